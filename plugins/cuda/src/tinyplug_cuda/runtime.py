"""The CUDA device: the GPU's primary context and one stream, device memory from cuMemAlloc, host copies through
pinned staging buffers, kernels loaded from cubins, launches timed with CUDA events when asked to wait.

`DEV=CUDA` (the default renderer, CUDA C), `DEV=CUDA:PTX` (the PTX renderer), `DEV=CUDA:1` / `CUDA_DEVICE=1` (the
second GPU); the parts combine (`CUDA:PTX:1`). Unverified on hardware in this repository's CI (no GPU there)."""
from __future__ import annotations
import ctypes, threading
from typing import Any, Callable
from tinyplug.backend import Allocator, Compiled, ProgramSpec, parse_gpu_name
from tinyplug.helpers import DEBUG, env_str
from tinyplug_cuda import driver
from tinyplug_cuda.driver import check, lib

STAGING_BYTES = 16 << 20   # two pinned buffers of this size carry host <-> device copies

class CUDAAllocator(Allocator):
  """cuMemAlloc'd device memory (never managed memory); copies go through two pinned host buffers in turn, so
  copying one chunk into a staging buffer overlaps the DMA of the previous one. cuMemAlloc maps fresh pages and
  cuMemFree waits for the GPU, so the core keeps freed blocks of every size, up to half the GPU's memory (a failed
  cuMemAlloc gives them back first)."""
  reuse_min = 0
  def __init__(self, dev: CUDADevice):
    self.dev = dev
    self.reuse_max = dev.info["memory"] // 2
    self.staging: list[tuple[ctypes.c_void_p, ctypes.c_void_p]] = []   # (pinned buffer, event marking its last use)
    self._lock = threading.Lock()

  def alloc(self, nbytes: int) -> ctypes.c_uint64:
    self.dev.make_current()
    ptr = ctypes.c_uint64(0)
    check("cuMemAlloc", lib().cuMemAlloc_v2(ctypes.byref(ptr), max(nbytes, 1)), f"{nbytes} bytes")
    return ptr
  def free(self, handle: ctypes.c_uint64, nbytes: int) -> None:
    self.dev.make_current()
    lib().cuMemFree_v2(handle)
  def wrap(self, address: int, nbytes: int) -> ctypes.c_uint64:
    return ctypes.c_uint64(address)   # a device pointer another library allocated (Tensor.from_blob)

  def _staging(self) -> list[tuple[ctypes.c_void_p, ctypes.c_void_p]]:
    if not self.staging:
      for _ in range(2):
        host, event = ctypes.c_void_p(), ctypes.c_void_p()
        check("cuMemHostAlloc", lib().cuMemHostAlloc(ctypes.byref(host), STAGING_BYTES, driver.MEMHOSTALLOC_PORTABLE))
        check("cuEventCreate", lib().cuEventCreate(ctypes.byref(event), driver.EVENT_DEFAULT))
        check("cuEventRecord", lib().cuEventRecord(event, self.dev.stream))
        self.staging.append((host, event))
    return self.staging

  def copyin(self, dest: ctypes.c_uint64, src: memoryview) -> None:
    if not src.nbytes: return
    self.dev.make_current()
    data = (ctypes.c_char * src.nbytes).from_buffer_copy(src) if src.readonly else (ctypes.c_char * src.nbytes).from_buffer(src)
    with self._lock:
      bufs = self._staging()
      for k, off in enumerate(range(0, src.nbytes, STAGING_BYTES)):
        n = min(STAGING_BYTES, src.nbytes - off)
        host, event = bufs[k % 2]
        check("cuEventSynchronize", lib().cuEventSynchronize(event))   # the DMA that last read this buffer is done
        ctypes.memmove(host, ctypes.addressof(data) + off, n)
        check("cuMemcpyHtoDAsync", lib().cuMemcpyHtoDAsync_v2(dest.value + off, host, n, self.dev.stream))
        check("cuEventRecord", lib().cuEventRecord(event, self.dev.stream))

  def copyout(self, dest: memoryview, src: ctypes.c_uint64) -> None:
    if not dest.nbytes: return
    self.dev.make_current()
    out = (ctypes.c_char * dest.nbytes).from_buffer(dest)
    with self._lock:
      host, _ = self._staging()[0]
      for off in range(0, dest.nbytes, STAGING_BYTES):
        n = min(STAGING_BYTES, dest.nbytes - off)
        check("cuMemcpyDtoHAsync", lib().cuMemcpyDtoHAsync_v2(host, src.value + off, n, self.dev.stream))
        check("cuStreamSynchronize", lib().cuStreamSynchronize(self.dev.stream))
        ctypes.memmove(ctypes.addressof(out) + off, host, n)

