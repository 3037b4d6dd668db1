"""ROCm's HIP runtime (libamdhip64.so) through ctypes: the functions the AMD device calls, with their signatures,
`check`, which turns a hipError_t into an error naming the call and HIP's own name for the code, and the probe.

Not run on AMD hardware in this repository (no GPU or ROCm there): the names, signatures, constants and the
`hipDeviceProp_tR0600` offsets are those of ROCm 6's hip_runtime_api.h. Tested: the no-ROCm probe, and every call
against a stand-in library (tests/fake_hip), which proves the calls are made as written, not that ROCm accepts them."""
from __future__ import annotations
import ctypes, functools, os, re
from tinyplug.helpers import env_str

c_int, c_uint, c_size_t, c_void_p, c_char_p = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p
P = ctypes.POINTER

MEMCPY_HOST_TO_DEVICE, MEMCPY_DEVICE_TO_HOST, MEMCPY_DEVICE_TO_DEVICE = 1, 2, 3
# hipModuleLaunchKernel's `extra`: the kernel arguments as one packed buffer
LAUNCH_PARAM_BUFFER_POINTER, LAUNCH_PARAM_BUFFER_SIZE, LAUNCH_PARAM_END = 1, 2, 3
# hipDeviceProp_tR0600 (ROCm 6): byte offsets of the fields read; the struct is 1472 bytes, a larger buffer is passed
PROPS_BYTES = 4096
PROP_OFFSETS = {"name": (0, 256), "totalGlobalMem": (288, "Q"), "sharedMemPerBlock": (296, "Q"), "warpSize": (308, "i"),
                "maxThreadsPerBlock": (320, "i"), "maxThreadsDim": (324, "3i"), "maxGridSize": (336, "3i"),
                "multiProcessorCount": (388, "i"), "gcnArchName": (1160, 256)}

# name -> argtypes; every function returns a hipError_t (int) unless listed in _RESTYPES
_SIGNATURES = {
  "hipInit": [c_uint],
  "hipDriverGetVersion": [P(c_int)],
  "hipRuntimeGetVersion": [P(c_int)],
  "hipGetDeviceCount": [P(c_int)],
  "hipSetDevice": [c_int],
  "hipDeviceSynchronize": [],
  "hipMalloc": [P(c_void_p), c_size_t],
  "hipFree": [c_void_p],
  "hipHostMalloc": [P(c_void_p), c_size_t, c_uint],
  "hipHostFree": [c_void_p],
  "hipMemcpyAsync": [c_void_p, c_void_p, c_size_t, c_int, c_void_p],
  "hipStreamCreate": [P(c_void_p)],
  "hipStreamSynchronize": [c_void_p],
  "hipModuleLoadData": [P(c_void_p), c_void_p],
  "hipModuleUnload": [c_void_p],
  "hipModuleGetFunction": [P(c_void_p), c_void_p, c_char_p],
  "hipModuleLaunchKernel": [c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p, P(c_void_p),
                            P(c_void_p)],
  "hipEventCreate": [P(c_void_p)],
  "hipEventRecord": [c_void_p, c_void_p],
  "hipEventSynchronize": [c_void_p],
  "hipEventElapsedTime": [P(ctypes.c_float), c_void_p, c_void_p],
  "hipEventDestroy": [c_void_p],
  "hipGetErrorName": [c_int],
  "hipGetErrorString": [c_int],
}
_RESTYPES = {"hipGetErrorName": c_char_p, "hipGetErrorString": c_char_p}
# what the device assumes where HIP has no hipGetDevicePropertiesR0600 (before ROCm 6, whose struct has another layout)
DEFAULT_PROPS = {"totalGlobalMem": 0, "sharedMemPerBlock": 65536, "warpSize": 0, "maxThreadsPerBlock": 1024,
                 "maxThreadsDim": (1024, 1024, 1024), "maxGridSize": (2**31 - 1, 65535, 65535), "multiProcessorCount": 0,
                 "gcnArchName": ""}

