"""Registration of the `materialize` pass set (tinyplug/passes/materialize.py)."""
from tinyplug.hookspecs import PassSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "expensive elementwise results broadcast into larger kernels are computed once"}

@hookimpl
def tinyplug_register_passes(register) -> None:
  register(PassSpec(name="materialize.broadcasts", stage="materialize", rewrite="tinyplug.passes.materialize:make_pass"))
