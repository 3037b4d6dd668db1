"""The METAL device: the system's default GPU, one command queue, shared-storage buffers, kernels compiled from MSL
by Metal itself (`newLibraryWithSource:`), one command buffer per launch, GPU start/end times for the profile.

Buffers use shared storage: on Apple silicon the CPU and the GPU address the same memory, so a copy in or out is one
memmove into the buffer's `contents`, with no staging buffer and no blit. Launches are committed without waiting;
`synchronize` (and every copy) waits for the command buffers still in flight and reports a failed one.

Written against Apple's Metal documentation; not yet run on Apple hardware (see plugins/metal/README.md)."""
from __future__ import annotations
import ctypes, platform, threading
from typing import Any, Callable
import numpy as np
from tinyplug.backend import Allocator, Compiled, Compiler, ProgramSpec
from tinyplug.helpers import DEBUG
from tinyplug_metal import objc
from tinyplug_metal.objc import MTLSize, MetalError, autorelease_pool, send

class MetalBuffer:
  """One MTLBuffer (shared storage): the object, its size and the CPU address of its contents."""
  __slots__ = ("obj", "nbytes", "contents")
  def __init__(self, obj: int, nbytes: int, contents: int):
    self.obj, self.nbytes, self.contents = obj, nbytes, contents

def pack_launch(global_size: Any, local_size: Any) -> tuple[MTLSize, MTLSize]:
  """(threadgroups per grid, threads per threadgroup) as MTLSize, each padded to three dimensions with 1."""
  def size(xs: Any, what: str) -> MTLSize:
    dims = (tuple(int(x) for x in xs) + (1, 1, 1))[:3] if xs is not None else (1, 1, 1)
    if len(tuple(xs or ())) > 3 or any(d < 1 for d in dims):
      raise ValueError(f"a Metal {what} must be 1 to 3 positive sizes, got {xs}")
    return MTLSize(*dims)
  return size(global_size, "grid"), size(local_size, "threadgroup")

def pack_values(vals: Any) -> list[ctypes.c_int32]:
  """The kernel's scalar arguments (`constant int& n [[buffer(k)]]`), as the 4-byte values setBytes copies."""
  out = []
  for v in vals:
    if not -2**31 <= int(v) < 2**31: raise ValueError(f"a Metal kernel's int argument must fit 32 bits, got {v}")
    out.append(ctypes.c_int32(int(v)))
  return out

def numbered(src: str) -> str:
  """The source with line numbers, as Metal's compile errors refer to them."""
  return "\n".join(f"{i + 1:5d} | {line}" for i, line in enumerate(src.splitlines()))

def macos_version() -> tuple[int, ...]:
  """(14, 5) on macOS 14.5; () elsewhere."""
  release = platform.mac_ver()[0]
  return tuple(int(x) for x in release.split(".") if x.isdigit()) if release else ()

class MetalCompiler(Compiler):
  """MSL stays text until the device compiles it: Metal's own compiler runs in `newLibraryWithSource:` (with its
  shader cache), so the binary handed to the program is the source's UTF-8 bytes."""
  cachekey = "metal-msl"
  def compile(self, src: str) -> bytes: return src.encode()

def _address(view: memoryview) -> int:
  """The address of a contiguous byte view's memory (read-only ones too: no intermediate copy)."""
  return np.frombuffer(view, dtype=np.uint8).ctypes.data

class MetalAllocator(Allocator):
  """Shared-storage MTLBuffers; copies are one memmove each, after the GPU work in flight has finished."""
  def __init__(self, dev: MetalDevice): self.dev = dev
  def alloc(self, nbytes: int) -> MetalBuffer:
    obj = send(self.dev.device, "newBufferWithLength:options:", max(nbytes, 1), objc.STORAGE_SHARED)
    if not obj: raise MemoryError(f"Metal could not allocate a buffer of {nbytes} bytes")
    return MetalBuffer(obj, nbytes, send(obj, "contents"))
  def free(self, handle: MetalBuffer, nbytes: int) -> None:
    send(handle.obj, "release")   # a command buffer in flight keeps its own reference
    handle.obj = None
  def copyin(self, dest: MetalBuffer, src: memoryview) -> None:
    if not src.nbytes: return
    self.dev.synchronize()   # a kernel in flight may still read the old contents
    ctypes.memmove(dest.contents, _address(src), src.nbytes)
  def copyout(self, dest: memoryview, src: MetalBuffer) -> None:
    if not dest.nbytes: return
    self.dev.synchronize()
    ctypes.memmove(_address(dest), src.contents, dest.nbytes)

