"""The built-in search strategies (`tinyplug.hookspecs.search.SearchStrategy` says what `search` receives)."""
from __future__ import annotations
import random
from typing import Callable
from tinyplug.codegen.kernel import Kernel, KernelOptError, Opt
from tinyplug.hookspecs.search import SearchStrategy
from tinyplug.search.runner import apply_all, candidate_actions, candidate_steps

def _start(kernel: Kernel, timer: Callable[[list[Opt]], float]) -> list[tuple[float, list[Opt]]]:
  """The search starts from no actions and from the heuristic's (timed first: a far slower baseline is then timed
  once, not three times), so it refines the heuristic instead of rediscovering it and never ends up slower. The
  heuristic is whichever pass set decides actions in the opt stage (none when it is turned off)."""
  from tinyplug.codegen import heuristic_actions
  try: hand = heuristic_actions(kernel.sink, kernel.renderer)
  except KernelOptError: hand = []
  starts = ([hand] if hand and apply_all(kernel, hand) is not None else []) + [[]]
  return sorted(zip(time_all(timer, starts), starts), key=lambda t: t[0])

def time_all(timer: Callable[[list[Opt]], float], candidates: list[list[Opt]]) -> list[float]:
  """Each candidate's time, in order: `timer.many` (the core's timer: built in parallel) where the timer has it."""
  many = getattr(timer, "many", None)
  return list(many(candidates)) if many is not None else [timer(c) for c in candidates]

class BeamSearch(SearchStrategy):
  """Keep the `width` fastest action lists; extend each by one action per step until nothing gets faster."""
  def search(self, kernel: Kernel, timer: Callable[[list[Opt]], float], width: int,
             progress: Callable[[str], None]) -> list[Opt]:
    beam = _start(kernel, timer)
    seen: set[tuple[Opt, ...]] = {tuple(opts) for _, opts in beam}
    for step in range(8):
      candidates: list[list[Opt]] = []
      for _, opts in beam:
        k = apply_all(kernel, opts)
        for acts in candidate_steps(k):
          new = opts + list(acts)
          if tuple(new) in seen or apply_all(kernel, new) is None: continue
          seen.add(tuple(new)); candidates.append(new)
      progress(f"beam step {step}: {len(candidates)} candidates, best {beam[0][0]*1e6:.1f} us")
      timed = list(zip(time_all(timer, candidates), candidates))
      best = sorted(beam + timed, key=lambda t: t[0])[:width]
      if best[0][0] >= beam[0][0]: break
      beam = best
    return beam[0][1]

class RandomSearch(SearchStrategy):
  """Time `16 * width` random action lists (up to four actions each) and keep the fastest."""
  def search(self, kernel: Kernel, timer: Callable[[list[Opt]], float], width: int,
             progress: Callable[[str], None]) -> list[Opt]:
    rng = random.Random(0)
    best = (timer([]), [])
    for i in range(16 * width):
      opts: list[Opt] = []
      for _ in range(rng.randint(1, 4)):
        k = apply_all(kernel, opts)
        acts = [a for a in candidate_actions(k) if apply_all(kernel, opts + [a]) is not None]
        if not acts: break
        opts.append(rng.choice(acts))
      progress(f"random search: {i+1}/{16*width}, best {best[0]*1e6:.1f} us")
      if (t := timer(opts)) < best[0]: best = (t, opts)
    return best[1]
