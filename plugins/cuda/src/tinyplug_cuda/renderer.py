"""CUDA C from a linear program, through the core's C-style base (`tinyplug.renderer.cstyle`): the dialect is its
tables (`blockIdx`/`threadIdx` ids, `__shared__` arrays, `__syncthreads()`, `extern "C" __global__` kernels with
`__launch_bounds__`) and a few overrides.

- A GPU thread is scalar: the renderer declares `vector_alu = False`, so vectors only carry loads and stores
  (`float4`, `int4`, ... and `half4` / `bf16x4` structs from the prelude); math runs per lane.
- A vector access is one 8- or 16-byte load only where the index is provably a multiple of the width (a misaligned
  vector access faults on the GPU); elsewhere it is put together lane by lane.
- half and bfloat16 come from `cuda_fp16.h` / `cuda_bf16.h`; their arithmetic and comparisons use the headers'
  operators (rounded per operation, as numpy and torch do), conversions and math go through float (exact for
  half/bf16 -> float, one rounding back), and from double through `__double2half` / `__double2bfloat16`.
- Integer `/` and `%` never trap and agree with the other devices: x/0 is x, x%0 is 0, INT_MIN/-1 wraps.
- Float -> integer casts go through a wide signed integer, as the CPU device does, so negative or large values wrap
  the same way everywhere instead of saturating."""
from __future__ import annotations
import math
from typing import Any, Iterable
from tinyplug.backend import LAUNCH_GRID
from tinyplug.helpers import env_str
from tinyplug.renderer.cstyle import CStyleRenderer, SMALL_INTS, is_ptr_of
from tinyplug.uop.dtype import DType, dtypes
from tinyplug.uop.ops import Ops, UOp
from tinyplug_cuda.tensor_cores import ASYNC_HELPERS, WGMMA, mma_function, tensor_cores_for

_TYPE_NAMES = {dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
               dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int",
               dtypes.int64: "long long", dtypes.uint64: "unsigned long long", dtypes.float16: "half",
               dtypes.bfloat16: "__nv_bfloat16", dtypes.float32: "float", dtypes.float64: "double"}
# CUDA's vector type names (half and bfloat16 vectors are structs the prelude defines)
_VECTOR_NAMES = {dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short", dtypes.uint16: "ushort",
                 dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "longlong", dtypes.uint64: "ulonglong",
                 dtypes.float32: "float", dtypes.float64: "double", dtypes.float16: "half", dtypes.bfloat16: "bf16x"}
_HALVES = (dtypes.float16, dtypes.bfloat16)
# lane names of vectors: CUDA's x, y, z, w, then s4..s7 of the 8-lane half / bfloat16 structs (16-byte accesses)
_FIELDS = ("x", "y", "z", "w", "s4", "s5", "s6", "s7")
# bit patterns: (to bits, from bits) per scalar type; integers reinterpret through their unsigned type
_BITS = {dtypes.float32: ("__float_as_uint({})", "__uint_as_float({})"),
         dtypes.float64: ("((unsigned long long)__double_as_longlong({}))", "__longlong_as_double((long long)({}))"),
         dtypes.float16: ("__half_as_ushort({})", "__ushort_as_half({})"),
         dtypes.bfloat16: ("__bfloat16_as_ushort({})", "__ushort_as_bfloat16({})")}
_UNSIGNED = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}
_FLOAT_CALLS = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc",
                Ops.POW: "pow", Ops.MOD: "fmod"}

def known_divisor(u: UOp) -> int:
  """A number the integer value of `u` is always a multiple of (0: the value is 0)."""
  if u.op is Ops.CONST: return abs(int(u.arg))
  if u.op is Ops.ADD: return math.gcd(known_divisor(u.src[0]), known_divisor(u.src[1]))
  if u.op is Ops.MUL: return known_divisor(u.src[0]) * known_divisor(u.src[1])
  if u.op is Ops.SHL and u.src[1].op is Ops.CONST and 0 <= int(u.src[1].arg) < 62: return known_divisor(u.src[0]) << int(u.src[1].arg)
  return 1

