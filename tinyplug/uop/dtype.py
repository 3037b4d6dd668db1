"""Data types: scalar, vector and pointer dtypes, and the promotion lattice shared with PyTorch/tinygrad."""
from __future__ import annotations
import functools, math, struct
from dataclasses import dataclass, fields
from typing import Any, Final
from tinyplug.helpers import DEFAULT_FLOAT, DEFAULT_INT

ConstType = float | int | bool

@dataclass(frozen=True, eq=True)
class DType:
  priority: int            # orders dtypes within the promotion lattice (and for `min`)
  itemsize: int            # bytes of one element (vectors: all lanes)
  name: str
  fmt: str | None          # struct format character, None for void/bfloat16-like types
  count: int = 1           # vector width
  _scalar: DType | None = None

  def __repr__(self) -> str: return f"dtypes.{_INVERSE_NAMES.get(self, self.name)}" if self.count == 1 \
    else f"dtypes.{_INVERSE_NAMES.get(self.scalar(), self.scalar().name)}.vec({self.count})"
  def __lt__(self, other: DType) -> bool:
    return (self.priority, self.itemsize, self.name, self.fmt or "", self.count) < \
      (other.priority, other.itemsize, other.name, other.fmt or "", other.count)
  @property
  def base(self) -> DType: return self
  @property
  def vcount(self) -> int: return self.count
  def scalar(self) -> DType: return self._scalar if self._scalar is not None else self
  def vec(self, count: int) -> DType:
    if count == 1 or self == dtypes.void: return self
    if self.count != 1: raise ValueError(f"cannot vectorize {self}: it is already a vector")
    return _vec(self, count)
  def ptr(self, size: int = -1, local: bool = False) -> PtrDType:
    return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, None, self, local, 1, size)
  @property
  def min(self) -> ConstType: return dtypes.min(self)
  @property
  def max(self) -> ConstType: return dtypes.max(self)

@functools.cache
def _vec(dt: DType, count: int) -> DType:
  return DType(dt.priority, dt.itemsize * count, f"{dt.name}{count}", None, count, dt)

@dataclass(frozen=True, eq=True)
class PtrDType(DType):
  _base: DType | None = None
  local: bool = False
  v: int = 1
  size: int = -1            # number of elements the pointer addresses, -1 if unknown

  @property
  def base(self) -> DType: return self._base if self._base is not None else self
  def ptr(self, size: int = -1, local: bool = False) -> PtrDType: raise TypeError("a pointer dtype cannot be made a pointer again")
  def vec(self, count: int) -> DType:
    if count == 1: return self
    return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, None, self.base, self.local, count, self.size)
  def scalar(self) -> PtrDType:
    return PtrDType(self.priority, self.itemsize, self.name, self.fmt, self.count, None, self.base, self.local, 1, self.size)
  def __repr__(self) -> str:
    return f"{self.base!r}.ptr({self.size}{', local=True' if self.local else ''})" + (f".vec({self.v})" if self.v != 1 else "")

def _cached_hash(self: DType) -> int:
  # dtypes are hashed on every dict lookup that keys on one; a frozen dataclass's own hash rebuilds the field tuple
  # (and the scalar dtype's hash inside it) each time
  h = self.__dict__.get("_hash")
  if h is None: object.__setattr__(self, "_hash", h := hash((type(self),) + tuple(getattr(self, f.name) for f in fields(self))))
  return h
def _reduce(self: DType) -> tuple:   # pickles carry the fields only: a string's hash differs between processes
  return _unpickled, (type(self), tuple(getattr(self, f.name) for f in fields(self)))
def _unpickled(cls: type, values: tuple) -> DType:
  """A pickled dtype back as the canonical object where there is one (`dtypes.float`, its vectors): hash-consed UOps
  keep the dtype object of the first node made, and the disk caches store only canonical dtypes (a node made from a
  search worker's result with an equal copy would leave every graph holding it unstorable)."""
  dt = cls(*values)
  if cls is not DType: return dt
  if dt.count == 1: return canon if (canon := _canonical_scalars().get(dt.name)) == dt else dt
  return canon if (canon := _vec(dt.scalar(), dt.count)) == dt else dt
DType.__hash__ = PtrDType.__hash__ = _cached_hash   # type: ignore[method-assign]
def _fast_eq(generated):
  # the same object (canonical dtypes, nearly every comparison) answers before the dataclass builds two field tuples
  def __eq__(self, other): return True if self is other else generated(self, other)
  return __eq__
DType.__eq__, PtrDType.__eq__ = _fast_eq(DType.__eq__), _fast_eq(PtrDType.__eq__)   # type: ignore[method-assign]
DType.__reduce__ = _reduce   # type: ignore[method-assign,assignment]

