"""Registration of the `fuse_rows` pass set (tinyplug/passes/fuse_rows.py)."""
from tinyplug.hookspecs import PassSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default",
                   "description": "row kernels: softmax/layernorm reductions computed inside the kernel that uses them"}

@hookimpl
def tinyplug_register_passes(register) -> None:
  register(PassSpec(name="fuse_rows.rows", stage="fusion", rewrite="tinyplug.passes.fuse_rows:make_pass"))
  # a row kernel's output pass loads what its reduce pass computed (softmax's exp) instead of computing it again
  register(PassSpec(name="fuse_rows.reuse", after=("linearize",), rewrite="tinyplug.passes.row_reuse:make_pass",
                    when=_runs_loops))

def _runs_loops(renderer) -> bool: return renderer.runs_loops
