"""The AMD device: one GPU through ROCm's HIP runtime, one stream, device memory from hipMalloc, host copies through
pinned staging buffers, kernels loaded from code objects with hipModuleLoadData, launches timed with HIP events.

`DEV=AMD` (the LLVM IR renderer), `DEV=AMD:1` / `AMD_DEVICE=1` (the second GPU). Not run on AMD hardware in this
repository's CI (no GPU or ROCm there): written against ROCm 6's HIP API."""
from __future__ import annotations
import ctypes, threading
from typing import Callable
from tinyplug.backend import Allocator, Compiled, ProgramSpec, parse_gpu_name
from tinyplug.helpers import DEBUG, env_str
from tinyplug_amd import hip
from tinyplug_amd.hip import check, lib

STAGING_BYTES = 16 << 20   # a pinned host buffer of this size carries host <-> device copies

class AMDAllocator(Allocator):
  """hipMalloc'd device memory; copies go through one pinned host buffer, chunk by chunk."""
  def __init__(self, dev: AMDDevice):
    self.dev = dev
    self.staging: ctypes.c_void_p | None = None
    self._lock = threading.Lock()

  def alloc(self, nbytes: int) -> ctypes.c_void_p:
    self.dev.make_current()
    ptr = ctypes.c_void_p()
    check("hipMalloc", lib().hipMalloc(ctypes.byref(ptr), max(nbytes, 1)), f"{nbytes} bytes")
    return ptr
  def free(self, handle: ctypes.c_void_p, nbytes: int) -> None:
    self.dev.make_current()
    lib().hipFree(handle)

  def _staging(self) -> ctypes.c_void_p:
    if self.staging is None:
      self.staging = ctypes.c_void_p()
      check("hipHostMalloc", lib().hipHostMalloc(ctypes.byref(self.staging), STAGING_BYTES, 0))
    return self.staging

  def _copy(self, dest: int, src: int, nbytes: int, kind: int) -> None:
    check("hipMemcpyAsync", lib().hipMemcpyAsync(dest, src, nbytes, kind, self.dev.stream))
    check("hipStreamSynchronize", lib().hipStreamSynchronize(self.dev.stream))

  def copyin(self, dest: ctypes.c_void_p, src: memoryview) -> None:
    if not src.nbytes: return
    self.dev.make_current()
    buf = ctypes.c_char * src.nbytes
    data = buf.from_buffer_copy(src) if src.readonly else buf.from_buffer(src)
    with self._lock:
      host = self._staging()
      for off in range(0, src.nbytes, STAGING_BYTES):
        n = min(STAGING_BYTES, src.nbytes - off)
        ctypes.memmove(host, ctypes.addressof(data) + off, n)
        self._copy(dest.value + off, host.value, n, hip.MEMCPY_HOST_TO_DEVICE)

  def copyout(self, dest: memoryview, src: ctypes.c_void_p) -> None:
    if not dest.nbytes: return
    self.dev.make_current()
    out = (ctypes.c_char * dest.nbytes).from_buffer(dest)
    with self._lock:
      host = self._staging()
      for off in range(0, dest.nbytes, STAGING_BYTES):
        n = min(STAGING_BYTES, dest.nbytes - off)
        self._copy(host.value, src.value + off, n, hip.MEMCPY_DEVICE_TO_HOST)
        ctypes.memmove(ctypes.addressof(out) + off, host, n)

def pack_arguments(bufs, vals) -> ctypes.Structure:
  """The kernel's explicit arguments as the AMDGPU kernarg segment lays them out: 8-byte buffer pointers, then 4-byte
  ints, each at its natural alignment (what a ctypes Structure does)."""
  fields = [(f"b{i}", ctypes.c_uint64) for i in range(len(bufs))] + [(f"v{i}", ctypes.c_int32) for i in range(len(vals))]
  Args = type("KernelArgs", (ctypes.Structure,), {"_fields_": fields})
  return Args(*[b.value or 0 for b in bufs], *[int(v) for v in vals])

