"""Worker threads for the CPU device: `pool().run(fn, args, n, per)` calls the kernel `fn(*args, share, n)` once for
every share in 0..n-1, on the calling thread and the workers at once, and returns when all are done. Thread t's own
shares are the block [t*per, (t+1)*per): per=1 is one share per thread.

The native pool (Linux on x86-64 and aarch64) keeps its workers in JIT-compiled code that never touches the GIL:
an idle worker spins on a job counter for CPU_SPIN_US (pausing at first, then yielding its core to anyone else
who wants it) and then sleeps on a futex. A kernel that follows another within that time starts on every core
within a microsecond or so; waking a sleeping thread through Python and the OS took 10-140 us here, more than a
third of a 200 us kernel. Each thread, the calling one included, takes the shares of its own block in order, then
those still open in the others' blocks: a worker that is late (waking, or waiting for a core that other processes
hold) leaves its shares to whoever is free, and the caller waits only for shares already running, never for a thread
that has not started (with shares fixed per thread, a busy machine made 2 threads slower than 1). On an idle machine
every thread does its own block, the rows a fixed split gives it. Elsewhere, or if the native pool cannot be built, a
plain Python pool does the job."""
from __future__ import annotations
import atexit, ctypes, os, platform, queue, sys, threading, time
from typing import Any, Callable
from tinyplug.helpers import DEBUG
from tinyplug_cpu_llvm.plugin import CPU_SPIN_US

def _blocks(n: int, per: int) -> int:
  if per < 1 or n < 1 or n % per: raise ValueError(f"{n} shares do not make blocks of {per}")
  return n // per

class PyThreadPool:
  """Workers that block on queues (portable; each job pays the OS's thread wake-up)."""
  def __init__(self):
    self.workers: list[queue.SimpleQueue] = []
    self.done: queue.SimpleQueue = queue.SimpleQueue()
    self.lock = threading.Lock()
    self.pid = os.getpid()

  def _grow(self, n: int) -> None:
    if self.pid != os.getpid():   # a forked child has none of the parent's threads: start over
      self.workers, self.done, self.pid = [], queue.SimpleQueue(), os.getpid()
    while len(self.workers) < n - 1:
      q: queue.SimpleQueue = queue.SimpleQueue()
      threading.Thread(target=self._work, args=(q,), daemon=True, name=f"tinyplug-cpu-{len(self.workers)+1}").start()
      self.workers.append(q)

  def _work(self, q: queue.SimpleQueue) -> None:
    while True:
      fn, args, first, per, n = q.get()
      try:
        for share in range(first, first + per): fn(*args, share, n)
        self.done.put(None)
      except BaseException as e: self.done.put(e)

  def awake(self) -> bool: return False   # its workers sleep between jobs

  def run(self, fn: Callable, args: list, n: int, per: int = 1) -> None:
    """n shares in blocks of `per`, one block per thread (no taking of another's shares here)."""
    blocks = _blocks(n, per)
    with self.lock:   # one parallel kernel at a time
      self._grow(blocks)
      for t in range(1, blocks): self.workers[t - 1].put((fn, args, t * per, per, n))
      err = None
      try:
        for share in range(per): fn(*args, share, n)
      except BaseException as e: err = e
      for _ in range(1, blocks):
        if (e := self.done.get()) is not None and err is None: err = e
      if err is not None: raise err

# ---------------- the native pool ----------------

# the shared state, one cache line per field that different threads write
GEN, DONE, SLEEPERS, STOP, EXITED, JOB, SPIN, FLAGS = 0, 64, 128, 192, 256, 320, 384, 448   # byte offsets
MAX_SHARES = 256   # a job's shares, each with an i64 flag from FLAGS on
STATE_BYTES = FLAGS + 8 * MAX_SHARES
_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98}
_PAUSE = {"x86_64": "pause", "amd64": "pause", "aarch64": "yield", "arm64": "yield"}
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129

