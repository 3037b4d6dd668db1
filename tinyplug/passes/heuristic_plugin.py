"""Registration of the `heuristic` pass set (tinyplug/passes/heuristic.py)."""
from tinyplug.helpers import ContextVar
from tinyplug.hookspecs import PassSpec, hookimpl

# declared with the plugin's registration (not with the pass, imported at its first kernel), so it is in every
# codegen cache key from the first kernel on, whether or not a process runs the heuristic
EXPAND_BUDGET = ContextVar("EXPAND_BUDGET", 4096, "the heuristic's cap on a kernel's straight-line size: an upcast or "
                           "unroll is not taken when the expanded kernel would exceed this many UOps (estimated); 0: no cap")

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "kernel-optimisation heuristic: register tiles, unrolls, cache blocking, threads, work-groups"}

@hookimpl
def tinyplug_register_passes(register) -> None:
  register(PassSpec(name="heuristic.actions", stage="opt", rewrite="tinyplug.passes.heuristic:make_pass"))
  # large matmuls on a machine with caches read B from contiguous column panels (a copy first): passes/pack.py
  register(PassSpec(name="heuristic.pack", stage="tensor_graph", rewrite="tinyplug.passes.pack:make_pass",
                    bottom_up=True, version="2"))
  # a CPU kernel's shared (outermost) loop with rows for every thread: passes/thread_rows.py
  register(PassSpec(name="heuristic.thread_rows", stage="gpudims", rewrite="tinyplug.passes.thread_rows:make_pass",
                    when=_shares_loops))

def _shares_loops(renderer) -> bool:
  """Loop-running renderers whose kernels threads share out."""
  return bool(renderer.runs_loops) and renderer.threads > 1
