"""Creating tensors without data from Python: empty, full, zeros, ones, arange, linspace, eye and the *_like forms."""
from __future__ import annotations
import functools, math
from typing import Any
from tinyplug.uop.dtype import DType, dtypes, to_dtype
from tinyplug.uop.ops import Ops, UOp
from tinyplug.tensor_ops import graph
from tinyplug.uop.sint import as_uop, is_symbolic_shape, smax_of, smin_of, ssimplify

def argfix(*shape: Any) -> tuple[int, ...]:
  """`f(2, 3)` and `f((2, 3))` both give (2, 3); a size may be a bound variable or an expression of them."""
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
  if not all(isinstance(s, (int, UOp)) for s in shape): raise graph.ShapeTypeError(f"a shape must be ints, got {shape}")
  shape = tuple(ssimplify(s) for s in shape)
  if any(smin_of(s) < 0 for s in shape): raise ValueError(f"a shape cannot have negative sizes: {shape}")
  return tuple(shape)

@functools.lru_cache(maxsize=256)
def arange_uop(n: int, device: str) -> UOp:
  """0, 1, ..., n-1 as int32 (int64 past int32's range), built lazily from constants: a sum of one bit-weight
  [0, 2**j] per binary digit. Remembered per (n, device): UOps are immutable and hash-consed, so the same graph comes
  back, and `x[idx]` of a 50k-row table no longer builds 16 digits' nodes per call (~40% of its Python time)."""
  dt = dtypes.int32 if n - 1 <= dtypes.int32.max else dtypes.int64
  if n <= 1: return graph.const(0, dt, device, (n,))
  bits = (n - 1).bit_length()
  total: UOp | None = None
  for j in range(bits):
    weight = 1 << (bits - 1 - j)
    digit = graph.pad(graph.const(weight, dt, device, (1,)), ((1, 0),))   # [0, weight]
    digit = graph.expand(graph.reshape(digit, (1,) * j + (2,) + (1,) * (bits - 1 - j)), (2,) * bits)
    total = digit if total is None else graph.alu(Ops.ADD, total, digit)
  assert total is not None
  return graph.shrink(graph.reshape(total, (1 << bits,)), ((0, n),))

