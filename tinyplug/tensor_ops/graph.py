"""Building tensor-level UOps (architecture.md §1): constants, movement ops, casts and copies, with argument checks.

Every function takes and returns UOps; the Tensor mixins and the gradient rules share them.
Movement ops that would change nothing are left out, so equal computations build identical (shared) graphs.
"""
from __future__ import annotations
import math
from typing import Any
from tinyplug.caches import BoundedCache
from tinyplug.uop.dtype import DType, dtypes
from tinyplug.uop.ops import (Ops, UOp, canonical_dtype, device_node, float_const_node, known_node, shaped_node,
                              view_node)
from tinyplug.uop.sint import (is_symbolic_shape, max_shape, render_shape, resolve, seq, shape_eq, sle, smin_of, sprod,
                               ssimplify)

class ShapeError(ValueError, RuntimeError):
  """A shape that does not fit the operation. A ValueError (as numpy raises) and a RuntimeError (as torch and tinygrad
  raise), so code written for any of them catches it."""

class ArgumentError(ValueError, RuntimeError):
  """An argument value the operation does not take (a ValueError; a RuntimeError too, as torch and tinygrad raise)."""

class DTypeError(TypeError, RuntimeError):
  """A dtype the operation does not take (a TypeError; a RuntimeError too, as torch and tinygrad raise)."""

class ShapeTypeError(TypeError, ValueError):
  """A shape given as something other than ints (a TypeError, as torch raises; a ValueError, as tinygrad raises)."""

def normalize_axis(axis: int, ndim: int) -> int:
  """`axis` as a non-negative index into `ndim` dims; out of range raises an IndexError naming both."""
  if not isinstance(axis, int): raise TypeError(f"an axis must be an int, got {type(axis).__name__}")
  lo, hi = (-ndim, ndim - 1) if ndim > 0 else (-1, 0)
  if not lo <= axis <= hi:
    raise IndexError(f"axis {axis} is out of range for a tensor with {ndim} dims (expected {lo} to {hi})")
  return axis + ndim if axis < 0 and ndim > 0 else (0 if axis < 0 else axis)

def device_uop(device: str) -> UOp: return UOp(Ops.DEVICE, dtypes.void, arg=device)

def const(value: Any, dtype: DType, device: str | tuple[str, ...], shape: tuple[int, ...] = ()) -> UOp:
  """`value` broadcast to `shape`: a CONST of shape () reshaped to all ones and expanded."""
  # the same objects as a kept constant was last found for (`x + 1.0` in a loop: one float object, x's shape tuple)
  if (last := _by_value.get(id(value))) is not None and last[0] is value and last[1] is dtype and last[2] is device \
     and last[3] is shape:
    return last[4]
  # (the usual call first: a Python number on one device, asked for again and again by `x + 1.0` in a loop)
  if ((t := type(value)) is float or t is int or t is bool) and type(device) is str: pass
  elif isinstance(device, tuple): return multi([const(value, dtype, d, shape) for d in device], None)
  elif isinstance(value, UOp): return _sym_value(value, dtype, device, shape)
  # `x + 1.0` in a loop asks for the same constant each time: the three nodes are built once (they hold no buffer)
  key = None
  if t is float or t is int or t is bool:   # 0.0 and -0.0, 1 and True are different constants
    # the dtype by id (a DType hashes in Python): the entry holds it, so its id is not reused while the entry lives.
    # A float is its own key but for the zeros and nan (0.0 == -0.0, nan != nan), which go by their bits (hex(), 0.25
    # us, once per realize of `t + 1.0` otherwise)
    key = (t, value if t is not float or (value and value == value) else value.hex(), id(dtype), device,
           shape if type(shape) is tuple else tuple(shape))
    if (hit := _consts.get(key)) is not None:
      if type(shape) is tuple:
        if len(_by_value) >= 64: _by_value.clear()
        _by_value[id(value)] = (value, dtype, device, shape, hit[1])
      return hit[1]
    if (hit := _new_consts.pop(key, None)) is not None: return _consts.put(key, hit)[1]   # its second use: kept
  dev = device_node(device) if type(device) is str else device_uop(device)
  # a float into a float dtype is held as it is (as_const's answer, without its dtype comparisons)
  if t is float and (dtype is _F32 or dtypes.is_float(dtype)): c = float_const_node(dtype, dev, value)
  else: c = UOp(Ops.CONST, dtype, (dev,), dtypes.as_const(value, dtype))
  f32 = c.dtype is _F32 and key is not None
  if (ones := _ones.get(shape := tuple(shape))) is None and shape and all([type(s) is int for s in shape]):
    if len(_ones) > 1024: _ones.clear()
    ones = _ones[shape] = (1,) * len(shape)
  if ones is not None:   # the nodes reshape() and expand() make, without their checks
    ret = shaped_node(_RESHAPE, c, ones)
    if shape != ones:
      ret = shaped_node(_EXPAND, reshaped := ret, shape)
      if f32: (_const_skeleton or _bind_const_skeleton())(c, reshaped, ret)
    elif f32: (_const_skeleton or _bind_const_skeleton())(c, ret, None)
  else: ret = expand(reshape(c, (1,) * len(shape)), shape)
  if key is not None:   # (BoundedCache.put's work for this small first-in first-out table, without its call)
    if len(_new_consts) >= _NEW_CONSTS: del _new_consts[next(iter(_new_consts))]
    _new_consts[key] = (dtype, ret)
  return ret

