"""Float dtypes a renderer lacks become bits in memory and float32 in registers (the core's "dtypes" stage).

Which dtypes: the fp8 ones and float16/bfloat16 (`tinyplug.uop.minifloat.FORMATS`) that are not in the renderer's
`supported_dtypes()`, or that EMULATED_DTYPES names. For each:
- buffers (DEFINE_GLOBAL/LOCAL/REG, INDEX) hold the raw bits: uint8 for fp8, uint16 for the 16-bit formats;
- a LOAD reads the bits and decodes them to an exact float32; a STORE encodes (round to nearest even, the format's
  overflow and NaN rules);
- a value of the dtype is a float32 holding a value of the dtype: ALU results and casts to it are rounded to it
  (MAX, NEG and WHERE need no rounding); constants are float32;
- a BITCAST reads or writes the bits (a BITCAST of a LOAD takes the loaded bits as they are, NaN payloads included).
The walk keeps each node's original dtype at hand, so a rule knows which format a float32 register stands for."""
from __future__ import annotations
from typing import Callable
from tinyplug.helpers import EMULATED_DTYPES
from tinyplug.uop.dtype import DType, PtrDType, dtypes
from tinyplug.uop.minifloat import FORMATS, STORAGE, UOpOps, decode, encode, to_bits_np
from tinyplug.uop.ops import GroupOp, Ops, UOp

_EXACT = frozenset({Ops.MAX, Ops.NEG, Ops.WHERE})   # results that are an operand's value (or its negation): no rounding

def emulated_dtypes(renderer) -> frozenset[DType]:
  """The float dtypes `renderer` gets as bits: those it does not support, those it declares `emulated`, and those
  EMULATED_DTYPES names."""
  supported = set(renderer.supported_dtypes())
  named = set(EMULATED_DTYPES.tolist(dtypes)) | set(renderer.emulated)
  return frozenset(dt for dt in FORMATS if dt not in supported or dt in named)

def _storage(dt: DType) -> DType:
  """The uint dtype holding the bits of an emulated dtype (same vector width; pointers: same size and space)."""
  if isinstance(dt, PtrDType):
    return _storage(dt.base).ptr(dt.size, dt.local).vec(dt.v) if dt.v != 1 else _storage(dt.base).ptr(dt.size, dt.local)
  return STORAGE[FORMATS[dt.scalar()].bits].vec(dt.count)

def _f32(dt: DType) -> DType: return dtypes.float32.vec(dt.count)

def _encode(x: UOp, dt: DType) -> UOp:
  """The storage bits of the float value x (float32 or float64 register) in format dt."""
  ops = UOpOps(x.dtype.count)
  src = dtypes.float64 if x.dtype.scalar() == dtypes.float64 else dtypes.float32
  if x.dtype.scalar() not in (dtypes.float32, dtypes.float64): x = x.cast(_f32(x.dtype))
  return encode(x, FORMATS[dt.scalar()], ops, src).cast(_storage(dt.scalar()).vec(x.dtype.count))

def _decode(bits: UOp, dt: DType) -> UOp: return decode(bits, FORMATS[dt.scalar()], UOpOps(bits.dtype.count))

def _round(x: UOp, dt: DType) -> UOp: return _decode(_encode(x, dt), dt)

class _Lowering:
  def __init__(self, emulated: frozenset[DType]):
    self.emulated = emulated
    self.new: dict[UOp, UOp] = {}
    self.raw: dict[UOp, UOp] = {}   # an emulated LOAD or BITCAST -> the storage bits it read

  def is_emu(self, dt: DType) -> bool:
    return (dt.base if isinstance(dt, PtrDType) else dt).scalar() in self.emulated

  def lower(self, sink: UOp) -> UOp:
    for u in sink.toposort():
      src = tuple(self.new.get(s, s) for s in u.src)
      if self.is_emu(u.dtype) or any(self.is_emu(s.dtype) for s in u.src):
        rule = RULES.get(u.op)
        if rule is None: rule = alu_rule if u.op in GroupOp.ALU else retype_rule
        self.new[u] = rule(self, u, src)
      elif any(a is not b for a, b in zip(src, u.src)): self.new[u] = UOp(u.op, u.dtype, src, u.arg)
    return self.new.get(sink, sink)

# ---- the rules: (lowering, original node, its lowered sources) -> the lowered node ----

def define_rule(lw: _Lowering, u: UOp, src: tuple) -> UOp: return UOp(u.op, _storage(u.dtype), src, u.arg)

