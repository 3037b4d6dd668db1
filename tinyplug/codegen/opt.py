"""The "opt" stage: pick optimisation actions for a kernel and apply them.

Explicit actions (from a search strategy) win; otherwise BEAM=n asks the selected strategy plugin (SEARCH=name,
default beam); otherwise a hand-written heuristic; NOOPT=1 applies none."""
from __future__ import annotations
from typing import Any
from tinyplug.helpers import BEAM, NOOPT, getenv
from tinyplug.uop.ops import Ops, UOp
from tinyplug.codegen.kernel import Kernel, KernelOptError, Opt, OptOps

def apply_optimisations(sink: UOp, ctx: Any) -> UOp:
  k = Kernel(sink, ctx.renderer)
  if ctx.opts is not None: opts = list(ctx.opts)
  elif NOOPT: opts = []
  elif BEAM >= 1 and not getattr(ctx, "searching", False): opts = search_opts(sink, ctx)
  else: opts = heuristic_opts(k)
  for o in opts: k.apply_opt(o)
  ctx.applied_opts = list(k.applied_opts)
  return k.sink

def _try(k: Kernel, opt: Opt) -> bool:
  try: k.apply_opt(opt)
  except KernelOptError: return False
  return True

def heuristic_opts(k: Kernel) -> list[Opt]:
  """A short hand-written recipe: register-tile reductions over two output axes (matmul, conv), unroll reduce loops,
  give GPU-style renderers a work-group, and upcast the fastest output axis of elementwise kernels."""
  k = k.copy()
  loops, reduces = k.loop_axes, k.reduce_axes
  has_local = bool(k.renderer is not None and k.renderer.has_local and not getattr(k.renderer, "global_ids", False))
  if reduces and len(loops) >= 2:
    # a 4x4 register tile: each loaded value is used four times
    for axis in (len(loops) - 1, len(loops) - 2):
      for amt in (4, 2):
        if _try(k, Opt(OptOps.UPCAST, axis, amt)): break
    for amt in (4, 2):
      if _try(k, Opt(OptOps.UNROLL, 0, amt)): break
  elif reduces:
    size = reduces[0].src[0].arg
    for amt in (8, 4, 2):
      if size >= 4 * amt and _try(k, Opt(OptOps.UNROLL, 0, amt)): break
  elif loops and not has_local:
    for amt in (4, 2):
      if _try(k, Opt(OptOps.UPCAST, len(loops) - 1, amt)): break
  if has_local:
    for axis in reversed(range(len(k.loop_axes))):
      for amt in (32, 16, 8, 4, 2):
        if _try(k, Opt(OptOps.LOCAL, axis, amt)): break
      else: continue
      break
  return k.applied_opts

def search_opts(sink: UOp, ctx: Any) -> list[Opt]:
  from tinyplug.helpers import SEARCH
  from tinyplug.search import run_search
  return run_search(str(SEARCH.value or "beam"), sink, ctx.renderer, int(BEAM.value))
