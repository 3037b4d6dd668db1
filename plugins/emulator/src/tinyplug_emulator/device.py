"""`MOCK+<device>`: another plugin's renderer, with its exact source compiled for the host and run by the emulator.

The renderer comes from the registry (the plugin that renders for <device>), built with the dialect's options that
describe the emulated device. Buffers are host memory; with EMU_BOUNDS they sit against an inaccessible page."""
from __future__ import annotations
import ctypes, functools, os, threading
from typing import Callable
import numpy as np
from tinyplug.device import Allocator, Compiled, Compiler, ProgramSpec
from tinyplug.caches import BoundedCache
from tinyplug.helpers import DEBUG, KERNEL_CACHE_SIZE
from tinyplug.uop.ops import Ops
from tinyplug_emulator import native
from tinyplug_emulator.dialects import C_TYPE_SIZES, Dialect, dialect_for
from tinyplug_emulator.native import EmulatorError, LaunchOptions
from tinyplug_emulator.settings import EMU_BOUNDS, EMU_ORDER, EMU_SEED, EMU_STACK_KB, EMU_THREADS
from tinyplug_emulator.toolchain import (build_library, build_shared, clang, digest, keep, present, run_clang, store,
                                        verified_path)

# ---------------- memory ----------------

class HostMemory:
  """One buffer: `address`, `nbytes`, and the guarded mapping [lo, hi) around it (0, 0 without bounds checks)."""
  __slots__ = ("address", "nbytes", "lo", "hi", "array")
  def __init__(self, nbytes: int, guard: int):
    self.nbytes, self.array = nbytes, None
    if guard:
      lib, _ = native.runtime_library()
      lo, hi = ctypes.c_uint64(0), ctypes.c_uint64(0)
      address = lib.tp_alloc_guarded(nbytes, 1 if guard == 1 else 0, ctypes.byref(lo), ctypes.byref(hi))
      if not address: raise MemoryError(f"the emulator could not map {nbytes} bytes with guard pages")
      self.address, self.lo, self.hi = address, lo.value, hi.value
    else:
      self.array = np.zeros(max(nbytes, 1) + 64, dtype=np.uint8)
      base = self.array.ctypes.data
      self.address, self.lo, self.hi = base + (-base) % 64, 0, 0
  def view(self) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint8 * self.nbytes).from_address(self.address)) if self.nbytes else \
      np.zeros(0, np.uint8)
  def release(self) -> None:
    if self.hi: native.runtime_library()[0].tp_free_guarded(self.lo, self.hi)
    self.hi = self.lo = 0

class EmulatorAllocator(Allocator):
  """Host buffers. EMU_BOUNDS, read at each allocation, decides whether a buffer gets guard pages."""
  @property
  def reusable(self) -> bool: return not EMU_BOUNDS.value   # a reused block might lack the guard this mode needs
  def alloc(self, nbytes: int) -> HostMemory: return HostMemory(nbytes, int(EMU_BOUNDS.value))
  def free(self, handle: HostMemory, nbytes: int) -> None: handle.release()
  def copyin(self, dest: HostMemory, src: memoryview) -> None:
    if src.nbytes: ctypes.memmove(dest.address, (ctypes.c_char * src.nbytes).from_buffer_copy(src), src.nbytes)
  def copyout(self, dest: memoryview, src: HostMemory) -> None:
    if dest.nbytes: ctypes.memmove((ctypes.c_char * dest.nbytes).from_buffer(dest), src.address, dest.nbytes)

# ---------------- compiling ----------------

