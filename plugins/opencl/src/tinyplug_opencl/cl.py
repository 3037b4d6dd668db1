"""The few OpenCL 1.2 entry points tinyplug needs, bound with ctypes on the system ICD loader (libOpenCL.so.1).

Every call goes through `check`, which turns an error code into a `CLError` naming the function and the code."""
from __future__ import annotations
import ctypes, ctypes.util, functools, os
from typing import Any
from tinyplug.diskcache import cache_path, note_write

c_size_t, c_uint, c_int, c_ulong, c_void_p = ctypes.c_size_t, ctypes.c_uint32, ctypes.c_int32, ctypes.c_uint64, ctypes.c_void_p

# ---- constants (from the OpenCL headers' numeric values) ----
CL_SUCCESS = 0
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_PLATFORM_VERSION, CL_PLATFORM_NAME = 0x0901, 0x0902
CL_DEVICE_TYPE, CL_DEVICE_MAX_COMPUTE_UNITS, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS = 0x1000, 0x1002, 0x1003
CL_DEVICE_MAX_WORK_GROUP_SIZE, CL_DEVICE_MAX_WORK_ITEM_SIZES = 0x1004, 0x1005
CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT = 0x100A
CL_DEVICE_MAX_MEM_ALLOC_SIZE, CL_DEVICE_GLOBAL_MEM_SIZE = 0x1010, 0x101F
CL_DEVICE_LOCAL_MEM_TYPE, CL_DEVICE_LOCAL_MEM_SIZE = 0x1022, 0x1023
CL_DEVICE_NAME, CL_DEVICE_VENDOR, CL_DRIVER_VERSION, CL_DEVICE_VERSION, CL_DEVICE_EXTENSIONS = 0x102B, 0x102C, 0x102D, 0x102F, 0x1030
CL_DEVICE_TYPE_CPU, CL_DEVICE_TYPE_GPU = 1 << 1, 1 << 2
CL_QUEUE_PROFILING_ENABLE = 1 << 1
CL_MEM_READ_WRITE = 1 << 0
CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARIES = 0x1165, 0x1166
CL_PROGRAM_BUILD_LOG = 0x1183
CL_PROFILING_COMMAND_START, CL_PROFILING_COMMAND_END = 0x1282, 0x1283

ERROR_NAMES = {
  -1: "DEVICE_NOT_FOUND", -2: "DEVICE_NOT_AVAILABLE", -3: "COMPILER_NOT_AVAILABLE", -4: "MEM_OBJECT_ALLOCATION_FAILURE",
  -5: "OUT_OF_RESOURCES", -6: "OUT_OF_HOST_MEMORY", -7: "PROFILING_INFO_NOT_AVAILABLE", -11: "BUILD_PROGRAM_FAILURE",
  -30: "INVALID_VALUE", -32: "INVALID_PLATFORM", -33: "INVALID_DEVICE", -34: "INVALID_CONTEXT",
  -36: "INVALID_COMMAND_QUEUE", -38: "INVALID_MEM_OBJECT", -42: "INVALID_BINARY", -43: "INVALID_BUILD_OPTIONS",
  -44: "INVALID_PROGRAM", -45: "INVALID_PROGRAM_EXECUTABLE", -46: "INVALID_KERNEL_NAME", -48: "INVALID_KERNEL",
  -49: "INVALID_ARG_INDEX", -50: "INVALID_ARG_VALUE", -51: "INVALID_ARG_SIZE", -52: "INVALID_KERNEL_ARGS",
  -53: "INVALID_WORK_DIMENSION", -54: "INVALID_WORK_GROUP_SIZE", -55: "INVALID_WORK_ITEM_SIZE",
  -56: "INVALID_GLOBAL_OFFSET", -58: "INVALID_EVENT", -59: "INVALID_OPERATION", -61: "INVALID_BUFFER_SIZE",
  -63: "INVALID_GLOBAL_WORK_SIZE", -1001: "PLATFORM_NOT_FOUND_KHR",
}

class CLError(RuntimeError):
  def __init__(self, func: str, code: int, detail: str = ""):
    self.func, self.code = func, code
    super().__init__(f"{func} failed with CL_{ERROR_NAMES.get(code, 'UNKNOWN_ERROR')} ({code})" + (f"\n{detail}" if detail else ""))

def check(func: str, code: int, detail: str = "") -> None:
  if code != CL_SUCCESS: raise CLError(func, code, detail)

# ---- loading the library ----

