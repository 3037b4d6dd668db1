"""Registration of the `simplify` pass set (tinyplug/passes/simplify.py)."""
from tinyplug.hookspecs import PassSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "symbolic simplification (constant folding, index arithmetic) in the symbolic stages"}

@hookimpl
def tinyplug_register_passes(register) -> None:
  for stage, factory in (("symbolic_initial", "initial"), ("symbolic_postopt", "postopt"), ("symbolic_final", "final")):
    register(PassSpec(name=f"simplify.{factory}", stage=stage, rewrite=f"tinyplug.passes.simplify:{factory}"))