def _sym_value(value: UOp, dtype: DType, device: str, shape: tuple) -> UOp:
  """A scalar expression over (bound) variables as a tensor-level value of `dtype` broadcast to `shape`: each leaf
  gets the device, so the expression is computed inside the kernel from the variables' values."""
  def leaf(x: UOp) -> UOp:
    if x.op is Ops.CONST: return UOp(Ops.CONST, x.dtype, (device_uop(device),), x.arg)
    if x.op is Ops.DEFINE_VAR: return UOp(Ops.DEFINE_VAR, x.dtype, (device_uop(device),), x.arg)
    if x.op is Ops.BIND:
      return UOp(Ops.BIND, x.dtype, (x.src[0], UOp(Ops.CONST, x.dtype, (device_uop(device),), x.src[1].arg)))
    return None
  memo: dict[UOp, UOp] = {}
  for x in value.toposort(gate=lambda x: x.op not in (Ops.BIND, Ops.DEFINE_VAR)):
    if (lf := leaf(x)) is not None: memo[x] = lf
    elif x.src: memo[x] = x.replace(src=tuple(memo[s] for s in x.src))
    else: raise ValueError(f"cannot make a tensor from {x.op} in a symbolic expression")
  ret = cast(memo[value], dtype)
  return expand(reshape(ret, (1,) * len(shape)), shape)

# a concrete shape (all ints, at least one dim) -> its rank's (1, ..., 1): a new constant's reshape, without looking at
# each dim again
_ones: dict[tuple, tuple] = {}

_F32 = canonical_dtype(dtypes.float32)
# (an attribute of the Ops enum costs ~80 ns: every new constant reads two, every movement op one)
_RESHAPE, _EXPAND, _PERMUTE, _PAD, _SHRINK, _FLIP = Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.PAD, Ops.SHRINK, Ops.FLIP

# a new float32 constant's chain gets its skeleton as it is made (schedule/cache.py: a new k's graph is then known from
# its ops alone on its first realize); the scheduler is loaded by the first such constant, not on import
_const_skeleton: Any = None

def _bind_const_skeleton() -> Any:
  global _const_skeleton
  from tinyplug.schedule.cache import remember_const_skeleton
  _const_skeleton = remember_const_skeleton
  return _const_skeleton

# constants found in _consts, by the id of the value object const() was given: (value, dtype, device, shape, node),
# a hit when all four are the same objects again (the entry holds them: their ids are not reused meanwhile). Emptied
# whenever _consts drops an entry (an eviction, a reset), so no constant outlives its entry there
_by_value: dict[int, tuple] = {}

def _forget_found(_entry: Any) -> None: _by_value.clear()

