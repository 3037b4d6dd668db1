"""A replacement for the first-party kernel-optimisation heuristic: imported when the codegen pipeline is built.

The rule is deliberately short: upcast the innermost output axis by 4 (or 2) where it divides, and unroll the first
reduce axis by 4 (or 2). It only uses the public optimisation actions of `tinyplug.codegen.kernel`."""
from tinyplug.codegen.kernel import Kernel, KernelOptError, Opt, OptOps


def pick_actions(k: Kernel) -> list[Opt]:
  """The actions this heuristic picks for kernel `k` (tried on a copy, so an action that does not apply is skipped)."""
  k = k.copy()
  tries = []
  if k.loop_axes: tries += [Opt(OptOps.UPCAST, len(k.loop_axes) - 1, amt) for amt in (4, 2)]
  if k.reduce_axes: tries += [Opt(OptOps.UNROLL, 0, amt) for amt in (4, 2)]
  done: set[OptOps] = set()
  for opt in tries:
    if opt.op in done: continue
    try: k.apply_opt(opt)
    except KernelOptError: continue
    done.add(opt.op)
  return k.applied_opts


def make_pass():
  """Factory named by the PassSpec: a function pass `(sink, ctx) -> sink` in the "opt" stage."""
  def example_actions(sink, ctx):
    # ctx.opts is None while nobody decided this kernel's actions: not BEAM (the engine passes its search's actions
    # down), not NOOPT=1 (none), not another heuristic that ran earlier in the stage
    if ctx.opts is not None: return sink
    return ctx.apply_opts(sink, pick_actions(Kernel(sink, ctx.renderer)))
  return example_actions
