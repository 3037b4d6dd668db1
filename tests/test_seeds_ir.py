"""The tinygrad IR and PatternMatcher walkthrough examples (building UOps, printing them, rewriting with UPat rules),
run as a tinygrad user writes them with `tinygrad` replaced by `tinyplug` (module paths included), checking the
printed text they are known to produce.
Renderer examples (MetalRenderer, CUDARenderer) belong to the renderer plugins' tests."""
import contextlib, io, textwrap

def run_example(code: str) -> str:
  out = io.StringIO()
  with contextlib.redirect_stdout(out): exec(textwrap.dedent(code), {"__name__": "__seed_example__"})
  return out.getvalue()

RAMP_UOP = """
from tinyplug import dtypes
from tinyplug.uop import UOp, Ops

# Create constant UOPs
a = UOp(Ops.CONST, dtypes.int, arg=2)
b = UOp(Ops.CONST, dtypes.int, arg=2)

# Global uniqueness: same specifications = same object
assert a is b

# Construct computation
a_plus_b = a + b
print(a_plus_b)
"""

RAMP_UOP_PRINTED = """\
UOp(Ops.ADD, dtypes.int, arg=None, src=(
  x0:=UOp(Ops.CONST, dtypes.int, arg=2, src=()),
   x0,))
"""

RAMP_PATTERNS = """
from tinyplug.uop.ops import graph_rewrite, UPat, PatternMatcher
from tinyplug.uop import UOp, Ops

# Define a constant folding pattern
simple_pm = PatternMatcher([
  (UPat(Ops.ADD, src=(UPat(Ops.CONST, name="c1"), UPat(Ops.CONST, name="c2"))),
   lambda c1,c2: UOp(Ops.CONST, dtype=c1.dtype, arg=c1.arg+c2.arg)),
])

# Apply the pattern
a_plus_b_simplified = graph_rewrite(a_plus_b, simple_pm)
print(a_plus_b_simplified)  # UOp(Ops.CONST, dtypes.int, arg=4, src=())
"""

RAMP_SUGAR = """
simpler_pm = PatternMatcher([
  (UPat.cvar("c1")+UPat.cvar("c2"), lambda c1,c2: c1.const_like(c1.arg+c2.arg))
])

assert graph_rewrite(a_plus_b, simple_pm) is graph_rewrite(a_plus_b, simpler_pm)
"""

INTERNALS_ADD = """
from tinyplug.uop.ops import UOp, Ops
from tinyplug import dtypes

const = UOp(Ops.CONST, dtypes.float, arg=1.0)
add = UOp(Ops.ADD, dtypes.float, src=(const, const), arg=None)

print(add)
"""

INTERNALS_ADD_PRINTED = """\
UOp(Ops.ADD, dtypes.float, arg=None, src=(
  x0:=UOp(Ops.CONST, dtypes.float, arg=1.0, src=()),
   x0,))
"""

def test_ramp_uop_hash_consing_and_print():
  assert run_example(RAMP_UOP) == RAMP_UOP_PRINTED

def test_ramp_pattern_matcher():
  # the three ramp.md blocks run in one session, as in the document
  assert run_example(RAMP_UOP + RAMP_PATTERNS + RAMP_SUGAR) == RAMP_UOP_PRINTED + "UOp(Ops.CONST, dtypes.int, arg=4, src=())\n"

def test_internals_add_print():
  assert run_example(INTERNALS_ADD) == INTERNALS_ADD_PRINTED

def test_internals_uop_fields():
  # "class UOp: op, dtype, src, arg" and the SPECIAL example's node, built as the document builds them
  out = run_example("""
    from tinyplug.uop.ops import UOp, Ops
    from tinyplug import dtypes
    u = UOp(Ops.SPECIAL, dtypes.int, arg=("gidx0", 16))
    print(u.op, u.dtype, u.src, u.arg)
    print(u)
  """)
  assert out == "Ops.SPECIAL dtypes.int () ('gidx0', 16)\nUOp(Ops.SPECIAL, dtypes.int, arg=('gidx0', 16), src=())\n"

def test_tinygrad_import_paths():
  from tinyplug.uop import UOp, Ops
  from tinyplug.uop.ops import UOp as UOp2, Ops as Ops2, UPat, PatternMatcher, graph_rewrite
  import tinyplug
  assert UOp is UOp2 is tinyplug.UOp and Ops is Ops2 and tinyplug.UPat is UPat and tinyplug.PatternMatcher is PatternMatcher
  assert tinyplug.graph_rewrite is graph_rewrite
