"""Movement ops become index arithmetic: given the indices into a view, the indices into its source."""
from __future__ import annotations
import contextlib, contextvars
from typing import Iterator
from tinyplug.uop.dtype import DType, dtypes
from tinyplug.uop.ops import Ops, UOp
from tinyplug.uop.sint import as_uop, resolve

INT32_MAX = 2**31 - 1
# the dtype of the index math being built: int32, or int64 for a schedule that touches 2^31 elements or more
_index_dtype: contextvars.ContextVar[DType] = contextvars.ContextVar("index_dtype", default=dtypes.index)

def index_dtype() -> DType: return _index_dtype.get()

@contextlib.contextmanager
def wide_index(wide: bool) -> Iterator[None]:
  """Build index math in int64 inside the block when `wide` (element counts past int32 would wrap)."""
  token = _index_dtype.set(dtypes.int64 if wide else dtypes.index)
  try: yield
  finally: _index_dtype.reset(token)

def const_index(v: int) -> UOp: return UOp.const(_index_dtype.get(), v)

def strides_for(shape: tuple[int, ...]) -> tuple[int, ...]:
  out, acc = [], 1
  for d in reversed(shape):
    out.append(acc if d != 1 else 0)
    acc *= d
  return tuple(reversed(out))

def linear_index(idx: tuple[UOp, ...], shape: tuple[int, ...]) -> UOp:
  """Row-major offset of `idx` in a contiguous array of `shape`."""
  terms = [i * st if st != 1 else i for i, st in zip(idx, strides_for(shape)) if st != 0]
  ret = const_index(0)
  for t in terms: ret = t if ret.op is Ops.CONST and ret.arg == 0 else ret + t
  return ret

def _nz(x) -> bool:
  """Whether a movement argument may be nonzero (a symbolic one always may)."""
  return isinstance(x, UOp) or x != 0

def _lt(a, b) -> bool:
  # plain ints stay Python ints (an index constant is int32 and would wrap past 2^31); sizes with variables by bounds
  if not isinstance(a, UOp) and not isinstance(b, UOp): return a < b
  return resolve(as_uop(a) < as_uop(b))

def _and(a: UOp | None, b: UOp) -> UOp: return b if a is None else a & b

def source_index(x: UOp, idx: tuple[UOp, ...]) -> tuple[tuple[UOp, ...], UOp | None]:
  """For a movement op `x` indexed at `idx`: the indices into x.src[0], and a bool that is false in padding (or None)."""
  src_shape, out_shape, arg = x.src[0].shape, x.shape, x.arg
  if x.op is Ops.PERMUTE:
    ret: list[UOp] = [const_index(0)] * len(idx)
    for i, p in enumerate(arg): ret[p] = idx[i]
    return tuple(ret), None
  if x.op is Ops.EXPAND:
    return tuple(const_index(0) if s == 1 and o != 1 else i for i, s, o in zip(idx, src_shape, out_shape)), None
  if x.op is Ops.SHRINK:
    return tuple(i + b if _nz(b) else i for i, (b, _) in zip(idx, arg)), None
  if x.op is Ops.FLIP:
    return tuple(const_index(s - 1) - i if f else i for i, s, f in zip(idx, src_shape, arg)), None
  if x.op is Ops.PAD:
    valid, ret = None, []
    for i, s, (b, a) in zip(idx, src_shape, arg):
      if _nz(b) or _nz(a):
        # i in [b, b+s): written as two comparisons so bounds analysis can drop the one that always holds
        if _nz(b): valid = _and(valid, (i < b).logical_not())
        if _nz(a): valid = _and(valid, i < b + s)
      ret.append(i - b if _nz(b) else i)
    return tuple(ret), valid
  if x.op is Ops.RESHAPE: return reshape_index(idx, out_shape, src_shape), None
  raise ValueError(f"{x.op} is not a movement op")

def reshape_index(idx: tuple[UOp, ...], out_shape: tuple[int, ...], src_shape: tuple[int, ...]) -> tuple[UOp, ...]:
  # adding or removing size-1 dims needs no arithmetic
  if tuple(d for d in out_shape if d != 1) == tuple(d for d in src_shape if d != 1):
    kept = iter(i for i, d in zip(idx, out_shape) if d != 1)
    return tuple(const_index(0) if d == 1 else next(kept) for d in src_shape)
  lin = linear_index(idx, out_shape)
  ret, acc = [], 1
  for d in reversed(src_shape):
    if d == 1: ret.append(const_index(0))
    else:
      q = lin // acc if acc != 1 else lin
      ret.append(q % d if _lt(acc * d, _size(out_shape)) else q)
    acc *= d
  return tuple(reversed(ret))

def _size(shape: tuple[int, ...]) -> int:
  n = 1
  for d in shape: n *= d
  return n