class HIPError(RuntimeError):
  """A HIP call failed: the message names the call, the hipError_t's name and HIP's description."""
  def __init__(self, call: str, code: int, detail: str = ""):
    self.call, self.code = call, code
    super().__init__(f"{call} failed: {error_name(code)}" + (f" ({detail})" if detail else ""))

def library_candidates() -> list[str]:
  roots = [r for r in (env_str("ROCM_PATH"), "/opt/rocm") if r]
  return [os.path.join(r, "lib", "libamdhip64.so") for r in roots] + ["libamdhip64.so", "libamdhip64.so.6"]

@functools.cache
def lib() -> ctypes.CDLL:
  """libamdhip64.so with the signatures above (OSError naming the places tried when ROCm is not installed)."""
  errors = []
  for path in library_candidates():
    if os.path.sep in path and not os.path.exists(path): errors.append(f"{path}: not found"); continue
    try: L = ctypes.CDLL(path)
    except OSError as e: errors.append(str(e)); continue
    for name, args in _SIGNATURES.items():
      fn = getattr(L, name)
      fn.restype, fn.argtypes = _RESTYPES.get(name, c_int), args
    return L
  raise OSError("; ".join(errors))

def error_name(code: int) -> str:
  try:
    name, text = lib().hipGetErrorName(code), lib().hipGetErrorString(code)
  except Exception: name = text = None
  n = name.decode() if name else f"hipError_t {code}"
  return f"{n}: {text.decode()}" if text else n

def check(call: str, code: int, detail: str = "") -> None:
  if code != 0: raise HIPError(call, code, detail)

INSTALL_HINT = ("install ROCm (it provides libamdhip64.so; set ROCM_PATH if it is not in /opt/rocm) and the amdgpu "
                "kernel driver; without an AMD GPU, DEV=MOCK+AMD runs the AMD renderer's kernels on the CPU emulator")

def probe_hip() -> tuple[bool, str]:
  """(available, reason): the HIP runtime loads, hipInit succeeds and at least one GPU is present."""
  try: L = lib()
  except OSError as e: return False, f"ROCm's HIP runtime libamdhip64.so is not installed ({e}); {INSTALL_HINT}"
  code = L.hipInit(0)
  if code != 0: return False, f"hipInit failed: {error_name(code)}; {INSTALL_HINT}"
  n = c_int(0)
  code = L.hipGetDeviceCount(ctypes.byref(n))
  if code != 0: return False, f"hipGetDeviceCount failed: {error_name(code)}; {INSTALL_HINT}"
  if n.value == 0: return False, f"the HIP runtime sees no AMD GPU; {INSTALL_HINT}"
  return True, ""

def device_properties(ordinal: int) -> dict:
  """The fields of hipDeviceProp_t the device needs; `arch` is the processor part of gcnArchName
  (`gfx1100`), None when that field does not hold one. Before ROCm 6: defaults, and no arch (AMD_ARCH names it)."""
  import struct
  L = lib()
  if not hasattr(L, "hipGetDevicePropertiesR0600"): return {**DEFAULT_PROPS, "name": f"AMD GPU {ordinal}", "arch": None}
  buf = ctypes.create_string_buffer(PROPS_BYTES)
  fn = L.hipGetDevicePropertiesR0600
  fn.restype, fn.argtypes = c_int, [c_void_p, c_int]
  check("hipGetDevicePropertiesR0600", fn(buf, ordinal))
  raw = buf.raw
  def field(name: str):
    off, fmt = PROP_OFFSETS[name]
    if isinstance(fmt, int): return raw[off:off + fmt].split(b"\0", 1)[0].decode(errors="replace")
    vals = struct.unpack_from("<" + fmt, raw, off)
    return vals if len(vals) > 1 else vals[0]
  info = {name: field(name) for name in PROP_OFFSETS}
  arch = info["gcnArchName"].split(":")[0]
  info["arch"] = arch if re.fullmatch(r"gfx[0-9a-f]+", arch) else None   # None: not ROCm 6's layout (AMD_ARCH decides)
  return info
