"""Small float formats (fp8, and float16/bfloat16 when a device has to emulate them) as bits in unsigned integers.

One description per format (`FORMATS`) and one conversion algorithm, written once against a tiny array interface so
that it runs on numpy arrays (host data, Python constants) and builds UOps (kernels on devices without the format):

  encode(x, fmt, ops)   float32/float64 values -> the format's bits, round to nearest even
  decode(bits, fmt, ops) the format's bits -> exact float32 values

Special values follow PyTorch (2.13), the reference the tests compare against, bit for bit:
- float8_e4m3fn (`fp8e4m3`, OCP): no infinity; S.1111.111 is NaN; finite values past 448 and +-inf saturate to +-448.
- float8_e5m2 (`fp8e5m2`, OCP): IEEE-like, with +-inf; rounding past 57344 gives inf; NaN encodes as S.11111.11.
- float8_e4m3fnuz / float8_e5m2fnuz: no infinity and no negative zero; 0x80 is the only NaN; overflow, inf and NaN
  all give 0x80.
- float16 / bfloat16: IEEE (overflow to inf, quiet NaN).
Subnormals of every format are kept (not flushed)."""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any
from tinyplug.uop.dtype import DType, dtypes

@dataclass(frozen=True)
class FloatFormat:
  exp_bits: int
  mant_bits: int
  bias: int
  overflow: str      # past the largest finite value: "inf" (IEEE), "saturate" (the largest finite value) or "nan"
  nan: int           # the magnitude bits of the NaN it writes ("nan" formats: the whole code, sign included)
  has_inf: bool      # the all-ones exponent holds inf and NaNs (IEEE)
  fnuz: bool = False  # 0x80 is NaN: no negative zero

  @property
  def bits(self) -> int: return 1 + self.exp_bits + self.mant_bits
  @property
  def max_code(self) -> int:
    """The magnitude bits of the largest finite value."""
    if self.has_inf: return (((1 << self.exp_bits) - 2) << self.mant_bits) | ((1 << self.mant_bits) - 1)
    if self.fnuz: return (1 << (self.exp_bits + self.mant_bits)) - 1
    return (1 << (self.exp_bits + self.mant_bits)) - 2   # e4m3fn: all ones is NaN
  @property
  def inf_code(self) -> int: return ((1 << self.exp_bits) - 1) << self.mant_bits
  @property
  def max_value(self) -> float:
    e, m = self.max_code >> self.mant_bits, self.max_code & ((1 << self.mant_bits) - 1)
    return (1 + m / (1 << self.mant_bits)) * 2.0 ** (e - self.bias)

FORMATS: dict[DType, FloatFormat] = {
  dtypes.fp8e4m3: FloatFormat(4, 3, 7, "saturate", 0x7F, has_inf=False),
  dtypes.fp8e5m2: FloatFormat(5, 2, 15, "inf", 0x7F, has_inf=True),
  dtypes.fp8e4m3fnuz: FloatFormat(4, 3, 8, "nan", 0x80, has_inf=False, fnuz=True),
  dtypes.fp8e5m2fnuz: FloatFormat(5, 2, 16, "nan", 0x80, has_inf=False, fnuz=True),
  dtypes.float16: FloatFormat(5, 10, 15, "inf", 0x7E00, has_inf=True),
  dtypes.bfloat16: FloatFormat(8, 7, 127, "inf", 0x7FC0, has_inf=True),
}
STORAGE: dict[int, DType] = {8: dtypes.uint8, 16: dtypes.uint16}

# ---------------- the array interface the algorithm runs on ----------------

class NumpyOps:
  """The algorithm on numpy arrays (dtypes are numpy dtypes of the same names)."""
  def __init__(self):
    import numpy as np
    self.np = np
  def dtype(self, dt: DType) -> Any:
    names = {dtypes.uint8: "uint8", dtypes.uint16: "uint16", dtypes.uint32: "uint32", dtypes.uint64: "uint64",
             dtypes.float32: "float32", dtypes.float64: "float64"}
    return self.np.dtype(names[dt])
  def const(self, v: Any, dt: DType) -> Any: return self.np.asarray(v, self.dtype(dt))
  def where(self, c: Any, a: Any, b: Any) -> Any: return self.np.where(c, a, b)
  def eq(self, a: Any, b: Any) -> Any: return a == b
  def ne(self, a: Any, b: Any) -> Any: return a != b
  def lt(self, a: Any, b: Any) -> Any: return a < b
  def cast(self, x: Any, dt: DType) -> Any: return x.astype(self.dtype(dt))
  def bitcast(self, x: Any, dt: DType) -> Any: return self.np.asarray(x).view(self.dtype(dt))

class UOpOps:
  """The algorithm building UOps (kernel-level values; lanes of any vector width)."""
  def __init__(self, count: int = 1): self.count = count
  def const(self, v: Any, dt: DType) -> Any:
    from tinyplug.uop.ops import UOp
    return UOp.const(dt.vec(self.count), v)
  def where(self, c: Any, a: Any, b: Any) -> Any: return c.where(a, b)
  def eq(self, a: Any, b: Any) -> Any: return a.eq(b)
  def ne(self, a: Any, b: Any) -> Any: return a.ne(b)
  def lt(self, a: Any, b: Any) -> Any: return a < b
  def cast(self, x: Any, dt: DType) -> Any: return x.cast(dt.vec(self.count))
  def bitcast(self, x: Any, dt: DType) -> Any: return x.bitcast(dt.vec(self.count))

