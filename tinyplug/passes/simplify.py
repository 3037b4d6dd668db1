"""The `simplify` pass set: symbolic simplification of the kernel graph (constant folding, identities, combining index
terms, div/mod and comparisons decided by bounds; `tinyplug.uop.symbolic`), in the three symbolic stages.

Lowering does not need it: off (`TINY_PLUGINS=-simplify`) the index arithmetic of split, upcast and padded axes is
rendered as written, correct and longer. The scheduler still simplifies each kernel AST once when it builds it."""
from __future__ import annotations
from typing import Any, Callable
from tinyplug.uop.ops import UOp
from tinyplug.uop.rewrite import graph_rewrite

def _make(stage: str) -> Callable[[UOp, Any], UOp]:
  from tinyplug.uop.symbolic import symbolic
  # a function pass, not the shared PatternMatcher: the pipeline would credit the rows of `symbolic` (used by the
  # scheduler and UOp.simplify too) to this plugin
  def simplify(sink: UOp, ctx: Any) -> UOp: return graph_rewrite(sink, symbolic, name=stage)
  return simplify

def initial() -> Callable[[UOp, Any], UOp]: return _make("symbolic_initial")
def postopt() -> Callable[[UOp, Any], UOp]: return _make("symbolic_postopt")
def final() -> Callable[[UOp, Any], UOp]: return _make("symbolic_final")
