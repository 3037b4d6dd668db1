"""The PTX path: the core's LLVM IR base with NVPTX hooks (launch ids from `llvm.nvvm.read.ptx.sreg.*`, shared
memory as an `addrspace(3)` global, `llvm.nvvm.barrier0`, `ptx_kernel`), turned into PTX by llvmlite's NVPTX target
and linked into a cubin for the GPU's own `sm_XY` by nvJitLink (the `nvidia-nvjitlink` wheel; without it the PTX goes
to the driver, which JIT-compiles it). Selected with `DEV=CUDA:PTX`.

exp2, log2, sin and pow are left to the core's decompositions (NVPTX's hardware versions are approximations)."""
from __future__ import annotations
import ctypes, functools, hashlib, re, threading
from typing import Any
from tinyplug.backend import Compiler
from tinyplug.diskcache import cache_path, read_sealed, write_sealed
from tinyplug.helpers import CACHELEVEL
from tinyplug.renderer.llvmir import LLVMFunctionBuilder, LLVMIRRenderer, mem_type
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import GroupOp, Ops, UOp
from tinyplug_cuda.renderer import CUDATarget

_SREG = {"gidx": "ctaid", "lidx": "tid"}

class NVPTXBuilder(LLVMFunctionBuilder):
  def sreg(self, reg: str, axis: str) -> str:
    fn = f"@llvm.nvvm.read.ptx.sreg.{reg}.{axis}"
    self.decls[fn] = f"declare i32 {fn}()"
    return self.op(f"call i32 {fn}()")

  def render_special(self, u: UOp) -> str:
    name = u.arg[0]
    prefix, dim = name.rstrip("0123456789"), int(name.lstrip("gilxd"))
    axis = "xyz"[dim]
    t = "i64" if u.dtype.itemsize == 8 else "i32"   # i64 in a kernel over 2^31+ elements: widen before the math
    def reg(r: str) -> str: return self.sreg(r, axis) if t == "i32" else self.op(f"sext i32 {self.sreg(r, axis)} to i64")
    if prefix == "idx":   # global id: block * block size + thread
      block, size, thread = reg("ctaid"), reg("ntid"), reg("tid")
      return self.op(f"add {t} {self.op(f'mul {t} {block}, {size}')}, {thread}")
    return reg(_SREG[prefix])

  def define_local(self, u: UOp) -> str:
    glob = f"@shared{len(self.shared)}"
    self.shared.append(f"{glob} = internal addrspace(3) global [{max(u.dtype.size, 1)} x {mem_type(u.dtype.base)}] "
                       "undef, align 16")
    name = f"%shared{len(self.shared) - 1}"
    self.allocas.append(f"{name} = addrspacecast ptr addrspace(3) {glob} to ptr")
    return name

  def render_barrier(self, u: UOp) -> None:
    self.decls["@llvm.nvvm.barrier0"] = "declare void @llvm.nvvm.barrier0() convergent nounwind"
    self.emit("call void @llvm.nvvm.barrier0()")

  def footer(self) -> list[str]:
    return list(self.shared)   # (the compiler sets the NVPTX triple and data layout)

  def build(self) -> str:
    self.shared: list[str] = []
    return super().build()

class PTXRenderer(CUDATarget, LLVMIRRenderer):
  """LLVM IR for NVPTX (the text the PTX compiler turns into PTX); arguments as CUDATarget's."""
  suffix = "ptx"
  calling_convention = "ptx_kernel"
  native_ops = frozenset(GroupOp.ALU - {Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW})
  builder = NVPTXBuilder

  def __init__(self, arch: str | None = None, **limits: Any):
    super().__init__(arch, **limits)
    # vector loads and stores of up to 16 bytes (LLVM splits the ones it cannot prove aligned); no bool vectors
    self.vector_widths = {dt: tuple(w for w in (4, 2) if w * dt.itemsize <= 16)
                          for dt in (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
                                     dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64)}

  def __repr__(self) -> str: return f"PTXRenderer(arch={self.arch!r})"

# ---------------- compiling ----------------

def ptx_features(arch: str) -> str:
  """The PTX ISA version to write for `sm_XY`: 8.0 covers sm_75..sm_90; newer GPUs need 8.7."""
  return "+ptx80" if int(re.sub(r"\D", "", arch)[:3] or 0) <= 90 else "+ptx87"

_llvm_lock = threading.Lock()

@functools.cache
def _target_machine(arch: str):
  import llvmlite.binding as llvm
  llvm.initialize_all_targets()
  llvm.initialize_all_asmprinters()
  target = llvm.Target.from_triple("nvptx64-nvidia-cuda")
  return target.create_target_machine(cpu=arch, features=ptx_features(arch), opt=3)

def llvm_to_ptx(src: str, arch: str) -> str:
  """NVPTX LLVM IR -> PTX text, optimised at O3 (a freshly parsed module each time)."""
  import llvmlite.binding as llvm
  with _llvm_lock:
    tm = _target_machine(arch)
    mod = llvm.parse_assembly(src)
    mod.verify()
    mod.triple = "nvptx64-nvidia-cuda"
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return tm.emit_assembly(mod)