class _DTypesType(type):
  # the defaults are settings: `Context(DEFAULT_FLOAT=dtypes.half)` or DEFAULT_FLOAT=half in the environment
  @property
  def default_float(cls) -> DType: return _default_dtype(DEFAULT_FLOAT.value, "DEFAULT_FLOAT", _FLOATS)
  @property
  def default_int(cls) -> DType: return _default_dtype(DEFAULT_INT.value, "DEFAULT_INT", _INTS)

def _default_dtype(value: Any, key: str, allowed: frozenset[DType]) -> DType:
  dt = value if isinstance(value, DType) else _NAMED.get(str(value).lower())
  if dt not in allowed: raise ValueError(f"{key}={value!r} is not a {'float' if key == 'DEFAULT_FLOAT' else 'int'} dtype")
  return dt

class dtypes(metaclass=_DTypesType):
  void: Final = DType(-1, 0, "void", None)
  bool: Final = DType(0, 1, "bool", "?")
  int8: Final = DType(1, 1, "char", "b")
  uint8: Final = DType(2, 1, "unsigned char", "B")
  int16: Final = DType(3, 2, "short", "h")
  uint16: Final = DType(4, 2, "unsigned short", "H")
  int32: Final = DType(5, 4, "int", "i")
  uint32: Final = DType(6, 4, "unsigned int", "I")
  int64: Final = DType(7, 8, "long", "q")
  uint64: Final = DType(8, 8, "unsigned long", "Q")
  # 8-bit floats (OCP e4m3fn / e5m2, and the fnuz variants without negative zero): stored as their raw bits
  fp8e4m3: Final = DType(9, 1, "float8_e4m3", None)
  fp8e5m2: Final = DType(10, 1, "float8_e5m2", None)
  fp8e4m3fnuz: Final = DType(9, 1, "float8_e4m3fnuz", None)
  fp8e5m2fnuz: Final = DType(10, 1, "float8_e5m2fnuz", None)
  float16: Final = DType(11, 2, "half", "e")
  bfloat16: Final = DType(12, 2, "__bf16", None)
  float32: Final = DType(13, 4, "float", "f")
  float64: Final = DType(14, 8, "double", "d")
  # aliases, as PyTorch and tinygrad spell them
  half = float16; float = float32; double = float64
  char = int8; uchar = uint8; short = int16; ushort = uint16
  int = int32; uint = uint32; long = int64; ulong = uint64
  # index arithmetic inside kernels
  index: Final = int32
  # an int that takes the other operand's int type (tinygrad's weak int: a tensor over a bound Variable); it holds
  # the default int's values and becomes the default int before any kernel is made (schedule/weak.py) or read back
  weakint: Final = DType(0, 4, "weakint", None)

  @staticmethod
  def is_float(x: DType) -> bool: return id(s := x.scalar()) in _FLOAT_IDS or s in _FLOATS
  @staticmethod
  def is_int(x: DType) -> bool: return id(s := x.scalar()) in _INT_IDS or s in _INTS
  @staticmethod
  def is_unsigned(x: DType) -> bool: return x.scalar() in _UINTS
  @staticmethod
  def is_bool(x: DType) -> bool: return x.scalar() == dtypes.bool
  @staticmethod
  def from_py(x: Any) -> DType:
    if isinstance(x, bool): return dtypes.bool
    if isinstance(x, float): return dtypes.default_float
    if isinstance(x, int): return dtypes.default_int
    if isinstance(x, (list, tuple)):
      return max((dtypes.from_py(v) for v in x), default=dtypes.default_float)
    raise TypeError(f"cannot infer a dtype for {x!r} of type {type(x).__name__}")
  @staticmethod
  def as_const(val: Any, dtype: DType) -> Any:
    """Casts a Python value to what a constant of `dtype` holds (wrapping integers like C does)."""
    if isinstance(val, tuple): return tuple(dtypes.as_const(v, dtype) for v in val)
    sc = dtype.scalar()
    if sc == dtypes.bool: return bool(val)
    if sc in _INTS:
      if isinstance(val, float) and (math.isnan(val) or math.isinf(val)): return 0
      v, bits = int(val), sc.itemsize * 8
      v &= (1 << bits) - 1
      return v - (1 << bits) if sc not in _UINTS and v >= 1 << (bits - 1) else v
    if sc in _FLOATS: return float(val)
    return val
  @staticmethod
  def min(dtype: DType) -> ConstType:
    sc = dtype.scalar()
    if sc == dtypes.bool: return False
    if sc in _UINTS: return 0
    if sc in _INTS: return -(1 << (sc.itemsize * 8 - 1))
    return -dtypes.max(sc)
  @staticmethod
  def max(dtype: DType) -> ConstType:
    """The largest value: inf for floats that have it (fp8e4m3 and the fnuz formats have none: their largest finite)."""
    sc = dtype.scalar()
    if sc == dtypes.bool: return True
    if sc in _UINTS: return (1 << (sc.itemsize * 8)) - 1
    if sc in _INTS: return (1 << (sc.itemsize * 8 - 1)) - 1
    return _FP8_MAX.get(sc, math.inf)
  @staticmethod
  def finfo(dtype: DType) -> tuple[int, int]:
    """(exponent bits, mantissa bits) of a float dtype."""
    if not dtypes.is_float(dtype): raise ValueError(f"{dtype!r} is not a float dtype")
    return _FINFO[dtype.scalar()]
  @staticmethod
  def fields() -> dict[str, DType]: return dict(_NAMED)

