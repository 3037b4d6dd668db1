"""The CUDA driver API (libcuda.so.1) through ctypes: the few functions the runtime calls, with their signatures,
and `check`, which turns a CUresult into an error naming the call and the driver's own name for the code.

Unverified on hardware in this repository's CI (no GPU there); the names, signatures and constants are those of
cuda.h (CUDA 12/13 driver API, `_v2` entry points where the ABI has them)."""
from __future__ import annotations
import ctypes, functools

c_int, c_uint, c_size_t, c_void_p, c_u64 = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_uint64
P = ctypes.POINTER

# CUdevice_attribute values used here (cuda.h)
ATTR_MAX_THREADS_PER_BLOCK = 1
ATTR_MAX_BLOCK_DIM = (2, 3, 4)
ATTR_MAX_GRID_DIM = (5, 6, 7)
ATTR_MAX_SHARED_PER_BLOCK = 8
ATTR_MAX_SHARED_PER_BLOCK_OPTIN = 97   # what a kernel may ask for with FUNC_ATTR_MAX_DYNAMIC_SHARED
FUNC_ATTR_MAX_DYNAMIC_SHARED = 8       # CUfunction_attribute CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_CC_MAJOR, ATTR_CC_MINOR = 75, 76
MEMHOSTALLOC_PORTABLE = 0x01
EVENT_DEFAULT = 0x0

# name -> (restype, argtypes); every function returns a CUresult (int) unless said otherwise
_SIGNATURES = {
  "cuInit": [c_uint],
  "cuDriverGetVersion": [P(c_int)],
  "cuDeviceGetCount": [P(c_int)],
  "cuDeviceGet": [P(c_int), c_int],
  "cuDeviceGetName": [ctypes.c_char_p, c_int, c_int],
  "cuDeviceGetAttribute": [P(c_int), c_int, c_int],
  "cuDeviceTotalMem_v2": [P(c_size_t), c_int],
  "cuDevicePrimaryCtxRetain": [P(c_void_p), c_int],
  "cuDevicePrimaryCtxRelease_v2": [c_int],
  "cuCtxSetCurrent": [c_void_p],
  "cuCtxSynchronize": [],
  "cuStreamCreate": [P(c_void_p), c_uint],
  "cuStreamSynchronize": [c_void_p],
  "cuMemAlloc_v2": [P(c_u64), c_size_t],
  "cuMemFree_v2": [c_u64],
  "cuMemHostAlloc": [P(c_void_p), c_size_t, c_uint],
  "cuMemFreeHost": [c_void_p],
  "cuMemcpyHtoDAsync_v2": [c_u64, c_void_p, c_size_t, c_void_p],
  "cuMemcpyDtoHAsync_v2": [c_void_p, c_u64, c_size_t, c_void_p],
  "cuMemcpyDtoDAsync_v2": [c_u64, c_u64, c_size_t, c_void_p],
  "cuModuleLoadData": [P(c_void_p), c_void_p],
  "cuModuleUnload": [c_void_p],
  "cuModuleGetFunction": [P(c_void_p), c_void_p, ctypes.c_char_p],
  "cuFuncSetAttribute": [c_void_p, c_int, c_int],
  "cuLaunchKernel": [c_void_p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_void_p, P(c_void_p), P(c_void_p)],
  "cuEventCreate": [P(c_void_p), c_uint],
  "cuEventRecord": [c_void_p, c_void_p],
  "cuEventSynchronize": [c_void_p],
  "cuEventElapsedTime": [P(ctypes.c_float), c_void_p, c_void_p],
  "cuEventDestroy_v2": [c_void_p],
  "cuGetErrorName": [c_int, P(ctypes.c_char_p)],
  "cuGetErrorString": [c_int, P(ctypes.c_char_p)],
}

# ---- CUDA graphs (TinyJit's replay, graph.py): looked up on first use, so a driver without them still loads ----

class KernelNodeParamsV1(ctypes.Structure):
  """CUDA_KERNEL_NODE_PARAMS_v1 (cuda.h): what the unversioned cuGraphAddKernelNode / cuGraphExecKernelNodeSetParams
  entry points take (CUDA 10-11 ABI)."""
  _fields_ = [("func", c_void_p), ("gridDimX", c_uint), ("gridDimY", c_uint), ("gridDimZ", c_uint),
              ("blockDimX", c_uint), ("blockDimY", c_uint), ("blockDimZ", c_uint), ("sharedMemBytes", c_uint),
              ("kernelParams", c_void_p), ("extra", c_void_p)]

