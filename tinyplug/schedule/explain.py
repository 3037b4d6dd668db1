"""Why the scheduler cut the graph where it did: for every realized node (one kernel each) the rule that made it a
kernel of its own, and for every reduction a fusion pass moved into its consumer's kernel, the pass's reason.

Computed after `decide()`, only when someone listens to `schedule` events (the visualizer), so the scheduler's
own path stays as it is. Each reason names a rule id, a sentence with the node's particulars, and the function
that implements the rule (for its file:line)."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any, Callable
from tinyplug.uop.ops import Ops, UOp

@dataclass(frozen=True)
class Decision:
  """`node` is computed by a kernel of its own (`realized`) or inside its consumer's kernel (not realized)."""
  node: UOp
  realized: bool
  rule: str            # the core's: "target", "contiguous", "assign", "copy", "copy-source", "reduce-then-<op>" (e.g.
                       # reduce-then-expand), "reduce-in-several-kernels"; a fusion pass's (fuse_rows: "row-kernel",
                       # "row-fuse-limit")
  detail: str
  file: str
  line: int

def _where(fn: Callable) -> tuple[str, int]:
  code = getattr(fn, "__func__", fn).__code__
  return code.co_filename, code.co_firstlineno

def _op_text(u: UOp) -> str:
  return f"{u.op.name} {tuple(u.shape)}" if u.op is not Ops.SINK else "SINK"

def explain(sched: Any) -> list[Decision]:
  """The reasons for every kernel boundary `sched` (a decided _Scheduler) drew, in graph order: the core's rules, and
  for reductions the fusion stage's passes fused or left alone, what those passes said."""
  from tinyplug.schedule import is_contiguous_buffer
  out: list[Decision] = []
  decide_at = _where(type(sched).decide)
  targets = set(sched.targets)
  graph, passes = sched.fusion, sched.fusion_passes
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
      rule, detail, at = rule or "reduce-used-beyond-elementwise", blocker or "its result is used by more than elementwise math", \
                         _where(type(sched)._fuses_into_one_output)
      for _, fusion_pass in passes:
        if (refusal := fusion_pass.why_not(graph, n)) is None: continue
        detail += "; " + refusal.detail
        if refusal.by_limit: rule, at = refusal.rule, _where(type(fusion_pass).why_not)
      add(n, True, rule, detail, at)
    elif n in graph.reasons:   # a pass's decision: a reduction fused into its consumer, or a node given a kernel
      name, rule, detail = graph.reasons[n]
      fusion_pass = next(p for s, p in passes if s.name == name)
      add(n, realized, rule, detail, _where(type(fusion_pass).fuse))
  return out

def _reduce_blocker(sched: Any, r: UOp) -> tuple[str, str]:
  """(rule, sentence): why reduction r's result cannot be computed inside one consumer kernel with elementwise math
  only; ("", "") if it can. The walk and its rule are the scheduler's own."""
  from tinyplug.schedule.fusion import fuse_step
  ends, refused = sched.fusion.consumer_walk(r, fuse_step(set(sched.realized)), every_end=True)
  if refused is not None:
    return f"reduce-then-{refused.op.name.lower().removesuffix('_axis')}", f"its result is used by {_op_text(refused)}, " \
           "which is not elementwise math (a reduction's output is materialized before it is broadcast, padded or reduced again)"
  if len(ends) > 1:
    names = ", ".join(_op_text(e) for e in list(ends)[:3])
    return "reduce-in-several-kernels", f"its result reaches {len(ends)} kernels ({names}): computing it in each " \
                                        "would repeat the reduction"
  return "", ""

__all__ = ["Decision", "explain"]
