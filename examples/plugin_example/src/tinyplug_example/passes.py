"""The example pass: imported only when the codegen pipeline is built."""
from tinyplug.uop import Ops, PatternMatcher, UPat


def fold_double_neg() -> PatternMatcher:
  """Factory named by the PassSpec: returns the PatternMatcher the pipeline runs for this pass."""
  return PatternMatcher([
    (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(UPat.var("x"),)),)), lambda x: x),
  ])