class AMDProgram:
  """One kernel of a loaded code object. `prg(*buffers, global_size=, local_size=, vals=, wait=) -> seconds | None`:
  global_size counts work-groups (as in the ProgramSpec), local_size is the work-group."""
  def __init__(self, dev: AMDDevice, name: str, binary: bytes):
    self.dev, self.name = dev, name
    dev.make_current()
    self.module, self.function = ctypes.c_void_p(), ctypes.c_void_p()
    self.image = ctypes.create_string_buffer(binary, len(binary))
    check("hipModuleLoadData", lib().hipModuleLoadData(ctypes.byref(self.module), self.image), f"kernel {name}")
    check("hipModuleGetFunction", lib().hipModuleGetFunction(ctypes.byref(self.function), self.module, name.encode()))

  def __call__(self, *bufs: ctypes.c_void_p, global_size=(1, 1, 1), local_size=None, vals=(), wait=False) -> float | None:
    self.dev.make_current()
    args = pack_arguments(bufs, vals)
    size = ctypes.c_size_t(ctypes.sizeof(args))
    extra = (ctypes.c_void_p * 5)(hip.LAUNCH_PARAM_BUFFER_POINTER, ctypes.addressof(args), hip.LAUNCH_PARAM_BUFFER_SIZE,
                                  ctypes.addressof(size), hip.LAUNCH_PARAM_END)
    grid = (tuple(int(g) for g in global_size) + (1, 1, 1))[:3]
    block = (tuple(int(x) for x in local_size) + (1, 1, 1))[:3] if local_size is not None else (1, 1, 1)
    start, end = self.dev.events if wait else (None, None)
    if wait: check("hipEventRecord", lib().hipEventRecord(start, self.dev.stream))
    check("hipModuleLaunchKernel", lib().hipModuleLaunchKernel(self.function, *grid, *block, 0, self.dev.stream, None,
                                                               extra), f"kernel {self.name} grid {grid} block {block}")
    if not wait: return None
    check("hipEventRecord", lib().hipEventRecord(end, self.dev.stream))
    check("hipEventSynchronize", lib().hipEventSynchronize(end))
    ms = ctypes.c_float(0)
    check("hipEventElapsedTime", lib().hipEventElapsedTime(ctypes.byref(ms), start, end))
    return ms.value * 1e-3

  def __del__(self):
    try: lib().hipModuleUnload(self.module)
    except Exception: pass

class AMDDevice(Compiled):
  """One AMD GPU through HIP: one stream, a renderer and compiler for its own gfx architecture."""
  def __init__(self, name: str = "AMD"):
    from tinyplug.plugins import get_plugin_manager
    pm = get_plugin_manager()
    specs = {spec.name: spec for spec, _ in pm.renderers_for("AMD")}
    renderer_name, self.ordinal = parse_gpu_name(name, list(specs), "AMD_DEVICE")
    ok, reason = hip.probe_hip()
    if not ok: raise RuntimeError(reason)
    count = ctypes.c_int(0)
    check("hipGetDeviceCount", lib().hipGetDeviceCount(ctypes.byref(count)))
    if not 0 <= self.ordinal < count.value:
      raise RuntimeError(f"{name}: there is no AMD GPU {self.ordinal} (HIP sees {count.value})")
    self._current = threading.local()
    self.make_current()
    self.info = hip.device_properties(self.ordinal)
    self.arch = self.info["arch"] or env_str("AMD_ARCH")
    if not self.arch:
      raise RuntimeError(f"{name}: HIP reports no gfx architecture ({self.info['gcnArchName']!r}); set AMD_ARCH")
    self.stream = ctypes.c_void_p()
    check("hipStreamCreate", lib().hipStreamCreate(ctypes.byref(self.stream)))
    self.events = (ctypes.c_void_p(), ctypes.c_void_p())
    for e in self.events: check("hipEventCreate", lib().hipEventCreate(ctypes.byref(e)))
    spec = specs[renderer_name] if renderer_name else next(iter(sorted(specs.values(), key=lambda s: -s.priority)))
    renderer = pm.load_factory(spec.factory)(self.arch, local_max=self.info["maxThreadsDim"],
                                             max_threads=self.info["maxThreadsPerBlock"],
                                             shared_max=self.info["sharedMemPerBlock"])
    renderer.global_max = self.info["maxGridSize"]
    from tinyplug_amd.compiler import compiler_for
    super().__init__(name, AMDAllocator(self), renderer, compiler_for(spec.name, self.arch))
    if DEBUG >= 1: print(f"{name}: {self.describe()}")

  def make_current(self) -> None:
    if getattr(self._current, "set", False): return
    check("hipSetDevice", lib().hipSetDevice(self.ordinal))
    self._current.set = True

  def make_program(self, spec: ProgramSpec, binary: bytes) -> Callable[..., float | None]:
    return AMDProgram(self, spec.name, binary)

  def synchronize(self) -> None:
    self.make_current()
    check("hipStreamSynchronize", lib().hipStreamSynchronize(self.stream))

  def describe(self) -> str:
    wave = self.info["warpSize"] or self.renderer.target.wave
    return (f"{self.info['name']} ({self.arch}, {self.info['multiProcessorCount']} CUs, wave{wave}, "
            f"{self.info['totalGlobalMem'] >> 20} MiB), kernels by {type(self.renderer).__name__} via "
            f"{type(self.compiler).__name__}")
