"""NVRTC through ctypes: CUDA C -> a cubin for one `sm_XY`, with no CUDA toolkit installed.

The library comes from NVIDIA's `nvidia-cuda-nvrtc` wheel (`site-packages/nvidia/cu13/lib`, or `nvidia/cuda_nvrtc/lib`
for CUDA 12 wheels), else from `$CUDA_PATH`, `/usr/local/cuda`, `/opt/cuda`; `cuda_fp16.h` / `cuda_bf16.h` from the
`nvidia-cuda-runtime` wheel's include folder (NVRTC 13 has no built-in copies) or the toolkit's.

Asking for a cubin for the GPU's own architecture (not PTX for the driver to JIT) means a kernel never fails on a
driver older than NVRTC ("the provided PTX was compiled with an unsupported toolchain")."""
from __future__ import annotations
import ctypes, functools, glob, hashlib, os, re
from tinyplug.helpers import env_str

class NVRTCError(RuntimeError):
  """NVRTC is missing, or a kernel did not compile (the message has NVRTC's log and the offending source lines)."""

def _wheel_dirs(sub: str) -> list[str]:
  """Folders `nvidia/<cuXX or package>/<sub>` of NVIDIA's wheels on sys.path, newest CUDA first."""
  try:
    import nvidia   # a namespace package the nvidia-* wheels share
    roots = list(nvidia.__path__)
  except ImportError: return []
  found = [d for r in roots for d in glob.glob(os.path.join(r, "*", sub)) if os.path.isdir(d)]
  return sorted(found, key=lambda d: (wheel_major(d), d), reverse=True)

def wheel_major(path: str) -> int:
  """The CUDA major version of a wheel folder: `nvidia/cu13/...` is 13; CUDA 12 wheels use `nvidia/<package>/...`."""
  m = re.search(r"[/\\]cu(\d+)[/\\]", path)
  return int(m.group(1)) if m else 12

def _toolkit_dirs(sub: str) -> list[str]:
  roots = [r for r in (env_str("CUDA_PATH"), "/usr/local/cuda", "/opt/cuda") if r]
  return [os.path.join(r, s) for r in roots for s in ((sub, "lib64") if sub == "lib" else (sub,))
          if os.path.isdir(os.path.join(r, s))]

def _find(pattern: str, dirs: list[str]) -> str | None:
  for d in dirs:
    hits = sorted(glob.glob(os.path.join(d, pattern)), reverse=True)
    if hits: return hits[0]
  return None

@functools.cache
def library_path() -> str:
  path = _find("libnvrtc.so*", _wheel_dirs("lib")) or _find("libnvrtc.so*", _toolkit_dirs("lib"))
  if path is None:
    raise NVRTCError("NVRTC not found: pip install nvidia-cuda-nvrtc (a dependency of tinyplug-cuda), or set CUDA_PATH "
                     "to a CUDA toolkit")
  return path

@functools.cache
def include_dirs() -> tuple[str, ...]:
  """Folders holding cuda_fp16.h (the nvidia-cuda-runtime wheel's, else the toolkit's); empty if none."""
  dirs = [d for d in _wheel_dirs("include") + _toolkit_dirs("include") if os.path.exists(os.path.join(d, "cuda_fp16.h"))]
  # headers of NVRTC's own CUDA major first: a CUDA 12 and a CUDA 13 wheel side by side must not be mixed
  lib_major = wheel_major(library_path()) if "nvidia" in library_path() else None
  dirs.sort(key=lambda d: wheel_major(d) != lib_major)
  return tuple(dirs[:1])

@functools.cache
def lib() -> ctypes.CDLL:
  L = ctypes.CDLL(library_path())
  c_p, c_int, c_size = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
  L.nvrtcGetErrorString.restype = ctypes.c_char_p
  L.nvrtcCreateProgram.argtypes = [ctypes.POINTER(c_p), ctypes.c_char_p, ctypes.c_char_p, c_int, c_p, c_p]
  L.nvrtcCompileProgram.argtypes = [c_p, c_int, ctypes.POINTER(ctypes.c_char_p)]
  L.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(c_p)]
  for name in ("nvrtcGetProgramLogSize", "nvrtcGetCUBINSize", "nvrtcGetPTXSize"):
    getattr(L, name).argtypes = [c_p, ctypes.POINTER(c_size)]
  for name in ("nvrtcGetProgramLog", "nvrtcGetCUBIN", "nvrtcGetPTX"): getattr(L, name).argtypes = [c_p, ctypes.c_char_p]
  return L

