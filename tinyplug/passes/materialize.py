"""The `materialize` pass set: an expensive elementwise result that is broadcast into a much larger kernel gets a kernel
of its own. Inlined, it would be recomputed for every element of the broadcast: the softmax-cross-entropy gradient
(an exp per logit) inside a linear layer's weight gradient ran once per weight column, 9216 times over. Off
(`TINY_PLUGINS=-materialize`) it is recomputed there: correct, slower."""
from __future__ import annotations
import math
from tinyplug.hookspecs import FusionPass
from tinyplug.schedule.fusion import FusionGraph
from tinyplug.uop.ops import GroupOp, Ops, UOp

# ops worth computing once rather than per broadcast element (a transcendental, a division)
EXPENSIVE = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.THREEFRY})
# how many times larger the broadcast must make it (one store and many cached loads against that many recomputes)
MIN_GROWTH = 16
_VIEWS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.PAD})

def _numel(u: UOp) -> int: return math.prod(s if isinstance(s, int) else 1 for s in u.shape)

def broadcast_growth(graph: FusionGraph, n: UOp) -> int:
  """The largest factor by which an EXPAND reached from n through views (no computation) multiplies its elements."""
  best, stack, seen = 1, [n], set()
  while stack:
    x = stack.pop()
    for c in graph.children(x):
      if c in seen or graph.is_realized(c): continue
      seen.add(c)
      if c.op is Ops.EXPAND: best = max(best, _numel(c) // max(1, _numel(c.src[0])))
      elif c.op in _VIEWS: stack.append(c)
  return best

class Materialize(FusionPass):
  def fuse(self, graph: FusionGraph) -> None:
    if not any(u.op is Ops.EXPAND for u in graph.nodes): return
    for n in graph.nodes:
      if graph.is_realized(n) or n.op not in GroupOp.Elementwise or not n.shape or not isinstance(n.device, str): continue
      if (growth := broadcast_growth(graph, n)) < MIN_GROWTH: continue
      inside = n.toposort(gate=lambda u: u is n or not graph.is_realized(u))
      # a value over a row kernel's fused reduction (log_softmax's log of the row sum) is loop-invariant in that row's
      # loop: the linearizer computes it once per row already, and a kernel of its own would split the row kernel
      if any(u.op is Ops.REDUCE_AXIS and not graph.is_realized(u) for u in inside): continue
      costly = sorted({u.op.name for u in inside if u.op in EXPENSIVE and not graph.is_realized(u)})
      if costly:
        graph.realize(n, "broadcast-expensive", f"{'/'.join(costly)} broadcast {growth}x into a larger kernel: computed once "
                      f"in a kernel of its own (at least MIN_GROWTH={MIN_GROWTH}x)")

def make_pass() -> Materialize: return Materialize()