_consts: BoundedCache = BoundedCache("tensor.constants", 4096, on_evict=_forget_found)
# a constant asked for once waits here and moves into _consts on its second use: one used once (a new float each step,
# `x * k` for a k never seen before) would otherwise be held in _consts until evicted, long enough for its nodes, key
# and entry to age into the garbage collector's oldest generation, which then runs full collections over the whole
# heap (a new `((x * k) + 1).exp()` each time: ~15 us of collections per realize, 94 -> 62 us, one thread)
_NEW_CONSTS = 32
_new_consts: BoundedCache = BoundedCache("tensor.new_constants", _NEW_CONSTS)

def const_like(u: UOp, value: Any, dtype: DType | None = None) -> UOp:
  return const(value, dtype or u.dtype, u.device, u.shape)

def cast(u: UOp, dtype: DType) -> UOp: return u if u.dtype == dtype else UOp(Ops.CAST, dtype, (u,))

def bitcast(u: UOp, dtype: DType) -> UOp: return u if u.dtype == dtype else UOp(Ops.BITCAST, dtype, (u,))

def copy_to(u: UOp, device: str | tuple[str, ...]) -> UOp:
  """`u` on `device`; a tuple of devices gets a copy on each (a multi-device tensor that is not split)."""
  if isinstance(device, tuple): return shard(u, device, None)
  if u.op in _CONSTANT_GRAPH and u.device is not None and _constants_only(u):   # nothing to move: made on `device`
    return u.substitute({d: device_uop(device) for d in u.toposort() if d.op is Ops.DEVICE})
  return UOp(Ops.COPY, u.dtype, (u, device_uop(device)))

_CONSTANT_GRAPH = frozenset({Ops.CONST, Ops.DEVICE, Ops.CAST, Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.PERMUTE,
                             Ops.FLIP})

def _constants_only(u: UOp) -> bool:
  """Whether u is computed from constants alone (a broadcast value, padded or cast): copying it needs no data."""
  return all(n.op in _CONSTANT_GRAPH for n in u.toposort(gate=lambda n: n.op in _CONSTANT_GRAPH))

# ---- multi-device tensors (architecture.md §1, MULTI) ----

def multi(shards: list[UOp], axis: int | None) -> UOp:
  """One tensor made of `shards`, one per device, side by side along `axis` (None: each holds all of it)."""
  first = shards[0]
  for s in shards:
    if not isinstance(s.device, str): raise ValueError(f"a shard must live on one device, not on {s.device}")
    if s.dtype != first.dtype or s.shape != first.shape:
      raise ValueError(f"shards differ: {s.shape} {s.dtype!r} and {first.shape} {first.dtype!r}")
  return UOp(Ops.MULTI, first.dtype, tuple(shards), axis)