def find_library() -> str | None:
  """The ICD loader's file name, or None. `ctypes.util.find_library` misses a bare libOpenCL.so.1, so try it too."""
  name = ctypes.util.find_library("OpenCL")
  if name: return name
  for candidate in ("libOpenCL.so.1", "libOpenCL.so", "/System/Library/Frameworks/OpenCL.framework/OpenCL"):
    try:
      ctypes.CDLL(candidate)
      return candidate
    except OSError: continue
  return None

# (name, restype, argtypes); pointers to handles are passed as c_void_p arrays
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
  "clGetPlatformIDs": (c_int, [c_uint, c_void_p, ctypes.POINTER(c_uint)]),
  "clGetPlatformInfo": (c_int, [c_void_p, c_uint, c_size_t, c_void_p, ctypes.POINTER(c_size_t)]),
  "clGetDeviceIDs": (c_int, [c_void_p, c_ulong, c_uint, c_void_p, ctypes.POINTER(c_uint)]),
  "clGetDeviceInfo": (c_int, [c_void_p, c_uint, c_size_t, c_void_p, ctypes.POINTER(c_size_t)]),
  "clCreateContext": (c_void_p, [c_void_p, c_uint, c_void_p, c_void_p, c_void_p, ctypes.POINTER(c_int)]),
  "clCreateCommandQueue": (c_void_p, [c_void_p, c_void_p, c_ulong, ctypes.POINTER(c_int)]),
  "clReleaseCommandQueue": (c_int, [c_void_p]),
  "clReleaseContext": (c_int, [c_void_p]),
  "clCreateBuffer": (c_void_p, [c_void_p, c_ulong, c_size_t, c_void_p, ctypes.POINTER(c_int)]),
  "clReleaseMemObject": (c_int, [c_void_p]),
  "clEnqueueWriteBuffer": (c_int, [c_void_p, c_void_p, c_uint, c_size_t, c_size_t, c_void_p, c_uint, c_void_p, c_void_p]),
  "clEnqueueReadBuffer": (c_int, [c_void_p, c_void_p, c_uint, c_size_t, c_size_t, c_void_p, c_uint, c_void_p, c_void_p]),
  "clEnqueueCopyBuffer": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_size_t, c_size_t, c_uint, c_void_p, c_void_p]),
  "clCreateProgramWithSource": (c_void_p, [c_void_p, c_uint, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(c_size_t),
                                           ctypes.POINTER(c_int)]),
  "clCreateProgramWithBinary": (c_void_p, [c_void_p, c_uint, c_void_p, ctypes.POINTER(c_size_t), ctypes.POINTER(c_void_p),
                                           ctypes.POINTER(c_int), ctypes.POINTER(c_int)]),
  "clBuildProgram": (c_int, [c_void_p, c_uint, c_void_p, ctypes.c_char_p, c_void_p, c_void_p]),
  "clGetProgramBuildInfo": (c_int, [c_void_p, c_void_p, c_uint, c_size_t, c_void_p, ctypes.POINTER(c_size_t)]),
  "clGetProgramInfo": (c_int, [c_void_p, c_uint, c_size_t, c_void_p, ctypes.POINTER(c_size_t)]),
  "clReleaseProgram": (c_int, [c_void_p]),
  "clCreateKernel": (c_void_p, [c_void_p, ctypes.c_char_p, ctypes.POINTER(c_int)]),
  "clReleaseKernel": (c_int, [c_void_p]),
  "clSetKernelArg": (c_int, [c_void_p, c_uint, c_size_t, c_void_p]),
  "clEnqueueNDRangeKernel": (c_int, [c_void_p, c_void_p, c_uint, c_void_p, ctypes.POINTER(c_size_t),
                                     ctypes.POINTER(c_size_t), c_uint, c_void_p, ctypes.POINTER(c_void_p)]),
  "clWaitForEvents": (c_int, [c_uint, ctypes.POINTER(c_void_p)]),
  "clGetEventProfilingInfo": (c_int, [c_void_p, c_uint, c_size_t, c_void_p, ctypes.POINTER(c_size_t)]),
  "clReleaseEvent": (c_int, [c_void_p]),
  "clFinish": (c_int, [c_void_p]),
  "clFlush": (c_int, [c_void_p]),
}

class _Lib:
  """The loaded library with typed functions as attributes."""
  def __init__(self, path: str):
    self.path = path
    self.dll = ctypes.CDLL(path)
    for name, (restype, argtypes) in _SIGNATURES.items():
      fn = getattr(self.dll, name)
      fn.restype, fn.argtypes = restype, argtypes
      setattr(self, name, fn)

