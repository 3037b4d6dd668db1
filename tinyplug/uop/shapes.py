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
  if op is Ops.MULTI:   # the whole tensor: the shards side by side along the axis (each device holds all with None)
    shp = u.src[0].shape
    return shp if arg is None or shp is None else shp[:arg] + (shp[arg] * len(u.src),) + shp[arg + 1:]
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
  if op is Ops.SCATTER_ADD: return (arg,) + tuple(u.src[0].shape[1:])
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
  if u.op is Ops.MULTI: return tuple(s.device for s in u.src)
  if u.op is Ops.COPY: return u.src[1].arg
  for s in u.src:
    if (d := s.device) is not None: return d
  return None

def size_of(shape: tuple[int, ...]) -> int: return math.prod(shape)

# ---------------- multi-device tensors (Ops.MULTI) ----------------

def shard_bounds(size: int, count: int, i: int) -> tuple[int, int]:
  """(start, end) of shard `i` when an axis of `size` is split evenly over `count` devices."""
  step = size // count
  return i * step, (i + 1) * step

def reshape_axis(old: tuple, new: tuple, axis: int, count: int) -> int | None:
  """Where a reshape from `old` to `new` keeps a split along `axis` of `old`, or None when it moves elements between
  shards: each shard is a block of `old[axis] // count` rows under every index of the axes before `axis`, so the new
  shape must have the same product before some axis, and that axis must split evenly."""
  if any(isinstance(s, UOp) for s in (*old, *new)): return None
  before, acc = math.prod(old[:axis]), [1]
  for s in new: acc.append(acc[-1] * s)
  # the last match skips size-1 axes in front of the split one
  k = max((i for i, p in enumerate(acc[:-1]) if p == before), default=None)
  return k if k is not None and new[k] % count == 0 else None

def axis_of(u: UOp) -> int | None:
  """The axis along which a multi-device tensor-level node is split over its devices (None: every device holds
  all of it, or the node is on one device). The scheduler's lowering (schedule/multi.py) follows the same rules."""
  op = u.op
  if op is Ops.MULTI: return u.arg
  if not isinstance(u.device, tuple) or op is Ops.COPY or not u.src: return None
  if op in GroupOp.ALU:   # the sources that are split: the last one's axis wins, the others are split to match
    axes = [a for s in u.src if (a := s.axis) is not None]
    return axes[-1] if axes else None
  src = u.src[0]
  if (a := src.axis) is None: return None
  if op is Ops.RESHAPE: return reshape_axis(src.shape, u.arg, a, len(u.device))
  if op is Ops.PERMUTE: return u.arg.index(a)
  if op is Ops.PAD: return a if tuple(u.arg[a]) == (0, 0) else None
  if op is Ops.SHRINK: return a if tuple(u.arg[a]) == (0, src.shape[a]) else None
  if op is Ops.FLIP: return None if u.arg[a] else a
  if op is Ops.REDUCE_AXIS: return None if a in u.arg[1] else a
  return a   # EXPAND (never of the split axis: it is larger than 1), CAST, BITCAST, CONTIGUOUS, DETACH, ASSIGN, ...
