"""HIP C -> a code object for one target: through ROCm's hiprtc (`libhiprtc.so`, ctypes) where ROCm is installed,
else through a plain clang >= 19 (`-x hip --cuda-device-only -nogpuinc -nogpulib`, Debian's clang-19 has the AMDGPU
target) with the plugin's device-side stand-in `hip/hip_runtime.h`; clang links the code object itself with its
ld.lld. Either way the result is what hipModuleLoadData loads; cached like the LLVM IR path."""
from __future__ import annotations
import ctypes, functools, hashlib, os, re, shutil, subprocess, tempfile
from tinyplug.helpers import env_str
from tinyplug_amd.compiler import AMDCompileError, CachedCodeObjects, MIN_LLD
from tinyplug_amd.renderer import CODE_OBJECT_VERSION
from tinyplug_amd.targets import arch_info

INCLUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")
CLANG_PACKAGE = "clang-19"

@functools.cache
def hiprtc() -> ctypes.CDLL | None:
  """ROCm's libhiprtc.so with the signatures used, or None without ROCm."""
  roots = [r for r in (env_str("ROCM_PATH"), "/opt/rocm") if r]
  for path in [os.path.join(r, "lib", "libhiprtc.so") for r in roots] + ["libhiprtc.so"]:
    if os.path.sep in path and not os.path.exists(path): continue
    try: L = ctypes.CDLL(path)
    except OSError: continue
    p, c_size, P = ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER
    L.hiprtcCreateProgram.argtypes = [P(p), ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, p, p]
    L.hiprtcCompileProgram.argtypes = [p, ctypes.c_int, P(ctypes.c_char_p)]
    L.hiprtcDestroyProgram.argtypes = [P(p)]
    for name in ("hiprtcGetProgramLogSize", "hiprtcGetCodeSize"): getattr(L, name).argtypes = [p, P(c_size)]
    for name in ("hiprtcGetProgramLog", "hiprtcGetCode"): getattr(L, name).argtypes = [p, ctypes.c_char_p]
    return L
  return None

def compile_hiprtc(src: str, arch: str) -> bytes:
  L = hiprtc()
  assert L is not None
  prog = ctypes.c_void_p()
  if (code := L.hiprtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.hip", 0, None, None)) != 0:
    raise AMDCompileError(f"hiprtcCreateProgram failed ({code})")
  try:
    opts = [f"--offload-arch={arch}".encode(), b"-O3", f"-mcode-object-version={CODE_OBJECT_VERSION // 100}".encode()]
    code = L.hiprtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    if code != 0:
      size = ctypes.c_size_t()
      L.hiprtcGetProgramLogSize(prog, ctypes.byref(size))
      log = ctypes.create_string_buffer(size.value + 1)
      L.hiprtcGetProgramLog(prog, log)
      raise AMDCompileError(f"hiprtc could not compile the kernel for {arch} (error {code}):\n"
                            f"{log.value.decode(errors='replace').strip()}\n--- source ---\n{src}")
    size = ctypes.c_size_t()
    L.hiprtcGetCodeSize(prog, ctypes.byref(size))
    out = ctypes.create_string_buffer(size.value)
    L.hiprtcGetCode(prog, out)
    return out.raw
  finally: L.hiprtcDestroyProgram(ctypes.byref(prog))

def _clang_major(path: str) -> int | None:
  try: out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
  except (OSError, subprocess.SubprocessError): return None
  m = re.search(r"clang version (\d+)\.", out)
  return int(m.group(1)) if m else None

@functools.cache
def find_clang() -> str:
  """The newest `clang-NN` (NN >= 19), or a `clang` >= 19, on PATH; else an error naming the package."""
  for major in range(40, MIN_LLD - 1, -1):
    if (found := shutil.which(f"clang-{major}")): return found
  if (found := shutil.which("clang")) and (_clang_major(found) or 0) >= MIN_LLD: return found
  raise AMDCompileError(f"no compiler for HIP C without ROCm: the HIP renderer needs ROCm's hiprtc or clang "
                        f"{MIN_LLD} or newer; install the Debian/Ubuntu package {CLANG_PACKAGE} (and lld-19, which "
                        "clang links code objects with) or ROCm")

def clang_flags(arch: str) -> list[str]:
  return ["-x", "hip", f"--offload-arch={arch}", "--cuda-device-only", "--no-gpu-bundle-output", "-nogpuinc",
          "-nogpulib", "-O3", f"-mcode-object-version={CODE_OBJECT_VERSION // 100}", "-I", INCLUDE, "-w"]

def compile_clang(src: str, arch: str) -> bytes:
  clang = find_clang()
  with tempfile.TemporaryDirectory(prefix="tinyplug-hip-") as d:
    path, out = os.path.join(d, "kernel.hip"), os.path.join(d, "kernel.hsaco")
    with open(path, "w") as f: f.write(src)
    res = subprocess.run([clang, *clang_flags(arch), "-c", path, "-o", out], capture_output=True, text=True, timeout=300)
    if res.returncode != 0:
      raise AMDCompileError(f"{os.path.basename(clang)} could not compile the HIP kernel for {arch}:\n"
                            f"{(res.stderr or res.stdout).strip()}\n--- source ---\n{src}")
    with open(out, "rb") as f: return f.read()

class HIPCompiler(CachedCodeObjects):
  """HIP C -> a code object for one target: hiprtc where ROCm is installed, else clang >= 19."""
  def __init__(self, arch: str | None = None):
    super().__init__()
    self.arch = arch_info(arch).name
    if (L := hiprtc()) is not None:
      major, minor = ctypes.c_int(), ctypes.c_int()
      L.hiprtcVersion(ctypes.byref(major), ctypes.byref(minor))
      self.tool, self.identity = "hiprtc", f"hiprtc{major.value}.{minor.value}"
    else:
      clang = find_clang()
      with open(os.path.join(INCLUDE, "hip", "hip_runtime.h"), "rb") as f: header = f.read()
      version = subprocess.run([clang, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[0]
      header_digest = hashlib.sha256(header).hexdigest()[:16]
      self.tool, self.identity = "clang", f"{version}-{header_digest}-{' '.join(clang_flags(self.arch))}"
    self.cachekey = f"amd-hip-{self.tool}-{self.arch}"

  def compile(self, src: str) -> bytes:
    return compile_hiprtc(src, self.arch) if self.tool == "hiprtc" else compile_clang(src, self.arch)
