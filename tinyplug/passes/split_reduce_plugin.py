"""Registration of the `split_reduce` pass set (tinyplug/passes/split_reduce.py)."""
from tinyplug.hookspecs import PassSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "huge reductions split into partial sums first, so threads or work-groups share them"}

@hookimpl
def tinyplug_register_passes(register) -> None:
  register(PassSpec(name="split_reduce.partials", stage="tensor_graph", rewrite="tinyplug.passes.split_reduce:make_pass"))
