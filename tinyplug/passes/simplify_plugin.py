"""Registration of the `simplify` pass set (tinyplug/passes/simplify.py)."""
from tinyplug.hookspecs import PassSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "symbolic simplification (constant folding, index arithmetic) in the symbolic stages"}

def _runs_loops(renderer) -> bool: return bool(renderer.runs_loops)   # a GPU's output loops are its launch grid

@hookimpl
def tinyplug_register_passes(register) -> None:
  for stage, factory in (("symbolic_initial", "initial"), ("symbolic_postopt", "postopt"), ("symbolic_final", "final")):
    register(PassSpec(name=f"simplify.{factory}", stage=stage, rewrite=f"tinyplug.passes.simplify:{factory}"))
  # cat's and pad's gated loops cut where their gates change (tinyplug/passes/split_loops.py)
  register(PassSpec(name="simplify.split_loops", stage="symbolic_final", after=("simplify.final",),
                    rewrite="tinyplug.passes.split_loops:make_pass", when=_runs_loops))
