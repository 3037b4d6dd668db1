"""The CL device: context and in-order profiling queue, buffers, program builds with an in-memory and on-disk binary
cache, and kernel launches that return the device time from profiling events when asked to wait."""
from __future__ import annotations
import ctypes, hashlib, threading
from typing import Any, Callable
from tinyplug.device import Allocator, Compiled, Compiler, ProgramSpec
from tinyplug.diskcache import cache_path, read_sealed, write_sealed
from tinyplug.caches import BoundedCache
from tinyplug.helpers import KERNEL_CACHE_SIZE, CACHELEVEL, DEBUG, env_str
from tinyplug_opencl import cl
from tinyplug_opencl.cl import CLError, check, lib, c_size_t, c_uint, c_int, c_void_p
from tinyplug_opencl.renderer import OpenCLRenderer

BUILD_OPTIONS = b"-cl-std=CL1.2"

def select_device(choice: str) -> tuple[int, int]:
  """The (platform, device) pair CL_DEVICE (or `CL:<n>`) names: an index, or a substring of the device name."""
  found = cl.all_devices()
  if not found: raise RuntimeError("no OpenCL device found (is an ICD driver such as pocl-opencl-icd installed?)")
  if choice == "": return found[0]
  if choice.isdigit():
    if int(choice) >= len(found):
      raise RuntimeError(f"CL_DEVICE={choice}: there are only {len(found)} OpenCL devices: {describe_devices(found)}")
    return found[int(choice)]
  for p, d in found:
    if choice.lower() in cl.device_str(d, cl.CL_DEVICE_NAME).lower(): return p, d
  raise RuntimeError(f"CL_DEVICE={choice!r} matches no OpenCL device; there are: {describe_devices(found)}")

def describe_devices(found: list[tuple[int, int]]) -> str:
  return ", ".join(f"{i}: {cl.device_str(d, cl.CL_DEVICE_NAME)}" for i, (_, d) in enumerate(found))

class CLAllocator(Allocator):
  """cl_mem buffers. Freed big ones are kept for reuse by the core's cache (LRU, LRU_MIN, LRU_MAX): their first use
  is what costs (PoCL maps fresh memory on the first kernel that touches it); an out-of-memory error makes the core
  release what it keeps and try once more."""
  def __init__(self, dev: CLDevice):
    self.dev = dev
  def alloc(self, nbytes: int) -> c_void_p:
    # a byte count past size_t would wrap in ctypes (a 16-byte buffer for 2^62 floats, then heap reads)
    if not 0 <= nbytes < 1 << (8 * ctypes.sizeof(c_size_t)):
      raise ValueError(f"CL: cannot allocate {nbytes} bytes (size_t holds at most {(1 << 8 * ctypes.sizeof(c_size_t)) - 1})")
    err = c_int(0)
    mem = lib().clCreateBuffer(self.dev.context, cl.CL_MEM_READ_WRITE, nbytes, None, ctypes.byref(err))
    check("clCreateBuffer", err.value, f"({nbytes} bytes)")
    return c_void_p(mem)
  def free(self, handle: c_void_p, nbytes: int) -> None: lib().clReleaseMemObject(handle)
  def copyin(self, dest: c_void_p, src: memoryview) -> None:
    if not src.nbytes: return
    host = (ctypes.c_char * src.nbytes).from_buffer(src) if not src.readonly else ctypes.create_string_buffer(src.tobytes(), src.nbytes)
    check("clEnqueueWriteBuffer", lib().clEnqueueWriteBuffer(self.dev.queue, dest, 1, 0, src.nbytes, host, 0, None, None))
  def copyout(self, dest: memoryview, src: c_void_p) -> None:
    if not dest.nbytes: return
    host = (ctypes.c_char * dest.nbytes).from_buffer(dest)
    check("clEnqueueReadBuffer", lib().clEnqueueReadBuffer(self.dev.queue, src, 1, 0, dest.nbytes, host, 0, None, None))

