"""The CPU device: 64-byte aligned host memory, objects JIT-loaded with MCJIT, kernels called through ctypes; a large
one runs on every core through the process's thread pool (threads.py).

`DEV=CPU` (or `CPU:LLVM`) uses the host CPU and all its features; `DEV=CPU:LLVM:<cpu>,<+feature,...>` overrides
them, e.g. `CPU:LLVM:znver4,+avx2`, or `CPU:LLVM:x86-64` for a baseline build."""
from __future__ import annotations
import ctypes, functools, time
from typing import Any, Callable
import numpy as np
from tinyplug.device import Allocator, Compiled, ProgramSpec
from tinyplug.backend import host_block, host_view
from tinyplug.helpers import DEBUG, worker_thread
from tinyplug_cpu_llvm.compiler import LLVM_LOCK, LLVMCompiler, init_llvm, make_target_machine, symbol_for
from tinyplug_cpu_llvm.elf import undefined_symbols
from tinyplug_cpu_llvm.machine import data_caches, n_threads, vector_registers
from tinyplug_cpu_llvm.renderer import LLVMRenderer
from tinyplug_cpu_llvm.threads import MAX_SHARES, NativeThreadPool, pool

ALIGN = 64
# kernels with fewer loop-body executions than this run on one thread: waking the pool costs more than it saves
PARALLEL_MIN_WORK = 1 << 16
# ... unless the workers are still awake from the last parallel kernel (they wait a while for the next one): then a
# share starts within a microsecond and kernels from this size on split (conv2d's pad kernel: 36 -> 27 us)
PARALLEL_MIN_WORK_AWAKE = 1 << 14
# ... or whose buffers hold at least this many bytes, one thread per half of it, each with BYTES_SHARE_MIN_WORK loop
# bodies or more (a slice of a big tensor is not worth waking anyone for): a few wide bodies can move a lot (packing B
# for a 2048 matmul: 16 x 2048 bodies of 128 floats, 32 MB, ran on 1-4 of 16 cores in 0.9-2.8 ms)
PARALLEL_MIN_BYTES, BYTES_SHARE_MIN_WORK = 1 << 20, 256
# ... and a kernel that splits by work or bytes gets at least one thread per this many ALU operations (the kernel's
# estimate): loop bodies undercount a tiled kernel, each body a tile of 8 x 32 products (linear 64x9216 -> 128, 150M
# operations in 295K bodies, 1.6 ms on one Zen 4 core: 13 of 16 threads by bodies, so 32 rows split 3 to 2)
PARALLEL_OPS_PER_THREAD = 1 << 20
# ... and at least one thread per this much of its last run's time on all its threads (wall time x threads), no more
# than its shared loop has rows: bodies, bytes and operations undercount kernels of strided loads or long dependency
# chains (q @ k^T's packing of k: 14K bodies, 6 MB, 0.6 ms on one Zen 4 core, 12 of 16 threads; cumsum(1)'s scan of
# block totals: 34K bodies, 0.13 ms, 8 of 16)
PARALLEL_SHARE_S = 10e-6
# a parallel kernel is cut into up to this many shares per thread, each taking about SHARE_MIN_S or more by its last
# run: a thread done with its own shares takes the others' that are still open, so a worker that starts late or loses
# its core to another process for a while leaves most of its part to the rest (a share costs 0.5-1 us more, its call
# and loop set-up: under 0.5% of a share this long)
SHARES_PER_THREAD, SHARE_MIN_S = 8, 200e-6

def threads_for_time(cpu_s: float, rows: int) -> int:
  """The threads a parallel kernel that took `cpu_s` seconds on all its threads gets at least (one per
  PARALLEL_SHARE_S), no more than its shared loop's `rows`."""
  return min(int(cpu_s / PARALLEL_SHARE_S), rows)

# ---------------- memory ----------------

_addressof, _byte_at = ctypes.addressof, ctypes.c_byte.from_buffer

