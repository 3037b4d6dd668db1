"""Metal Shading Language from a linear program, through the core's C-style base (`tinyplug.renderer.cstyle`): the
dialect is its tables (`kernel void`, `device`/`threadgroup`/`constant` address spaces, `[[buffer(n)]]` bindings,
the position attributes, `threadgroup_barrier`) and a few overrides.

- An Apple GPU thread is scalar (SIMD lanes are threads): `vector_alu = False`, so vectors only carry loads and stores
  (`float4`, `half4`, `int2`, ...) and math runs per lane. A vector access is one load or store only on a device
  buffer and where the index is provably a multiple of the width; elsewhere it is put together lane by lane.
- Every pointer cast names its address space (`device float4*`): Metal's unqualified pointers are `thread`.
- Metal has no double: float64 is not supported (`supported_dtypes`). bool lives in buffers as uchar.
- half computes natively (IEEE, rounded per operation); its math calls and max go through float. bfloat (MSL 3.1,
  macOS 14) computes everything through float, rounded back once per operation, as numpy and torch round.
- Integer `/` and `%` never trap and agree with the other devices: x/0 is x, x%0 is 0, INT_MIN/-1 wraps.
- Scalar kernel arguments are `constant int& n [[buffer(k)]]`, bound after the buffers (the runtime's setBytes)."""
from __future__ import annotations
import math
from typing import Any
from tinyplug.backend import LAUNCH_GRID
from tinyplug.renderer.cstyle import CStyleRenderer, SMALL_INTS
from tinyplug.uop.dtype import DType, dtypes
from tinyplug.uop.ops import Ops, UOp

_TYPE_NAMES = {dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short",
               dtypes.uint16: "ushort", dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long",
               dtypes.uint64: "ulong", dtypes.float16: "half", dtypes.bfloat16: "bfloat", dtypes.float32: "float"}
_UNSIGNED = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}
_FLOAT_CALLS = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc",
                Ops.POW: "pow", Ops.MOD: "fmod"}
_COMPARISONS = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
# the position attributes a kernel takes, by SPECIAL prefix: (parameter name, attribute)
_POSITIONS = {"gidx": ("gid", "threadgroup_position_in_grid"), "lidx": ("lid", "thread_position_in_threadgroup"),
              "idx": ("tid", "thread_position_in_grid")}
MAX_BINDINGS = 31   # entries of a compute function's buffer argument table

def known_divisor(u: UOp) -> int:
  """A number the integer value of `u` is always a multiple of (0: the value is 0)."""
  if u.op is Ops.CONST: return abs(int(u.arg))
  if u.op is Ops.ADD: return math.gcd(known_divisor(u.src[0]), known_divisor(u.src[1]))
  if u.op is Ops.MUL: return known_divisor(u.src[0]) * known_divisor(u.src[1])
  if u.op is Ops.SHL and u.src[1].op is Ops.CONST and 0 <= int(u.src[1].arg) < 62:
    return known_divisor(u.src[0]) << int(u.src[1].arg)
  return 1

