"""The codegen pipeline: one ordered list of stages, plugin passes placed among them (before and after linearize),
function passes that receive the kernel's context, and a pipeline that follows the installed plugin set."""
from __future__ import annotations
import numpy as np
import pytest
from plugin_fixtures import plugin_module, plugin_site  # noqa: F401  (plugin_site is a fixture)

from tinyplug.codegen import STAGES, get_program, pipeline_steps
from tinyplug.device import Device
from tinyplug.hookspecs.passes import CORE_STAGES
from tinyplug.plugins import get_plugin_manager
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor

@pytest.fixture(autouse=True)
def _no_program_cache():
  """These tests watch the stages and passes run: a program read back from the disk cache would run none."""
  from tinyplug.helpers import Context
  with Context(CACHELEVEL=0): yield
from tinyplug.uop import Ops

def _ast():
  x = Tensor(np.arange(12, dtype=np.float32), device="PYTHON")
  return create_schedule([(x * 2 + 1).uop])[0][-1].ast

# a pass after linearize sees the linear program; it appends a NOOP (renderers skip it) so the test can see it ran
PASSES = plugin_module("""
  @hookimpl
  def tinyplug_register_passes(register):
    register(PassSpec(name="late.mark", after=("linearize",), rewrite="tp_late.impl:make_mark"))
    register(PassSpec(name="late.seen", stage="final", rewrite="tp_late.impl:make_seen"))
""")
IMPL = """
  from tinyplug.uop import Ops, UOp, dtypes
  SEEN = []
  def make_mark():
    def mark(uops, ctx):
      SEEN.append(("mark", ctx.renderer.device, any(u.op is Ops.RANGE or u.op is Ops.SPECIAL for u in uops)))
      return uops + [UOp(Ops.NOOP, dtypes.void, (), "late.mark")]
    return mark
  def make_seen():
    def seen(sink, ctx):
      SEEN.append(("seen", ctx.renderer.device, sink.op.name))
      return sink
    return seen
"""

def test_stage_list_is_the_public_one():
  assert tuple(name for name, _ in STAGES) == CORE_STAGES
  steps = pipeline_steps()
  assert [s.name for s in steps if s.name in CORE_STAGES] == list(CORE_STAGES)
  # linearize is the last core stage: only plugin passes (fuse_rows.reuse, on the linear program) follow it
  late = steps[[s.name for s in steps].index("linearize") + 1:]
  assert all(not s.is_core for s in late) and "fuse_rows.reuse" in [s.name for s in late]

def test_pass_after_linearize_runs_on_the_linear_program_and_function_passes_get_the_context(plugin_site):
  plugin_site.add("tp-late", {"late": PASSES}, extra_files={"impl.py": IMPL})
  names = [s.name for s in pipeline_steps()]
  assert names.index("late.mark") > names.index("linearize") and names.index("late.seen") == names.index("final") + 1
  import tp_late.impl as impl
  spec = get_program(_ast(), Device["PYTHON"].renderer)
  assert spec.uops[-1].op is Ops.NOOP and spec.uops[-1].arg == "late.mark"
  assert ("seen", "PYTHON", "SINK") in impl.SEEN and ("mark", "PYTHON", True) in impl.SEEN
  assert impl.SEEN.index(("seen", "PYTHON", "SINK")) < impl.SEEN.index(("mark", "PYTHON", True))

def test_pattern_matcher_after_linearize_is_refused(plugin_site):
  plugin_site.add("tp-bad", {"bad": plugin_module("""
    from tinyplug.uop import PatternMatcher
    @hookimpl
    def tinyplug_register_passes(register):
      register(PassSpec(name="bad.pm", after=("linearize",), rewrite=lambda: PatternMatcher([])))
  """)})
  with pytest.raises(ValueError, match=r"'bad.pm'.*after linearize.*function \(uops, ctx\)"):
    get_program(_ast(), Device["PYTHON"].renderer)

def test_reset_plugins_picks_up_a_newly_installed_pass(plugin_site):
  before = [s.name for s in pipeline_steps()]
  spec = get_program(_ast(), Device["PYTHON"].renderer)   # builds (and keeps) the pipeline of this plugin set
  assert "late.mark" not in before and spec.uops[-1].op is not Ops.NOOP
  plugin_site.add("tp-late", {"late": PASSES}, extra_files={"impl.py": IMPL})   # installs it, then reset_plugins()
  assert "late.mark" in [s.name for s in pipeline_steps()]
  assert get_program(_ast(), Device["PYTHON"].renderer).uops[-1].arg == "late.mark"
  assert get_plugin_manager().derived["codegen.pipeline"] is pipeline_steps()   # kept with the plugin set

def test_spec_checks_each_step_and_blames_the_pass(plugin_site):
  from tinyplug.codegen.spec import SpecError
  from tinyplug.helpers import Context
  with Context(SPEC=2): assert get_program(_ast(), Device["PYTHON"].renderer).uops   # a good pipeline passes the checks
  plugin_site.add("tp-broken", {"broken": plugin_module("""
    @hookimpl
    def tinyplug_register_passes(register):
      register(PassSpec(name="broken.mix", stage="symbolic_final", rewrite="tp_broken.impl:make"))
  """)}, extra_files={"impl.py": """
    from tinyplug.uop import Ops, UOp, dtypes
    def make():
      def mix(sink, ctx):   # a float ADD whose operand is an int: against the IR's rules
        st = sink.src[0]
        bad = UOp(Ops.ADD, dtypes.float, (st.src[1], UOp.const(dtypes.int, 1)))
        return sink.replace(src=(st.replace(src=(st.src[0], bad)),) + sink.src[1:])
      return mix
  """})
  with Context(SPEC=2), pytest.raises(SpecError, match=r"after plugin pass broken.mix \(broken\).*Ops.ADD"):
    get_program(_ast(), Device["PYTHON"].renderer)
  with Context(SPEC=1), pytest.raises(SpecError, match=r"after final"):   # SPEC=1: the next core stage reports it
    get_program(_ast(), Device["PYTHON"].renderer)

def test_spec_checks_a_wmma_has_its_accumulator_operands():
  from tinyplug.codegen.spec import SpecError, verify
  from tinyplug.uop.dtype import dtypes
  from tinyplug.uop.ops import Ops, UOp
  h, f = UOp.const(dtypes.half, 1.0), UOp.const(dtypes.float, 0.0)
  verify(UOp(Ops.WMMA, dtypes.float.vec(4), (h,) * 12 + (f,) * 4, "toy"), "test")
  with pytest.raises(SpecError, match="4 C elements of dtypes.float"):
    verify(UOp(Ops.WMMA, dtypes.float.vec(4), (h,) * 16, "toy"), "test")