def launch_dims(global_size, local_size) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
  """(grid, block) as three ints each: global_size counts blocks, local_size is the block."""
  grid = (tuple(int(g) for g in (global_size or ())) + (1, 1, 1))[:3]
  block = (tuple(int(x) for x in local_size) + (1, 1, 1))[:3] if local_size is not None else (1, 1, 1)
  return grid, block  # type: ignore[return-value]

class CUDAProgram:
  """One kernel of a loaded cubin. `prg(*buffers, global_size=, local_size=, vals=, wait=) -> seconds | None`:
  global_size counts blocks (as in the ProgramSpec), local_size is the block."""
  def __init__(self, dev: CUDADevice, name: str, binary: bytes, var_types: tuple = (), shared: int = 0):
    # the C type of each variable argument (int, or long long for a 64-bit variable); int where not given; the
    # dynamic shared memory each launch gets (bytes; renderer.py's dynamic_shared_bytes)
    self.dev, self.name, self.var_types, self.shared = dev, name, var_types, int(shared)
    self._dims: dict = {}   # (global_size, local_size) -> (grid, block), worked out once per launch shape
    dev.make_current()
    self.module, self.function = ctypes.c_void_p(), ctypes.c_void_p()
    image = ctypes.create_string_buffer(binary, len(binary))
    check("cuModuleLoadData", lib().cuModuleLoadData(ctypes.byref(self.module), image), f"kernel {name}")
    check("cuModuleGetFunction", lib().cuModuleGetFunction(ctypes.byref(self.function), self.module, name.encode()))
    self._launch = lib().cuLaunchKernel   # bound once: a launch is on every op's path
    if self.shared:   # past 48 KB a kernel must ask for its dynamic shared memory
      check("cuFuncSetAttribute", lib().cuFuncSetAttribute(self.function, driver.FUNC_ATTR_MAX_DYNAMIC_SHARED, self.shared),
            f"kernel {name}: {self.shared} bytes of dynamic shared memory")

  def pack(self, bufs, vals) -> tuple[list, ctypes.Array]:
    """The kernel's arguments as C values (buffer pointers, then variables) and the array of pointers to them that
    the driver reads (`kernelParams`). The driver copies the values when called, so the buffers' own handles (c_uint64)
    are pointed at directly."""
    args = list(bufs)
    if vals: args += [(self.var_types[j] if j < len(self.var_types) else ctypes.c_int32)(int(v)) for j, v in enumerate(vals)]
    return args, (ctypes.c_void_p * max(len(args), 1))(*[ctypes.addressof(a) for a in args])

  def __call__(self, *bufs: ctypes.c_uint64, global_size=(1, 1, 1), local_size=None, vals=(), wait=False) -> float | None:
    dev = self.dev
    if not getattr(dev._current, "set", False): dev.make_current()
    if vals: args, params = self.pack(bufs, vals)
    else:   # buffers only (most launches): the pointer array straight from the handles, which outlive the call
      params = (ctypes.c_void_p * max(len(bufs), 1))(*[ctypes.addressof(b) for b in bufs])
    try: dims = self._dims[(global_size, local_size)]
    except (KeyError, TypeError):   # a new launch shape (or one given as lists)
      dims = launch_dims(global_size, local_size)
      if isinstance(global_size, tuple) and (local_size is None or isinstance(local_size, tuple)):
        self._dims[(global_size, local_size)] = dims
    (gx, gy, gz), (bx, by, bz) = dims
    if wait: check("cuEventRecord", lib().cuEventRecord(dev.events[0], dev.stream))
    if (code := self._launch(self.function, gx, gy, gz, bx, by, bz, self.shared, dev.stream, params, None)) != 0:
      check("cuLaunchKernel", code, f"kernel {self.name} grid {dims[0]} block {dims[1]}")
    return dev.elapsed_since_start(f"kernel {self.name}") if wait else None

  def __del__(self):
    try: lib().cuModuleUnload(self.module)
    except Exception: pass