def _pool_ir(futex_nr: int, pause: str) -> str:
  # job: tramp ptr @JOB, fn ptr @JOB+8, argv ptr @JOB+16, shares n i32 @JOB+24, shares per block i32 @JOB+28;
  # SPIN: spin ns i64, pause-only ns i64; DONE: shares finished; FLAGS: i64 per share (generation*2, +1 once taken)
  return f"""
declare i32 @sched_yield()
declare i64 @syscall(i64, ...)
declare i32 @clock_gettime(i32, ptr)

define internal i64 @now_ns() {{
  %ts = alloca [2 x i64], align 8
  call i32 @clock_gettime(i32 1, ptr %ts)
  %s = load i64, ptr %ts, align 8
  %p = getelementptr i64, ptr %ts, i64 1
  %ns = load i64, ptr %p, align 8
  %s9 = mul i64 %s, 1000000000
  %t = add i64 %s9, %ns
  ret i64 %t
}}

; wait until the i32 at %w differs from %old: pause, then yield the core, then (if %may_sleep) sleep on a futex
define internal i32 @wait_change(ptr %st, ptr %w, i32 %old, i1 %may_sleep) {{
entry:
  %spinp = getelementptr i8, ptr %st, i64 {SPIN}
  %spin_ns = load atomic i64, ptr %spinp monotonic, align 8
  %pausep = getelementptr i8, ptr %st, i64 {SPIN + 8}
  %pause_ns = load atomic i64, ptr %pausep monotonic, align 8
  %t0 = call i64 @now_ns()
  br label %spin
spin:
  %i = phi i64 [0, %entry], [%i1, %pause], [%i1, %yield]
  %v = load atomic i32, ptr %w acquire, align 4
  %changed = icmp ne i32 %v, %old
  br i1 %changed, label %out, label %next
next:
  %i1 = add i64 %i, 1
  %check = and i64 %i1, 15
  %is_check = icmp eq i64 %check, 0
  br i1 %is_check, label %clock, label %pause
clock:
  %t = call i64 @now_ns()
  %el = sub i64 %t, %t0
  %over = icmp sge i64 %el, %spin_ns
  %sleep_now = and i1 %over, %may_sleep
  br i1 %sleep_now, label %sleep, label %phase
phase:
  %yield_now = icmp sge i64 %el, %pause_ns
  br i1 %yield_now, label %yield, label %pause
pause:
  call void asm sideeffect "{pause}", "~{{memory}}"()
  br label %spin
yield:
  call i32 @sched_yield()
  br label %spin
sleep:
  %slp = getelementptr i8, ptr %st, i64 {SLEEPERS}
  atomicrmw add ptr %slp, i32 1 seq_cst
  %v2 = load atomic i32, ptr %w seq_cst, align 4
  %same = icmp eq i32 %v2, %old
  br i1 %same, label %futex, label %woke
futex:
  %old64 = zext i32 %old to i64
  call i64 (i64, ...) @syscall(i64 {futex_nr}, ptr %w, i64 {FUTEX_WAIT_PRIVATE}, i64 %old64, ptr null, ptr null, i64 0)
  br label %woke
woke:
  atomicrmw sub ptr %slp, i32 1 seq_cst
  %v3 = load atomic i32, ptr %w acquire, align 4
  %still = icmp eq i32 %v3, %old
  br i1 %still, label %sleep, label %out
out:
  %r = phi i32 [%v, %spin], [%v3, %woke]
  ret i32 %r
}}

; run share %c if it is still open in job %gen: its flag goes from gen*2 (open) to gen*2+1 (taken) in one exchange, so
; a thread still on an earlier job (whose flags were reset since) can never take it
define internal void @try_share(ptr %st, i64 %open, i32 %c, i32 %n) {{
entry:
  %c64 = zext i32 %c to i64
  %off = mul i64 %c64, 8
  %off2 = add i64 %off, {FLAGS}
  %flagp = getelementptr i8, ptr %st, i64 %off2
  %f = load atomic i64, ptr %flagp monotonic, align 8
  %is_open = icmp eq i64 %f, %open
  br i1 %is_open, label %claim, label %out
claim:
  %taken = or i64 %open, 1
  %pair = cmpxchg ptr %flagp, i64 %open, i64 %taken acq_rel monotonic
  %won = extractvalue {{ i64, i1 }} %pair, 1
  br i1 %won, label %run, label %out
run:
  ; the job cannot end (and its fields change) before this share is done
  %trp = getelementptr i8, ptr %st, i64 {JOB}
  %fnp = getelementptr i8, ptr %st, i64 {JOB + 8}
  %avp = getelementptr i8, ptr %st, i64 {JOB + 16}
  %donep = getelementptr i8, ptr %st, i64 {DONE}
  %tramp = load ptr, ptr %trp, align 8
  %fn = load ptr, ptr %fnp, align 8
  %argv = load ptr, ptr %avp, align 8
  call void %tramp(ptr %fn, ptr %argv, i32 %c, i32 %n)
  atomicrmw add ptr %donep, i32 1 release
  br label %out
out:
  ret void
}}

; thread %t's part of job %gen: the shares of its own block in order (with no other thread about, exactly the rows a
; fixed split gives it), then whatever is still open in the other blocks, each from its end (its owner works from the
; front). n and per may be a later job's once this one is over: every flag has moved on then, and nothing is taken
define internal void @run_shares(ptr %st, i32 %gen, i32 %t) {{
entry:
  %np = getelementptr i8, ptr %st, i64 {JOB + 24}
  %perp = getelementptr i8, ptr %st, i64 {JOB + 28}
  %n = load atomic i32, ptr %np monotonic, align 4
  %per = load atomic i32, ptr %perp monotonic, align 4
  %gen64 = zext i32 %gen to i64
  %open = shl i64 %gen64, 1
  %blocks = udiv i32 %n, %per
  %home = icmp ult i32 %t, %blocks
  %first = mul i32 %t, %per
  %home_end = select i1 %home, i32 %per, i32 0
  br label %own
own:
  %i = phi i32 [0, %entry], [%i1, %own_body]
  %more = icmp ult i32 %i, %home_end
  br i1 %more, label %own_body, label %steal
own_body:
  %c = add i32 %first, %i
  call void @try_share(ptr %st, i64 %open, i32 %c, i32 %n)
  %i1 = add i32 %i, 1
  br label %own
steal:
  %v = phi i32 [1, %own], [%v1, %steal_next]
  %vmore = icmp ule i32 %v, %blocks
  br i1 %vmore, label %victim, label %out
victim:
  %tv = add i32 %t, %v
  %b = urem i32 %tv, %blocks
  %bstart = mul i32 %b, %per
  br label %tail
tail:
  %j = phi i32 [%per, %victim], [%j1, %tail_body]
  %jmore = icmp ugt i32 %j, 0
  br i1 %jmore, label %tail_body, label %steal_next
tail_body:
  %j1 = sub i32 %j, 1
  %cj = add i32 %bstart, %j1
  call void @try_share(ptr %st, i64 %open, i32 %cj, i32 %n)
  br label %tail
steal_next:
  %v1 = add i32 %v, 1
  br label %steal
out:
  ret void
}}

define void @tp_worker(ptr %st, i32 %core, i32 %gen0) {{
entry:
  %stopp = getelementptr i8, ptr %st, i64 {STOP}
  %exitp = getelementptr i8, ptr %st, i64 {EXITED}
  br label %wait
wait:
  %last = phi i32 [%gen0, %entry], [%g, %job]
  %g = call i32 @wait_change(ptr %st, ptr %st, i32 %last, i1 true)
  %stop = load atomic i32, ptr %stopp acquire, align 4
  %stopping = icmp ne i32 %stop, 0
  br i1 %stopping, label %exit, label %job
job:
  call void @run_shares(ptr %st, i32 %g, i32 %core)
  br label %wait
exit:
  atomicrmw add ptr %exitp, i32 1 seq_cst
  ret void
}}

; post a job of n shares in blocks of `per` (block t is thread t's), take shares here too (as thread 0), and wait
; until all n are done, not for every worker: one that never got to the job has nothing of it to finish
define void @tp_run(ptr %st, ptr %tramp, ptr %fn, ptr %argv, i32 %n, i32 %per) {{
entry:
  %donep = getelementptr i8, ptr %st, i64 {DONE}
  %trp = getelementptr i8, ptr %st, i64 {JOB}
  %fnp = getelementptr i8, ptr %st, i64 {JOB + 8}
  %avp = getelementptr i8, ptr %st, i64 {JOB + 16}
  %np = getelementptr i8, ptr %st, i64 {JOB + 24}
  %perp = getelementptr i8, ptr %st, i64 {JOB + 28}
  store ptr %tramp, ptr %trp, align 8
  store ptr %fn, ptr %fnp, align 8
  store ptr %argv, ptr %avp, align 8
  store atomic i32 %n, ptr %np monotonic, align 4
  store atomic i32 %per, ptr %perp monotonic, align 4
  store atomic i32 0, ptr %donep monotonic, align 4
  %g0 = load atomic i32, ptr %st monotonic, align 4
  %gen = add i32 %g0, 1
  %gen64 = zext i32 %gen to i64
  %open = shl i64 %gen64, 1
  br label %reset
reset:
  %c = phi i32 [0, %entry], [%c1, %reset_body]
  %more = icmp ult i32 %c, %n
  br i1 %more, label %reset_body, label %go
reset_body:
  %c64 = zext i32 %c to i64
  %off = mul i64 %c64, 8
  %off2 = add i64 %off, {FLAGS}
  %flagp = getelementptr i8, ptr %st, i64 %off2
  store atomic i64 %open, ptr %flagp monotonic, align 8
  %c1 = add i32 %c, 1
  br label %reset
go:
  ; post's seq_cst add on the generation publishes the job and its flags
  call void @post(ptr %st)
  call void @run_shares(ptr %st, i32 %gen, i32 0)
  call void @wait_count(ptr %st, ptr %donep, i32 %n)
  ret void
}}

; wait (never sleeping: the workers are busy for us) until the counter at %c reaches %target
define internal void @wait_count(ptr %st, ptr %c, i32 %target) {{
entry:
  br label %wait
wait:
  %v = load atomic i32, ptr %c acquire, align 4
  %all = icmp sge i32 %v, %target
  br i1 %all, label %out, label %again
again:
  %v2 = call i32 @wait_change(ptr %st, ptr %c, i32 %v, i1 false)
  br label %wait
out:
  ret void
}}

define internal void @post(ptr %st) {{
  atomicrmw add ptr %st, i32 1 seq_cst
  %slp = getelementptr i8, ptr %st, i64 {SLEEPERS}
  %sleepers = load atomic i32, ptr %slp seq_cst, align 4
  %any = icmp ne i32 %sleepers, 0
  br i1 %any, label %wake, label %out
wake:
  call i64 (i64, ...) @syscall(i64 {futex_nr}, ptr %st, i64 {FUTEX_WAKE_PRIVATE}, i64 2147483647, ptr null, ptr null, i64 0)
  br label %out
out:
  ret void
}}

; tell every worker to leave its loop and wait until `workers` have
define void @tp_stop(ptr %st, i32 %workers) {{
entry:
  %stopp = getelementptr i8, ptr %st, i64 {STOP}
  %exitp = getelementptr i8, ptr %st, i64 {EXITED}
  store atomic i32 1, ptr %stopp seq_cst, align 4
  call void @post(ptr %st)
  call void @wait_count(ptr %st, ptr %exitp, i32 %workers)
  ret void
}}
"""

