"""Registration of the `heuristic` pass set (tinyplug/passes/heuristic.py)."""
from tinyplug.hookspecs import PassSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "kernel-optimisation heuristic: register tiles, unrolls, cache blocking, threads, work-groups"}

@hookimpl
def tinyplug_register_passes(register) -> None:
  register(PassSpec(name="heuristic.actions", stage="opt", rewrite="tinyplug.passes.heuristic:make_pass"))