class EmulatorCompiler(Compiler):
  """Rendered source -> a host shared object (its bytes). Keyed on disk by source, dialect and clang version."""
  compiles = 0    # clang runs for kernels in this process (cache misses), for tests
  def __init__(self, dialect: Dialect):
    self.dialect = dialect
    _, self.clang_version = clang()
    self.cachekey = f"emulator-{dialect.name}-{dialect.version}-{self.clang_version}"
    self._memory = BoundedCache("emulator.objects", KERNEL_CACHE_SIZE.value)   # source -> shared object (LRU)
    self._paths: dict[str, str] = {}   # digest of a shared object's bytes -> a verified file holding them
    self._lock = threading.Lock()
    self._headers_digest = digest(b"".join(_read(h) for h in dialect.headers))

  def __reduce__(self):   # rebuilt from its dialect in BEAM's compile workers
    return type(self), (self.dialect,)

  def support_libraries(self) -> list[str]:
    """Paths of the runtime and the dialect's builtins, loaded with global symbols (kernels link against them)."""
    _, runtime_path = native.runtime_library()
    libs = [runtime_path] if self.dialect.builtins is None else [runtime_path, _builtins_library(self.dialect, runtime_path)]
    return [present(p) for p in libs]   # (evicted from the cache since they were built: written back)

  def key(self, src: str) -> str:
    """Hashes what clang is given (the source with its thunk, flags, headers), its version and the libraries."""
    return digest(f"{self.cachekey}\n{' '.join(self.dialect.compile_flags)}\n{self.support_libraries()}\n"
                  f"{self._headers_digest}\n{self.dialect.with_entry(src)}".encode())

  def compile(self, src: str) -> bytes:
    libs = self.support_libraries()
    name = f"kernel-{self.key(src)[:32]}"
    def build(out: str) -> None:
      EmulatorCompiler.compiles += 1
      path = out[:-3] + self._suffix()
      with open(path, "w") as f: f.write(self.dialect.with_entry(src))
      build_library(list(self.dialect.compile_flags), path, [*libs, "-lm", f"-Wl,-rpath,{os.path.dirname(libs[0])}"],
                    out, f"a {self.dialect.name} kernel", src)
    path = build_shared(name, build)
    with open(path, "rb") as f: data = f.read()
    self._paths[digest(data)] = path
    return data

  def _suffix(self) -> str: return _SUFFIXES.get(self.dialect.name, ".src")

  def compile_cached(self, src: str) -> bytes:
    with self._lock:
      if (hit := self._memory.get_lru(src)) is None: hit = self._memory.put(src, self.compile(src))
      return hit

  def path_for(self, lib: bytes) -> str:
    """A file holding exactly these bytes (the compiler's own, a verified cache entry, or written now)."""
    d = digest(lib)
    if (path := self._paths.get(d)) is None or not os.path.exists(path):   # the cache's size limit may evict it
      path = verified_path(f"lib-{d[:32]}") or store(f"lib-{d[:32]}", lib)
      self._paths[d] = path
    return path

_SUFFIXES = {"opencl": ".cl", "cuda": ".cu", "hip": ".hip", "llvm-ir": ".ll", "metal": ".metal"}
_HERE = os.path.dirname(os.path.abspath(__file__))

def _read(name: str) -> bytes:
  with open(os.path.join(_HERE, name), "rb") as f: return f.read()

@functools.cache
def _builtins_library(dialect: Dialect, runtime_path: str) -> str:
  src_path = os.path.join(_HERE, dialect.builtins)
  src = _read(dialect.builtins)
  flags = dialect.builtins_flags or dialect.compile_flags
  name = native.library_name(os.path.splitext(dialect.builtins)[0], src, " ".join(flags), runtime_path)
  def build(out: str) -> None:
    run_clang([*flags, "-shared", src_path, "-x", "none", runtime_path, "-lm", "-o", out,
               f"-Wl,-soname,{name}.so"], f"the {dialect.name} builtins")
  path = keep(build_shared(name, build))
  native.load_global(path)
  return path

# ---------------- running ----------------

def _threads() -> int:
  if EMU_THREADS.value > 0: return int(EMU_THREADS.value)
  return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))