class CPUMemory:
  """A 64-byte aligned block of host memory (a numpy byte array) and its address."""
  __slots__ = ("array", "addr", "nbytes")
  def __init__(self, nbytes: int):
    raw = host_block(nbytes + ALIGN)   # calloc or mmap: pages are zeroed lazily by the OS
    base = _addressof(_byte_at(raw))   # (numpy's .ctypes.data costs ~1 us: every small output pays it)
    off = (-base) % ALIGN
    self.array = raw[off:off + nbytes]
    self.addr, self.nbytes = base + off, nbytes
  def __repr__(self) -> str: return f"<CPUMemory {self.nbytes} bytes at {self.addr:#x}>"
  @classmethod
  def over(cls, address: int, nbytes: int) -> CPUMemory:
    """Memory someone else allocated (Tensor.from_blob): used in place, never freed here."""
    self = cls.__new__(cls)
    self.array, self.addr, self.nbytes = host_view(address, nbytes), address, nbytes
    return self

class CPUAllocator(Allocator):
  reuse_small = 64   # a loop of tiny ops reuses its outputs' blocks (a new one costs ~1.5 us: numpy, address, slice)
  def alloc(self, nbytes: int) -> CPUMemory: return CPUMemory(nbytes)
  def wrap(self, address: int, nbytes: int) -> CPUMemory: return CPUMemory.over(address, nbytes)
  def clear(self, handle: CPUMemory, nbytes: int) -> None: handle.array[:nbytes] = 0
  def copyin(self, dest: CPUMemory, src: memoryview) -> None:
    dest.array[:len(src)] = np.frombuffer(src, dtype=np.uint8)
  def copyout(self, dest: memoryview, src: CPUMemory) -> None:
    np.frombuffer(dest, dtype=np.uint8)[:] = src.array[:len(dest)]

def _address(handle: Any) -> int:
  if isinstance(handle, CPUMemory): return handle.addr
  if isinstance(handle, np.ndarray): return handle.ctypes.data
  if isinstance(handle, int): return handle
  raise TypeError(f"not CPU memory: {type(handle).__name__}")

# ---------------- programs ----------------

# a kernel compiled at O0 for its size (compiler.QUICK_WORK: its first result in a few ms, not 60-270) that runs over
# and over, as a loop of small ops runs it, is compiled again with the full pipeline on a thread of its own once it has
# run TIER_UP_CALLS times, and its launchers call that code once it is loaded (the caller never waits for the
# compile): at O0 the values go through memory (row sums of 128x10 on a Zen 3 core ~2.3 -> ~0.9 us a call)
TIER_UP_CALLS = 2000
_TIER_UP_NOTE = "\n; compiled again with the full pipeline\n"   # (another source: another symbol to load)

