"""The built-in search strategies (`tinyplug.hookspecs.search.SearchStrategy` says what `search` receives)."""
from __future__ import annotations
import random
from typing import Callable
from tinyplug.codegen.kernel import Kernel, KernelOptError, Opt
from tinyplug.hookspecs.search import SearchStrategy
from tinyplug.search.runner import apply_all, candidate_actions, tensor_core_kernels

def _start(kernel: Kernel, timer: Callable[[list[Opt]], float]) -> list[tuple[float, list[Opt]]]:
  """The search starts from the heuristic's actions (timed first: a far slower start is then timed once, not three
  times), from no actions, and on a renderer with tensor cores from whole tensor-core kernels (`TC_SEARCH`), so it
  refines the heuristic instead of rediscovering it and never ends up slower. The heuristic is whichever pass set
  decides actions in the opt stage (none when it is turned off). Fastest first."""
  from tinyplug.codegen import heuristic_actions
  try: hand = heuristic_actions(kernel.sink, kernel.renderer)
  except KernelOptError: hand = []
  starts = ([hand] if hand and apply_all(kernel, hand) is not None else []) + [[]]
  starts += [list(s) for s in tensor_core_kernels(kernel) if list(s) != hand]
  return sorted(zip(time_all(timer, starts), starts), key=lambda t: t[0])

# a beam entry this many times slower than the best is not extended: one more action will not catch up (on a GPU its
# one-action variants of a naive 4096^3 matmul took most of the search's device time)
FAR_SLOWER = 8

def time_all(timer: Callable[[list[Opt]], float], candidates: list[list[Opt]]) -> list[float]:
  """Each candidate's time, in order: `timer.many` (the core's timer: built in parallel) where the timer has it."""
  many = getattr(timer, "many", None)
  return list(many(candidates)) if many is not None else [timer(c) for c in candidates]

class BeamSearch(SearchStrategy):
  """Keep the `width` fastest action lists (at least the two fastest starts); extend each by one action per step
  until nothing gets faster."""
  def search(self, kernel: Kernel, timer: Callable[[list[Opt]], float], width: int,
             progress: Callable[[str], None]) -> list[Opt]:
    starts = _start(kernel, timer)
    seen: set[tuple[Opt, ...]] = {tuple(opts) for _, opts in starts}
    beam = starts[:max(width, 2)]
    for step in range(8):
      candidates: list[list[Opt]] = []
      for t, opts in beam:
        if t > FAR_SLOWER * beam[0][0]: continue
        k = apply_all(kernel, opts)
        for act in candidate_actions(k):
          new = opts + [act]
          if tuple(new) in seen or apply_all(kernel, new) is None: continue
          seen.add(tuple(new)); candidates.append(new)
      progress(f"beam step {step}: {len(candidates)} candidates, best {beam[0][0]*1e6:.1f} us")
      timed = list(zip(time_all(timer, candidates), candidates))
      best = sorted(beam + timed, key=lambda t: t[0])[:width]
      if best[0][0] >= beam[0][0]: break
      beam = best
    return beam[0][1]

class RandomSearch(SearchStrategy):
  """Time `16 * width` random action lists (up to four actions each) and keep the fastest (the first on a tie)."""
  def search(self, kernel: Kernel, timer: Callable[[list[Opt]], float], width: int,
             progress: Callable[[str], None]) -> list[Opt]:
    rng = random.Random(0)
    candidates: list[list[Opt]] = [[]]
    for _ in range(16 * width):   # drawn first (no draw depends on a time), then built and timed as one batch
      opts: list[Opt] = []
      for _ in range(rng.randint(1, 4)):
        k = apply_all(kernel, opts)
        acts = [a for a in candidate_actions(k) if apply_all(kernel, opts + [a]) is not None]
        if not acts: break
        opts.append(rng.choice(acts))
      candidates.append(opts)
    progress(f"random search: {len(candidates)} candidates")
    times = time_all(timer, candidates)
    return candidates[min(range(len(candidates)), key=lambda i: times[i])]