class EmulatorProgram:
  """`prg(*buffers, global_size=, local_size=, vals=, wait=)`: global_size counts work-groups, as in the ProgramSpec."""
  def __init__(self, compiler: EmulatorCompiler, spec: ProgramSpec, lib: bytes):
    dialect = compiler.dialect
    self.name, self.spec = spec.name, spec
    self.lib = ctypes.CDLL(compiler.path_for(lib))
    self.entry = ctypes.cast(self.lib.tp_entry, ctypes.c_void_p).value
    self.fibers = dialect.uses_barrier(spec.src)
    self.serial_groups = dialect.uses_local_memory(spec.src)
    params = sorted((u for u in spec.uops if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
    # (element size, name) of each buffer parameter: from the program, or from the source's signature (hand-written)
    self.param_types = [(u.dtype.base.scalar().itemsize, u.dtype.base.scalar().name) for u in params] or \
      [(C_TYPE_SIZES.get(t, 1), t) for t in dialect.pointer_types(spec.src)]

  def __call__(self, *bufs: HostMemory, global_size=(1, 1, 1), local_size=None, vals=(), wait=False) -> float | None:
    import time
    handles = [_Arg(b, *(self.param_types[i] if i < len(self.param_types) else (1, "bytes"))) for i, b in enumerate(bufs)]
    local = tuple(local_size) if local_size is not None else (1, 1, 1)
    if any(int(d) < 1 for d in (*global_size, *local)):   # a GPU driver refuses one too (CUDA_ERROR_INVALID_VALUE)
      raise ValueError(f"kernel {self.name}: launch grid {tuple(global_size)} x work-group {local} has an empty dimension")
    order = str(EMU_ORDER.value)
    start = time.perf_counter()
    if order == "check": self._run_checked(handles, vals, global_size, local)
    else: self._run(handles, vals, global_size, local, order)
    return time.perf_counter() - start if wait else None

  def _run(self, handles, vals, groups, local, order: str) -> None:
    if order not in native.ORDERS:
      raise ValueError(f"EMU_ORDER={order!r} is not one of forward, reverse, shuffle, check")
    opts = LaunchOptions(order=order, seed=int(EMU_SEED.value), threads=_threads(), stack_bytes=int(EMU_STACK_KB.value) << 10)
    native.launch(self.name, self.entry, handles, vals, groups, local, self.fibers, self.serial_groups, opts)

  def _run_checked(self, handles, vals, groups, local) -> None:
    """Forward, reverse and shuffled order from the same inputs: any difference in what they write is an error."""
    outs = sorted({i for i in self.spec.outs if i < len(handles)} or range(len(handles)))
    before = {i: handles[i].mem.view().copy() for i in outs}
    results = {}
    # forward first: it is the order most likely to read local memory before another work-item wrote it, and what the
    # first run finds there is left over from other kernels, not this kernel's own right answers
    for order in ("forward", "reverse", "shuffle"):
      for i in outs: handles[i].mem.view()[:] = before[i]
      self._run(handles, vals, groups, local, order)
      results[order] = {i: handles[i].mem.view().copy() for i in outs}
    for i in outs: handles[i].mem.view()[:] = results["forward"][i]   # what the launch leaves: forward order's
    for order in ("reverse", "shuffle"):
      for i in outs:
        a, b = results["forward"][i], results[order][i]
        if not np.array_equal(a, b):
          h = handles[i]
          first = int(np.flatnonzero(a != b)[0]) // max(h.itemsize, 1)
          raise EmulatorError("order", f"kernel {self.name} writes different results in forward and {order} work-item "
                              f"order: buffer {i} ({h.size} x {h.dtype_name}) first differs at index {first} "
                              "(a missing barrier, or work-items racing on one address)")

class _Arg:
  """A buffer argument as the launch sees it: address, guarded mapping, element size and dtype for messages."""
  __slots__ = ("mem", "address", "nbytes", "lo", "hi", "itemsize", "size", "dtype_name")
  def __init__(self, mem: HostMemory, itemsize: int, dtype_name: str):
    self.mem, self.address, self.nbytes, self.lo, self.hi = mem, mem.address, mem.nbytes, mem.lo, mem.hi
    self.itemsize, self.dtype_name = max(itemsize, 1), dtype_name
    self.size = self.nbytes // self.itemsize

class EmulatorDevice(Compiled):
  """`MOCK+CL`: the CL renderer's OpenCL C, compiled by clang for the host and run on the emulator. `MOCK+CUDA:PTX`
  names another renderer of the device (one the emulator has a dialect for)."""
  def __init__(self, name: str):
    base, _, option = name.partition(":")
    base = base.upper()
    target = base.partition("+")[2]
    self.dialect = dialect_for(target, option.upper() or None)
    renderer = _renderer_for(target, self.dialect)
    renderer.device = base    # search timing and cache keys see the emulated device, not the real one
    super().__init__(name, EmulatorAllocator(), renderer, EmulatorCompiler(self.dialect))
    if DEBUG >= 1: print(f"{name}: {self.describe()}")

  def make_program(self, spec: ProgramSpec, lib: bytes) -> Callable[..., float | None]:
    return EmulatorProgram(self.compiler, spec, lib)

  def describe(self) -> str:
    return (f"{self.dialect.name} kernels compiled by {self.compiler.clang_version}, run as fibers on {_threads()} "
            f"host thread(s), work-item order {EMU_ORDER.value}" + (", bounds checked" if EMU_BOUNDS.value else ""))

def _renderer_for(target: str, dialect: Dialect):
  """The registered renderer of the real device, configured as the emulated device (falls back to its defaults)."""
  from tinyplug.plugins import get_plugin_manager
  pm = get_plugin_manager()
  found = [spec for spec, _ in pm.renderers_for(target) if dialect.renderer in (None, spec.name)]
  if not found:
    which = f"the {dialect.renderer} renderer for device {target}" if dialect.renderer else f"a renderer for device {target}"
    raise RuntimeError(f"no active plugin provides {which}: install the plugin that provides it")
  factory = pm.load_factory(found[0].factory)
  try: return factory(**dialect.renderer_options)
  except TypeError: return factory()