_FINFO = {dtypes.fp8e4m3: (4, 3), dtypes.fp8e5m2: (5, 2), dtypes.fp8e4m3fnuz: (4, 3), dtypes.fp8e5m2fnuz: (5, 2),
          dtypes.float16: (5, 10), dtypes.bfloat16: (8, 7), dtypes.float32: (8, 23), dtypes.float64: (11, 52)}
_FP8_MAX = {dtypes.fp8e4m3: 448.0, dtypes.fp8e4m3fnuz: 240.0, dtypes.fp8e5m2fnuz: 57344.0}   # no inf in these
_FLOATS = frozenset(_FINFO)
_UINTS = frozenset({dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64})
_INTS = frozenset({dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.weakint}) | _UINTS
# the module's own dtype objects by id (they live as long as the module): `in` a set of dtypes hashes the dtype in
# Python; an equal dtype made elsewhere misses these and is looked up in the sets above
_FLOAT_IDS, _INT_IDS = frozenset(map(id, _FLOATS)), frozenset(map(id, _INTS))
_NAMED: dict[str, DType] = {k: v for k, v in vars(dtypes).items() if isinstance(v, DType) and not k.startswith("default")}

@functools.cache
def _canonical_scalars() -> dict[str, DType]: return {dt.name: dt for dt in _NAMED.values()}
# groups, as tinygrad names them (tuples in a fixed order: code iterates them to parametrize over dtypes)
dtypes.fp8_ocp = (dtypes.fp8e4m3, dtypes.fp8e5m2)
dtypes.fp8_fnuz = (dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz)
dtypes.fp8s = dtypes.fp8_ocp + dtypes.fp8_fnuz
dtypes.floats = dtypes.fp8s + (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
dtypes.uints = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
dtypes.sints = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
dtypes.ints = dtypes.uints + dtypes.sints
dtypes.all = dtypes.floats + dtypes.ints + (dtypes.bool,)
dtypes.weaks = (dtypes.weakint,)
# the canonical short name of each dtype, for repr
_INVERSE_NAMES: dict[DType, str] = {}
for _k in ("void", "bool", "char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "fp8e4m3", "fp8e5m2",
           "fp8e4m3fnuz", "fp8e5m2fnuz", "half", "bfloat16", "float", "double"):
  _INVERSE_NAMES[_NAMED[_k]] = _k

class UnknownDTypeError(ValueError, AttributeError):
  """A dtype name that does not exist (an AttributeError too, as tinygrad raises for `dtypes.<name>`)."""

def to_dtype(x: DType | str) -> DType:
  """Accepts a DType or its name ('float32', 'half', ...); unknown names raise an UnknownDTypeError naming the choices."""
  if isinstance(x, DType): return x
  if isinstance(x, str) and x in _NAMED: return _NAMED[x]
  raise UnknownDTypeError(f"unknown dtype {x!r}; choose one of {sorted(k for k in _NAMED if k not in ('index',))}")

_FP8S = (dtypes.fp8e4m3, dtypes.fp8e5m2, dtypes.fp8e4m3fnuz, dtypes.fp8e5m2fnuz)
# Promotion lattice: an edge a -> b means values of a fit into b. The result of mixing dtypes is the
# smallest dtype reachable from all of them, as in PyTorch/tinygrad (int + half -> half, uint32 + int32 -> int64).
# The 8-bit floats sit between the ints and half, as in tinygrad (int64 + fp8e4m3 -> fp8e4m3; two fp8 kinds -> half).
_PROMO_LATTICE: dict[DType, tuple[DType, ...]] = {
  dtypes.bool: (dtypes.weakint,), dtypes.weakint: (dtypes.int8, dtypes.uint8),
  dtypes.int8: (dtypes.int16,), dtypes.int16: (dtypes.int32,),
  dtypes.int32: (dtypes.int64,), dtypes.int64: _FP8S,
  dtypes.uint8: (dtypes.int16, dtypes.uint16), dtypes.uint16: (dtypes.int32, dtypes.uint32),
  dtypes.uint32: (dtypes.int64, dtypes.uint64), dtypes.uint64: _FP8S,
  **{f: (dtypes.float16, dtypes.bfloat16) for f in _FP8S},
  dtypes.float16: (dtypes.float32,), dtypes.bfloat16: (dtypes.float32,), dtypes.float32: (dtypes.float64,),
}

@functools.cache
def _upper_set(dt: DType) -> frozenset[DType]:
  return frozenset({dt}).union(*(_upper_set(p) for p in _PROMO_LATTICE.get(dt, ())))

def least_upper_dtype(*ds: DType) -> DType:
  """The smallest dtype all of `ds` promote to. Ints that no int holds all of (int64 and uint64) meet at the default
  float, as in tinygrad (there through its weak float), not at the smallest float."""
  common = frozenset.intersection(*(_upper_set(d.scalar()) for d in ds))
  if not common: raise TypeError(f"no common dtype for {ds}")
  if not any(dtypes.is_float(d) for d in ds) and not any(dtypes.is_int(d) for d in common): return dtypes.default_float
  return min(common)

def strong_dtype(dt: DType) -> DType:
  """`dt`, with the weak int as the default int (what a weak value is stored and read as)."""
  return dtypes.default_int if dt == dtypes.weakint else dt

def least_upper_float(dt: DType) -> DType:
  return dt if dtypes.is_float(dt) else least_upper_dtype(dt, dtypes.default_float)

def sum_acc_dtype(dt: DType) -> DType:
  """The accumulator dtype of a sum: ints widen to at least int32 (uint32 if unsigned), floats to at least float32."""
  if dtypes.is_unsigned(dt): return least_upper_dtype(dt, dtypes.uint32)
  if dtypes.is_int(dt) or dt == dtypes.bool: return least_upper_dtype(dt, dtypes.int32)
  return least_upper_dtype(dt, dtypes.float32)

def truncate(dt: DType, val: ConstType) -> ConstType:
  """Rounds a Python constant to what `dt` can represent (float32 rounding for float32, wrapping for ints)."""
  sc = dt.scalar()
  if sc == dtypes.float32 and isinstance(val, float) and math.isfinite(val):
    try: return struct.unpack("f", struct.pack("f", val))[0]
    except OverflowError: return math.copysign(math.inf, val)
  if sc == dtypes.float16 and isinstance(val, float) and math.isfinite(val):
    try: return struct.unpack("e", struct.pack("e", val))[0]
    except OverflowError: return math.copysign(math.inf, val)
  if sc in _ROUNDED and isinstance(val, (int, float)) and not isinstance(val, bool):
    from tinyplug.uop.minifloat import round_to
    return round_to(val, sc)
  return dtypes.as_const(val, dt)

_ROUNDED = frozenset(dtypes.fp8s + (dtypes.bfloat16,))   # rounded by tinyplug.uop.minifloat

_NP_NAMES = {dtypes.bool: "bool", dtypes.int8: "int8", dtypes.uint8: "uint8", dtypes.int16: "int16", dtypes.uint16: "uint16",
             dtypes.int32: "int32", dtypes.uint32: "uint32", dtypes.int64: "int64", dtypes.uint64: "uint64",
             dtypes.float16: "float16", dtypes.float32: "float32", dtypes.float64: "float64", dtypes.bfloat16: "uint16",
             **{f: "uint8" for f in dtypes.fp8s}, dtypes.weakint: "int32"}

def to_np_dtype(dt: DType):
  """The numpy dtype holding `dt` (bfloat16 and the fp8 dtypes are stored as their raw uint16/uint8 bits)."""
  import numpy as np
  return np.dtype(_NP_NAMES[dt.scalar()])

def from_np_dtype(npdt) -> DType:
  # a numpy dtype's .name is a Python property (~5 us): every Tensor made from an array asks, so known ones are kept
  try:
    if (hit := _FROM_NP.get(npdt)) is not None: return hit
  except TypeError: pass   # (an unhashable dtype spec)
  import numpy as np
  name = np.dtype(npdt).name
  for dt, n in _NP_NAMES.items():
    if n == name and dt not in _ROUNDED:
      if len(_FROM_NP) < 256: _FROM_NP[npdt] = dt
      return dt
  raise ValueError(f"numpy dtype {name} has no tinyplug dtype")
_FROM_NP: dict = {}   # numpy dtype (or the type, str given) -> DType