POCL_SLOTS = 64
_slot_lock: Any = None   # the open lock file of this process's PoCL cache slot, held for the life of the process

def claim_pocl_cache() -> str | None:
  """Give PoCL a kernel cache of this process's own, unless the user chose one (POCL_CACHE_DIR).

  PoCL keeps one cache directory for every process, and two processes building the same program at once crash
  inside it (one reads the program's files while the other rewrites them; `pytest -n 2` did). So each process
  takes the first free slot under tinyplug's cache directory, a folder it holds an exclusive lock on while it
  lives; later processes reuse the slots, so PoCL's cache stays warm. Returns the folder, or None."""
  global _slot_lock
  if "POCL_CACHE_DIR" in os.environ: return os.environ["POCL_CACHE_DIR"]
  try: import fcntl
  except ImportError: return None
  for slot in range(POCL_SLOTS):
    if (folder := cache_path("pocl", str(slot), "kcache")) is None: return None
    try: f = open(os.path.join(os.path.dirname(folder), "lock"), "a")
    except OSError: return None
    try: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      f.close()
      continue
    _slot_lock, os.environ["POCL_CACHE_DIR"] = f, folder
    note_write(0)   # PoCL writes there unmeasured: this process checks the cache's size limit (when due) now
    return folder
  return None

@functools.cache
def lib() -> _Lib:
  claim_pocl_cache()   # before the driver loads: PoCL reads its cache directory once, at start
  path = find_library()
  if path is None: raise RuntimeError("libOpenCL not found: install an OpenCL ICD loader and a driver "
                                      "(for a CPU device: apt-get install ocl-icd-libopencl1 pocl-opencl-icd)")
  return _Lib(path)

# ---- queries ----

def platforms() -> list[int]:
  n = c_uint(0)
  code = lib().clGetPlatformIDs(0, None, ctypes.byref(n))
  if code == -1001 or n.value == 0: return []
  check("clGetPlatformIDs", code)
  ids = (c_void_p * n.value)()
  check("clGetPlatformIDs", lib().clGetPlatformIDs(n.value, ids, None))
  return [i for i in ids]

def devices(platform: int) -> list[int]:
  n = c_uint(0)
  code = lib().clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(n))
  if code == -1 or n.value == 0: return []
  check("clGetDeviceIDs", code)
  ids = (c_void_p * n.value)()
  check("clGetDeviceIDs", lib().clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, n.value, ids, None))
  return [i for i in ids]

def all_devices() -> list[tuple[int, int]]:
  """(platform, device) pairs in platform order, then device order: what CL_DEVICE indexes."""
  return [(p, d) for p in platforms() for d in devices(p)]

def _info_bytes(getter, what: str, handle: int, param: int, *extra) -> bytes:
  size = c_size_t(0)
  check(what, getter(handle, *extra, param, 0, None, ctypes.byref(size)))
  buf = ctypes.create_string_buffer(size.value)
  check(what, getter(handle, *extra, param, size.value, buf, None))
  return buf.raw

def platform_str(platform: int, param: int) -> str:
  return _info_bytes(lib().clGetPlatformInfo, "clGetPlatformInfo", platform, param).rstrip(b"\0").decode(errors="replace")

def device_str(device: int, param: int) -> str:
  return _info_bytes(lib().clGetDeviceInfo, "clGetDeviceInfo", device, param).rstrip(b"\0").decode(errors="replace")

def device_int(device: int, param: int, ctype=c_ulong) -> int:
  out = ctype(0)
  check("clGetDeviceInfo", lib().clGetDeviceInfo(device, param, ctypes.sizeof(ctype), ctypes.byref(out), None))
  return out.value

def device_sizes(device: int, param: int) -> tuple[int, ...]:
  raw = _info_bytes(lib().clGetDeviceInfo, "clGetDeviceInfo", device, param)
  n = len(raw) // ctypes.sizeof(c_size_t)
  return tuple((c_size_t * n).from_buffer_copy(raw))

def probe_platforms() -> tuple[bool, str]:
  """(available, reason): the library loads and some platform has a device. Loads the library, creates nothing."""
  if find_library() is None:
    return False, "libOpenCL not found (apt-get install ocl-icd-libopencl1 pocl-opencl-icd, or a GPU vendor's driver)"
  try: found = all_devices()
  except Exception as e: return False, f"OpenCL query failed: {e}"
  if not found:
    n = len(platforms())
    return False, ("no OpenCL platform is installed (an ICD loader without drivers; try pocl-opencl-icd)" if n == 0
                   else f"{n} OpenCL platform(s) but no device")
  return True, ""
