"""HIP C from a linear program, through the core's C-style base (`tinyplug.renderer.cstyle`), selected with
`DEV=AMD:HIP`. The text is plain HIP (`#include <hip/hip_runtime.h>`, `threadIdx`/`blockIdx`, `__shared__`,
`__syncthreads()`, `extern "C" __global__` kernels with `__launch_bounds__`), so three toolchains take it as it is:
ROCm's hiprtc, clang >= 19 with the plugin's device-side stand-in header (no ROCm), and the emulator (`MOCK+AMD:HIP`).

- Only clang built-ins are used beyond that header: `_Float16` for half, `__bf16` for bfloat16, `__builtin_sqrtf`,
  `__builtin_truncf`, `__builtin_fmodf`, `__builtin_isnan`, `__builtin_fmaxf`, `__builtin_bit_cast`: no device
  library (ROCm's ocml) is needed. exp2, log2, sin and pow are left to the core's decompositions.
- A GPU thread is scalar: no vectors (`vector_widths` is empty), math per lane.
- half arithmetic is native and rounded per operation; bfloat16 is computed in float and rounded back after every
  operation (as torch does); their math calls go through float.
- Integer `/` and `%` never trap and agree with the other devices: x/0 is x, x%0 is 0, INT_MIN/-1 wraps.
- Float -> integer casts go through a wide signed integer, as the CPU device does."""
from __future__ import annotations
import math, struct
from typing import Any
from tinyplug.renderer.cstyle import CStyleRenderer, SMALL_INTS
from tinyplug.uop.dtype import DType, dtypes
from tinyplug.uop.ops import GroupOp, Ops, UOp
from tinyplug_amd.renderer import AMDTarget, work_group_size

_TYPE_NAMES = {dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
               dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int",
               dtypes.int64: "long long", dtypes.uint64: "unsigned long long", dtypes.float16: "_Float16",
               dtypes.bfloat16: "__bf16", dtypes.float32: "float", dtypes.float64: "double"}
_UNSIGNED = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
# float math as clang built-ins (float spelling; double drops the `f`)
_BUILTINS = {Ops.SQRT: "__builtin_sqrtf", Ops.TRUNC: "__builtin_truncf", Ops.MOD: "__builtin_fmodf"}
_HALVES = (dtypes.float16, dtypes.bfloat16)
_COMPARISONS = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)

def _bf16_value(v: float) -> float:
  """`v` rounded to bfloat16 (nearest even), so the literal written is exact in float and rounds once."""
  bits = struct.unpack("<I", struct.pack("<f", v))[0]
  bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
  return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]