class CreationMixin:
  __slots__ = ()
  @classmethod
  def _creation_args(cls, kwargs: dict, default_dtype: DType) -> tuple[str | tuple[str, ...], DType, bool | None]:
    from tinyplug.tensor import canonical_device
    unknown = set(kwargs) - {"device", "dtype", "requires_grad"}
    if unknown: raise TypeError(f"unexpected keyword arguments {sorted(unknown)}")
    dtype = kwargs.get("dtype")
    return canonical_device(kwargs.get("device")), default_dtype if dtype is None else to_dtype(dtype), \
      kwargs.get("requires_grad")

  @classmethod
  def empty(cls, *shape, **kwargs):
    """A tensor whose buffer is allocated but not filled."""
    shape = argfix(*shape)
    device, dtype, rg = cls._creation_args(kwargs, dtypes.default_float)
    if is_symbolic_shape(shape): return cls.from_uop(graph.symbolic_buffer(device, shape, dtype), rg)
    if math.prod(shape) == 0: return cls.from_uop(graph.const(0, dtype, device, shape), rg)
    return cls.from_uop(graph.new_buffer(device, shape, dtype), rg)

  @classmethod
  def from_blob(cls, ptr: int, shape: tuple[int, ...], **kwargs):
    """A tensor over memory someone else allocated at address `ptr` (host memory on CPU and PYTHON, a device
    pointer on CUDA), used in place, not copied: what is written there shows in the tensor's next use. The caller
    keeps the memory alive as long as the tensor."""
    from tinyplug.device import Buffer, buffer_attach_external
    shape = argfix(shape)
    device, dtype, rg = cls._creation_args(kwargs, dtypes.default_float)
    if isinstance(device, tuple): raise ValueError("from_blob makes a tensor on one device, not a tuple of devices")
    uop = graph.new_buffer(device, shape, dtype)
    buffer_attach_external(uop.base, Buffer.from_address(device, math.prod(shape), dtype, ptr))
    return cls.from_uop(uop, rg)

  @classmethod
  def invalids(cls, *shape, **kwargs):
    """tinygrad's name for a tensor whose values are not defined until written: `empty` (a buffer, not filled)."""
    return cls.empty(*shape, **kwargs)

  @classmethod
  def full(cls, shape, fill_value: Any, **kwargs):
    """A tensor of `fill_value` in a buffer of its own (two equal `full`s never share storage or gradients);
    `buffer=False` gives the broadcast constant itself (nothing stored until something needs it)."""
    default = dtypes.from_py(fill_value) if isinstance(fill_value, (bool, int, float)) else dtypes.default_float
    buffer = kwargs.pop("buffer", True)
    device, dtype, rg = cls._creation_args(kwargs, default)
    value = graph.const(fill_value, dtype, device, argfix(shape))
    return cls.from_uop(graph.own_buffer(value) if buffer else value, rg)

  @classmethod
  def zeros(cls, *shape, **kwargs): return cls.full(argfix(*shape), 0.0, **{"dtype": dtypes.default_float, **kwargs})
  @classmethod
  def ones(cls, *shape, **kwargs): return cls.full(argfix(*shape), 1.0, **{"dtype": dtypes.default_float, **kwargs})

  def _multi_like(self, make, kwargs: dict):
    """`make(shape, device=..., **kwargs)` on each device of this multi-device tensor, split as this one is."""
    if kwargs.get("device") is not None: raise ValueError("a *_like of a multi-device tensor takes no device")
    parts = [make(graph.shard_shape(self.uop), **{**kwargs, "device": d}) for d in self.device]
    return type(self).from_uop(graph.multi([p.uop for p in parts], self.uop.axis), parts[0].requires_grad)
  def full_like(self, fill_value: Any, **kwargs):
    kwargs = {"dtype": self.dtype, **kwargs}
    if isinstance(self.device, tuple):
      return self._multi_like(lambda shape, **kw: type(self).full(shape, fill_value, **kw), kwargs)
    return type(self).full(self.shape, fill_value, **{"device": self.device, **kwargs})
  def zeros_like(self, **kwargs): return self.full_like(0, **kwargs)
  def ones_like(self, **kwargs): return self.full_like(1, **kwargs)
  def empty_like(self, **kwargs):
    kwargs = {"dtype": self.dtype, **kwargs}
    if isinstance(self.device, tuple): return self._multi_like(lambda shape, **kw: type(self).empty(*shape, **kw), kwargs)
    return type(self).empty(*self.shape, **{"device": self.device, **kwargs})

  @classmethod
  def arange(cls, start: int | float, stop: int | float | None = None, step: int | float = 1, **kwargs):
    """Like range() (and torch.arange): `arange(5)`, `arange(2, 8, 2)`, `arange(0, 1, 0.25)`."""
    if stop is None: start, stop = 0, start
    if step == 0: raise ValueError("arange: step must not be zero")
    is_float = any(isinstance(v, float) for v in (start, stop, step))
    if any(isinstance(v, UOp) for v in (start, stop, step)):
      if is_float or smin_of(step) <= 0:
        raise ValueError("arange with symbolic bounds needs int bounds and a positive step")
      device, dtype, rg = cls._creation_args(kwargs, dtypes.default_int)
      # ceil((stop-start)/step) elements: 0..max-1 computed for the largest count, cut to the count
      n = ssimplify((as_uop(stop) - as_uop(start) + as_uop(step) - 1) // as_uop(step))
      idx = cls.from_uop(graph.shrink(arange_uop(max(smax_of(n), 0), device), ((0, n),)))
    else:
      n = max(0, math.ceil((stop - start) / step))
      default = dtypes.default_float if is_float else dtypes.default_int
      ends = (start, start + (n - 1) * step)
      if not is_float and n and not all(dtypes.min(default) <= v <= dtypes.max(default) for v in ends):
        default = dtypes.int64   # an integer range past the default int's bounds (as tinygrad and torch)
      device, dtype, rg = cls._creation_args(kwargs, default)
      ends = (start, start + (n - 1) * step)
      if not is_float and n and dtypes.is_int(dtype) and not all(dtype.min <= v <= dtype.max for v in ends):
        raise OverflowError(f"arange({start}, {stop}, {step}) does not fit {dtype!r}")   # as tinygrad (torch wraps)
      idx = cls.from_uop(arange_uop(n, device))
    out = idx.cast(dtype) if (dtypes.is_float(dtype) or not is_float) else idx.cast(dtypes.default_float)
    if isinstance(step, UOp) or step != 1: out = out * step
    if isinstance(start, UOp) or start != 0: out = out + start
    out = out.cast(dtype)
    out.requires_grad = rg
    return out

  @classmethod
  def linspace(cls, start: int | float, stop: int | float, steps: int, **kwargs):
    """`steps` evenly spaced values from start to stop inclusive (computed from both ends, like torch)."""
    if steps < 0: raise graph.ArgumentError(f"linspace: steps must be non-negative, got {steps}")
    device, dtype, rg = cls._creation_args(kwargs, dtypes.default_float)
    if dtype == dtypes.bool: raise graph.ArgumentError("linspace cannot make bool values (as torch)")
    if steps == 1: return cls.full((1,), start, dtype=dtype, device=device, requires_grad=rg)
    i = cls.arange(steps, device=device, dtype=dtypes.default_float)
    delta = (stop - start) / max(steps - 1, 1)
    out = (i < steps // 2).where(i * delta + start, stop - (steps - 1 - i) * delta).cast(dtype)
    out.requires_grad = rg
    return out

  @classmethod
  def eye(cls, n: int, m: int | None = None, **kwargs):
    device, dtype, rg = cls._creation_args(kwargs, dtypes.default_float)
    m = n if m is None else m
    rows = cls.arange(n, device=device).reshape(n, 1)
    out = (rows == cls.arange(m, device=device).reshape(1, m)).cast(dtype)
    out.requires_grad = rg
    return out
