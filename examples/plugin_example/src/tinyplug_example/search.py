"""The example search strategy: imported only when `SEARCH=example_random` is used with `BEAM>0`."""
from __future__ import annotations

import random
from typing import Callable

from tinyplug.codegen.kernel import Kernel, Opt
from tinyplug.hookspecs.search import SearchStrategy
from tinyplug.search.runner import apply_all, candidate_actions


class RandomSearch(SearchStrategy):
  """Time `4 * width` random single actions (and no action at all); keep the fastest. A stand-in for a real strategy.

  The core calls `search(kernel, timer, width, progress)` (see `SearchStrategy`) and caches what it returns."""
  runs = 0   # how many kernels this strategy searched in this process (the tests read it)

  def __init__(self, seed: int = 0):
    self.rng = random.Random(seed)

  def search(self, kernel: Kernel, timer: Callable[[list[Opt]], float], width: int,
             progress: Callable[[str], None]) -> list[Opt]:
    RandomSearch.runs += 1
    valid = [a for a in candidate_actions(kernel) if apply_all(kernel, [a]) is not None]
    picks = self.rng.sample(valid, min(4 * width, len(valid)))
    best: tuple[float, list[Opt]] = (timer([]), [])
    for i, act in enumerate(picks):
      progress(f"example_random: {i + 1}/{len(picks)}")
      if (t := timer([act])) < best[0]: best = (t, [act])
    return best[1]
