"""The CPU's LLVM IR renderer: the core's LLVM IR base (`tinyplug.renderer.llvmir`) with the CPU's parts: loops on the
host, the outermost shareable loop split across threads (`core_id`, `n_cores`), and exp2/log2/sin as libm calls
whose vector variants (glibc's libmvec) LLVM may vectorise to."""
from __future__ import annotations
from tinyplug.backend import LAUNCH_LOOPS
from tinyplug_cpu_llvm.machine import n_threads, usable_cores
from tinyplug.renderer.llvmir import LLVM_VECTOR_WIDTHS, LLVMFunctionBuilder, LLVMIRRenderer, reg_type
from tinyplug.uop.dtype import DType, dtypes
from tinyplug.uop.ops import GroupOp, Ops

# libmvec vector lengths per ISA letter, for float and double
_VECLEN = {"b": (4, 2), "d": (8, 4), "e": (16, 8)}
_LIBM = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin"}

class CPUFunctionBuilder(LLVMFunctionBuilder):
  def __init__(self, name, uops, renderer: LLVMRenderer):
    super().__init__(name, uops, renderer)
    self.vector_isas = renderer.vector_isas
    self.libm_attrs: dict[str, str] = {}    # scalar libm function -> its call-site attribute group
    self.libm_variants: dict[str, list[str]] = {}

  def float_call(self, op: Ops, dt: DType, x: str) -> str | None:
    if op in _LIBM and self.vector_isas and dt in (dtypes.float32, dtypes.float64):
      return self.libm_call(_LIBM[op], dt, x)
    if op in _LIBM and self.vector_isas and dt.count > 1 and (v := self.libm_vector_call(_LIBM[op], dt, x)):
      return v
    return None

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
    if scalar not in (dtypes.float32, dtypes.float64): return None
    fname = self._declare_libm(base, scalar)
    isa = next((i for i in self.vector_isas if _VECLEN[i][0 if scalar == dtypes.float32 else 1] == dt.count), None)
    if isa is None: return None
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