def part_shape(shape: tuple[int, ...], n_devices: int, axis: int | None) -> tuple[int, ...]:
  """The shape of one device's part of a tensor of `shape` split evenly over `n_devices` along `axis`."""
  return shape if axis is None else tuple(s // n_devices if i == axis else s for i, s in enumerate(shape))

def shard_shape(u: UOp) -> tuple[int, ...]:
  """The shape of each device's part of `u` (its shape when it is on one device or not split)."""
  return part_shape(u.shape, len(u.device), u.axis) if isinstance(u.device, tuple) else u.shape

def shard(u: UOp, devices: tuple[str, ...], axis: int | None) -> UOp:
  """`u` split along `axis` over `devices` (None: copied whole to each). Each device gets a copy of its part; from a
  tensor that is already split, each part is gathered first (the scheduler copies only what it needs)."""
  from tinyplug.uop.shapes import shard_bounds
  if axis is not None:
    n = len(devices)
    if is_symbolic_shape(u.shape) or u.shape[axis] % n != 0:
      raise ShapeError(f"multi axis uneven: cannot split axis {axis} of shape {render_shape(u.shape)} evenly over "
                       f"{n} devices (its size must be a multiple of {n})")
  pieces = []
  for i, d in enumerate(devices):
    part = u if axis is None else \
      shrink(u, tuple(shard_bounds(s, len(devices), i) if j == axis else (0, s) for j, s in enumerate(u.shape)))
    pieces.append(copy_to(part, d))
  return multi(pieces, axis)

def new_buffer(device: str | tuple[str, ...], shape: tuple[int, ...], dtype: DType, axis: int | None = None) -> UOp:
  """An unfilled buffer of `shape` (on each of a tuple of devices, split along `axis`)."""
  if isinstance(device, tuple):
    return multi([new_buffer(d, part_shape(shape, len(device), axis), dtype) for d in device], axis)
  return reshape(UOp.new_buffer(device, math.prod(shape), dtype), shape)

def alu(op: Ops, *srcs: UOp) -> UOp:
  """An elementwise op; comparisons give bool, everything else the dtype of the last source (WHERE: its values)."""
  shapes = {s.shape for s in srcs}
  if len(shapes) != 1: raise ValueError(f"{op} needs sources of one shape, got {[s.shape for s in srcs]}")
  out = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else srcs[-1].dtype
  return UOp(op, out, tuple(srcs)).with_known_shape(next(iter(shapes)))

_COMPARISONS = frozenset({Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ})

def alu2(op: Ops, a: UOp, b: UOp) -> UOp:
  """alu(op, a, b), for the two sources of a binary op without collecting their shapes."""
  if (shape := a.shape) != b.shape: return alu(op, a, b)   # (raises, naming both)
  # its device as shapes.device_of would work it out later (the first source's that has one), known now
  return known_node(op, _BOOL if op in _COMPARISONS else b.dtype, (a, b), shape,
                    b.device if (d := a.device) is None else d)

def alu2_known(op: Ops, a: UOp, b: UOp, shape: tuple | None, device: Any) -> UOp:
  """alu2(op, a, b) for sources the caller knows are both of `shape` and on `device` (a node and a constant made at
  its shape and device)."""
  return known_node(op, _BOOL if op in _COMPARISONS else b.dtype, (a, b), shape, device)

def alu1(op: Ops, u: UOp) -> UOp:
  """alu(op, u) for a unary op: its shape and device are its source's."""
  return known_node(op, u.dtype, (u,), u.shape, u.device)

_BOOL = canonical_dtype(dtypes.bool)   # (a node's dtype is the canonical one: the cache key holds its id)

def own_buffer(u: UOp) -> UOp:
  """`u` written into a fresh buffer (an ASSIGN), so that equal values made separately stay separate tensors."""
  if is_symbolic_shape(u.shape): return UOp(Ops.CONTIGUOUS, u.dtype, (u,))
  n = math.prod(u.shape)
  if n == 0: return u
  if isinstance(u.device, tuple): return UOp(Ops.ASSIGN, u.dtype, (new_buffer(u.device, u.shape, u.dtype, u.axis), u))
  buf = UOp.new_buffer(u.device, n, u.dtype)
  return reshape(UOp(Ops.ASSIGN, u.dtype, (buf, reshape(u, (n,)))), u.shape)

def symbolic_buffer(device: str, shape: tuple, dtype: DType) -> UOp:
  """A new buffer for a shape with symbolic sizes: allocated for the largest shape, seen through a shrink."""
  big = max_shape(shape)
  return shrink(reshape(UOp.new_buffer(device, math.prod(big), dtype), big), tuple((0, s) for s in shape))

# ---- movement ----
# Each maker first takes the usual case, plain ints over a shape of plain ints, without the symbolic helpers: the node
# is made with its shape and device (view_node); anything else (a symbolic size, a numpy int, a bad argument) takes
# the general path below it, which checks and names what is wrong.

def concrete(shape: tuple | None) -> bool:
  """Whether `shape` is known and every size in it a plain int."""
  return shape is not None and all([type(s) is int for s in shape])

# a permutation seen before -> whether it is the identity (a tuple of plain ints, valid for its own length)
_perms: dict[tuple, bool] = {}

def reshape(u: UOp, shape: tuple[int, ...]) -> UOp:
  shape = tuple(shape)
  if (old := u.shape) == shape: return u
  if old is not None and all([type(s) is int and s >= 0 for s in shape]) and concrete(old) and \
     math.prod(shape) == math.prod(old):
    return view_node(_RESHAPE, u, shape, shape)
  shape = tuple(ssimplify(s) for s in shape)
  if u.shape == shape: return u
  if is_symbolic_shape(shape) or is_symbolic_shape(u.shape):
    if shape_eq(u.shape, shape): return u
    if not seq(sprod(shape), sprod(u.shape)):
      raise ShapeError(f"cannot reshape a tensor of shape {render_shape(u.shape)} to {render_shape(shape)}")
    return UOp(Ops.RESHAPE, u.dtype, (u,), shape)
  if math.prod(shape) != math.prod(u.shape):
    raise ShapeError(f"cannot reshape a tensor of shape {u.shape} ({math.prod(u.shape)} elements) to {shape} "
                     f"({math.prod(shape)} elements)")
  return UOp(Ops.RESHAPE, u.dtype, (u,), shape)

def expand(u: UOp, shape: tuple[int, ...]) -> UOp:
  shape = tuple(shape)
  if (old := u.shape) == shape: return u
  if old is not None and len(old) == len(shape) and all([type(s) is int for s in shape]) and concrete(old) and \
     all([n == s or n == 1 for n, s in zip(old, shape)]):
    return view_node(_EXPAND, u, shape, shape)
  shape = tuple(ssimplify(s) for s in shape)
  if u.shape == shape or shape_eq(u.shape, shape): return u
  if len(shape) != len(u.shape) or any(s != n and s != 1 and not seq(s, n) for s, n in zip(u.shape, shape)):
    raise ShapeError(f"cannot expand shape {u.shape} to {shape}: only dims of size 1 can grow")
  return UOp(Ops.EXPAND, u.dtype, (u,), shape)

def permute(u: UOp, order: tuple[int, ...]) -> UOp:
  order = tuple(order)
  if (ident := _perms.get(order)) is None and (shape := u.shape) is not None and len(order) == len(shape) and \
     all([type(a) is int for a in order]) and sorted(order) == list(range(len(order))):
    if len(_perms) > 1024: _perms.clear()
    ident = _perms[order] = order == tuple(range(len(order)))
  # (a permutation's shape takes no arithmetic: symbolic sizes are fine here)
  if ident is not None and (shape := u.shape) is not None and len(shape) == len(order):
    return u if ident else view_node(_PERMUTE, u, order, tuple([shape[i] for i in order]))
  if sorted(order) != list(range(len(u.shape))):
    raise ShapeError(f"permute order {order} is not a permutation of the {len(u.shape)} dims of shape {u.shape}")
  if order == tuple(range(len(order))): return u
  return UOp(Ops.PERMUTE, u.dtype, (u,), order)

def pad(u: UOp, padding: tuple[tuple[int, int], ...]) -> UOp:
  """Zero padding; each (before, after) must be >= 0 (negative pads are shrinks, see Tensor.pad)."""
  if (ints := int_pairs(padding)) is not None and concrete(shape := u.shape) and len(ints) == len(shape) and \
     all([b >= 0 and a >= 0 for b, a in ints]):
    return pad_ints(u, ints, shape)
  padding = tuple((_size_arg(b), _size_arg(a)) for b, a in padding)
  if len(padding) != len(u.shape):
    raise ShapeError(f"pad needs one (before, after) per dim of {u.shape}, got {padding}")
  if any(smin_of(b) < 0 or smin_of(a) < 0 for b, a in padding): raise ShapeError(f"negative padding {padding}")
  if all(seq(b, 0) and seq(a, 0) for b, a in padding): return u
  return UOp(Ops.PAD, u.dtype, (u,), padding)

def pad_ints(u: UOp, pairs: tuple[tuple[int, int], ...], shape: tuple[int, ...]) -> UOp:
  """pad(u, pairs) for a caller that checked them: a (before, after) of plain non-negative ints per dim of `shape`,
  u's shape of plain ints."""
  if not any([b or a for b, a in pairs]): return u
  return view_node(_PAD, u, pairs, tuple([s + b + a for s, (b, a) in zip(shape, pairs)]))

def shrink(u: UOp, bounds: tuple[tuple[int, int], ...]) -> UOp:
  if (ints := int_pairs(bounds)) is not None and concrete(shape := u.shape) and len(ints) == len(shape) and \
     all([0 <= b <= e <= s for (b, e), s in zip(ints, shape)]):
    if all([b == 0 and e == s for (b, e), s in zip(ints, shape)]): return u
    return view_node(_SHRINK, u, ints, tuple([e - b for b, e in ints]))
  bounds = tuple((_size_arg(b), _size_arg(e)) for b, e in bounds)
  if len(bounds) != len(u.shape): raise ShapeError(f"shrink needs one (start, end) per dim of {u.shape}, got {bounds}")
  # symbolic bounds are checked where the bounds of the variables decide it (a variable may reach past the end)
  if any(not (sle(0, b) and sle(b, e) and sle(e, s, default=True)) for (b, e), s in zip(bounds, u.shape)):
    raise ShapeError(f"shrink bounds {bounds} do not fit in shape {u.shape}")
  if all(seq(b, 0) and seq(e, s) for (b, e), s in zip(bounds, u.shape)): return u
  return UOp(Ops.SHRINK, u.dtype, (u,), bounds)

def int_pairs(pairs: Any) -> tuple[tuple[int, int], ...] | None:
  """`pairs` as a tuple of (int, int) tuples when every entry is a pair of plain ints, else None."""
  try: out = tuple([(b, e) for b, e in pairs])
  except (TypeError, ValueError): return None
  return out if all([type(b) is int and type(e) is int for b, e in out]) else None

def _size_arg(x: Any) -> Any:
  """An int (Python or numpy) as an int, a symbolic size as its simplest form."""
  return ssimplify(x) if isinstance(x, UOp) else int(x)

def flip(u: UOp, axes: tuple[int, ...]) -> UOp:
  if len(set(axes)) != len(axes): raise ShapeError(f"flip axes {axes} name a dim more than once")
  if concrete(shape := u.shape):
    flags = tuple([i in axes and s > 1 for i, s in enumerate(shape)])
    return view_node(_FLIP, u, flags, shape) if True in flags else u
  flags = tuple(i in axes and s != 1 and resolve(s > 1) for i, s in enumerate(u.shape))
  if not any(flags): return u
  return UOp(Ops.FLIP, u.dtype, (u,), flags)

def reduce(u: UOp, op: Ops, axes: tuple[int, ...]) -> UOp:
  """REDUCE_AXIS over `axes` (kept as size 1); reducing dims of size 1 changes nothing and is left out."""
  axes = tuple(sorted(a for a in set(axes) if u.shape[a] != 1))
  if not axes: return u
  return UOp(Ops.REDUCE_AXIS, u.dtype, (u,), (op, axes))

# ---- facts about realized graphs ----

def is_plain_buffer(u: UOp) -> bool:
  """A BUFFER, possibly reshaped, holding exactly this tensor's elements in order."""
  if u.op is Ops.MULTI: return all(is_plain_buffer(s) for s in u.src)
  if u.op is Ops.RESHAPE: u = u.src[0]
  return u.op is Ops.BUFFER

# views that show each element of the buffer at most once: writing through them is well defined
_INJECTIVE_VIEWS = (Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.DETACH)

def is_writable_view(u: UOp) -> bool:
  """A realized buffer seen through reshapes, permutes, shrinks, flips (and detach): an assign writes into the
  buffer."""
  while u.op in _INJECTIVE_VIEWS: u = u.src[0]
  return u.op is Ops.BUFFER

def is_symbolic_buffer(u: UOp) -> bool:
  """A tensor of symbolic shape in the layout the scheduler gives one (a max-shape BUFFER seen through a shrink)."""
  if u.op is not Ops.SHRINK or not is_symbolic_shape(u.shape): return False
  inner = u.src[0]
  return inner.op is Ops.RESHAPE and inner.src[0].op is Ops.BUFFER and inner.shape == max_shape(u.shape) and \
    all(seq(b, 0) for b, _ in u.arg)

def is_realized(u: UOp) -> bool:
  """Nothing to compute: a buffer seen through movement ops only (on each device, for a multi-device tensor)."""
  if u.op is Ops.MULTI: return all(is_realized(s) for s in u.src)
  return u.base.op is Ops.BUFFER