class NVJitLinkError(RuntimeError):
  """nvJitLink rejected the PTX (the message has its log)."""

@functools.cache
def nvjitlink() -> ctypes.CDLL | None:
  from tinyplug_cuda.nvrtc import _find, _toolkit_dirs, _wheel_dirs
  path = _find("libnvJitLink.so*", _wheel_dirs("lib")) or _find("libnvJitLink.so*", _toolkit_dirs("lib"))
  if path is None: return None
  L = ctypes.CDLL(path)
  c_p, c_size = ctypes.c_void_p, ctypes.c_size_t
  L.nvJitLinkCreate.argtypes = [ctypes.POINTER(c_p), ctypes.c_uint32, ctypes.POINTER(ctypes.c_char_p)]
  L.nvJitLinkAddData.argtypes = [c_p, ctypes.c_int, ctypes.c_char_p, c_size, ctypes.c_char_p]
  L.nvJitLinkComplete.argtypes = [c_p]
  L.nvJitLinkDestroy.argtypes = [ctypes.POINTER(c_p)]
  for name in ("nvJitLinkGetLinkedCubinSize", "nvJitLinkGetErrorLogSize"): getattr(L, name).argtypes = [c_p, ctypes.POINTER(c_size)]
  for name in ("nvJitLinkGetLinkedCubin", "nvJitLinkGetErrorLog"): getattr(L, name).argtypes = [c_p, ctypes.c_char_p]
  return L

NVJITLINK_INPUT_PTX = 2

def ptx_to_cubin(ptx: str, arch: str) -> bytes:
  """PTX -> a cubin for `arch` through nvJitLink; raises NVJitLinkError with its log."""
  L = nvjitlink()
  if L is None: raise NVJitLinkError("nvJitLink not found: pip install nvidia-nvjitlink")
  handle = ctypes.c_void_p()
  opts = (ctypes.c_char_p * 1)(f"-arch={arch}".encode())
  code = L.nvJitLinkCreate(ctypes.byref(handle), 1, opts)
  if code != 0: raise NVJitLinkError(f"nvJitLinkCreate failed ({code}) for -arch={arch}")
  try:
    data = ptx.encode()
    code = L.nvJitLinkAddData(handle, NVJITLINK_INPUT_PTX, data, len(data), b"kernel.ptx")
    if code == 0: code = L.nvJitLinkComplete(handle)
    if code != 0:
      size = ctypes.c_size_t()
      L.nvJitLinkGetErrorLogSize(handle, ctypes.byref(size))
      log = ctypes.create_string_buffer(size.value + 1)
      L.nvJitLinkGetErrorLog(handle, log)
      raise NVJitLinkError(f"nvJitLink could not link the PTX for {arch} (error {code}):\n"
                           f"{log.value.decode(errors='replace').strip()}\n--- PTX ---\n{ptx}")
    size = ctypes.c_size_t()
    L.nvJitLinkGetLinkedCubinSize(handle, ctypes.byref(size))
    out = ctypes.create_string_buffer(size.value)
    L.nvJitLinkGetLinkedCubin(handle, out)
    return out.raw
  finally: L.nvJitLinkDestroy(ctypes.byref(handle))

class PTXCompiler(Compiler):
  """NVPTX LLVM IR -> PTX (llvmlite) -> cubin (nvJitLink), or the PTX itself (NUL-terminated) for the driver to JIT
  where nvJitLink is missing. Cached like CUDACompiler, keyed by LLVM's version, the architecture and the source."""
  def __init__(self, arch: str):
    try: import llvmlite.binding as llvm
    except ImportError as e: raise RuntimeError("the PTX renderer needs llvmlite: pip install 'tinyplug-cuda[ptx]'") from e
    self.arch = arch
    self.link = nvjitlink() is not None
    self.cachekey = f"cuda-ptx-llvm{'.'.join(map(str, llvm.llvm_version_info))}-{arch}-{'cubin' if self.link else 'ptx'}"
    self._memory: dict[str, bytes] = {}
    self._lock = threading.Lock()

  def __reduce__(self):   # rebuilt from its architecture in BEAM's compile workers
    return type(self), (self.arch,)

  def key(self, src: str) -> str: return hashlib.sha256(f"{self.cachekey}\0{src}".encode()).hexdigest()

  def compile(self, src: str) -> bytes:
    ptx = llvm_to_ptx(src, self.arch)
    return ptx_to_cubin(ptx, self.arch) if self.link else ptx.encode() + b"\0"

  def compile_cached(self, src: str) -> bytes:
    with self._lock:
      if (hit := self._memory.get(src)) is not None: return hit
      key = self.key(src)
      path = cache_path("cuda", key + ".ptxbin") if CACHELEVEL >= 1 else None
      binary = read_sealed(path, key, "cuda") if path is not None else None
      if binary is None:
        binary = self.compile(src)
        if path is not None: write_sealed(path, key, binary)
      self._memory[src] = binary
      return binary
