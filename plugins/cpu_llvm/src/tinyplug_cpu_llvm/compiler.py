"""LLVM IR -> a relocatable object for the host CPU, with llvmlite; cached in memory and in SQLite on disk (checked).

The object's one function is renamed to `symbol_for(src)` (a hash of the source), so every program can live in the
same JIT engine without name clashes; the runtime looks it up by that name."""
from __future__ import annotations
import hashlib, os, threading, time
from tinyplug.device import Compiler
from tinyplug.diskcache import SealedTable
from tinyplug.caches import BoundedCache
from tinyplug.helpers import CACHELEVEL, DEBUG, KERNEL_CACHE_SIZE
from tinyplug_cpu_llvm import __version__

_init_lock = threading.Lock()
# every call into LLVM (compiling, loading objects into the JIT) holds this: LLVM state is not thread-safe to share
LLVM_LOCK = threading.RLock()
# a fork while another thread compiles (runtime's tier-up thread) would leave the child's lock held by a thread it does
# not have: the fork waits for that compile instead
if hasattr(os, "register_at_fork"):
  os.register_at_fork(before=LLVM_LOCK.acquire, after_in_parent=LLVM_LOCK.release, after_in_child=LLVM_LOCK.release)
_initialized = False

def init_llvm():
  """Load llvmlite and initialise the native target once per process."""
  global _initialized
  import llvmlite.binding as llvm
  with _init_lock:
    if not _initialized:
      llvm.initialize_native_target()
      llvm.initialize_native_asmprinter()
      llvm.initialize_native_asmparser()
      _initialized = True
  return llvm

def symbol_for(src: str) -> str:
  """The name of the compiled function: unique per source."""
  return "tpk_" + hashlib.sha256(src.encode()).hexdigest()[:24]

def host_target() -> tuple[str, str]:
  llvm = init_llvm()
  return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()

def make_target_machine(cpu: str, features: str, opt: int = 3):
  llvm = init_llvm()
  target = llvm.Target.from_triple(llvm.get_process_triple())
  # large code model: the JIT maps code and constants wherever memory is free, often more than 2 GB apart in a
  # long-lived process (RIP-relative 32-bit offsets then overflow and RuntimeDyld aborts); 64-bit addresses always fit
  return target.create_target_machine(cpu=cpu, features=features, opt=opt, reloc="static", codemodel=CODE_MODEL)

CODE_MODEL = "large"

# compiled objects on disk, each row checked against its digest before it is loaded (tinyplug.diskcache)
DISK_CACHE = SealedTable("cpu_llvm.sqlite", "cpu_llvm_objects_v2", "cpu_llvm")

# kernels with at most this many loop-body executions (the renderer's `work`) compile at O0
QUICK_WORK = 1024

def _quick(spec) -> bool: return spec.work is not None and spec.work <= QUICK_WORK