def index_rule(lw: _Lowering, u: UOp, src: tuple) -> UOp:
  return UOp(u.op, _storage(u.dtype) if lw.is_emu(u.dtype) else u.dtype, src, u.arg)

def load_rule(lw: _Lowering, u: UOp, src: tuple) -> UOp:
  if not lw.is_emu(u.dtype): return UOp(u.op, u.dtype, src, u.arg)
  alt = tuple(_const_bits(s, u.dtype) if s.op is Ops.CONST else _encode(s, u.dtype) for s in src[1:])
  bits = UOp(Ops.LOAD, _storage(u.dtype), (src[0], *alt), u.arg)
  lw.raw[u] = bits
  return _decode(bits, u.dtype)

def _const_bits(c: UOp, dt: DType) -> UOp:
  return UOp.const(_storage(dt), int(to_bits_np(float(c.arg), dt.scalar())))

def store_rule(lw: _Lowering, u: UOp, src: tuple) -> UOp:
  val = u.src[1]
  if not lw.is_emu(val.dtype): return UOp(u.op, u.dtype, src, u.arg)
  bits = lw.raw[val] if val in lw.raw else _encode(src[1], val.dtype)
  return UOp(u.op, u.dtype, (src[0], bits, *src[2:]), u.arg)

def const_rule(lw: _Lowering, u: UOp, src: tuple) -> UOp: return UOp(u.op, _f32(u.dtype), src, u.arg)

def cast_rule(lw: _Lowering, u: UOp, src: tuple) -> UOp:
  x = src[0]
  if lw.is_emu(u.dtype): return _round(x, u.dtype)        # to an emulated dtype: round the value to it
  return x if x.dtype == u.dtype else UOp(Ops.CAST, u.dtype, (x,))   # from one: x is its float32 value already

def bitcast_rule(lw: _Lowering, u: UOp, src: tuple) -> UOp:
  orig, x = u.src[0], src[0]
  if lw.is_emu(orig.dtype): bits = lw.raw[orig] if orig in lw.raw else _encode(x, orig.dtype)
  else: bits = x.bitcast(STORAGE[8 * x.dtype.scalar().itemsize].vec(x.dtype.count))
  if not lw.is_emu(u.dtype): return bits.bitcast(u.dtype)
  lw.raw[u] = bits
  return _decode(bits, u.dtype)

def alu_rule(lw: _Lowering, u: UOp, src: tuple) -> UOp:
  if not lw.is_emu(u.dtype): return UOp(u.op, u.dtype, src, u.arg)   # a comparison of emulated values
  out = UOp(u.op, _f32(u.dtype), src, u.arg)
  return out if u.op in _EXACT else _round(out, u.dtype)

def reduce_rule(lw: _Lowering, u: UOp, src: tuple) -> UOp:
  out = UOp(u.op, _f32(u.dtype), src, u.arg)
  return out if u.arg is Ops.MAX else _round(out, u.dtype)

def retype_rule(lw: _Lowering, u: UOp, src: tuple) -> UOp:
  """Anything else (VECTORIZE, GEP, ...): the same node on float32 registers."""
  if isinstance(u.dtype, PtrDType): return UOp(u.op, _storage(u.dtype) if lw.is_emu(u.dtype) else u.dtype, src, u.arg)
  return UOp(u.op, _f32(u.dtype) if lw.is_emu(u.dtype) else u.dtype, src, u.arg)

RULES: dict[Ops, Callable[[_Lowering, UOp, tuple], UOp]] = {
  Ops.DEFINE_GLOBAL: define_rule, Ops.DEFINE_LOCAL: define_rule, Ops.DEFINE_REG: define_rule, Ops.INDEX: index_rule,
  Ops.LOAD: load_rule, Ops.STORE: store_rule, Ops.CONST: const_rule, Ops.VCONST: const_rule, Ops.CAST: cast_rule,
  Ops.BITCAST: bitcast_rule, Ops.REDUCE: reduce_rule,
}

def lower_emulated_dtypes(sink: UOp, renderer) -> UOp:
  """`sink` with every value of an emulated dtype in float32 registers and its memory as bits (module docstring)."""
  lowering = _Lowering(emulated_dtypes(renderer))
  if not lowering.emulated or not any(lowering.is_emu(u.dtype) for u in sink.toposort()): return sink
  return lowering.lower(sink)
