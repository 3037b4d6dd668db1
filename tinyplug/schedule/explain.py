"""Why the scheduler cut the graph where it did: for every realized node (one kernel each) the rule that made it a
kernel of its own, and for every reduction that joined its consumer's kernel as a row kernel, that rule.

Computed after `decide()`, only when someone listens to `schedule` events (the visualizer), so the scheduler's
own path stays as it is. Each reason names a rule id, a sentence with the node's particulars, and the function
that implements the rule (for its file:line)."""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import Any, Callable
from tinyplug.uop.ops import Ops, UOp

@dataclass(frozen=True)
class Decision:
  """`node` is computed by a kernel of its own (`realized`) or inside its consumer's kernel (not realized)."""
  node: UOp
  realized: bool
  rule: str            # "target", "contiguous", "assign", "copy", "copy-source", "row-kernel", "row-fuse-limit",
                       # "reduce-then-<op>" (e.g. reduce-then-expand), "reduce-in-several-kernels"
  detail: str
  file: str
  line: int

def _where(fn: Callable) -> tuple[str, int]:
  code = getattr(fn, "__func__", fn).__code__
  return code.co_filename, code.co_firstlineno

def _op_text(u: UOp) -> str:
  return f"{u.op.name} {tuple(u.shape)}" if u.op is not Ops.SINK else "SINK"

def explain(sched: Any) -> list[Decision]:
  """The reasons for every kernel boundary `sched` (a decided _Scheduler) drew, in graph order."""
  from tinyplug.schedule import ROW_FUSE_MAX, is_contiguous_buffer, _keeps_loops_on
  out: list[Decision] = []
  decide_at = _where(type(sched).decide)
  targets = set(sched.targets)
  def add(n: UOp, realized: bool, rule: str, detail: str, at: tuple[str, int] = decide_at) -> None:
    out.append(Decision(n, realized, rule, detail, *at))
  copy_sources = {n.src[0] for n in sched.nodes if n.op is Ops.COPY and not is_contiguous_buffer(n.src[0])}
  for n in sched.nodes:
    realized = n in sched.realized
    if realized and n.op is Ops.CONTIGUOUS: add(n, True, "contiguous", "asked for with .contiguous(): it gets a buffer of its own")
    elif realized and n.op is Ops.ASSIGN: add(n, True, "assign", "an assign writes its value into the target's buffer")
    elif realized and n.op is Ops.COPY: add(n, True, "copy", f"a copy to {n.device}: a transfer, not a kernel")
    elif realized and n in copy_sources: add(n, True, "copy-source", "copied to another device: computed into a buffer first")
    elif realized and n in targets: add(n, True, "target", "asked for (realize/numpy/a jit output): its value is stored")
    elif n.op is Ops.REDUCE_AXIS and realized:
      rule, blocker = _reduce_blocker(sched, n)
      row_rule, why_not_row = _row_refusal(sched, n, ROW_FUSE_MAX, _keeps_loops_on)
      at = _where(type(sched)._row_fusable) if row_rule == "row-fuse-limit" else _where(type(sched)._fuses_into_one_output)
      add(n, True, row_rule if row_rule == "row-fuse-limit" else rule or "reduce-used-beyond-elementwise",
          (blocker or "its result is used by more than elementwise math") + "; " + why_not_row, at)
    elif n.op is Ops.REDUCE_AXIS and not realized and _reduce_blocker(sched, n)[0]:
      axes = n.arg[1]
      add(n, False, "row-kernel", f"a reduction over axes {axes} (rows of {math.prod(n.src[0].shape[a] for a in axes)} "
          f"elements) broadcast back along them: computed inside its consumer's kernel once per row "
          f"(limit ROW_FUSE_MAX={ROW_FUSE_MAX})", _where(type(sched)._row_fusable))
  return out

def _reduce_blocker(sched: Any, r: UOp) -> tuple[str, str]:
  """(rule, sentence): why reduction r's result cannot be computed inside one consumer kernel with elementwise math
  only; ("", "") if it can. The walk and its rule are the scheduler's own."""
  ends, refused = sched._consumer_walk(r, sched._fuse_step(sched.realized), every_end=True)
  if refused is not None:
    return f"reduce-then-{refused.op.name.lower().removesuffix('_axis')}", f"its result is used by {_op_text(refused)}, " \
           "which is not elementwise math (a reduction's output is materialized before it is broadcast, padded or reduced again)"
  if len(ends) > 1:
    names = ", ".join(_op_text(e) for e in list(ends)[:3])
    return "reduce-in-several-kernels", f"its result reaches {len(ends)} kernels ({names}): computing it in each " \
                                        "would repeat the reduction"
  return "", ""

def _row_refusal(sched: Any, r: UOp, row_max: int, keeps_loops_on: Callable[[str], bool]) -> tuple[str, str]:
  """Why the row-kernel exception (softmax, layernorm in one kernel) did not apply to reduction r."""
  if not isinstance(r.device, str) or not keeps_loops_on(r.device):
    return "gpu-style-device", f"not a row kernel: {r.device} runs kernels GPU-style (one kernel per reduction)"
  axes, shape = r.arg[1], r.src[0].shape
  row = math.prod(shape[a] for a in axes)
  if row > row_max: return "row-fuse-limit", f"not a row kernel: a row of {row} elements is over ROW_FUSE_MAX={row_max}"
  if any(s != 1 and a not in axes for a, s in enumerate(shape) if a > min(axes)):
    return "row-axes-not-innermost", f"not a row kernel: the reduced axes {axes} are not the innermost axes of " \
                                     f"{tuple(shape)}"
  inner = r.src[0].toposort(gate=lambda u: u not in sched.realized)
  if any(u.op is Ops.REDUCE_AXIS and u not in sched.realized for u in inner):
    return "row-holds-reduction", "not a row kernel: its input holds another reduction, which would run again for " \
                                  "every row"
  return "row-leaves-rows", "not a row kernel: " + _rows_leave(sched, r, axes, tuple(shape))

def _rows_leave(sched: Any, r: UOp, axes: tuple[int, ...], shape: tuple[int, ...]) -> str:
  """Where the paths from r leave its rows, or the kernels they end in (the row kernel needs exactly one)."""
  ends, refused = sched._consumer_walk(r, sched._row_step(axes, shape, sched.realized), every_end=True)
  if refused is not None:
    if refused in sched.realized or refused.op is Ops.SINK:
      return f"its result reaches {_op_text(refused)}, a kernel that is not computed over the same rows"
    return f"its result is used by {_op_text(refused)}, which leaves the reduced rows"
  if len(ends) > 1:
    return f"its rows end in {len(ends)} kernels ({', '.join(_op_text(e) for e in list(ends)[:3])}), not one"
  return "its rows end in no single kernel"

__all__ = ["Decision", "explain"]
