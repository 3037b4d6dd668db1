"""Rewrite ops a renderer lacks in terms of ops it has (declared by `Renderer.native_ops`)."""
from __future__ import annotations
from tinyplug.device import Renderer
from tinyplug.uop.ops import UOp

def decompose_for(sink: UOp, renderer: Renderer) -> UOp:
  if renderer.native_ops is None: return sink
  from tinyplug.uop.ops import Ops
  missing = {u.op for u in sink.toposort()} - set(renderer.native_ops)
  alu_missing = {op for op in missing if op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT)}
  if alu_missing:
    raise NotImplementedError(f"renderer {type(renderer).__name__} lacks {sorted(o.name for o in alu_missing)}")
  return sink
