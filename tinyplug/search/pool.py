"""BEAM's compile workers: `PARALLEL` Python processes (`python -m tinyplug.search.worker`, started fresh, never
forked from a process that has a GPU driver loaded, and never running the user's `__main__`) that lower and compile
search candidates and send back each program and its binary; the parent only times them on the device.

Each worker belongs to one thread of a thread pool: the thread sends a candidate down the worker's stdin and waits
for its answer on stdout (frames: an 8-byte length, then a pickle; both ends are this module and the worker it
started; the worker's first frame, READY, says its imports are done: a build's time bound counts from there). A
worker that dies takes only the candidate it was building with it: that candidate's future fails with `WorkerDied`,
and the thread starts a new worker for its next candidate."""
from __future__ import annotations
import atexit, os, pickle, queue, struct, subprocess, threading, time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, BinaryIO
from tinyplug.helpers import python_module_command

class WorkerDied(RuntimeError):
  """The worker process building a candidate exited (a crash in a compiler or the codegen)."""

class JobRefused(RuntimeError):
  """The workers cannot build this kernel's candidates at all (its renderer or compiler does not load there, or the
  worker's plugin set differs from this process's): the search builds them itself."""

_HEADER = struct.Struct("<Q")
READY = ("ready",)   # a worker's first frame: its imports are done
# seconds a new worker may take to import (a loaded machine, a cold disk) on top of the build bound before
# `stop_stuck` ends it; the build bound itself counts from its READY, so a slow start never costs a candidate
START_ALLOWANCE = 60.0

def write_frame(out: BinaryIO, obj: Any) -> None:
  data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
  out.write(_HEADER.pack(len(data)) + data)
  out.flush()

def read_frame(inp: BinaryIO) -> Any:
  """The next object, or None at the end of the stream (the other side exited)."""
  head = inp.read(_HEADER.size)
  if len(head) < _HEADER.size: return None
  (n,) = _HEADER.unpack(head)
  data = inp.read(n)
  if len(data) < n: return None
  return pickle.loads(data)   # a frame from the process at the other end of our own pipe

def default_workers() -> int:
  try: return len(os.sched_getaffinity(0))
  except (AttributeError, OSError): return os.cpu_count() or 1

class _Worker:
  def __init__(self):
    # the worker imports codegen and, through the job's pickle, the plugin's renderer and compiler (a compiler class
    # defined next to a script is found: the child searches this process's path): never a device
    argv, env = python_module_command("tinyplug.search.worker")
    self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    self.job_key: str | None = None   # the job (kernel, renderer, compiler, settings) it holds
    self.ready = False                # it has sent READY
    self.busy_since: float | None = None
    self.stopped_after: float | None = None   # seconds, when `stop_stuck` ended it

  def build(self, job_key: str, job: bytes, opts: list) -> tuple[Any, bytes]:
    self.busy_since = time.monotonic()
    try:
      if not self.ready:
        if read_frame(self.proc.stdout) != READY:   # it exited while starting (or broke the protocol: ended)
          self.proc.kill()
          raise OSError("no READY")
        self.ready, self.busy_since = True, time.monotonic()
      write_frame(self.proc.stdin, (job_key, job if job_key != self.job_key else None, opts))
      reply = read_frame(self.proc.stdout)
    except (BrokenPipeError, OSError): reply = None
    finally: self.busy_since = None
    if reply is None:
      code = self.proc.wait()
      if self.stopped_after is not None: raise WorkerDied(f"building took over {self.stopped_after:.0f} s: stopped")
      raise WorkerDied(f"the compile worker exited with status {code}")
    kind, *rest = reply
    self.job_key = job_key if kind != "refused" else None
    if kind == "ok": return rest[0], rest[1]
    if kind == "refused": raise JobRefused(rest[0])
    raise RuntimeError(rest[0])   # this candidate did not lower or compile

  def close(self) -> None:
    try:
      self.proc.stdin.close()
      self.proc.wait(timeout=5)
    except Exception:
      self.proc.kill()
      self.proc.wait()

class CompilePool:
  """`n` worker processes; `submit(job_key, job, opts)` -> a Future of (ProgramSpec, binary)."""
  def __init__(self, n: int):
    self.n, self.env = n, 0
    self._threads = ThreadPoolExecutor(n, thread_name_prefix="tinyplug-compile")
    self._local = threading.local()
    self._all: list[_Worker] = []
    self._lock = threading.Lock()
    # started now: they import while the search times its starting points
    self._spare: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
    for _ in range(n): self._spare.put(self._start())

  def _start(self) -> _Worker:
    w = _Worker()
    with self._lock: self._all.append(w)
    return w

  def _run(self, job_key: str, job: bytes, opts: list) -> tuple[Any, bytes]:
    w = getattr(self._local, "worker", None)
    if w is None:
      try: w = self._spare.get_nowait()
      except queue.Empty: w = self._start()
      self._local.worker = w
    try: return w.build(job_key, job, opts)
    except WorkerDied:
      self._local.worker = None
      with self._lock:
        if w in self._all: self._all.remove(w)
      raise

  def stop_stuck(self, seconds: float) -> None:
    """End the workers busy with one candidate for more than `seconds`, or still starting for START_ALLOWANCE more
    (its future then fails with WorkerDied)."""
    now = time.monotonic()
    with self._lock: workers = list(self._all)
    for w in workers:
      if (since := w.busy_since) is not None and now - since > seconds + (0.0 if w.ready else START_ALLOWANCE):
        w.stopped_after = seconds
        w.proc.kill()

  def submit(self, job_key: str, job: bytes, opts: list) -> Future:
    return self._threads.submit(self._run, job_key, job, opts)

  def close(self) -> None:
    # the workers first: a thread waits on its worker's answer, so the threads end once the workers have
    self._threads.shutdown(wait=False, cancel_futures=True)
    with self._lock: workers, self._all = self._all, []
    for w in workers: w.close()
    self._threads.shutdown(wait=True)

_POOL: CompilePool | None = None

def compile_pool(n: int) -> CompilePool:
  """The process's pool of `n` workers (made on first use, kept for later searches; made anew when the environment
  changed since: the workers read it when they start)."""
  global _POOL
  env = hash(frozenset(os.environ.items()))
  if _POOL is not None and (_POOL.n, _POOL.env) != (n, env): close_pool()
  if _POOL is None:
    _POOL = CompilePool(n)
    _POOL.env = env
  return _POOL

def close_pool() -> None:
  global _POOL
  if _POOL is not None: _POOL.close()
  _POOL = None

atexit.register(close_pool)