class CPUProgram:
  def __init__(self, device: CPUDevice, spec: ProgramSpec, lib: bytes):
    self.device, self.name = device, spec.name
    addr = device.load(symbol_for(spec.src), lib)
    n_bufs = spec.buffer_count   # not from spec.uops: a program read from the codegen cache decodes those lazily
    argtypes = [ctypes.c_void_p] * n_bufs + [ctypes.c_int64 if v.dtype.itemsize == 8 else ctypes.c_int32
                                             for v in spec.vars] + [ctypes.c_int32, ctypes.c_int32]
    self._proto = ctypes.CFUNCTYPE(None, *argtypes)
    self.fn = self._proto(addr)
    # runs left before the full pipeline's compile is started (0: never, this is its code), and that compile
    self.calls_left = TIER_UP_CALLS if isinstance(c := device.compiler, LLVMCompiler) and c.is_quick(spec) else 0
    self._tier_up: Any = None
    self.n_bufs, self.n_vars = n_bufs, len(spec.vars)
    self.splittable, self.work, self.thread_opt = bool(spec.thread_split), int(spec.work or 0), spec.thread_parts
    nbytes = int((spec.estimates or {}).get("mem", 0))   # shares by bytes: fixed per program, worked out once
    self.byte_shares = min(nbytes // (PARALLEL_MIN_BYTES // 2), self.work // BYTES_SHARE_MIN_WORK) \
      if nbytes >= PARALLEL_MIN_BYTES else 1
    self.ops_shares = int((spec.estimates or {}).get("ops", 0)) // PARALLEL_OPS_PER_THREAD
    self.last_s, self.last_threads = 0.0, 1   # the last run's wall time and the threads it ran on
    self._spec, self._rows = spec, None   # rows: the shared loop's trip count, read from the spec when first needed

  def count_call(self) -> None:
    """One more run of a kernel compiled at O0: the TIER_UP_CALLS-th hands its full compile to the tier-up thread; a run
    after that compile is done loads it, and every launcher calls it from then on (`fn`)."""
    if (job := self._tier_up) is None:
      self.calls_left -= 1
      if self.calls_left == 1:
        self._tier_up = worker_thread("tinyplug-cpu-tier-up").submit(self.device.compiler.compile_tier_up,
                                                                      self._spec.src + _TIER_UP_NOTE)
    elif job.done():
      self.calls_left = 0
      src = self._spec.src + _TIER_UP_NOTE
      try: self.fn = self._proto(self.device.load(symbol_for(src), job.result()))
      except Exception: pass   # (the O0 code stays: it computes the same)

  def threads(self) -> int:
    if not self.splittable: return 1
    # an explicit THREAD action: its axis (the outermost loop) has that many shares, at most one per thread
    if self.thread_opt is not None: return max(1, min(n_threads(), self.thread_opt))
    if self.work < PARALLEL_MIN_WORK_AWAKE: split = self.byte_shares
    else:
      least = PARALLEL_MIN_WORK_AWAKE if self.device.pool.awake() else PARALLEL_MIN_WORK
      split = max(self.work // (least // 2) if self.work >= least else 1, self.byte_shares)
      if split > 1: split = max(split, self.ops_shares)
    if split <= 1: return 1
    if split >= (n := n_threads()): return n
    return min(n, max(split, threads_for_time(self.last_s * self.last_threads, self.shared_rows())))

  def shares_per_thread(self, threads: int) -> int:
    """How many shares each of `threads` threads gets: as many of SHARE_MIN_S as the last run took, 1 to
    SHARES_PER_THREAD, no more than the shared loop has rows (and MAX_SHARES in all). A THREAD axis has its parts and no
    more (the heuristic's: 1, 2 or 4 per thread)."""
    per = min(SHARES_PER_THREAD if self.thread_opt is None else self.thread_opt // threads,
              int(self.last_s / SHARE_MIN_S), MAX_SHARES // threads)
    return max(1, min(per, self.shared_rows() // threads)) if per > 1 else 1

  def shared_rows(self) -> int:
    """Iterations of the loop the threads share (shares beyond them would be empty calls); a large number when its
    end is not a constant."""
    if self._rows is None:   # (a program read from the codegen cache knows it without building its UOps)
      self._rows = MAX_SHARES if (trips := self._spec.shared_trips) is None else trips
    return self._rows

  def launcher(self, global_size=None, local_size=None) -> Callable[[list, tuple], None] | None:
    """(handles, vals) -> None for a kernel that always runs on one thread (a small one): the ctypes function called
    straight, without the per-call checks and timing of __call__ (a realize plan's tiny op). None: use __call__."""
    if self.splittable and (self.thread_opt is not None or self.work >= PARALLEL_MIN_WORK_AWAKE or self.byte_shares > 1):
      return None
    n_bufs, n_vars, name = self.n_bufs, self.n_vars, self.name
    if (unpacked := _UNPACKED_LAUNCHERS.get((n_bufs, n_vars))) is not None: return unpacked(self, name)
    def launch(handles: list, vals: tuple) -> None:
      if len(handles) != n_bufs or len(vals) != n_vars: _wrong_arguments(name, n_bufs, handles, vals, n_vars)
      args = [b.addr if type(b) is CPUMemory else _address(b) for b in handles]
      if vals: args += [int(v) for v in vals]
      self.fn(*args, 0, 1)
      if self.calls_left: self.count_call()
    return launch

  def __call__(self, *bufs: Any, global_size=None, local_size=None, vals=(), wait=False) -> float:
    if len(bufs) != self.n_bufs or len(vals) != self.n_vars:   # extra arguments would land in the thread slots
      _wrong_arguments(self.name, self.n_bufs, bufs, vals, self.n_vars)
    args = [b.addr if type(b) is CPUMemory else _address(b) for b in bufs]   # (CPUMemory: no call per buffer)
    if vals: args += [int(v) for v in vals]
    n = self.threads()
    st = time.perf_counter()
    if n == 1: self.fn(*args, 0, 1)
    else:
      per = self.shares_per_thread(n)
      self.device.pool.run(self.fn, args, n * per, per)
    if self.calls_left: self.count_call()
    self.last_s = took = time.perf_counter() - st
    self.last_threads = n
    return took

def _wrong_arguments(name: str, n_bufs: int, handles: list, vals: tuple, n_vars: int = 0) -> None:
  raise ValueError(f"kernel {name} takes {n_bufs} buffers and {n_vars} values, got {len(handles)} and {len(vals)}")

# launchers of the usual small kernels (one to three buffers, no values; two buffers and a value): the addresses passed as they are, without
# building an argument list (~0.3 us of a ~0.9 us tiny op's call); each reads the program's `fn` per call and counts the
# runs of an O0 kernel until its full compile is loaded
def _launch1(prg: CPUProgram, name: str) -> Callable[[list, tuple], None]:
  def launch(handles: list, vals: tuple) -> None:
    if vals or len(handles) != 1: _wrong_arguments(name, 1, handles, vals)
    (a,) = handles
    prg.fn(a.addr if type(a) is CPUMemory else _address(a), 0, 1)
    if prg.calls_left: prg.count_call()
  return launch

def _launch2(prg: CPUProgram, name: str) -> Callable[[list, tuple], None]:
  def launch(handles: list, vals: tuple) -> None:
    if vals or len(handles) != 2: _wrong_arguments(name, 2, handles, vals)
    a, b = handles
    prg.fn(a.addr if type(a) is CPUMemory else _address(a), b.addr if type(b) is CPUMemory else _address(b), 0, 1)
    if prg.calls_left: prg.count_call()
  return launch

def _launch3(prg: CPUProgram, name: str) -> Callable[[list, tuple], None]:
  def launch(handles: list, vals: tuple) -> None:
    if vals or len(handles) != 3: _wrong_arguments(name, 3, handles, vals)
    a, b, c = handles
    prg.fn(a.addr if type(a) is CPUMemory else _address(a), b.addr if type(b) is CPUMemory else _address(b),
           c.addr if type(c) is CPUMemory else _address(c), 0, 1)
    if prg.calls_left: prg.count_call()
  return launch

def _launch2v1(prg: CPUProgram, name: str) -> Callable[[list, tuple], None]:
  def launch(handles: list, vals: tuple) -> None:   # (a parameter plan's `x * k`: one value)
    if len(vals) != 1 or len(handles) != 2: _wrong_arguments(name, 2, handles, vals, 1)
    a, b = handles
    prg.fn(a.addr if type(a) is CPUMemory else _address(a), b.addr if type(b) is CPUMemory else _address(b),
           int(vals[0]), 0, 1)
    if prg.calls_left: prg.count_call()
  return launch

# (buffers, values) -> its launcher maker
_UNPACKED_LAUNCHERS = {(1, 0): _launch1, (2, 0): _launch2, (3, 0): _launch3, (2, 1): _launch2v1}

# ---------------- the device ----------------

@functools.cache
def load_compiler_runtime() -> None:
  """libgcc's helpers into the process, for what LLVM lowers to calls on targets without the instruction (half
  conversions without F16C: `__truncsfhf2`, `__extendhfsf2`)."""
  import ctypes.util
  if (path := ctypes.util.find_library("gcc_s")) is None: return
  try: init_llvm().load_library_permanently(path)
  except RuntimeError: pass

def vector_math_isas(features: str) -> tuple[str, ...]:
  """The libmvec ISA variants usable on this target, after loading libmvec into the process (x86-64 glibc only)."""
  import ctypes.util, platform
  if platform.machine().lower() not in ("x86_64", "amd64"): return ()
  path = ctypes.util.find_library("mvec")
  if path is None: return ()
  try: init_llvm().load_library_permanently(path)
  except RuntimeError: return ()
  flags = set(features.split(","))
  isas = ["b"] if "+sse4.2" in flags or "+avx2" in flags else []
  if "+avx2" in flags: isas.append("d")
  if "+avx512f" in flags: isas.append("e")
  return tuple(isas)

def parse_device(name: str) -> tuple[str | None, str | None]:
  """`CPU`, `CPU:LLVM` -> host; `CPU:LLVM:znver4,+avx2,-avx512f` -> ("znver4", "+avx2,-avx512f")."""
  parts = name.split(":", 2)
  if len(parts) < 3 or not parts[2]: return None, None
  cpu, _, features = parts[2].partition(",")
  return cpu or None, features if features else ("" if cpu else None)

class CPUDevice(Compiled):
  def __init__(self, name: str = "CPU"):
    cpu, features = parse_device(name)
    compiler = LLVMCompiler(cpu, features)
    load_compiler_runtime()
    renderer = LLVMRenderer(vector_math_isas(compiler.features), data_caches(), vector_registers(compiler.features))
    super().__init__(name, CPUAllocator(), renderer, compiler)
    self._engine = None
    self._loaded: dict[str, int] = {}
    self._lock = LLVM_LOCK

  def make_graph(self, launches: list) -> Any:
    """TinyJit's runs of one-thread kernels as one native call each (graph.py); JIT_GRAPH=0 turns it off."""
    from tinyplug_cpu_llvm.graph import CPUGraph
    return CPUGraph(self, launches)

  def load(self, symbol: str, obj: bytes) -> int:
    """The address of `symbol` after loading the object that defines it (each object is loaded once)."""
    with self._lock:
      if (addr := self._loaded.get(symbol)) is not None: return addr
      llvm = init_llvm()
      if self._engine is None:
        # the engine takes ownership of its own TargetMachine; objects are added to it one by one
        tm = make_target_machine(self.compiler.cpu, self.compiler.features)
        self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
      # MCJIT binds a symbol no library defines to address 0: the kernel would jump there
      if missing := [name for name in undefined_symbols(obj) if not llvm.address_of_symbol(name)]:
        raise RuntimeError(f"CPU: kernel {symbol} calls {', '.join(missing)}, which no library loaded in this process "
                           f"defines (target {self.compiler.cpu})")
      self._engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
      self._engine.finalize_object()
      addr = self._engine.get_function_address(symbol)
      if not addr: raise RuntimeError(f"CPU: symbol {symbol} not found in the compiled object")
      self._loaded[symbol] = addr
      if DEBUG >= 6: print(f"CPU: loaded {symbol} at {addr:#x}")
      return addr

  def describe(self) -> str:
    from tinyplug_cpu_llvm.plugin import CPU_SPIN_US
    llvm = ".".join(map(str, init_llvm().llvm_version_info))
    kind = f"native pool, idle spin {CPU_SPIN_US.value} us" if isinstance(self.pool, NativeThreadPool) else "Python pool"
    return f"LLVM {llvm} for {self.compiler.cpu}, {n_threads()} threads ({kind})"

  @property
  def pool(self):
    """The process's worker threads (shared by every CPU device); their trampolines come from this device's object
    cache."""
    if isinstance(p := pool(), NativeThreadPool) and p.load_ir is None: p.load_ir = self.load_ir
    return p

  def load_ir(self, src: str) -> int:
    """The address of the one function of LLVM IR `src`, compiled once and kept with the kernels' objects (on disk
    too), at O0 (a few loads and a call): the thread pool's trampolines."""
    return self.load(symbol_for(src), self.compiler.compile_cached(src, quick=True))

  def make_program(self, spec: ProgramSpec, lib: bytes) -> Callable[..., float]: return CPUProgram(self, spec, lib)