class KernelNodeParamsV2(ctypes.Structure):
  """CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h, CUDA 12+; what `CUDA_KERNEL_NODE_PARAMS` means there): v1 plus `kern` (a
  CUkernel, used only when func is NULL) and `ctx` (NULL: the current context; ignored when func is set)."""
  _fields_ = KernelNodeParamsV1._fields_ + [("kern", c_void_p), ("ctx", c_void_p)]

class GraphAPI:
  """The graph entry points of this driver: the `_v2` kernel-node calls with the v2 struct where the driver has them
  (CUDA 12+), else the unversioned ones with the v1 struct."""
  def __init__(self, L: ctypes.CDLL):
    v2 = all(hasattr(L, f"{n}_v2") for n in ("cuGraphAddKernelNode", "cuGraphExecKernelNodeSetParams"))
    self.params = KernelNodeParamsV2 if v2 else KernelNodeParamsV1
    sfx = "_v2" if v2 else ""
    def fn(name: str, argtypes: list):
      f = getattr(L, name)   # AttributeError: a driver older than the call (the JIT then replays kernel by kernel)
      f.restype, f.argtypes = c_int, argtypes
      return f
    self.create = fn("cuGraphCreate", [P(c_void_p), c_uint])
    self.add_kernel_node = fn(f"cuGraphAddKernelNode{sfx}", [P(c_void_p), c_void_p, P(c_void_p), c_size_t, P(self.params)])
    self.instantiate = fn("cuGraphInstantiateWithFlags", [P(c_void_p), c_void_p, ctypes.c_ulonglong])
    self.exec_set_params = fn(f"cuGraphExecKernelNodeSetParams{sfx}", [c_void_p, c_void_p, P(self.params)])
    self.launch = fn("cuGraphLaunch", [c_void_p, c_void_p])
    self.exec_destroy = fn("cuGraphExecDestroy", [c_void_p])
    self.destroy = fn("cuGraphDestroy", [c_void_p])
    self.names = {"add": f"cuGraphAddKernelNode{sfx}", "set": f"cuGraphExecKernelNodeSetParams{sfx}"}

@functools.cache
def graph_api() -> GraphAPI:
  return GraphAPI(lib())

class CUDAError(RuntimeError):
  """A driver call failed: the message names the call, the CUresult's name and the driver's description."""
  def __init__(self, call: str, code: int, detail: str = ""):
    self.call, self.code = call, code
    super().__init__(f"{call} failed: {error_name(code)}" + (f" ({detail})" if detail else ""))

@functools.cache
def lib() -> ctypes.CDLL:
  """libcuda.so.1 with the signatures above (OSError when the driver is not installed)."""
  L = ctypes.CDLL("libcuda.so.1")
  for name, args in _SIGNATURES.items():
    fn = getattr(L, name)
    fn.restype, fn.argtypes = c_int, args
  return L

def error_name(code: int) -> str:
  name, text = ctypes.c_char_p(), ctypes.c_char_p()
  try:
    lib().cuGetErrorName(code, ctypes.byref(name))
    lib().cuGetErrorString(code, ctypes.byref(text))
  except Exception: pass
  n = name.value.decode() if name.value else f"CUresult {code}"
  return f"{n}: {text.value.decode()}" if text.value else n

def check(call: str, code: int, detail: str = "") -> None:
  if code != 0: raise CUDAError(call, code, detail)

INSTALL_HINT = ("install the NVIDIA driver for your GPU (it provides libcuda.so.1); without a GPU, DEV=MOCK+CUDA runs "
                "the CUDA renderer's kernels on the CPU emulator")

def probe_driver() -> tuple[bool, str]:
  """(available, reason): the driver loads, cuInit succeeds and at least one GPU is present."""
  try: L = lib()
  except OSError as e: return False, f"the NVIDIA driver library libcuda.so.1 is not installed ({e}); {INSTALL_HINT}"
  code = L.cuInit(0)
  if code != 0: return False, f"cuInit failed: {error_name(code)}; {INSTALL_HINT}"
  n = c_int(0)
  code = L.cuDeviceGetCount(ctypes.byref(n))
  if code != 0: return False, f"cuDeviceGetCount failed: {error_name(code)}"
  if n.value == 0: return False, f"the NVIDIA driver sees no GPU; {INSTALL_HINT}"
  return True, ""