class LLVMCompiler(Compiler):
  """Optimises LLVM IR with the O3 pipeline (loop and SLP vectorisation) for `cpu`/`features` and emits an object."""
  compiles = 0          # LLVM compilations in this process (cache misses), for tests and DEBUG
  tier_ups = 0          # ... of them, those on the tier-up thread (not in `compiles`: they land at any time)
  background = True     # LLVM releases the GIL; LLVM_LOCK guards compiles, _memory_lock the object cache

  def __init__(self, cpu: str | None = None, features: str | None = None, opt: int = 3):
    llvm = init_llvm()
    host_cpu, host_features = host_target()
    self.cpu = cpu or host_cpu
    self.features = host_features if features is None else features
    if cpu and not self.features:
      from tinyplug_cpu_llvm.machine import implied_features
      self.features = implied_features(make_target_machine(self.cpu, "", opt))
    if "+avx512f" in self.features.split(",") and "prefer-no-gather" not in self.features:
      # AVX-512 gathers/scatters are slow (microcoded on Zen 4): let the vectorisers shuffle instead
      self.features += ",+prefer-no-gather,+prefer-no-scatter"
    self.opt = opt
    self.tm = make_target_machine(self.cpu, self.features, opt)
    self._quick_tm = None   # for kernels too small to be worth optimising (see QUICK_WORK)
    self._lock = LLVM_LOCK
    # the object cache is read by the engine's compile thread and the caller's; LLVM_LOCK is held through whole
    # compiles, so a lookup beside one takes this lock instead
    self._memory_lock = threading.Lock()
    # key -> object, least recently used dropped first (a kernel per distinct constant must not pile up forever)
    self._memory: BoundedCache = BoundedCache("cpu_llvm.objects", KERNEL_CACHE_SIZE.value)
    version = ".".join(map(str, llvm.llvm_version_info))
    import llvmlite
    self.cachekey = (f"cpu_llvm-{__version__}-llvm{version}-llvmlite{llvmlite.__version__}-{self.cpu}-{self.features}-O{opt}"
                     f"-{CODE_MODEL}-quick{QUICK_WORK}")

  def __reduce__(self):   # rebuilt from its settings in BEAM's compile workers (a TargetMachine does not pickle)
    return type(self), (self.cpu, self.features, self.opt)

  def key(self, src: str, quick: bool = False) -> str:
    return hashlib.sha256(f"{self.cachekey}{'-quick' if quick else ''}\n{src}".encode()).hexdigest()

  def compile(self, src: str, quick: bool = False, tier_up: bool = False) -> bytes:
    """An object for `src`; `quick` (a kernel with little work) builds it without optimisation, in a few ms."""
    llvm = init_llvm()
    with self._lock:   # a TargetMachine is not safe to share between threads
      st = time.perf_counter()
      mod = llvm.parse_assembly(src)
      mod.verify()
      fns = [f for f in mod.functions if not f.is_declaration]
      if len(fns) != 1: raise ValueError(f"expected one function in the module, found {len(fns)}")
      fns[0].name = symbol_for(src)
      tm = self._optimize(mod, quick)
      obj = tm.emit_object(mod)
      if tier_up: LLVMCompiler.tier_ups += 1
      else: LLVMCompiler.compiles += 1
      if DEBUG >= 5: print(f"cpu_llvm: compiled {symbol_for(src)} in {(time.perf_counter()-st)*1e3:.2f} ms\n{mod}")
    return obj

  def _optimize(self, mod, quick: bool):
    """Run the tier's pass pipeline on `mod` in place; returns the TargetMachine that emits it."""
    llvm = init_llvm()
    opt, tm = self._tier(quick)
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=opt)
    pto.loop_vectorization = pto.slp_vectorization = pto.loop_unrolling = pto.loop_interleaving = opt >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return tm

  def optimized_ir(self, src: str, quick: bool = False) -> str:
    """The IR `compile` would emit for `src`, as text (for tests and for looking at what the optimiser did)."""
    llvm = init_llvm()
    with self._lock:
      mod = llvm.parse_assembly(src)
      self._optimize(mod, quick)
      return str(mod)

  def _tier(self, quick: bool):
    """(IR opt level, TargetMachine): O0 for a quick kernel, else the configured level."""
    if self.opt == 0 or not quick: return self.opt, self.tm
    if self._quick_tm is None: self._quick_tm = make_target_machine(self.cpu, self.features, 0)
    return 0, self._quick_tm

  def is_quick(self, spec) -> bool:
    """Whether compile_program builds `spec` at O0 (and the full pipeline would build it otherwise)."""
    return self.opt != 0 and _quick(spec)

  def compile_program(self, spec) -> bytes:
    """A kernel whose loop bodies run at most QUICK_WORK times in all (`spec.work`) compiles at O0: its run takes
    microseconds either way, while O3 takes 60-270 ms to compile it (one run over and over is compiled again with the
    full pipeline on a thread: runtime.TIER_UP_CALLS). Hand-written IR (compile_cached) counts as big."""
    return self.compile_cached(spec.src, quick=_quick(spec))

  def cached_program(self, spec) -> bytes | None:
    return self._stored_object(self.key(spec.src, _quick(spec)))

  def cached_programs(self, specs: list) -> list[bytes | None]:
    """cached_program of each spec, those not in memory read from disk in one query (a warm schedule's kernels)."""
    keys = [self.key(s.src, _quick(s)) for s in specs]
    with self._memory_lock: objs = {k: o for k in keys if (o := self._memory.get_lru(k)) is not None}
    if CACHELEVEL >= 1 and (missing := [k for k in dict.fromkeys(keys) if k not in objs]):
      read = DISK_CACHE.get_many(missing)
      with self._memory_lock:
        for k, o in read.items(): self._memory.put(k, o)
      objs.update(read)
    return [objs.get(k) for k in keys]

  def _stored_object(self, key: str) -> bytes | None:
    """The object under `key` from memory or disk; None: not compiled before."""
    with self._memory_lock: obj = self._memory.get_lru(key)
    if obj is None and CACHELEVEL >= 1 and (obj := DISK_CACHE.get(key)) is not None:
      with self._memory_lock: self._memory.put(key, obj)
    return obj

  def compile_tier_up(self, src: str) -> bytes:
    """compile_cached(src) for runtime's tier-up thread, kept in memory only: a write to the disk cache would land at
    any time (a cache trim or a test measuring the cache between two of its own steps)."""
    key = self.key(src)
    with self._memory_lock: obj = self._memory.get_lru(key)
    if obj is None:
      obj = self.compile(src, tier_up=True)
      with self._memory_lock: self._memory.put(key, obj)
    return obj

  def compile_cached(self, src: str, quick: bool = False) -> bytes:
    key = self.key(src, quick)
    if (obj := self._stored_object(key)) is not None: return obj
    obj = self.compile(src, quick)
    with self._memory_lock: self._memory.put(key, obj)
    if CACHELEVEL >= 1: DISK_CACHE.put(key, obj)
    return obj