class CLCompiler(Compiler):
  """Builds OpenCL C for one device. `compile` returns the program binary; built programs stay in memory by source."""
  builds_from_source = 0     # counters for tests and benchmarks
  builds_from_binary = 0
  def __init__(self, dev: CLDevice):
    self.dev = dev
    self.cachekey = f"opencl-{hashlib.sha256(dev.identity.encode()).hexdigest()[:16]}"
    # binary -> built program (so make_program needs no second build), released when dropped (a kernel made from it
    # keeps it alive until the kernel goes); source -> binary. Both forget the least recently used first.
    self.programs = BoundedCache("opencl.programs", KERNEL_CACHE_SIZE.value,
                                 on_evict=lambda prg: lib().clReleaseProgram(prg))
    self._by_src = BoundedCache("opencl.binaries", KERNEL_CACHE_SIZE.value)
    self._lock = threading.Lock()

  def _key(self, src: str) -> str:
    return hashlib.sha256(b"\0".join([self.dev.identity.encode(), BUILD_OPTIONS, src.encode()])).hexdigest()

  def _build(self, program: c_void_p, src: str | None) -> None:
    code = lib().clBuildProgram(program, 1, ctypes.byref(self.dev.device_id), BUILD_OPTIONS, None, None)
    if code != cl.CL_SUCCESS:
      log = self._build_log(program)
      lib().clReleaseProgram(program)
      raise CLError("clBuildProgram", code, f"build log:\n{log.strip()}" + (f"\n--- source ---\n{src}" if src else ""))

  def _build_log(self, program: c_void_p) -> str:
    size = c_size_t(0)
    lib().clGetProgramBuildInfo(program, self.dev.device_id, cl.CL_PROGRAM_BUILD_LOG, 0, None, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value + 1)
    lib().clGetProgramBuildInfo(program, self.dev.device_id, cl.CL_PROGRAM_BUILD_LOG, size.value, buf, None)
    return buf.value.decode(errors="replace")

  def _from_source(self, src: str) -> c_void_p:
    err = c_int(0)
    raw = src.encode()
    strings = (ctypes.c_char_p * 1)(raw)
    lengths = (c_size_t * 1)(len(raw))
    program = c_void_p(lib().clCreateProgramWithSource(self.dev.context, 1, strings, lengths, ctypes.byref(err)))
    check("clCreateProgramWithSource", err.value)
    self._build(program, src)
    CLCompiler.builds_from_source += 1
    return program

  def from_binary(self, binary: bytes) -> c_void_p:
    err, status = c_int(0), c_int(0)
    lengths = (c_size_t * 1)(len(binary))
    data = ctypes.create_string_buffer(binary, len(binary))
    ptrs = (c_void_p * 1)(ctypes.cast(data, c_void_p).value)
    program = c_void_p(lib().clCreateProgramWithBinary(self.dev.context, 1, ctypes.byref(self.dev.device_id), lengths,
                                                       ptrs, ctypes.byref(status), ctypes.byref(err)))
    check("clCreateProgramWithBinary", err.value or status.value)
    self._build(program, None)
    CLCompiler.builds_from_binary += 1
    return program

  def _binary(self, program: c_void_p) -> bytes:
    size = c_size_t(0)
    check("clGetProgramInfo", lib().clGetProgramInfo(program, cl.CL_PROGRAM_BINARY_SIZES, ctypes.sizeof(c_size_t),
                                                     ctypes.byref(size), None))
    if size.value == 0: return b""
    buf = ctypes.create_string_buffer(size.value)
    ptrs = (c_void_p * 1)(ctypes.cast(buf, c_void_p).value)
    check("clGetProgramInfo", lib().clGetProgramInfo(program, cl.CL_PROGRAM_BINARIES, ctypes.sizeof(ptrs), ptrs, None))
    return buf.raw

  def _cache_path(self, src: str) -> str | None: return cache_path("opencl", self._key(src) + ".bin")

  def compile(self, src: str) -> bytes:
    program = self._from_source(src)
    binary = self._binary(program)
    if not binary: binary = b"src:" + src.encode()    # a driver without binaries: the source is the "binary"
    self.programs.put(binary, program)
    return binary

  def compile_cached(self, src: str) -> bytes:
    with self._lock:
      if (hit := self._by_src.get_lru(src)) is not None: return hit
      path = self._cache_path(src) if CACHELEVEL >= 1 else None
      # read_sealed checks the binary against its digest (keyed with the source) before the driver sees it
      binary = read_sealed(path, self._key(src), "opencl") if path is not None else None
      if binary is not None:
        try: self.programs.put(binary, self.from_binary(binary))
        except CLError: binary = None    # intact but the driver rejects it (a driver update): build from source
      if binary is None:
        binary = self.compile(src)
        if path is not None and not binary.startswith(b"src:"): write_sealed(path, self._key(src), binary)
      return self._by_src.put(src, binary)

  def program_for(self, lib_bytes: bytes) -> c_void_p:
    with self._lock:
      if (prg := self.programs.get_lru(lib_bytes)) is None:
        prg = self._from_source(lib_bytes[4:].decode()) if lib_bytes.startswith(b"src:") else self.from_binary(lib_bytes)
        self.programs.put(lib_bytes, prg)
      return prg

