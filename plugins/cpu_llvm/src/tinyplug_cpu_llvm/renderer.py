"""The CPU's LLVM IR renderer: the core's LLVM IR base (`tinyplug.renderer.llvmir`) with the CPU's parts: loops on the
host, the outermost shareable loop split across threads (`core_id`, `n_cores`), and log2/sin as libm calls whose
vector variants (glibc's libmvec) LLVM may vectorise to (exp2 is the core's polynomial: `native_ops` below)."""
from __future__ import annotations
import math
from tinyplug.backend import LAUNCH_LOOPS
from tinyplug_cpu_llvm.machine import n_threads, usable_cores
from tinyplug.renderer.llvmir import LLVM_VECTOR_WIDTHS, LLVMFunctionBuilder, LLVMIRRenderer, literal, reg_type
from tinyplug.uop.dtype import DType, dtypes
from tinyplug.uop.ops import GroupOp, Ops

# libmvec vector lengths per ISA letter, for float and double
_VECLEN = {"b": (4, 2), "d": (8, 4), "e": (16, 8)}
_LIBM = {Ops.LOG2: "log2", Ops.SIN: "sin"}

def _cond(dt: DType) -> str: return "i1" if dt.count == 1 else f"<{dt.count} x i1>"

class CPUFunctionBuilder(LLVMFunctionBuilder):
  def __init__(self, name, uops, renderer: LLVMRenderer):
    super().__init__(name, uops, renderer)
    self.vector_isas = renderer.vector_isas
    self.libm_attrs: dict[str, str] = {}    # scalar libm function -> its call-site attribute group
    self.libm_variants: dict[str, list[str]] = {}

  def float_call(self, op: Ops, dt: DType, x: str) -> str | None:
    if op not in _LIBM or not self.vector_isas or dt.scalar() not in (dtypes.float32, dtypes.float64): return None
    if dt.count > 1 and not self._libmvec_isa(dt): return None
    call = self.libm_call if dt.count == 1 else self.libm_vector_call
    if op is Ops.LOG2: return self.log2_guarded(dt, x, lambda arg: call("log2", dt, arg))
    return call(_LIBM[op], dt, x)

  def log2_guarded(self, dt: DType, x: str, log2) -> str:
    """log2 by libm with the lanes its vector variant takes a scalar path for (0, negatives, denormals, inf, NaN) kept
    from it. A vector whose lanes are all positive normal floats (one class test) calls it as it is; any other
    branches to the guarded call. A scalar call (which LLVM's loop vectoriser widens) is always guarded, by selects."""
    if dt.count == 1: return self.log2_selects(dt, x, log2)
    # every class but the positive normals (llvm.is.fpclass bits: nan 0-1, -inf 2, -normal 3, -denormal 4, -0 5, +0 6,
    # +denormal 7, +inf 9); the guarded path weighted unlikely so the plain call falls through
    vt = f"v{dt.count}{'f32' if dt.scalar() == dtypes.float32 else 'f64'}"
    self.decls[f"is.fpclass.{vt}"] = f"declare {_cond(dt)} @llvm.is.fpclass.{vt}({reg_type(dt)}, i32)"
    self.decls[f"reduce.or.{dt.count}"] = f"declare i1 @llvm.vector.reduce.or.v{dt.count}i1({_cond(dt)})"
    bad = self.op(f"call {_cond(dt)} @llvm.is.fpclass.{vt}({reg_type(dt)} {x}, i32 {0x3FF & ~0x100})")
    any_bad = self.op(f"call i1 @llvm.vector.reduce.or.v{dt.count}i1({_cond(dt)} {bad})")
    n = self.tmp
    self.emit(f"br i1 {any_bad}, label %log{n}_guarded, label %log{n}_fast, !prof !{{!\"branch_weights\", i32 1, i32 1000}}")
    self.label(f"log{n}_fast")
    fast = log2(x)
    self.emit(f"br label %log{n}_join")
    self.label(f"log{n}_guarded")
    guarded = self.log2_selects(dt, x, log2)
    guarded_block = self.block
    self.emit(f"br label %log{n}_join")
    self.label(f"log{n}_join")
    return self.op(f"phi {reg_type(dt)} [{fast}, %log{n}_fast], [{guarded}, %{guarded_block}]")

  def log2_selects(self, dt: DType, x: str, log2) -> str:
    """log2 by libm, its special lanes kept from it by selects: denormals enter scaled by 2**64 (64 taken off after),
    0, negatives, inf and NaN as 1.0 with their results set after."""
    t = reg_type(dt)
    lit = lambda v: literal(v, dt)
    tiny = 2.0 ** (2 - 2 ** (dtypes.finfo(dt.scalar())[0] - 1))          # the smallest normal
    small = self.op(f"fcmp olt {t} {x}, {lit(tiny)}")                    # denormals, zeros, negatives, -inf
    xs = self.op(f"select {_cond(dt)} {small}, {t} {self.op(f'fmul {t} {x}, {lit(2.0 ** 64)}')}, {t} {x}")
    ok = self.op(f"and {_cond(dt)} {self.op(f'fcmp oge {t} {xs}, {lit(tiny)}')}, "
                 f"{self.op(f'fcmp olt {t} {xs}, {lit(math.inf)}')}")    # positive, finite, normal (after scaling)
    y = log2(self.op(f"select {_cond(dt)} {ok}, {t} {xs}, {t} {lit(1.0)}"))
    y = self.op(f"fadd {t} {y}, {self.op(f'select {_cond(dt)} {small}, {t} {lit(-64.0)}, {t} {lit(0.0)}')}")
    # +inf -> inf, +-0 -> -inf, negatives and NaN -> NaN
    special = self.op(f"select {_cond(dt)} {self.op(f'fcmp ogt {t} {x}, {lit(0.0)}')}, {t} {x}, {t} {lit(math.nan)}")
    special = self.op(f"select {_cond(dt)} {self.op(f'fcmp oeq {t} {x}, {lit(0.0)}')}, {t} {lit(-math.inf)}, {t} {special}")
    return self.op(f"select {_cond(dt)} {ok}, {t} {y}, {t} {special}")

  def _libmvec_isa(self, dt: DType) -> str | None:
    return next((i for i in self.vector_isas if _VECLEN[i][0 if dt.scalar() == dtypes.float32 else 1] == dt.count), None)

  def libm_call(self, base: str, dt: DType, x: str) -> str:
    """A call to libm's exp2f/log2f/sinf (or the double ones), marked with its libmvec vector variants so the
    vectorisers can call those (`_ZGVeN16v_exp2f` does 16 lanes at once) instead of one scalar call per lane."""
    t = reg_type(dt)
    fname = self._declare_libm(base, dt)
    return self.op(f"call {t} @{fname}({t} {x}) {self.libm_attrs[fname]}")

  def libm_vector_call(self, base: str, dt: DType, x: str) -> str | None:
    """A vector's exp2/log2/sin (upcast lanes) as one libmvec call when a variant of exactly its width exists;
    LLVM's own vector intrinsic would become one scalar libm call per lane."""
    scalar = dt.scalar()
    if scalar not in (dtypes.float32, dtypes.float64) or (isa := self._libmvec_isa(dt)) is None: return None
    fname = self._declare_libm(base, scalar)
    t = reg_type(dt)
    return self.op(f"call {t} @_ZGV{isa}N{dt.count}v_{fname}({t} {x})")

  def _declare_libm(self, base: str, dt: DType) -> str:
    t = reg_type(dt)
    fname = base + ("f" if dt == dtypes.float32 else "")
    if fname not in self.libm_attrs:
      variants = []
      for isa in self.vector_isas:
        n = _VECLEN[isa][0 if dt == dtypes.float32 else 1]
        vname = f"_ZGV{isa}N{n}v_{fname}"
        variants.append(f"{vname}({vname})")
        self.decls[vname] = f"declare <{n} x {t}> @{vname}(<{n} x {t}>) #1"
      self.decls[fname] = f"declare {t} @{fname}({t}) #1"
      self.libm_attrs[fname] = f"#{len(self.libm_attrs) + 2}"
      self.libm_variants[fname] = variants
    return fname

  def footer(self) -> list[str]:
    if not self.libm_attrs: return []
    # libm functions as pure (no errno), their vector variants kept alive until the vectorisers had their chance
    lines = ["attributes #1 = { nounwind willreturn memory(none) }"]
    for fname, group in self.libm_attrs.items():
      lines.append(f'attributes {group} = {{ "vector-function-abi-variant"="{",".join(self.libm_variants[fname])}" }}')
    used = [d.split("@")[1].split("(")[0] for d in self.decls.values() if "@_ZGV" in d]
    if used:
      lines.append(f"@llvm.compiler.used = appending global [{len(used)} x ptr] [{', '.join('ptr @' + u for u in used)}], "
                   'section "llvm.metadata"')
    return lines