_CTYPE_IR = {ctypes.c_void_p: "ptr", ctypes.c_int32: "i32", ctypes.c_int64: "i64", ctypes.c_uint32: "i32",
             ctypes.c_uint64: "i64"}

def _trampoline_ir(name: str, types: tuple[str, ...]) -> str:
  """`void name(ptr fn, ptr argv, i32 core, i32 n)`: calls fn(argv[0], ..., core, n), argv holding one 8-byte slot
  per argument (an i32 is the low half of its slot: little-endian only, as the pool's platforms are)."""
  lines = [f"define void @{name}(ptr %fn, ptr %argv, i32 %core, i32 %n) {{"]
  for i, t in enumerate(types):
    lines += [f"  %p{i} = getelementptr i64, ptr %argv, i64 {i}", f"  %a{i} = load {t}, ptr %p{i}, align 8"]
  args = ", ".join([f"{t} %a{i}" for i, t in enumerate(types)] + ["i32 %core", "i32 %n"])
  lines += [f"  call void %fn({args})", "  ret void", "}"]
  return "\n".join(lines) + "\n"

class NativeThreadPool:
  def __init__(self):
    from tinyplug_cpu_llvm.compiler import LLVM_LOCK, init_llvm, make_target_machine, host_target
    machine = platform.machine().lower()
    if not sys.platform.startswith("linux") or machine not in _FUTEX:
      raise OSError(f"no native thread pool for {sys.platform}/{machine}")
    self.llvm, self.llvm_lock = init_llvm(), LLVM_LOCK
    with self.llvm_lock:
      mod = self.llvm.parse_assembly(_pool_ir(_FUTEX[machine], _PAUSE[machine]))
      mod.verify()
      self.engine = self.llvm.create_mcjit_compiler(mod, make_target_machine(*host_target(), opt=2))
      self.engine.finalize_object()
      addr = {name: self.engine.get_function_address(name) for name in ("tp_worker", "tp_run", "tp_stop")}
    if not all(addr.values()): raise RuntimeError("native thread pool: functions not found after JIT")
    self._worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32)(addr["tp_worker"])
    self._run = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 4, ctypes.c_int32, ctypes.c_int32)(addr["tp_run"])
    self._stop = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(addr["tp_stop"])
    self._trampolines: dict[tuple, int] = {}
    # LLVM IR of one function -> its address, from the device's object cache (set by the CPU device): a warm process
    # loads its trampolines instead of compiling them here (~2 ms each, one per kernel signature)
    self.load_ir: Callable[[str], int] | None = None
    # id of a ctypes function -> (the function, kept so that its id stays its own; its address; its trampoline)
    self._entries: dict[int, tuple[Any, int, int]] = {}
    self.lock = threading.Lock()
    self._start()
    atexit.register(self.close)

  def _start(self) -> None:
    self.state = ctypes.create_string_buffer(STATE_BYTES)
    self.addr = ctypes.addressof(self.state)
    self.workers: list[threading.Thread] = []
    self.pid, self.spin_us, self.last_done = os.getpid(), None, 0.0

  def _set_spin(self) -> None:
    if (spin_us := CPU_SPIN_US.value) == self.spin_us: return
    spin_ns = max(0, int(spin_us)) * 1000
    ctypes.c_int64.from_address(self.addr + SPIN).value = spin_ns
    ctypes.c_int64.from_address(self.addr + SPIN + 8).value = min(spin_ns, 50_000)   # then yield between looks
    self.spin_us = spin_us

  def _grow(self, n: int) -> None:
    if self.pid != os.getpid(): self._start()   # a forked child has none of the parent's threads: start over
    self._set_spin()
    while len(self.workers) < n - 1:
      gen = ctypes.c_int32.from_address(self.addr + GEN).value   # no job is in flight: the worker waits for the next
      t = threading.Thread(target=self._worker, args=(self.addr, len(self.workers) + 1, gen), daemon=True,
                           name=f"tinyplug-cpu-{len(self.workers)+1}")
      t.start()
      self.workers.append(t)

  def trampoline(self, types: tuple[str, ...]) -> int:
    if (addr := self._trampolines.get(types)) is None:
      if self.load_ir is not None: addr = self.load_ir(_trampoline_ir("tp_call", types))
      else: addr = self._build_trampoline(f"tp_call_{len(self._trampolines)}", types)
      self._trampolines[types] = addr
    return addr

  def _build_trampoline(self, name: str, types: tuple[str, ...]) -> int:
    with self.llvm_lock:
      mod = self.llvm.parse_assembly(_trampoline_ir(name, types))
      mod.verify()
      self.engine.add_module(mod)
      self.engine.finalize_object()
      return self.engine.get_function_address(name)

  def _entry(self, fn: Callable) -> tuple[Any, int, int] | None:
    if (hit := self._entries.get(id(fn))) is None:
      if (argtypes := getattr(fn, "argtypes", None)) is None: return None
      types = tuple(_CTYPE_IR[t] for t in argtypes[:-2])
      hit = self._entries[id(fn)] = (fn, ctypes.cast(fn, ctypes.c_void_p).value, self.trampoline(types))
    return hit

  def run(self, fn: Callable, args: list, n: int, per: int = 1) -> None:
    """n shares in blocks of `per`: one block per thread, and a thread done with its own takes what is left of others'."""
    blocks = _blocks(n, per)
    if n > MAX_SHARES: raise ValueError(f"a job has at most {MAX_SHARES} shares, not {n}")
    if (entry := self._entry(fn)) is None:    # not a ctypes function: run it on Python threads
      return _python_pool().run(fn, args, n, per)
    argv = (ctypes.c_int64 * max(1, len(args)))(*args)
    with self.lock:   # one parallel kernel at a time
      self._grow(blocks)
      self._run(self.addr, entry[2], entry[1], ctypes.addressof(argv), n, per)
      self.last_done = time.perf_counter()

  def awake(self) -> bool:
    """Are the workers (very likely) still looking for work, so that a job starts on them at once? Within the first
    half of their spin after the last job."""
    return bool(self.workers) and time.perf_counter() - self.last_done < (self.spin_us or 0) * 0.5e-6

  def close(self) -> None:
    """Stop the workers (at exit: they must be out of the JIT's code before the engine is freed)."""
    with self.lock:
      if self.pid == os.getpid() and self.workers:
        self._stop(self.addr, len(self.workers))
        self.workers = []
        self._start()

_pool: NativeThreadPool | PyThreadPool | None = None
_py_pool: PyThreadPool | None = None
_pool_lock = threading.Lock()

def _python_pool() -> PyThreadPool:
  global _py_pool
  with _pool_lock:
    if _py_pool is None: _py_pool = PyThreadPool()
  return _py_pool

def pool() -> NativeThreadPool | PyThreadPool:
  """The process's thread pool (native where it can be built, else Python)."""
  global _pool
  if _pool is None:
    try: p: Any = NativeThreadPool()
    except Exception as e:  # any failure to build it leaves the portable pool, which is only slower
      if DEBUG >= 1: print(f"cpu_llvm: native thread pool unavailable ({e}); using Python threads")
      p = _python_pool()
    with _pool_lock:
      if _pool is None: _pool = p
  return _pool