class CLProgram:
  """One kernel of a built program. `prg(*buffers, global_size=, local_size=, vals=, wait=) -> seconds | None`:
  global_size counts work-groups, as in the ProgramSpec; OpenCL's global size is groups * local size."""
  def __init__(self, dev: CLDevice, name: str, program: c_void_p, var_types: tuple = ()):
    # the C type of each variable argument (int, or long for a 64-bit variable); int where not given
    self.dev, self.name, self.var_types = dev, name, var_types
    err = c_int(0)
    self.kernel = c_void_p(lib().clCreateKernel(program, name.encode(), ctypes.byref(err)))
    check("clCreateKernel", err.value, f"kernel {name!r}")

  def __call__(self, *bufs: c_void_p, global_size=(1, 1, 1), local_size=None, vals=(), wait=False) -> float | None:
    L = lib()
    for i, b in enumerate(bufs):
      check("clSetKernelArg", L.clSetKernelArg(self.kernel, i, ctypes.sizeof(c_void_p), ctypes.byref(b)), f"buffer {i}")
    for j, v in enumerate(vals):
      ct = self.var_types[j] if j < len(self.var_types) else ctypes.c_int32
      check("clSetKernelArg", L.clSetKernelArg(self.kernel, len(bufs) + j, ctypes.sizeof(ct), ctypes.byref(ct(int(v)))))
    local = tuple(local_size) if local_size is not None else (1,) * len(global_size)
    dims = max(len(global_size), len(local))
    gs = (c_size_t * dims)(*[int(g) * int(l) for g, l in zip(global_size, local)])
    ls = (c_size_t * dims)(*local)
    event = c_void_p() if wait else None
    check("clEnqueueNDRangeKernel", L.clEnqueueNDRangeKernel(self.dev.queue, self.kernel, dims, None, gs,
                                                              ls if local_size is not None else None, 0, None,
                                                              ctypes.byref(event) if wait else None),
          f"kernel {self.name} global {tuple(gs)} local {tuple(ls)}")
    if not wait: return None
    try:
      check("clWaitForEvents", L.clWaitForEvents(1, ctypes.byref(event)))
      start, end = ctypes.c_uint64(0), ctypes.c_uint64(0)
      check("clGetEventProfilingInfo", L.clGetEventProfilingInfo(event, cl.CL_PROFILING_COMMAND_START, 8, ctypes.byref(start), None))
      check("clGetEventProfilingInfo", L.clGetEventProfilingInfo(event, cl.CL_PROFILING_COMMAND_END, 8, ctypes.byref(end), None))
      return (end.value - start.value) * 1e-9
    finally: L.clReleaseEvent(event)

  def __del__(self):
    try: lib().clReleaseKernel(self.kernel)
    except Exception: pass