class LLVMRenderer(LLVMIRRenderer):
  """Linear program -> LLVM IR for the host CPU (one function, threading-aware)."""
  device = "CPU"
  launch = LAUNCH_LOOPS
  split_threads = True
  vector_widths = LLVM_VECTOR_WIDTHS
  builder = CPUFunctionBuilder
  # exp2 from the core's polynomial (codegen/decompositions.py), not libm: as fast on ordinary inputs, and libmvec's
  # vector exp2 takes a scalar slow path per lane that overflows, underflows or is -inf (a softmax under a causal
  # mask, 4M floats half -inf, one thread: 41 -> 5.9 ms); log2 and sin keep libm (their polynomials are slower)
  native_ops = frozenset(GroupOp.ALU - {Ops.EXP2})
  # `x[idx]`'s gradient tests 16 indices (one AVX-512 compare, LLVM's SLP vectorizer makes it one) per branch:
  # 4096 rows of a 50000x512 table, one thread 142 -> 57 ms fwd+bwd
  match_scan_lanes = 16
  # ...and is a real scatter-add (Ops.SCATTER_ADD) instead: O(indices x width), not O(rows x indices / 16)
  row_scatter_add = True
  # a load of lanes at descending addresses (a flipped axis) is one vector load and a shufflevector (unmeasured on
  # the GPU targets that also render through LLVM, so theirs stay lane by lane)
  lane_shuffles = True
  def __init__(self, vector_isas: tuple[str, ...] = (), cache_bytes: tuple[int, ...] = (),
               vector_regs: tuple[int, int] = (0, 0)):
    """vector_isas: libmvec ISA letters the target supports ("b" SSE4, "d" AVX2, "e" AVX-512); with them, exp2, log2
    and sin of float32/float64 become libm calls whose vector variants (glibc's libmvec) LLVM may vectorise to.
    cache_bytes: the host's data caches (machine.data_caches()), which the optimiser sizes its cache blocks by.
    vector_regs: (bytes, count) of the target's vector registers (machine.vector_registers()), which the optimiser
    sizes its register tiles by; (0, 0) unknown."""
    self.vector_isas = tuple(vector_isas)
    self.cache_bytes = tuple(cache_bytes)
    self.vector_bytes, self.vector_registers = vector_regs
    self.cores = usable_cores()   # an instance field, so programs cached on disk are keyed by the machine's core count
  @property
  def threads(self) -> int:
    """CPU_THREADS, or every usable core: what the runtime shares a kernel across (read live, like the runtime)."""
    return n_threads()
