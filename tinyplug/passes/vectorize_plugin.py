"""Registration of the `vectorize` pass set (tinyplug/passes/vectorize.py)."""
from tinyplug.hookspecs import PassSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "vector UOps from upcast/unroll lanes, in the widths the renderer declares"}

def _has_vectors(renderer) -> bool: return bool(renderer.vector_widths)

@hookimpl
def tinyplug_register_passes(register) -> None:
  register(PassSpec(name="vectorize.lanes", stage="devectorize", rewrite="tinyplug.passes.vectorize:make_pass",
                    when=_has_vectors))