class CUDADevice(Compiled):
  """One GPU through the driver API: its primary context, one stream, a renderer for its architecture."""
  def __init__(self, name: str = "CUDA"):
    from tinyplug.plugins import get_plugin_manager
    pm = get_plugin_manager()
    specs = {spec.name: spec for spec, _ in pm.renderers_for("CUDA")}
    renderer_name, ordinal = parse_gpu_name(name, list(specs), "CUDA_DEVICE")
    ok, reason = driver.probe_driver()
    if not ok: raise RuntimeError(reason)
    L = lib()
    count = ctypes.c_int(0)
    check("cuDeviceGetCount", L.cuDeviceGetCount(ctypes.byref(count)))
    if not 0 <= ordinal < count.value: raise RuntimeError(f"{name}: there is no GPU {ordinal} (the driver sees {count.value})")
    self.device = ctypes.c_int(0)
    check("cuDeviceGet", L.cuDeviceGet(ctypes.byref(self.device), ordinal))
    self.context = ctypes.c_void_p()
    check("cuDevicePrimaryCtxRetain", L.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), self.device))
    self._current = threading.local()
    self.make_current()
    self.stream = ctypes.c_void_p()
    check("cuStreamCreate", L.cuStreamCreate(ctypes.byref(self.stream), 0))
    self.events = (ctypes.c_void_p(), ctypes.c_void_p())
    for e in self.events: check("cuEventCreate", L.cuEventCreate(ctypes.byref(e), driver.EVENT_DEFAULT))
    self.info = device_info(self.device)
    self.arch = f"sm_{self.info['cc'][0]}{self.info['cc'][1]}"
    spec = specs[renderer_name] if renderer_name else next(iter(sorted(specs.values(), key=lambda s: -s.priority)))
    renderer = pm.load_factory(spec.factory)(self.arch, local_max=self.info["block_max"], max_threads=self.info["threads"],
                                             shared_max=self.info["shared"])
    renderer.global_max = self.info["grid_max"]
    # a renderer that carves large shared arrays out of dynamic shared memory may use all a block can opt in to
    if renderer.dynamic_shared: renderer.shared_max = self.info["shared_optin"]
    from tinyplug_cuda.compiler import compiler_for
    super().__init__(name, CUDAAllocator(self), renderer, compiler_for(spec.name, self.arch))
    if DEBUG >= 1: print(f"{name}: {self.describe()}")

  def make_current(self) -> None:
    if getattr(self._current, "set", False): return
    check("cuCtxSetCurrent", lib().cuCtxSetCurrent(self.context))
    self._current.set = True

  def make_program(self, spec: ProgramSpec, binary: bytes) -> Callable[..., float | None]:
    var_types = tuple(ctypes.c_int64 if v.dtype.itemsize == 8 else ctypes.c_int32 for v in getattr(spec, "vars", ()))
    from tinyplug_cuda.renderer import dynamic_shared_bytes
    return CUDAProgram(self, spec.name, binary, var_types, dynamic_shared_bytes(spec.uops))

  def make_graph(self, launches: list) -> Any:
    """TinyJit's runs of kernels as one CUDA graph each (graph.py); JIT_GRAPH=0 turns it off."""
    from tinyplug_cuda.graph import CUDAGraph
    return CUDAGraph(self, launches)

  def synchronize(self) -> None:
    self.make_current()
    check("cuStreamSynchronize", lib().cuStreamSynchronize(self.stream))

  def elapsed_since_start(self, what: str) -> float:
    """Seconds on the GPU since the stream passed `events[0]` (recorded before a launch), waiting for the work."""
    start, end = self.events
    check("cuEventRecord", lib().cuEventRecord(end, self.stream))
    check("cuEventSynchronize", lib().cuEventSynchronize(end), f"waiting for {what}")
    ms = ctypes.c_float(0)
    check("cuEventElapsedTime", lib().cuEventElapsedTime(ctypes.byref(ms), start, end))
    return ms.value * 1e-3

  def describe(self) -> str:
    return (f"{self.info['name']} ({self.arch}, {self.info['sms']} SMs, {self.info['memory'] >> 20} MiB, driver "
            f"{self.info['driver']}), kernels by {type(self.renderer).__name__} via {type(self.compiler).__name__}")

def device_info(device: ctypes.c_int) -> dict[str, Any]:
  L = lib()
  def attr(a: int) -> int:
    v = ctypes.c_int(0)
    check("cuDeviceGetAttribute", L.cuDeviceGetAttribute(ctypes.byref(v), a, device))
    return v.value
  name = ctypes.create_string_buffer(256)
  check("cuDeviceGetName", L.cuDeviceGetName(name, 256, device))
  mem, ver = ctypes.c_size_t(0), ctypes.c_int(0)
  check("cuDeviceTotalMem", L.cuDeviceTotalMem_v2(ctypes.byref(mem), device))
  check("cuDriverGetVersion", L.cuDriverGetVersion(ctypes.byref(ver)))
  return {"name": name.value.decode(errors="replace"), "cc": (attr(driver.ATTR_CC_MAJOR), attr(driver.ATTR_CC_MINOR)),
          "threads": attr(driver.ATTR_MAX_THREADS_PER_BLOCK), "block_max": tuple(attr(a) for a in driver.ATTR_MAX_BLOCK_DIM),
          "grid_max": tuple(attr(a) for a in driver.ATTR_MAX_GRID_DIM), "shared": attr(driver.ATTR_MAX_SHARED_PER_BLOCK),
          "shared_optin": max(attr(driver.ATTR_MAX_SHARED_PER_BLOCK), attr(driver.ATTR_MAX_SHARED_PER_BLOCK_OPTIN)),
          "sms": attr(driver.ATTR_MULTIPROCESSOR_COUNT), "memory": mem.value,
          "driver": f"{ver.value // 1000}.{ver.value % 1000 // 10}"}
