"""The `materialize` pass set: an expensive elementwise result that is broadcast into a much larger kernel gets a kernel
of its own. Inlined, it would be recomputed for every element of the broadcast: the softmax-cross-entropy gradient
(an exp per logit) inside a linear layer's weight gradient ran once per weight column, 9216 times over. Cheap math
counts too when it is re-read enough: a convolution reads each input element once per output channel and window tap
(a ReLU after a bias add: a stride-2 3x3 convolution into 64 channels reads each element ~120 times, its weight
gradient as often). Off
(`TINY_PLUGINS=-materialize`) it is recomputed there: correct, slower."""
from __future__ import annotations
import math
from tinyplug.hookspecs import FusionPass
from tinyplug.schedule.fusion import FusionGraph
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import GroupOp, Ops, UOp

# ops worth computing once rather than per broadcast element (a transcendental, a division)
EXPENSIVE = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.POW, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.THREEFRY})
# how many times larger the broadcast must make it (one store and many cached loads against that many recomputes)
MIN_GROWTH = 16
_VIEWS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.PAD})
# cheap math is materialized by cost: the reads per element of the reductions that read it, times its work (ALU ops
# plus the loads beyond one it would replace by one), times its size, must reach MIN_REREAD_WORK element-ops; a kernel
# tile reuses each load across ~16 outputs, so below MIN_READS reads per element little is recomputed
MIN_READS = 16
MIN_WORK = 2
MIN_REREAD_WORK = 1 << 26
_INDEX_DTYPES = frozenset({dtypes.int32, dtypes.int64, dtypes.bool})

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

def reads_per_element(graph: FusionGraph, n: UOp) -> int:
  """How many times the reductions computed from n read each element of it: their input's size over n's, the
  largest over the reductions n reaches through views and elementwise math in the same kernel (0 if none)."""
  best, stack, seen, size = 0, [n], set(), max(1, _numel(n))
  while stack:
    x = stack.pop()
    for c in graph.children(x):
      if c in seen: continue
      seen.add(c)
      if c.op is Ops.REDUCE_AXIS: best = max(best, _numel(c.src[0]) // size)
      elif not graph.is_realized(c) and (c.op in GroupOp.Movement or c.op in GroupOp.Elementwise): stack.append(c)
  return best

def recompute_work(graph: FusionGraph, inside: list[UOp]) -> int:
  """The work of recomputing a value instead of loading it: its ALU ops plus the loads beyond one."""
  alu = sum(1 for u in inside if u.op in GroupOp.ALU and not graph.is_realized(u))
  loads = sum(1 for u in inside if graph.is_realized(u) or u.op is Ops.BUFFER)
  return alu + max(0, loads - 1)

def index_math(graph: FusionGraph, inside: list[UOp]) -> bool:
  """Integer math of constants alone (an `arange`: a sum of bit digits, which the kernel's simplification folds back
  into its loop index, and a one-hot gather then into one read): never worth a kernel of its own."""
  return all(not graph.is_realized(u) and u.op is not Ops.BUFFER and (u.op not in GroupOp.ALU or u.dtype.scalar() in
             _INDEX_DTYPES) for u in inside)

def onehot(graph: FusionGraph, n: UOp) -> bool:
  """n compares a value with an arange (`x[idx]`'s mask): the reduction that sums it collapses into one read."""
  return n.op is Ops.CMPEQ and any(index_math(graph, list(s.toposort(gate=lambda u: not graph.is_realized(u))))
                                   for s in n.src)

class Materialize(FusionPass):
  def fuse(self, graph: FusionGraph) -> None:
    if not any(u.op is Ops.EXPAND for u in graph.nodes): return
    for n in graph.nodes:
      if graph.is_realized(n) or n.op not in GroupOp.Elementwise or not n.shape or not isinstance(n.device, str): continue
      if self.reread(graph, n): continue
      if (growth := broadcast_growth(graph, n)) < MIN_GROWTH: continue
      inside = n.toposort(gate=lambda u: u is n or not graph.is_realized(u))
      # a value over a row kernel's fused reduction (log_softmax's log of the row sum) is loop-invariant in that row's
      # loop: the linearizer computes it once per row already, and a kernel of its own would split the row kernel
      if any(u.op is Ops.REDUCE_AXIS and not graph.is_realized(u) for u in inside): continue
      costly = sorted({u.op.name for u in inside if u.op in EXPENSIVE and not graph.is_realized(u)})
      if costly:
        graph.realize(n, "broadcast-expensive", f"{'/'.join(costly)} broadcast {growth}x into a larger kernel: computed once "
                      f"in a kernel of its own (at least MIN_GROWTH={MIN_GROWTH}x)")

  def reread(self, graph: FusionGraph, n: UOp) -> bool:
    """Realize n if the reductions reading it through a view would recompute more than MIN_REREAD_WORK element-ops
    of it. Only the last elementwise node before the view: its inputs (the bias add under a ReLU) are not read there."""
    if not any(c.op in GroupOp.Movement and not graph.is_realized(c) for c in graph.children(n)): return False
    if (reads := reads_per_element(graph, n)) < MIN_READS: return False
    inside = n.toposort(gate=lambda u: u is n or not graph.is_realized(u))
    if any(u.op is Ops.REDUCE_AXIS and not graph.is_realized(u) for u in inside): return False
    if (work := recompute_work(graph, inside)) < MIN_WORK or index_math(graph, inside) or onehot(graph, n): return False
    if _numel(n) * reads * work < MIN_REREAD_WORK: return False
    graph.realize(n, "reread", f"{work} ops and loads per element read {reads}x by a reduction ({_numel(n)} "
                  f"elements): computed once in a kernel of its own (at least MIN_READS={MIN_READS} reads, "
                  f"MIN_REREAD_WORK={MIN_REREAD_WORK} element-ops)")
    # the reduction under it (the convolution under a bias add and ReLU) now ends in n alone: computed in n's kernel,
    # which writes the activation instead of the raw sum
    for r in inside:
      if r in graph.candidates and graph.fuses_into(r) is n:
        graph.fuse(r, "reread-producer", f"{r.op.name} {tuple(r.shape)} flows only into a materialized "
                   f"{n.op.name} {tuple(n.shape)}: computed in its kernel")
    return True

def make_pass() -> Materialize: return Materialize()
