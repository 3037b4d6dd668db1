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

def _divisor(n: int, choices: tuple[int, ...]) -> int | None:
  return next((c for c in choices if n % c == 0 and n >= c), None)

def _reuse(k: Kernel) -> list[int]:
  """For each output axis: how much of the kernel's input the loads that do not depend on it read (upcasting the
  axis reuses each such loaded value once per lane)."""
  loads = [u for u in k.sink.toposort() if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
  deps = [(set(x for x in u.toposort() if x.op is Ops.RANGE), max(u.src[0].src[0].dtype.size, 1)) for u in loads]
  return [sum(size for d, size in deps if r not in d) for r in k.loop_axes]

def heuristic_opts(k: Kernel) -> list[Opt]:
  """A short hand-written recipe. Reductions over two or more output axes (matmul, conv) get a register tile: the
  innermost output axis upcast by up to 16, another by up to 8, so each loaded value feeds many accumulators.
  Other reductions unroll their loop; elementwise kernels upcast their fastest axis. GPU-style renderers also get a
  work-group on an output axis."""
  k = k.copy()
  loops, reduces = k.loop_axes, k.reduce_axes
  gpu = bool(k.renderer is not None and k.renderer.has_local and not getattr(k.renderer, "global_ids", False))
  if reduces and len(loops) >= 2:
    reuse = _reuse(k)
    inner = len(loops) - 1
    if reuse[inner] and (amt := _divisor(loops[inner].src[0].arg, (16, 8, 4, 2) if not gpu else (4, 2))):
      _try(k, Opt(OptOps.UPCAST, inner, amt))
    # the second tile axis: the output axis the most loads do not depend on (each of their values is reused per lane)
    others = sorted((a for a in range(len(loops) - 1) if reuse[a]), key=lambda a: (-reuse[a], -loops[a].src[0].arg))
    for axis in others:
      if (amt := _divisor(k.loop_axes[axis].src[0].arg, (8, 4, 2) if not gpu else (4, 2))) and _try(k, Opt(OptOps.UPCAST, axis, amt)):
        break
    if k.upcasted <= 16:
      for amt in (4, 2):
        if _try(k, Opt(OptOps.UNROLL, 0, amt)): break
  elif reduces:
    size = reduces[0].src[0].arg
    for amt in (8, 4, 2):
      if size >= 4 * amt and _try(k, Opt(OptOps.UNROLL, 0, amt)): break
  elif loops:
    for amt in (4, 2):
      if _try(k, Opt(OptOps.UPCAST, len(loops) - 1, amt)): break
  if gpu:
    for axis in reversed(range(len(k.loop_axes))):
      for amt in (256, 128, 64, 32, 16, 8, 4, 2):
        if _try(k, Opt(OptOps.LOCAL, axis, amt)): break
      else: continue
      break
  return k.applied_opts

def search_opts(sink: UOp, ctx: Any) -> list[Opt]:
  from tinyplug.helpers import SEARCH
  from tinyplug.search.runner import run_search
  return run_search(str(SEARCH.value or "beam"), sink, ctx.renderer, int(BEAM.value))