class CLDevice(Compiled):
  """`CL` (or `CL:<n>`, or CL_DEVICE=<n or name>): one OpenCL device with its own context and in-order queue."""
  def __init__(self, name: str = "CL"):
    choice = name.partition(":")[2] or env_str("CL_DEVICE", "")
    self.platform_id, device = select_device(choice)
    self.device_id = c_void_p(device)
    err = c_int(0)
    self.context = c_void_p(lib().clCreateContext(None, 1, ctypes.byref(self.device_id), None, None, ctypes.byref(err)))
    check("clCreateContext", err.value)
    self.queue = c_void_p(lib().clCreateCommandQueue(self.context, self.device_id, cl.CL_QUEUE_PROFILING_ENABLE,
                                                     ctypes.byref(err)))
    check("clCreateCommandQueue", err.value)
    self.info = device_info(device)
    self.identity = "|".join([self.info["name"], self.info["version"], self.info["driver"],
                              cl.platform_str(self.platform_id, cl.CL_PLATFORM_VERSION)])
    renderer = OpenCLRenderer(local_max=self.info["local_max"], max_work_group_size=self.info["max_work_group_size"],
                              shared_max=self.info["local_mem"], extensions=self.info["extensions"],
                              vector_width=self.info["vector_width"], device_name=self.info["name"],
                              parallel_work_items=not self.info["type"] & cl.CL_DEVICE_TYPE_CPU)
    super().__init__(name, CLAllocator(self), renderer, CLCompiler(self))
    if DEBUG >= 1: print(f"CL: {self.info['name']} ({self.info['version']}, driver {self.info['driver']})")

  def make_program(self, spec: ProgramSpec, lib_bytes: bytes) -> Callable[..., float | None]:
    var_types = tuple(ctypes.c_int64 if v.dtype.itemsize == 8 else ctypes.c_int32 for v in getattr(spec, "vars", ()))
    return CLProgram(self, spec.name, self.compiler.program_for(lib_bytes), var_types)

  def synchronize(self) -> None: check("clFinish", lib().clFinish(self.queue))
  def count(self) -> int: return len(cl.all_devices())
  def describe(self) -> str: return f"{self.info['name']} ({self.info['version']}, driver {self.info['driver']})"

def device_info(device: int) -> dict[str, Any]:
  """What the renderer and the compile cache need to know about a device."""
  ext = frozenset(cl.device_str(device, cl.CL_DEVICE_EXTENSIONS).split())
  local_type = cl.device_int(device, cl.CL_DEVICE_LOCAL_MEM_TYPE, c_uint)
  return {
    "name": cl.device_str(device, cl.CL_DEVICE_NAME), "version": cl.device_str(device, cl.CL_DEVICE_VERSION),
    "driver": cl.device_str(device, cl.CL_DRIVER_VERSION), "extensions": ext,
    "max_work_group_size": cl.device_int(device, cl.CL_DEVICE_MAX_WORK_GROUP_SIZE, c_size_t),
    "local_max": cl.device_sizes(device, cl.CL_DEVICE_MAX_WORK_ITEM_SIZES)[:3],
    "local_mem": cl.device_int(device, cl.CL_DEVICE_LOCAL_MEM_SIZE), "local_mem_is_global": local_type == 2,
    "vector_width": cl.device_int(device, cl.CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, c_uint),
    "compute_units": cl.device_int(device, cl.CL_DEVICE_MAX_COMPUTE_UNITS, c_uint),
    "type": cl.device_int(device, cl.CL_DEVICE_TYPE),
  }