class MetalProgram:
  """One kernel: its library, function and compute pipeline. `prg(*buffers, global_size=, local_size=, vals=,
  wait=) -> seconds | None`; global_size counts threadgroups, as in the ProgramSpec."""
  def __init__(self, dev: MetalDevice, name: str, src: str):
    self.dev, self.name = dev, name
    with autorelease_pool():
      options = send(objc.cls("MTLCompileOptions"), "new")
      send(options, "setFastMathEnabled:", False)   # IEEE NaN/inf semantics, as every other device
      err = objc.id_t()
      self.library = send(dev.device, "newLibraryWithSource:options:error:", objc.nsstring(src), options, ctypes.byref(err))
      send(options, "release")
      if not self.library:
        raise MetalError(f"Metal could not compile kernel {name}: {objc.error_text(err.value)}\n{numbered(src)}")
      self.function = send(self.library, "newFunctionWithName:", objc.nsstring(name))
      if not self.function: raise MetalError(f"the compiled Metal library has no kernel named {name}")
      err = objc.id_t()
      self.pipeline = send(dev.device, "newComputePipelineStateWithFunction:error:", self.function, ctypes.byref(err))
      if not self.pipeline:
        raise MetalError(f"Metal could not make a compute pipeline for {name}: {objc.error_text(err.value)}")
    self.max_threads = int(send(self.pipeline, "maxTotalThreadsPerThreadgroup"))

  def __call__(self, *bufs: MetalBuffer, global_size=(1, 1, 1), local_size=None, vals=(), wait=False) -> float | None:
    grid, group = pack_launch(global_size, local_size)
    threads = group.width * group.height * group.depth
    if threads > self.max_threads:
      raise MetalError(f"kernel {self.name}: a threadgroup of {threads} threads is more than this pipeline's "
                       f"maxTotalThreadsPerThreadgroup ({self.max_threads})")
    values = pack_values(vals)
    with autorelease_pool():
      cb = send(self.dev.queue, "commandBuffer")
      enc = send(cb, "computeCommandEncoder")
      send(enc, "setComputePipelineState:", self.pipeline)
      for i, b in enumerate(bufs): send(enc, "setBuffer:offset:atIndex:", b.obj, 0, i)
      for j, v in enumerate(values): send(enc, "setBytes:length:atIndex:", ctypes.byref(v), 4, len(bufs) + j)
      send(enc, "dispatchThreadgroups:threadsPerThreadgroup:", grid, group)
      send(enc, "endEncoding")
      send(cb, "commit")
      self.dev.track(send(cb, "retain"), self.name)
    if not wait: return None
    self.dev.synchronize()
    return self.dev.last_gpu_seconds

  def __del__(self) -> None:
    try:
      for obj in (self.pipeline, self.function, self.library): send(obj, "release")
    except Exception: pass

class MetalDevice(Compiled):
  """The system's default Metal GPU (`DEV=METAL`)."""
  def __init__(self, name: str = "METAL"):
    ok, reason = objc.probe_metal()
    if not ok: raise RuntimeError(reason)
    from tinyplug.plugins import get_plugin_manager
    self.device = objc.system_default_device()
    self.queue = send(self.device, "newCommandQueue")
    if not self.queue: raise MetalError("Metal could not create a command queue")
    self.in_flight: list[tuple[int, str]] = []   # (retained command buffer, kernel name)
    self.last_gpu_seconds: float | None = None
    self._lock = threading.Lock()
    with autorelease_pool(): self.gpu_name = objc.pystring(send(self.device, "name"))
    self.unified = bool(send(self.device, "hasUnifiedMemory"))
    self.supports_bfloat = macos_version() >= (14, 0)   # bfloat is MSL 3.1
    pm = get_plugin_manager()
    specs = sorted((spec for spec, _ in pm.renderers_for("METAL")), key=lambda s: -s.priority)
    renderer = pm.load_factory(specs[0].factory)(shared_max=int(send(self.device, "maxThreadgroupMemoryLength")),
                                                 device_name=self.gpu_name, bfloat=self.supports_bfloat)
    super().__init__(name, MetalAllocator(self), renderer, MetalCompiler())
    if DEBUG >= 1: print(f"{name}: {self.describe()}")

  def track(self, cb: int, name: str) -> None:
    with self._lock: self.in_flight.append((cb, name))

  def make_program(self, spec: ProgramSpec, binary: bytes) -> Callable[..., float | None]:
    return MetalProgram(self, spec.name, binary.decode())

  def synchronize(self) -> None:
    """Wait for every command buffer in flight; the first failed one raises with Metal's description."""
    with self._lock: pending, self.in_flight = self.in_flight, []
    failed = None
    for cb, name in pending:
      send(cb, "waitUntilCompleted")
      status = int(send(cb, "status"))
      if status == objc.STATUS_ERROR and failed is None:
        with autorelease_pool(): failed = f"kernel {name} failed on the GPU: {objc.error_text(send(cb, 'error'))}"
      elif status == objc.STATUS_COMPLETED:
        self.last_gpu_seconds = max(0.0, float(send(cb, "GPUEndTime")) - float(send(cb, "GPUStartTime")))
      send(cb, "release")
    if failed: raise MetalError(failed)

  def describe(self) -> str:
    memory = "unified memory" if self.unified else "discrete memory"
    return f"{self.gpu_name} ({memory}), kernels by {type(self.renderer).__name__} compiled by Metal"