STATIC_SHARED_MAX = 49152   # bytes of static __shared__ arrays a kernel may declare; more is dynamic shared memory
DESCRIPTOR_ALIGN = 1024     # descriptor tiles (arrays named wgmma*, tc_wgmma.py): the 128-byte swizzle's period

def _is_descriptor_tile(u: UOp) -> bool: return isinstance(u.arg, str) and u.arg.startswith("wgmma")

def shared_layout(uops: Iterable[UOp]) -> tuple[dict[UOp, int], int]:
  """Where each DEFINE_LOCAL of a kernel starts in its shared memory (bytes, 16-byte aligned, 1024 for descriptor
  tiles) and the total: past STATIC_SHARED_MAX, or with descriptor tiles, the arrays are carved out of dynamic shared
  memory, which the runtime sizes at launch (descriptor tiles: 1024 bytes more, to align its start at run time)."""
  offsets, total, descriptors = {}, 0, False
  for u in uops:
    if u.op is Ops.DEFINE_LOCAL and u not in offsets:
      if _is_descriptor_tile(u):
        total, descriptors = -(-total // DESCRIPTOR_ALIGN) * DESCRIPTOR_ALIGN, True
      offsets[u] = total
      total += -(-max(u.dtype.size, 1) * u.dtype.base.itemsize // 16) * 16
  return offsets, total + (DESCRIPTOR_ALIGN if descriptors else 0)

def _dynamic(uops: Iterable[UOp], total: int) -> bool:
  return total > STATIC_SHARED_MAX or any(u.op is Ops.DEFINE_LOCAL and _is_descriptor_tile(u) for u in uops)

# the shared memory one block may opt in to, per architecture (NVIDIA's published limits per compute capability):
# the CUDA C renderer's limit where no device gives its own
SHARED_OPTIN = {"sm_70": 98304, "sm_72": 98304, "sm_75": 65536, "sm_80": 166912, "sm_86": 101376, "sm_87": 166912,
                "sm_89": 101376, "sm_90": 232448}

def dynamic_shared_bytes(uops: Iterable[UOp]) -> int:
  """The dynamic shared memory a kernel rendered by CUDARenderer needs at launch (0: its arrays are static)."""
  uops = list(uops)
  total = shared_layout(uops)[1]
  return total if _dynamic(uops, total) else 0

class CUDATarget:
  """What the CUDA C and the PTX renderer share: the device, its grid/block launch and limits. `arch` ("sm_80";
  default CUDA_ARCH, else sm_80) is the GPU they write for; the limits default to those every CUDA GPU since sm_50
  has, and the CUDA device passes its own. Vectors carry loads and stores only: math runs per lane."""
  device = "CUDA"
  launch = LAUNCH_GRID
  has_local = True
  has_shared = True
  global_max = (2**31 - 1, 65535, 65535)
  vector_alu = False
  max_registers = 255   # 32-bit registers a thread may use: a tile whose accumulators alone need more would spill
  dynamic_shared = False   # whether shared arrays past 48 KB come from dynamic shared memory (the CUDA C renderer's)

  def __init__(self, arch: str | None = None, *, local_max: tuple[int, ...] = (1024, 1024, 64), max_threads: int = 1024,
               shared_max: int = 49152):
    self.arch = arch or env_str("CUDA_ARCH") or "sm_80"
    self.local_max = tuple(min(int(x), max_threads) for x in local_max)
    self.max_threads = int(max_threads)
    self.shared_max = int(shared_max)

class CUDARenderer(CUDATarget, CStyleRenderer):
  """CUDA C for NVRTC (and the emulator's CUDA dialect); arguments as CUDATarget's."""
  suffix = "cu"
  # the dialect, as tables for the C-style base
  kernel_prefix = 'extern "C" __global__ void'
  type_names = _TYPE_NAMES
  vector_lengths = (2, 4, 8)   # 8: half and bfloat16 only
  buffer_param = "{type}* __restrict__ {name}"
  var_param = "{type} {name}"
  shared_decl = "__shared__ __align__(16) {type} {name}[{size}];"
  barrier_code = "__syncthreads();"
  special_code = {"gidx": "blockIdx.{axis}", "lidx": "threadIdx.{axis}",
                  "idx": "(blockIdx.{axis}*blockDim.{axis}+threadIdx.{axis})"}
  const_suffix = {dtypes.float32: "f", dtypes.int64: "ll", dtypes.uint64: "ull", dtypes.uint32: "u"}
  inf_code = "__int_as_float(0x7f800000)"
  nan_code = "__int_as_float(0x7fffffff)"
  helper_prefix = "__device__"

  def __init__(self, arch: str | None = None, *, wgmma: bool | None = None, **limits: Any):
    super().__init__(arch, **limits)
    # Hopper's wgmma cores (sm_90 only; CUDA_WGMMA=0 or wgmma=False leaves them out: mma.sync only)
    self.wgmma = bool(int(env_str("CUDA_WGMMA") or "1")) if wgmma is None else wgmma
    if "shared_max" not in limits: self.shared_max = SHARED_OPTIN.get(self.arch.split("_", 1)[0] + "_" + "".join(
      ch for ch in self.arch.split("_")[-1] if ch.isdigit()), STATIC_SHARED_MAX)   # sm_90a counts as sm_90
    self.needs: set = set()   # what the kernel being rendered asks of the prelude (render() starts it afresh)
    self._dynamic: dict = {}  # DEFINE_LOCAL -> byte offset in dynamic shared memory (render() works it out)
    self._dynamic_total = 0   # and the bytes they take
    # 8- and 16-byte loads and stores (no bool vectors: comparisons stay per lane); 8 halves are one 16-byte access
    self.vector_widths = {dt: tuple(w for w in ((8, 4, 2) if dt in _HALVES else (4, 2)) if w * dt.itemsize <= 16)
                          for dt in _VECTOR_NAMES}

  @property
  def tensor_cores(self) -> tuple:   # mma.sync m16n8k16 (f16, bf16 -> f32) from sm_80 on, wgmma on sm_90: tensor_cores.py
    return tensor_cores_for(self.arch, self.wgmma)

  @property
  def descriptor_cores(self) -> frozenset:   # wgmma reads A and B from shared memory (STAGE bit 2048: tc_wgmma.py)
    return frozenset(t.name for t in self.tensor_cores if t in WGMMA)

  @property
  def prefer_descriptor_cores(self) -> bool: return bool(self.descriptor_cores)

  dynamic_shared = True   # shared arrays past 48 KB come from dynamic shared memory (the runtime sizes it)
  # STAGE's asynchronous mode (codegen/tc_async.py): cp.async copies, their commit groups and waits, ldmatrix reads
  memory_ops = frozenset({"cp.async", "ldmatrix", "ldmatrix.trans", "wgmma.k", "wgmma.mn"})

  @property
  def async_copy(self) -> bool: return bool(self.tensor_cores)   # cp.async and ldmatrix: sm_80 on, as mma.sync

  def render_barrier(self, u: UOp) -> str:
    if u.arg == "cp.async.commit":
      self.needs.add("async")
      return "tp_cp_async_commit();"
    if isinstance(u.arg, tuple) and u.arg[0] == "cp.async.wait":
      self.needs.add("async")
      proxy = " tp_fence_proxy_async();" if len(u.arg) > 3 and u.arg[3] else ""   # cp.async -> wgmma's reads
      if proxy: self.needs.add("wgmma")
      return f"tp_cp_async_wait<{int(u.arg[1])}>();{proxy} {self.barrier_code}"
    return super().render_barrier(u)

  def render_memory_op(self, u: UOp) -> str | None:
    self.needs.add("async")
    if u.op is Ops.LOAD and u.arg in ("wgmma.k", "wgmma.mn"):   # a descriptor of the tile at this element
      from tinyplug.codegen.tc_wgmma import STRIDES
      self.needs.add("wgmma")
      index, (lbo, sbo) = u.src[0], STRIDES[u.arg]
      return f"tp_wgmma_desc(tp_smem_addr({self.names[index.src[0]]}+{self.expr(index.src[1])}), {lbo}, {sbo}, 1)"
    if u.op is Ops.LOAD and u.arg == "cp.async":   # the source address, for the STORE that copies it
      index = u.src[0]
      self.names[u] = f"({self.names[index.src[0]]}+{self.expr(index.src[1])})"
      return None
    if u.op is Ops.STORE:
      index, src = u.src[0], u.src[1]
      if src.dtype.itemsize != 16: raise NotImplementedError(f"cp.async copies 16 bytes, not {src.dtype!r}")
      return f"tp_cp_async16({self.names[index.src[0]]}+{self.expr(index.src[1])}, {self.expr(src)});"
    index, regs = u.src[0], u.dtype.itemsize // 4
    if regs not in (1, 2, 4): raise NotImplementedError(f"ldmatrix loads 1, 2 or 4 registers, not {u.dtype!r}")
    fn = "tp_ldmatrix_trans" if u.arg == "ldmatrix.trans" else "tp_ldmatrix"
    return f"{fn}<{self.value_type(u.dtype)}, {regs}>({self.names[index.src[0]]}+{self.expr(index.src[1])})"

  def render(self, name: str, uops: list[UOp]) -> str:
    offsets, total = shared_layout(uops)
    self._dynamic, self._dynamic_total = (offsets, total) if _dynamic(uops, total) else ({}, 0)
    self._align_smem = any(u.op is Ops.DEFINE_LOCAL and _is_descriptor_tile(u) for u in uops)
    # WMMAs whose C is exactly the D of another (a K chain) that nothing else reads: that one neither waits nor this
    # one fences (wgmma: D is only defined once the chain is waited for)
    users: dict[UOp, list[UOp]] = {}
    for x in uops:
      for y in x.src: users.setdefault(y, []).append(x)
    self._chained = {u: u.src[-u.dtype.count].src[0] for u in uops if u.op is Ops.WMMA and
                     all(c.op is Ops.GEP and c.src[0] is u.src[-u.dtype.count].src[0] and c.arg == (i,) and
                         c.src[0].op is Ops.WMMA for i, c in enumerate(u.src[-u.dtype.count:]))}
    self._chained = {u: w for u, w in self._chained.items()
                     if all(g.op is Ops.GEP and all(y is u for y in users.get(g, [])) for g in users.get(w, []))}
    self._chain_inner = set(self._chained.values())
    return super().render(name, uops)

  def render_shared(self, u: UOp, name: str, ctype: str, size: int) -> str:
    if u not in self._dynamic: return super().render_shared(u, name, ctype, size)
    # more than 48 KB: one dynamic array (the runtime sets the kernel's limit and passes its size at launch); the
    # emulator, which has no launch-time size, gets a static array as large
    head = ""
    if self._dynamic[u] == 0 and self._align_smem:   # descriptor tiles: the arrays start on a 1024-byte boundary
      head = (f"#ifdef __CUDA_ARCH__\n  extern __shared__ __align__(1024) unsigned char tp_smem_raw[];\n#else\n"
              f"  __shared__ __align__(1024) unsigned char tp_smem_raw[{self._dynamic_total}];\n"
              f"  tp_shared_window(tp_smem_raw);\n#endif\n"
              f"  unsigned char* tp_smem = tp_smem_raw + ((1024u - (tp_smem_addr(tp_smem_raw) & 1023u)) & 1023u);\n  ")
    elif self._dynamic[u] == 0:
      head = (f"#ifdef __CUDA_ARCH__\n  extern __shared__ __align__(16) unsigned char tp_smem[];\n#else\n"
              f"  __shared__ __align__(16) unsigned char tp_smem[{self._dynamic_total}];\n#endif\n  ")
    return f"{head}{ctype}* {name} = ({ctype}*)(tp_smem+{self._dynamic[u]});"

  def render_wmma(self, u: UOp, s: list[str]) -> str:
    tc = next((t for t in self.tensor_cores if t.name == u.arg), None)
    if tc is None: raise NotImplementedError(f"CUDA C for {self.arch} has no tensor core {u.arg!r}")
    if tc in WGMMA: return self._render_wgmma(u, tc, s)
    self.needs.add(("wmma", u.arg))
    return f"tp_{tc.name}({', '.join(s)})"

  def _render_wgmma(self, u: UOp, tc, s: list[str]) -> str:
    """One wgmma of a K chain (tp_wgmma_chain<T, N, first, last>): the first fences the accumulators, the last commits
    and waits for the chain; D comes back as a struct of N/2 floats."""
    n_a, n_b, n_c = tc.elements
    kinds = ("wgmma.k", "wgmma.mn")
    if any(x.op is not Ops.LOAD or x.arg not in kinds for x in (u.src[0], u.src[n_a])):
      raise NotImplementedError(f"{tc.name} reads A and B from shared memory through descriptors: stage its operands "
                                "with STAGE bit 2048 (+16)")
    ta, tb = int(u.src[0].arg == "wgmma.mn"), int(u.src[n_a].arg == "wgmma.mn")   # M/N-major: transposed operand
    self.needs.add("wgmma")
    self.needs.add(("wgmma_mma", tc.dtype_in, tc.dims[1], ta, tb))
    acc = self.names[self._chained[u]] if u in self._chained else f"tp_f32s<{n_c}>{{{{{', '.join(s[n_a + n_b:])}}}}}"
    first, last = int(u not in self._chained), int(u not in self._chain_inner)
    return (f"tp_wgmma_chain<{self.type_names[tc.dtype_in]}, {tc.dims[1]}, {ta}, {tb}, {first}, {last}>({acc}, {s[0]}, "
            f"{s[n_a]})")

  def __repr__(self) -> str: return f"CUDARenderer(arch={self.arch!r}, local_max={self.local_max}, shared_max={self.shared_max})"

  # ---- types ----
  def value_type(self, dt: DType) -> str:
    if dt.count > 8 and dt.scalar() == dtypes.float32:   # a wgmma's D: a struct of floats
      self.needs.add("wgmma")
      return f"tp_f32s<{dt.count}>"
    if dt.count == 1 or dt.scalar() not in _VECTOR_NAMES: return super().value_type(dt)
    if dt.count not in self.vector_lengths or (dt.count == 8 and dt.scalar() not in _HALVES):
      raise NotImplementedError(f"CUDA C has no vectors of {dt.count} {dt.scalar().name} elements")
    if dt.scalar() in _HALVES: self.needs.add(("vector", dt.scalar(), dt.count))
    return f"{_VECTOR_NAMES[dt.scalar()]}{dt.count}"

  def render_const(self, value: Any, dt: DType) -> str:
    if dt.count > 1: return self.render_vectorize(dt, [self.render_const(value, dt.scalar())] * dt.count)
    if dt in _HALVES:   # a float literal, rounded once to half / bfloat16
      return f"(({self.value_type(dt)}){super().render_const(value, dtypes.float32)})"
    return super().render_const(value, dt)

  def render_vectorize(self, dt: DType, parts: list[str]) -> str:
    return f"make_{self.value_type(dt)}({', '.join(parts)})"

  def render_gep(self, x: str, lanes: tuple[int, ...], dt: DType | None = None) -> str:
    if dt is not None and dt.count > 8 and len(lanes) == 1: return f"{x}.v[{lanes[0]}]"
    if len(lanes) == 1: return f"{x}.{_FIELDS[lanes[0]]}"
    return self.render_vectorize(dt.scalar().vec(len(lanes)), [f"{x}.{_FIELDS[i]}" for i in lanes])

  # ---- ALU ----
  def _render_alu(self, u: UOp, s: list[str]) -> str:
    op, dt = u.op, u.dtype
    if dt.count > 1: raise NotImplementedError(f"CUDA C computes per lane: {op} on {dt!r} reached the renderer")
    if op in (Ops.IDIV, Ops.MOD) and dtypes.is_int(dt): return self._int_divmod(u, s[0], s[1])
    if dt in _HALVES:   # half / bfloat16: + - * / and comparisons by the headers' operators, the rest in float
      t = self.value_type(dt)
      if op is Ops.MAX: return f"(({t}){self._float_max('float', [f'(float)({x})' for x in s])})"
      if op in _FLOAT_CALLS: return f"(({t}){_FLOAT_CALLS[op]}f({', '.join(f'(float)({x})' for x in s)}))"
    if dtypes.is_float(dt) and op is Ops.MAX: return self._float_max(self.value_type(dt), s)
    if dtypes.is_float(dt) and op in _FLOAT_CALLS:
      return f"{_FLOAT_CALLS[op]}{'f' if dt == dtypes.float32 else ''}({', '.join(s)})"
    return super()._render_alu(u, s)

  def _float_max(self, ctype: str, s: list[str]) -> str:
    self.needs.add(("nanmax", ctype, False))
    return f"tp_max_{ctype}({s[0]}, {s[1]})"

  def render_nan_max(self, ctype: str, vector: bool) -> str:
    return (f"{self.helper_prefix} {ctype} tp_max_{ctype}({ctype} a, {ctype} b) "
            f"{{ return (isnan(a) || isnan(b)) ? a + b : fmax(a, b); }}")

  def _int_divmod(self, u: UOp, x: str, y: str) -> str:
    """x/0 is x and x%0 is 0; INT_MIN/-1 wraps to INT_MIN and x%-1 is 0, as on the other devices."""
    dt, divisor = u.dtype, u.src[1]
    sym = "/" if u.op is Ops.IDIV else "%"
    if divisor.op is Ops.CONST and divisor.arg not in (0, -1): return f"({x}{sym}{y})"
    t = self.value_type(dt)
    unsigned = dtypes.is_unsigned(dt)
    bad = f"(({y})==0)" if unsigned else f"((({y})==0)||(({y})==-1))"
    safe = f"({bad}?({t})1:({y}))"
    if u.op is Ops.MOD or unsigned: return f"(({t})(({x}){sym}{safe}))"
    negated = f"(({t})(({_UNSIGNED[dt.itemsize]})0-({_UNSIGNED[dt.itemsize]})({x})))"   # -x without signed overflow
    return f"((({y})==-1)?{negated}:(({t})(({x})/{safe})))"

  # ---- conversions ----
  def render_cast(self, u: UOp, x: str) -> str:
    dst, src = u.dtype, u.src[0].dtype
    if dst.count > 1: raise NotImplementedError(f"CUDA C computes per lane: a cast to {dst!r} reached the renderer")
    t = self.value_type(dst)
    if dst in _HALVES:
      if src == dtypes.float64: return f"__double2{'half' if dst == dtypes.float16 else 'bfloat16'}({x})"
      return f"(({t})((float)({x})))"
    if src in _HALVES: return f"(({t})((float)({x})))" if dst != dtypes.float32 else f"((float)({x}))"
    if dtypes.is_float(src) and dtypes.is_int(dst):
      if dst in SMALL_INTS: return f"(({t})(int)({x}))"
      if dst == dtypes.uint32: return f"(({t})(long long)({x}))"
    return f"(({t})({x}))"

  def render_bitcast(self, u: UOp, x: str) -> str:
    src, dst = u.src[0].dtype.scalar(), u.dtype.scalar()
    if u.dtype.count > 1 or u.src[0].dtype.count > 1: raise NotImplementedError("CUDA C bitcasts scalars only")
    bits = _BITS[src][0].format(x) if src in _BITS else f"(({_UNSIGNED[src.itemsize]})({x}))"
    return _BITS[dst][1].format(bits) if dst in _BITS else f"(({self.value_type(dst)})({bits}))"

  # ---- memory: whole-vector accesses only where aligned ----
  def _aligned(self, index: UOp, n: int) -> bool: return known_divisor(index.src[1]) % n == 0

  def render_load(self, index: UOp, dt: DType) -> str:
    mem = index.src[0]
    if dt.count > 1 and mem.dtype.base.count == 1 and not self._aligned(index, dt.count):
      idx = self.expr(index.src[1])
      return self.render_vectorize(dt, [f"{self.names[mem]}[({idx})+{i}]" for i in range(dt.count)])
    return super().render_load(index, dt)

  def render_store(self, index: UOp, value: str, dt: DType) -> str:
    mem = index.src[0]
    if dt.count > 1 and mem.dtype.base.count == 1 and not self._aligned(index, dt.count):
      idx = self.expr(index.src[1])
      lanes = " ".join(f"{self.names[mem]}[({idx})+{i}] = tp_v.{_FIELDS[i]};" for i in range(dt.count))
      return f"{{ {self.value_type(dt)} tp_v = {value}; {lanes} }}"
    return super().render_store(index, value, dt)

  # ---- kernel head and prelude ----
  def render_kernel_head(self, name: str, params: list[str], uops: list[UOp]) -> str:
    threads = 1
    for u in uops:
      if u.op is Ops.SPECIAL and u.arg[0].startswith("lidx"):
        if not isinstance(u.arg[1], int): threads = 0; break
        threads *= u.arg[1]
    # STAGE's asynchronous mode may ask for a number of blocks per multiprocessor (its wait carries it: tc_async.py)
    blocks = max((u.arg[2] for u in uops if u.op is Ops.BARRIER and isinstance(u.arg, tuple) and len(u.arg) > 2
                  and u.arg[0] == "cp.async.wait"), default=0)
    bounds = f" __launch_bounds__({threads}{f', {blocks}' if blocks else ''})" if threads else ""
    return f"{self.kernel_prefix}{bounds} {name}({', '.join(params)}) {{"

  def note(self, u: UOp) -> None:
    if is_ptr_of(u.dtype, dtypes.float16): self.needs.add("fp16")
    if is_ptr_of(u.dtype, dtypes.bfloat16): self.needs.add("bf16")

  def prelude(self) -> list[str]:
    lines = []
    if "fp16" in self.needs or any(isinstance(n, tuple) and n[1] == dtypes.float16 for n in self.needs):
      lines.append("#include <cuda_fp16.h>")
    if "bf16" in self.needs or any(isinstance(n, tuple) and n[1] == dtypes.bfloat16 for n in self.needs):
      lines.append("#include <cuda_bf16.h>")
    for _, sc, n in sorted((x for x in self.needs if isinstance(x, tuple) and x[0] == "vector"), key=str):
      if (sc, n) == (dtypes.float16, 2): continue   # half2 and make_half2 come with cuda_fp16.h
      t, name, fields = self.type_names[sc], f"{_VECTOR_NAMES[sc]}{n}", _FIELDS[:n]
      lines.append(f"struct __align__({2 * n}) {name} {{ {t} {', '.join(fields)}; }};")
      lines.append(f"{self.helper_prefix} {name} make_{name}({', '.join(f'{t} {f}' for f in fields)}) "
                   f"{{ {name} r; {' '.join(f'r.{f} = {f};' for f in fields)} return r; }}")
    if "async" in self.needs: lines.append(ASYNC_HELPERS)
    if "wgmma" in self.needs:
      from tinyplug_cuda.wgmma import CHAIN_HELPER, COMMON, GPU_HELPERS, mma_specialization
      lines += [COMMON, GPU_HELPERS, CHAIN_HELPER]
      lines += [mma_specialization(dt, n, ta, tb) for _, dt, n, ta, tb in
                sorted((x for x in self.needs if isinstance(x, tuple) and x[0] == "wgmma_mma"), key=str)]
    for _, name in sorted(x for x in self.needs if isinstance(x, tuple) and x[0] == "wmma"):
      lines.append(mma_function(next(t for t in self.tensor_cores if t.name == name)))
    return lines + super().prelude()