# ---------------- the conversions ----------------

_SOURCES = {dtypes.float32: (8, 23, dtypes.uint32), dtypes.float64: (11, 52, dtypes.uint64)}

def _rne_shift(m: Any, s: Any, one: Any, ops: Any) -> Any:
  """m >> s rounded to nearest, ties to even (s >= 1)."""
  kept = m >> s
  half = (m >> (s - one)) & one
  sticky = ops.where(ops.ne(m & ((one << (s - one)) - one), 0), one, 0)
  return kept + (half & (sticky | (kept & one)))

def encode(x: Any, fmt: FloatFormat, ops: Any, src: DType = dtypes.float32) -> Any:
  """The format's bits (as a uint of the source's width) of float values `x` of dtype `src` (float32 or float64)."""
  se, sm, u = _SOURCES[src]
  width, sbias = se + sm + 1, (1 << (se - 1)) - 1
  one = ops.const(1, u)
  bits = ops.bitcast(x, u)
  sign = bits >> (width - 1)
  mag = bits & ((1 << (width - 1)) - 1)
  e = mag >> sm
  denormal_src = ops.eq(e, 0)
  e = ops.where(denormal_src, one, e)
  m = (mag & ((1 << sm) - 1)) | ops.where(denormal_src, ops.const(0, u), ops.const(1 << sm, u))
  # e below k: the value lands in the format's subnormals, shifted right by k - e more
  k = sbias - fmt.bias + 1
  below = ops.lt(e, k)
  shift = ops.const(sm - fmt.mant_bits, u) + ops.where(below, ops.const(k, u) - e, 0)
  shift = ops.where(ops.lt(shift, width - 1), shift, ops.const(width - 1, u))
  code = ops.where(below, ops.const(0, u), (e - k) << fmt.mant_bits) + _rne_shift(m, shift, one, ops)
  # past the largest finite value: inf, the largest value, or NaN
  too_big = ops.lt(ops.const(fmt.max_code, u), code)
  if fmt.overflow == "inf": code = ops.where(too_big, ops.const(fmt.inf_code, u), code)
  elif fmt.overflow == "saturate": code = ops.where(too_big, ops.const(fmt.max_code, u), code)
  else: code = ops.where(too_big, ops.const(fmt.nan, u), code)
  code = ops.where(ops.lt(ops.const(((1 << se) - 1) << sm, u), mag), ops.const(fmt.nan, u), code)
  if fmt.fnuz: return ops.where(ops.eq(code, 0), code, code | (sign << (fmt.bits - 1)))
  return code | (sign << (fmt.bits - 1))

def decode(bits: Any, fmt: FloatFormat, ops: Any) -> Any:
  """Exact float32 values of the format's `bits` (a uint of any width holding them in its low bits)."""
  u, f = dtypes.uint32, dtypes.float32
  b = ops.cast(bits, u) & ((1 << fmt.bits) - 1)
  if fmt.exp_bits == 8: return ops.bitcast(b << (32 - fmt.bits), f)   # bfloat16: the top bits of a float32
  sign = b >> (fmt.bits - 1)
  mag = b & ((1 << (fmt.bits - 1)) - 1)
  e, m = mag >> fmt.mant_bits, mag & ((1 << fmt.mant_bits) - 1)
  normal = ops.bitcast(((e + (127 - fmt.bias)) << 23) | (m << (23 - fmt.mant_bits)), f)
  subnormal = ops.cast(m, f) * ops.const(2.0 ** (1 - fmt.bias - fmt.mant_bits), f)
  val = ops.bitcast(ops.where(ops.eq(e, 0), subnormal, normal), u)
  nan_bits, inf_bits = ops.const(0x7FC00000, u), ops.const(0x7F800000, u)
  if fmt.has_inf:
    special = ops.eq(e, (1 << fmt.exp_bits) - 1)
    val = ops.where(special, ops.where(ops.eq(m, 0), inf_bits, nan_bits), val)
  elif fmt.fnuz: return ops.bitcast(ops.where(ops.eq(b, 0x80), nan_bits, val | (sign << 31)), f)
  else: val = ops.where(ops.eq(mag, (1 << (fmt.bits - 1)) - 1), nan_bits, val)
  return ops.bitcast(val | (sign << 31), f)

# ---------------- host helpers (numpy arrays and Python numbers) ----------------

def to_bits_np(x: Any, dt: DType) -> Any:
  """numpy float values -> the dtype's bits as a uint8/uint16 numpy array (float64 input is rounded once, directly)."""
  import numpy as np
  arr = np.asarray(x)
  src = dtypes.float64 if arr.dtype == np.float64 else dtypes.float32
  arr = arr.astype(np.float64 if src == dtypes.float64 else np.float32)
  fmt = FORMATS[dt]
  with np.errstate(over="ignore", invalid="ignore"):
    return encode(arr, fmt, NumpyOps(), src).astype(np.dtype(f"uint{fmt.bits}"))

def from_bits_np(bits: Any, dt: DType) -> Any:
  """The dtype's bits (any numpy integer array) -> float32 numpy values."""
  import numpy as np
  with np.errstate(over="ignore", invalid="ignore"):
    return np.asarray(decode(np.asarray(bits), FORMATS[dt], NumpyOps()), dtype=np.float32)

def round_to(x: float, dt: DType) -> float:
  """A Python float rounded to the nearest value of `dt` (one of FORMATS)."""
  return float(from_bits_np(to_bits_np(float(x), dt), dt))
