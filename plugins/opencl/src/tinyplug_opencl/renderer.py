"""OpenCL C from a linear program, through the core's C-style base (`tinyplug.renderer.cstyle`): the dialect is
its tables (types, `get_group_id` / `get_local_id` ids, `__local` arrays, the barrier) and a few overrides.

Storage types differ from value types in two places: bool lives in buffers as uchar (OpenCL forbids bool pointers
in kernel arguments), and half without cl_khr_fp16 lives in memory as half but is computed in float through
`vload_half` / `vstore_half`, each new value rounded back to half (so the bits are those of half math)."""
from __future__ import annotations
from typing import Any
from tinyplug.backend import LAUNCH_GRID
from tinyplug.renderer.cstyle import CStyleRenderer, is_ptr_of
from tinyplug.uop.dtype import DType, dtypes
from tinyplug.uop.ops import Ops, UOp

_TYPE_NAMES = {dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short",
               dtypes.uint16: "ushort", dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long",
               dtypes.uint64: "ulong", dtypes.float16: "half", dtypes.float32: "float", dtypes.float64: "double"}
_SWIZZLE = "0123456789abcdef"

class OpenCLRenderer(CStyleRenderer):
  """OpenCL C 1.2. The limits default to what every OpenCL device offers; the CL device passes its real ones."""
  device = "CL"
  suffix = "CL"
  launch = LAUNCH_GRID
  has_local = True
  has_shared = True
  global_max = (2**31 - 1, 65535, 65535)
  # the dialect, as tables for the C-style base
  kernel_prefix = "__kernel void"
  type_names = _TYPE_NAMES
  vector_lengths = (2, 3, 4, 8, 16)
  buffer_param = "__global {type}* restrict {name}"
  shared_decl = "__local {type} {name}[{size}];"
  barrier_code = "barrier(CLK_LOCAL_MEM_FENCE);"
  special_code = {"gidx": "get_group_id({dim})", "lidx": "get_local_id({dim})", "idx": "get_global_id({dim})"}
  const_suffix = {dtypes.float32: "f", dtypes.float16: "f", dtypes.int64: "l", dtypes.uint64: "ul", dtypes.uint32: "u"}
  emulated = frozenset({dtypes.bfloat16})

  def __init__(self, *, local_max: tuple[int, ...] = (256, 256, 64), max_work_group_size: int = 256,
               shared_max: int = 16384, extensions: frozenset[str] | tuple[str, ...] = (), vector_width: int = 4,
               device_name: str = "", parallel_work_items: bool = True):
    self.parallel_work_items = parallel_work_items   # False for a CPU device (PoCL): work-items run one by one
    self.local_max = tuple(min(int(x), max_work_group_size) for x in local_max)
    self.max_work_group_size = int(max_work_group_size)
    self.shared_max = int(shared_max)
    self.extensions = frozenset(extensions)
    self.has_fp16 = "cl_khr_fp16" in self.extensions
    self.has_fp64 = "cl_khr_fp64" in self.extensions
    self.vector_width = int(vector_width)
    self.device_name = device_name
    supported = set(_TYPE_NAMES) - ({dtypes.float64} if not self.has_fp64 else set())
    # bfloat16 works (OpenCL C has no type for it: the core keeps its bits in ushort and computes in float)
    self._dtypes = [dt for dt in _TYPE_NAMES if dt in supported] + [dtypes.bfloat16]
    # vector types for the vectorize stage: not bool (no bool vectors in OpenCL C), half only with cl_khr_fp16
    # (without it half values live in floats and every rounding goes through vstore_half one lane at a time)
    vectors = supported - {dtypes.bool} - ({dtypes.float16} if not self.has_fp16 else set())
    self.vector_widths = {dt: (16, 8, 4, 2) for dt in vectors}

  def supported_dtypes(self) -> list[DType]: return list(self._dtypes)

  def __repr__(self) -> str:
    return (f"OpenCLRenderer(local_max={self.local_max}, shared_max={self.shared_max}, fp16={self.has_fp16}, "
            f"fp64={self.has_fp64})")

  # ---- types: bool lives in buffers as uchar; half without cl_khr_fp16 is a float in registers ----
  def value_type(self, dt: DType) -> str:
    if dt.scalar() == dtypes.float16 and not self.has_fp16: dt = dtypes.float32.vec(dt.count) if dt.count > 1 else dtypes.float32
    return super().value_type(dt)

  def storage_type(self, dt: DType, global_mem: bool = True) -> str:
    sc = dt.scalar()
    if sc == dtypes.bool: return "uchar"
    if sc == dtypes.float16: return "half" if global_mem or self.has_fp16 else "float"
    return super().storage_type(dt, global_mem)

  def _half_storage(self, dt: DType) -> bool: return dt.scalar() == dtypes.float16 and not self.has_fp16
  def _half_buffer(self, mem: UOp) -> bool:
    """A global half buffer on a device without cl_khr_fp16: accessed with vload_half/vstore_half."""
    return mem.op is Ops.DEFINE_GLOBAL and self._half_storage(mem.dtype.base)

  def render_const(self, value: Any, dt: DType) -> str:
    if dt.count == 1 and self._half_storage(dt): return super().render_const(value, dtypes.float32)
    return super().render_const(value, dt)

  # ---- ALU, casts ----
  def render_alu(self, u: UOp, s: list[str]) -> str:
    # half computed in float (no cl_khr_fp16): round every new value to half, so results are those of half math
    if self._half_storage(u.dtype) and u.op not in _EXACT_IN_HALF:
      self.needs.add("halfbits")
      return f"tp_round_half({self._render_alu(u, s)})"
    if u.op in (Ops.IDIV, Ops.MOD) and dtypes.is_int(u.dtype): return self._int_divmod(u, s[0], s[1])
    return super().render_alu(u, s)

  def render_where(self, u: UOp, s: list[str]) -> str:
    return f"select({s[2]}, {s[1]}, {s[0]})" if u.dtype.count > 1 else super().render_where(u, s)

  _DIVMOD = {Ops.IDIV: "/", Ops.MOD: "%"}

  def _int_divmod(self, u: UOp, x: str, y: str) -> str:
    """C division that never traps and agrees with the other devices: x/0 is x and x%0 is 0; INT_MIN/-1 wraps to
    INT_MIN and x%-1 is 0 (C leaves both undefined; PoCL gave INT_MIN%-1 = -1)."""
    dt, divisor = u.dtype, u.src[1]
    unsigned = dtypes.is_unsigned(dt)
    if divisor.op is Ops.CONST and divisor.arg not in (0, -1): return f"({x}{self._DIVMOD[u.op]}{y})"
    t, ut = self.value_type(dt), "u" + self.value_type(dt)
    zero, minus1 = f"({t})(0)", f"({t})(-1)"   # vector literals: a char4 compares with char4, not int
    bad = f"(({y})=={zero})" if unsigned else f"((({y})=={zero})|(({y})=={minus1}))"
    safe = f"({bad}?({t})1:({y}))" if dt.count == 1 else f"select(({y}), ({t})(1), {bad})"
    if u.op is Ops.MOD or unsigned: return f"(({x}){self._DIVMOD[u.op]}{safe})"
    # -x in unsigned arithmetic (signed overflow is undefined); scalars are cast, vectors reinterpreted
    negated = f"(({t})(({ut})0-({ut})({x})))" if dt.count == 1 else f"as_{t}(({ut})(0)-as_{ut}({x}))"
    if dt.count == 1: return f"((({y})=={minus1})?{negated}:(({x})/{safe}))"
    return f"select(({x})/{safe}, {negated}, (({y})=={minus1}))"

  def render_cast(self, u: UOp, x: str) -> str:
    dt = u.dtype
    if dt.count > 1: return f"convert_{self.value_type(dt)}({x})"
    if dt.scalar() == dtypes.float16 and not self.has_fp16:   # round to half precision, keep it in a float
      self.needs.add("halfbits")
      return f"tp_round_half((float)({x}))"
    return super().render_cast(u, x)

  def render_bitcast(self, u: UOp, x: str) -> str:
    if self._half_storage(u.dtype) or self._half_storage(u.src[0].dtype):
      self.needs.add("halfbits")
      if u.dtype.scalar() == dtypes.float16: return f"tp_half_from_bits(as_ushort({x}))"
      return f"as_{self.value_type(u.dtype)}(tp_half_to_bits({x}))"
    return f"as_{self.value_type(u.dtype)}({x})"

  def render_gep(self, x: str, lanes: tuple[int, ...], dt: DType | None = None) -> str:
    return f"{x}.s{''.join(_SWIZZLE[i] for i in lanes)}"

  # ---- memory: vload/vstore for vectors and for half without cl_khr_fp16 ----
  def render_load(self, index: UOp, dt: DType) -> str:
    mem, idx = index.src[0], self.expr(index.src[1])
    ptr, lval = self._access(mem, idx, dt)
    if mem.dtype.base.count > 1: return lval   # an array of vectors (a vector accumulator)
    if self._half_buffer(mem):
      return f"vload_half({idx}, {self.names[mem]})" if dt.count == 1 else f"vload_half{dt.count}(0, {ptr})"
    if dt.count > 1: return f"vload{dt.count}(0, {ptr})"
    if dt.scalar() == dtypes.bool: return f"((bool){lval})"
    return lval

  def render_store(self, index: UOp, value: str, dt: DType) -> str:
    mem, idx = index.src[0], self.expr(index.src[1])
    ptr, lval = self._access(mem, idx, dt)
    if mem.dtype.base.count > 1: return f"{lval} = {value};"
    if self._half_buffer(mem):
      return f"vstore_half({value}, {idx}, {self.names[mem]});" if dt.count == 1 else \
        f"vstore_half{dt.count}({value}, 0, {ptr});"
    if dt.count > 1: return f"vstore{dt.count}({value}, 0, {ptr});"
    if dt.scalar() == dtypes.bool: return f"{lval} = (uchar)({value});"
    return f"{lval} = {value};"

  # ---- extensions and helpers ----
  def note(self, u: UOp) -> None:
    if is_ptr_of(u.dtype, dtypes.float64): self.needs.add("fp64")
    if is_ptr_of(u.dtype, dtypes.float16): self.needs.add("fp16")

  def prelude(self) -> list[str]:
    lines: list[str] = []
    if "fp16" in self.needs and self.has_fp16: lines.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    if "fp64" in self.needs:
      if not self.has_fp64 and self.extensions:
        raise NotImplementedError(f"this OpenCL device ({self.device_name}) has no cl_khr_fp64: double is not supported")
      lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    lines += super().prelude()
    if "halfbits" in self.needs: lines.append(_HALF_HELPERS)
    return lines

# without cl_khr_fp16 a half value lives in a float: rounding and bit access go through vstore_half/vload_half
# ops whose result is one of their (already half) operands, or exact: no rounding needed
_EXACT_IN_HALF = frozenset({Ops.MAX, Ops.NEG, Ops.WHERE, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.TRUNC})

_HALF_HELPERS = """inline float tp_round_half(float x) { ushort h; vstore_half(x, 0, (__private half*)&h); return vload_half(0, (__private half*)&h); }
inline ushort tp_half_to_bits(float x) { ushort h; vstore_half(x, 0, (__private half*)&h); return h; }
inline float tp_half_from_bits(ushort h) { return vload_half(0, (__private half*)&h); }"""

