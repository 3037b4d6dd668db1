"""The example search strategy: imported only when `SEARCH=example_random` is used with `BEAM>0`."""
from __future__ import annotations

import random
from typing import Any, Callable, Sequence


class RandomSearch:
  """Try `budget` random candidates and keep the cheapest; a stand-in for a real strategy.

  `candidates` are opaque to the strategy (optimisation action lists); `cost` measures one (seconds).
  """
  def __init__(self, budget: int = 8, seed: int = 0):
    self.budget, self.rng = budget, random.Random(seed)

  def search(self, candidates: Sequence[Any], cost: Callable[[Any], float]) -> Any:
    if not candidates: raise ValueError("no candidates to search")
    picks = self.rng.sample(list(candidates), min(self.budget, len(candidates)))
    return min(picks, key=cost)