@functools.cache
def version() -> tuple[int, int]:
  major, minor = ctypes.c_int(), ctypes.c_int()
  lib().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
  return major.value, minor.value

@functools.cache
def supported_archs() -> tuple[int, ...]:
  """The `sm_XY` numbers (75, 80, ...) this NVRTC compiles for."""
  n = ctypes.c_int()
  if lib().nvrtcGetNumSupportedArchs(ctypes.byref(n)) != 0: return ()
  arr = (ctypes.c_int * n.value)()
  lib().nvrtcGetSupportedArchs(arr)
  return tuple(arr)

def check_arch(arch: str) -> str:
  """`arch` ("sm_90", "90", "sm_90a") as NVRTC spells it, or an error naming the ones it supports."""
  m = re.fullmatch(r"(?:sm_|compute_)?(\d+)([af]?)", arch.strip().lower())
  if m is None: raise NVRTCError(f"{arch!r} is not a GPU architecture: write it as sm_XY (sm_75, sm_80, sm_90, ...)")
  if (archs := supported_archs()) and int(m.group(1)) not in archs:
    raise NVRTCError(f"NVRTC {'.'.join(map(str, version()))} cannot compile for sm_{m.group(1)}; it supports "
                     f"{', '.join(f'sm_{a}' for a in archs)}")
  return f"sm_{m.group(1)}{m.group(2)}"

def options(arch: str) -> list[str]:
  return [f"--gpu-architecture={arch}", "--std=c++17", *(f"-I{d}" for d in include_dirs())]

_LOCATION = re.compile(r"^\S*?\((\d+)\): (error|warning)", re.M)

def explain(log: str, src: str, context: int = 1) -> str:
  """NVRTC's log followed by the source lines it names (with their neighbours), numbered."""
  lines = src.splitlines()
  wanted = sorted({n for m in _LOCATION.finditer(log) if m.group(2) == "error"
                   for n in range(int(m.group(1)) - context, int(m.group(1)) + context + 1) if 1 <= n <= len(lines)})
  errors = {int(m.group(1)) for m in _LOCATION.finditer(log) if m.group(2) == "error"}
  shown = [f"{'>' if n in errors else ' '}{n:5d} | {lines[n - 1]}" for n in wanted]
  return log.strip() + ("\n--- offending source lines ---\n" + "\n".join(shown) if shown else f"\n--- source ---\n{src}")

def _log(prog: ctypes.c_void_p) -> str:
  size = ctypes.c_size_t()
  lib().nvrtcGetProgramLogSize(prog, ctypes.byref(size))
  buf = ctypes.create_string_buffer(size.value + 1)
  lib().nvrtcGetProgramLog(prog, buf)
  return buf.value.decode(errors="replace")

def compile_cuda(src: str, arch: str, name: str = "kernel.cu", ptx: bool = False) -> bytes:
  """CUDA C -> a cubin for `arch` (or PTX text as bytes with `ptx=True`); raises NVRTCError with the log."""
  arch = check_arch(arch)
  L = lib()
  prog = ctypes.c_void_p()
  code = L.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None)
  if code != 0: raise NVRTCError(f"nvrtcCreateProgram: {L.nvrtcGetErrorString(code).decode()}")
  try:
    opts = options(arch if not ptx else arch.replace("sm_", "compute_"))
    raw = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    code = L.nvrtcCompileProgram(prog, len(opts), raw)
    if code != 0:
      raise NVRTCError(f"NVRTC could not compile {name} for {arch} ({L.nvrtcGetErrorString(code).decode()}):\n"
                       + explain(_log(prog), src))
    size = ctypes.c_size_t()
    get_size, get = (L.nvrtcGetPTXSize, L.nvrtcGetPTX) if ptx else (L.nvrtcGetCUBINSize, L.nvrtcGetCUBIN)
    get_size(prog, ctypes.byref(size))
    out = ctypes.create_string_buffer(size.value)
    get(prog, out)
    return out.raw.rstrip(b"\0") if ptx else out.raw
  finally: L.nvrtcDestroyProgram(ctypes.byref(prog))

def identity() -> str:
  """What a compiled kernel depends on besides its source and options: NVRTC's version and the headers it reads."""
  headers = b"".join(_read(os.path.join(d, h)) for d in include_dirs() for h in ("cuda_fp16.h", "cuda_bf16.h"))
  return f"nvrtc-{'.'.join(map(str, version()))}-{hashlib.sha256(headers).hexdigest()[:16]}"

def _read(path: str) -> bytes:
  try:
    with open(path, "rb") as f: return f.read()
  except OSError: return b""