class HIPRenderer(AMDTarget, CStyleRenderer):
  """HIP C for hiprtc / clang (and the emulator's HIP dialect); arguments as AMDTarget's."""
  suffix = "hip"
  kernel_prefix = 'extern "C" __global__ void'
  type_names = _TYPE_NAMES
  buffer_param = "{type}* __restrict__ {name}"
  var_param = "{type} {name}"
  shared_decl = "__shared__ __attribute__((aligned(16))) {type} {name}[{size}];"
  barrier_code = "__syncthreads();"
  special_code = {"gidx": "blockIdx.{axis}", "lidx": "threadIdx.{axis}"}
  const_suffix = {dtypes.float32: "f", dtypes.int64: "ll", dtypes.uint64: "ull", dtypes.uint32: "u"}
  inf_code = "__builtin_inff()"
  nan_code = "__builtin_nanf(\"\")"
  helper_prefix = "__device__"
  native_ops = frozenset(GroupOp.ALU - {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW})

  def __init__(self, arch: str | None = None, **limits: Any):
    super().__init__(arch, **limits)
    self.vector_widths = {}

  def __repr__(self) -> str:
    return f"HIPRenderer(arch={self.arch!r}, local_max={self.local_max}, shared_max={self.shared_max})"

  def render_const(self, value: Any, dt: DType) -> str:
    if dt == dtypes.bfloat16:
      v = float(value)
      if math.isfinite(v) and math.isfinite(_bf16_value(v)): return f"((__bf16){_bf16_value(v)!r}f)"
      return f"((__bf16){super().render_const(v, dtypes.float32)})"
    return super().render_const(value, dt)

  # ---- ALU ----
  def render_alu(self, u: UOp, s: list[str]) -> str:
    op, dt = u.op, u.dtype
    src = u.src[-1].dtype if op is Ops.WHERE else u.src[0].dtype
    if src == dtypes.bfloat16 and op is not Ops.WHERE:   # computed in float, rounded back once
      text = self._render_alu(u.replace(dtype=dtypes.float32 if dt == dtypes.bfloat16 else dt),
                              [f"((float)({x}))" for x in s], float_src=True)
      return text if op in _COMPARISONS else f"((__bf16)({text}))"
    return super().render_alu(u, s)

  def _render_alu(self, u: UOp, s: list[str], float_src: bool = False) -> str:
    op, dt = u.op, u.dtype
    if op in (Ops.IDIV, Ops.MOD) and dtypes.is_int(dt): return self._int_divmod(u, s[0], s[1])
    if op is Ops.MAX and dtypes.is_int(dt): return f"(({s[0]}>{s[1]})?{s[0]}:{s[1]})"
    if dtypes.is_float(dt) and op is Ops.MAX:
      ctype = "double" if dt == dtypes.float64 else "float"
      self.needs.add(("nanmax", ctype, False))
      text = f"tp_max_{ctype}({s[0]}, {s[1]})"
      return f"((_Float16){text})" if dt == dtypes.float16 else text
    if dtypes.is_float(dt) and op in _BUILTINS:
      if dt == dtypes.float16: return f"((_Float16){_BUILTINS[op]}({', '.join(f'(float)({x})' for x in s)}))"
      return f"{_BUILTINS[op][:-1] if dt == dtypes.float64 else _BUILTINS[op]}({', '.join(s)})"
    return super()._render_alu(u, s)

  def render_nan_max(self, ctype: str, vector: bool) -> str:
    fmax = "__builtin_fmax" if ctype == "double" else "__builtin_fmaxf"
    return (f"{self.helper_prefix} {ctype} tp_max_{ctype}({ctype} a, {ctype} b) "
            f"{{ return (__builtin_isnan(a) || __builtin_isnan(b)) ? a + b : {fmax}(a, b); }}")

  def _int_divmod(self, u: UOp, x: str, y: str) -> str:
    """x/0 is x and x%0 is 0; INT_MIN/-1 wraps to INT_MIN and x%-1 is 0, as on the other devices."""
    dt, divisor = u.dtype, u.src[1]
    sym = "/" if u.op is Ops.IDIV else "%"
    if divisor.op is Ops.CONST and divisor.arg not in (0, -1): return f"({x}{sym}{y})"
    t, unsigned = self.value_type(dt), dtypes.is_unsigned(dt)
    bad = f"(({y})==0)" if unsigned else f"((({y})==0)||(({y})==-1))"
    safe = f"({bad}?({t})1:({y}))"
    if u.op is Ops.MOD or unsigned: return f"(({t})(({x}){sym}{safe}))"
    negated = f"(({t})(({_UNSIGNED[dt.itemsize]})0-({_UNSIGNED[dt.itemsize]})({x})))"   # -x without signed overflow
    return f"((({y})==-1)?{negated}:(({t})(({x})/{safe})))"

  # ---- conversions ----
  def render_cast(self, u: UOp, x: str) -> str:
    dst, src = u.dtype, u.src[0].dtype
    t = self.value_type(dst)
    if dst in _HALVES and src != dtypes.float64: return f"(({t})((float)({x})))"
    if src in _HALVES: x = f"((float)({x}))"
    if dtypes.is_float(src) and dtypes.is_int(dst):
      if dst in SMALL_INTS: return f"(({t})(int)({x}))"
      if dst == dtypes.uint32: return f"(({t})(long long)({x}))"
    return f"(({t})({x}))"

  def render_bitcast(self, u: UOp, x: str) -> str:
    return f"__builtin_bit_cast({self.value_type(u.dtype)}, ({self.value_type(u.src[0].dtype)})({x}))"

  # ---- kernel head and prelude ----
  def render_kernel_head(self, name: str, params: list[str], uops: list[UOp]) -> str:
    return f"{self.kernel_prefix} __launch_bounds__({work_group_size(uops)}) {name}({', '.join(params)}) {{"

  def prelude(self) -> list[str]:
    return ["#include <hip/hip_runtime.h>", *super().prelude()]