class MetalRenderer(CStyleRenderer):
  """MSL for `newLibraryWithSource:` (and the emulator's Metal dialect). The limits default to what every Apple GPU
  offers (1024 threads and 32 KiB of threadgroup memory per threadgroup); the METAL device passes its own."""
  device = "METAL"
  suffix = "metal"
  launch = LAUNCH_GRID
  has_local = True
  has_shared = True
  global_max = (2**31 - 1, 65535, 65535)
  vector_alu = False
  # the dialect, as tables for the C-style base
  kernel_prefix = "kernel void"
  type_names = _TYPE_NAMES
  vector_lengths = (2, 4)
  buffer_param = "device {type}* {name} [[buffer({index})]]"
  var_param = "constant {type}& {name} [[buffer({index})]]"
  shared_decl = "threadgroup {type} {name}[{size}];"
  barrier_code = "threadgroup_barrier(mem_flags::mem_threadgroup);"
  special_code = {prefix: name + ".{axis}" for prefix, (name, _) in _POSITIONS.items()}
  vector_ctor = "{type}({args})"
  const_suffix = {dtypes.float32: "f", dtypes.int64: "l", dtypes.uint64: "ul", dtypes.uint32: "u"}
  inf_code = "INFINITY"
  nan_code = "NAN"
  helper_prefix = "inline"

  def __init__(self, *, local_max: tuple[int, ...] = (1024, 1024, 1024), max_threads: int = 1024,
               shared_max: int = 32768, device_name: str = "", bfloat: bool = True):
    self.bfloat = bfloat   # MSL 3.1 (macOS 14) has bfloat; the METAL device says whether its system does
    self.local_max = tuple(min(int(x), max_threads) for x in local_max)
    self.max_threads = int(max_threads)
    self.shared_max = int(shared_max)
    self.device_name = device_name
    self.needs: set = set()
    # 4- to 16-byte loads and stores of device buffers (no bool or bfloat vectors: those stay per lane)
    self.vector_widths = {dt: tuple(w for w in (4, 2) if w * dt.itemsize <= 16)
                          for dt in _TYPE_NAMES if dt not in (dtypes.bool, dtypes.bfloat16)}

  def supported_dtypes(self) -> list[DType]: return [dt for dt in _TYPE_NAMES if self.bfloat or dt != dtypes.bfloat16]

  def __repr__(self) -> str:
    return f"MetalRenderer(local_max={self.local_max}, shared_max={self.shared_max}, device={self.device_name!r})"

  # ---- types: bool in memory is uchar ----
  def storage_type(self, dt: DType, global_mem: bool = True) -> str:
    return "uchar" if dt.scalar() == dtypes.bool else super().storage_type(dt, global_mem)

  def render_const(self, value: Any, dt: DType) -> str:
    if dt.count > 1: return self.render_vectorize(dt, [self.render_const(value, dt.scalar())] * dt.count)
    if dt in (dtypes.float16, dtypes.bfloat16):   # a float literal, rounded once
      return f"(({self.value_type(dt)}){super().render_const(value, dtypes.float32)})"
    return super().render_const(value, dt)

  def render_gep(self, x: str, lanes: tuple[int, ...], dt: DType | None = None) -> str:
    if len(lanes) == 1: return f"{x}.{'xyzw'[lanes[0]]}"
    return self.render_vectorize(dt.scalar().vec(len(lanes)), [f"{x}.{'xyzw'[i]}" for i in lanes])

  # ---- ALU ----
  def _render_alu(self, u: UOp, s: list[str]) -> str:
    op, dt, src = u.op, u.dtype, u.src[0].dtype
    if dt.count > 1: raise NotImplementedError(f"Metal kernels compute per lane: {op} on {dt!r} reached the renderer")
    if op in (Ops.IDIV, Ops.MOD) and dtypes.is_int(dt): return self._int_divmod(u, s[0], s[1])
    if op is not Ops.WHERE and (dt == dtypes.bfloat16 or (op in _COMPARISONS and src == dtypes.bfloat16)):
      return self._via_float(u, s)   # bfloat: every operation in float, rounded back once
    if dt == dtypes.float16 and (op is Ops.MAX or op in _FLOAT_CALLS): return self._via_float(u, s)
    if dtypes.is_float(dt) and op is Ops.MAX:
      self.needs.add(("nanmax", self.value_type(dt), False))
      return f"tp_max_{self.value_type(dt)}({s[0]}, {s[1]})"
    if dtypes.is_float(dt) and op in _FLOAT_CALLS: return f"{_FLOAT_CALLS[op]}({', '.join(s)})"
    return super()._render_alu(u, s)

  def _via_float(self, u: UOp, s: list[str]) -> str:
    as_float = u.replace(dtype=dtypes.float32 if u.dtype.scalar() != dtypes.bool else u.dtype,
                         src=tuple(x.replace(dtype=dtypes.float32) if x.dtype in (dtypes.float16, dtypes.bfloat16) else x
                                   for x in u.src))
    text = self._render_alu(as_float, [f"(float)({x})" if a.dtype in (dtypes.float16, dtypes.bfloat16) else x
                                       for x, a in zip(s, u.src)])
    return text if u.dtype == dtypes.bool else f"(({self.value_type(u.dtype)}){text})"

  def render_nan_max(self, ctype: str, vector: bool) -> str:
    return (f"{self.helper_prefix} {ctype} tp_max_{ctype}({ctype} a, {ctype} b) "
            f"{{ return (isnan(a) || isnan(b)) ? a + b : fmax(a, b); }}")

  def _int_divmod(self, u: UOp, x: str, y: str) -> str:
    """x/0 is x and x%0 is 0; INT_MIN/-1 wraps to INT_MIN and x%-1 is 0, as on the other devices."""
    dt, divisor = u.dtype, u.src[1]
    sym = "/" if u.op is Ops.IDIV else "%"
    if divisor.op is Ops.CONST and divisor.arg not in (0, -1): return f"({x}{sym}{y})"
    t, unsigned = self.value_type(dt), dtypes.is_unsigned(dt)
    bad = f"(({y})==0)" if unsigned else f"((({y})==0)||(({y})==-1))"
    safe = f"({bad}?({t})1:({y}))"
    if u.op is Ops.MOD or unsigned: return f"(({t})(({x}){sym}{safe}))"
    ut = _UNSIGNED[dt.itemsize]
    negated = f"(({t})(({ut})0-({ut})({x})))"   # -x without signed overflow
    return f"((({y})==-1)?{negated}:(({t})(({x})/{safe})))"

  # ---- conversions ----
  def render_cast(self, u: UOp, x: str) -> str:
    dst, src = u.dtype, u.src[0].dtype
    if dst.count > 1: raise NotImplementedError(f"Metal kernels compute per lane: a cast to {dst!r} reached the renderer")
    t = self.value_type(dst)
    if dst == dtypes.bfloat16 or (src == dtypes.bfloat16 and dst != dtypes.float32):
      return f"(({t})((float)({x})))"
    if dtypes.is_float(src) and dtypes.is_int(dst):   # through a wide integer: negative and large values wrap alike
      if dst in SMALL_INTS: return f"(({t})(int)({x}))"
      if dst == dtypes.uint32: return f"(({t})(long)({x}))"
    return f"(({t})({x}))"

  def render_bitcast(self, u: UOp, x: str) -> str:
    if u.dtype.count > 1 or u.src[0].dtype.count > 1: raise NotImplementedError("Metal kernels bitcast scalars only")
    return f"as_type<{self.value_type(u.dtype)}>({x})"

  # ---- memory: address spaces on every pointer; whole-vector accesses of device buffers where aligned ----
  def _whole_vector(self, index: UOp, dt: DType) -> bool:
    return index.src[0].op is Ops.DEFINE_GLOBAL and known_divisor(index.src[1]) % dt.count == 0

  def render_load(self, index: UOp, dt: DType) -> str:
    mem = index.src[0]
    if mem.dtype.base.count > 1: return super().render_load(index, dt)   # an array of vectors (an accumulator)
    idx, name = self.expr(index.src[1]), self.names[mem]
    if dt.count > 1:
      if self._whole_vector(index, dt): return f"(*((device {self.value_type(dt)}*)({name}+{idx})))"
      return self.render_vectorize(dt, [f"{name}[({idx})+{i}]" for i in range(dt.count)])
    if dt.scalar() == dtypes.bool and mem.op is not Ops.DEFINE_REG: return f"((bool){name}[{idx}])"
    return f"{name}[{idx}]"

  def render_store(self, index: UOp, value: str, dt: DType) -> str:
    mem = index.src[0]
    if mem.dtype.base.count > 1: return super().render_store(index, value, dt)
    idx, name = self.expr(index.src[1]), self.names[mem]
    if dt.count > 1:
      if self._whole_vector(index, dt): return f"*((device {self.value_type(dt)}*)({name}+{idx})) = {value};"
      lanes = " ".join(f"{name}[({idx})+{i}] = tp_v.{'xyzw'[i]};" for i in range(dt.count))
      return f"{{ {self.value_type(dt)} tp_v = {value}; {lanes} }}"
    if dt.scalar() == dtypes.bool and mem.op is not Ops.DEFINE_REG: return f"{name}[{idx}] = (uchar)({value});"
    return f"{name}[{idx}] = {value};"

  # ---- kernel head and prelude ----
  def render_kernel_head(self, name: str, params: list[str], uops: list[UOp]) -> str:
    if len(params) > MAX_BINDINGS:
      raise NotImplementedError(f"kernel {name} takes {len(params)} buffers and scalars; Metal binds at most {MAX_BINDINGS} "
                                f"([[buffer(0)]] to [[buffer({MAX_BINDINGS - 1})]])")
    used = {u.arg[0].rstrip("0123456789") for u in uops if u.op is Ops.SPECIAL}
    positions = [f"uint3 {p} [[{attr}]]" for prefix, (p, attr) in _POSITIONS.items() if prefix in used]
    return f"{self.kernel_prefix} {name}({', '.join(params + positions)}) {{"

  def prelude(self) -> list[str]:
    return ["#include <metal_stdlib>", "using namespace metal;", *super().prelude()]
