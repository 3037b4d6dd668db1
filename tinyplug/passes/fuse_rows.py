"""The `fuse_rows` pass set: row kernels. On a device that runs loops, a reduction whose result is broadcast back along
the axes it reduced is computed inside the kernel that uses it, once per row (the linearizer hoists it out of the row's
loop): softmax's max, sum and normalised write become one kernel that reads each row from memory once and from cache
after; argmax's max and index pass, logsumexp's max and sum, one kernel writing one value per row. Off
(`TINY_PLUGINS=-fuse_rows`) each of those reductions gets a kernel of its own: correct, more memory traffic."""
from __future__ import annotations
import math
from typing import Any, Callable
from tinyplug.hookspecs import FusionPass, FusionRefusal
from tinyplug.schedule.fusion import GO, FusionGraph
from tinyplug.uop.ops import GroupOp, Ops, UOp

# the longest row (elements) a row kernel keeps in cache between its passes
ROW_FUSE_MAX = 1 << 15

def _op_text(u: UOp) -> str: return f"{u.op.name} {tuple(u.shape)}" if u.op is not Ops.SINK else "SINK"

def _squeezed(s: tuple) -> tuple: return tuple(d for d in s if d != 1)

def row_step(graph: FusionGraph, axes: tuple[int, ...], shape: tuple[int, ...]) -> Callable[[UOp, UOp], Any]:
  """The consumer rule of a row kernel (see FusionGraph.consumer_walk): stay on the rows (elementwise, broadcast back
  along `axes`, reduced along them again) and end in a realized node over the same rows: the rows themselves (softmax)
  or one value per row (argmax's index pass, logsumexp's sum: math on the row's reductions, unit dims dropped)."""
  per_row = tuple(1 if a in axes else s for a, s in enumerate(shape))
  def on_rows(u: UOp) -> bool: return u.shape == shape or _squeezed(u.shape) == _squeezed(per_row)
  def step(x: UOp, c: UOp) -> Any:
    if graph.is_realized(c):
      same_rows = on_rows(c) or (c.op is Ops.REDUCE_AXIS and c.arg[1] == axes and c.src[0].shape == shape)
      return None if c.op in (Ops.COPY, Ops.SINK) or not same_rows else c
    if c.op in GroupOp.Elementwise or c.op is Ops.DETACH: return GO
    # one value per row, its unit dims dropped or added (keepdim=False)
    if c.op is Ops.RESHAPE and x.shape != shape and _squeezed(x.shape) == _squeezed(per_row) == _squeezed(c.shape):
      return GO
    if c.op is Ops.EXPAND and c.shape == shape and \
       all(a in axes for a, (s, d) in enumerate(zip(c.src[0].shape, shape)) if s != d): return GO
    if c.op is Ops.REDUCE_AXIS and c.arg[1] == axes and c.src[0].shape == shape: return GO
    return None
  return step

class RowFusion(FusionPass):
  def fuse(self, graph: FusionGraph) -> None:
    # consumers first: softmax's sum joins the output's kernel, then its max (used by both) can join too
    for r in reversed(graph.nodes):
      if r in graph.candidates and self.why_not(graph, r) is None:
        axes = r.arg[1]
        graph.fuse(r, "row-kernel", f"a reduction over axes {axes} (rows of {math.prod(r.src[0].shape[a] for a in axes)} "
                   f"elements) broadcast back along them: computed inside its consumer's kernel once per row "
                   f"(limit ROW_FUSE_MAX={ROW_FUSE_MAX})")

  def why_not(self, graph: FusionGraph, r: UOp) -> FusionRefusal | None:
    if not graph.runs_loops(r.device):
      return FusionRefusal("gpu-style-device", f"not a row kernel: {r.device} runs kernels GPU-style (one kernel per "
                                               "reduction)")
    axes, shape = r.arg[1], tuple(r.src[0].shape)
    if any(isinstance(s, UOp) for s in shape):
      return FusionRefusal("symbolic-shape", "not a row kernel: its shape has a variable's value in it")
    if (row := math.prod(shape[a] for a in axes)) > ROW_FUSE_MAX:
      return FusionRefusal("row-fuse-limit", f"not a row kernel: a row of {row} elements is over ROW_FUSE_MAX={ROW_FUSE_MAX}",
                           by_limit=True)
    # the row's axes must be the innermost loops, so one pass of the outer loops sees each row once
    if any(s != 1 and a not in axes for a, s in enumerate(shape) if a > min(axes)):
      return FusionRefusal("row-axes-not-innermost", f"not a row kernel: the reduced axes {axes} are not the innermost "
                                                     f"axes of {shape}")
    # what is recomputed for every row must not hide another reduction (a matmul would run once per use)
    if any(u.op is Ops.REDUCE_AXIS and not graph.is_realized(u) for u in graph.unrealized_inputs(r)):
      return FusionRefusal("row-holds-reduction", "not a row kernel: its input holds another reduction, which would run "
                                                  "again for every row")
    ends, refused = graph.consumer_walk(r, row_step(graph, axes, shape), every_end=True)
    if refused is None and len(ends) == 1: return None
    if refused is not None and (graph.is_realized(refused) or refused.op is Ops.SINK):
      why = f"its result reaches {_op_text(refused)}, a kernel that is not computed over the same rows"
    elif refused is not None: why = f"its result is used by {_op_text(refused)}, which leaves the reduced rows"
    elif ends: why = f"its rows end in {len(ends)} kernels ({', '.join(_op_text(e) for e in list(ends)[:3])}), not one"
    else: why = "its rows end in no single kernel"
    return FusionRefusal("row-leaves-rows", "not a row kernel: " + why)

def make_pass() -> RowFusion: return RowFusion()
