"""Shape and device of tensor-level UOps (the graph a Tensor builds, before kernels exist)."""
from __future__ import annotations
import math
from tinyplug.uop.ops import Ops, GroupOp, UOp
from tinyplug.uop.sint import sadd, ssub, shape_eq

def shape_of(u: UOp) -> tuple[int, ...] | None:
  """The shape `u` has as a tensor, or None for nodes without one (kernel-level nodes, DEVICE, ...)."""
  op, arg = u.op, u.arg
  if op is Ops.BUFFER: return (arg,)
  if op is Ops.BIND and len(u.src) == 2 and u.src[1].op is Ops.CONST: return u.src[1].shape   # shaped as its value
  if op is Ops.CONST or op is Ops.DEFINE_VAR or op is Ops.BIND:
    return () if u.src and u.src[-1].op is Ops.DEVICE else None
  if op is Ops.RESHAPE or op is Ops.EXPAND: return tuple(arg)
  if op in GroupOp.Movement or op is Ops.REDUCE_AXIS:
    src = u.src[0].shape
    if src is None: return None
    if op is Ops.PERMUTE: return tuple(src[i] for i in arg)
    if op is Ops.PAD: return tuple(sadd(sadd(s, b), a) for s, (b, a) in zip(src, arg))
    if op is Ops.SHRINK: return tuple(ssub(e, b) for b, e in arg)
    if op is Ops.FLIP: return src
    return tuple(1 if i in arg[1] else s for i, s in enumerate(src))  # REDUCE_AXIS keeps reduced dims as 1
  if op in (Ops.COPY, Ops.CONTIGUOUS, Ops.DETACH, Ops.ASSIGN, Ops.CAST, Ops.AFTER, Ops.CUSTOM_GRAD):
    return u.src[0].shape
  if op is Ops.BITCAST:
    shp = u.src[0].shape
    if shp is None or u.dtype.itemsize == u.src[0].dtype.itemsize or not shp: return shp
    return shp[:-1] + (shp[-1] * u.src[0].dtype.itemsize // u.dtype.itemsize,)
  if op in GroupOp.ALU:
    shapes = [s.shape for s in u.src if s.shape is not None]
    if not shapes: return None
    if any(s != shapes[0] and not shape_eq(s, shapes[0]) for s in shapes):
      raise ValueError(f"{op} sources have different shapes {shapes}")
    return shapes[0]
  return None

def device_of(u: UOp) -> str | tuple[str, ...] | None:
  if u.op is Ops.DEVICE: return u.arg
  if u.op is Ops.COPY: return u.src[1].arg
  for s in u.src:
    if (d := s.device) is not None: return d
  return None

def size_of(shape: tuple[int, ...]) -> int: return math.prod(shape)
