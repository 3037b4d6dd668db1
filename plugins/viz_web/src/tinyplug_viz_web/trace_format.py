"""The trace format (docs/trace_format.md): one folder per run, one file per process: JSON lines in a zlib stream.

Every record is one JSON object on one line. Records are compressed and sync-flushed as they happen (one flush per
batch), so a killed program leaves every record but possibly a torn last batch. Nothing in a trace is ever
executed when it is read: it is plain JSON."""
from __future__ import annotations
import json, os, re, sys, threading, time, zlib
from typing import Any, IO
from tinyplug.diskcache import hold_folder

FORMAT_NAME = "tinyplug-trace"
FORMAT_VERSION = 2
FILE_PREFIX, FILE_SUFFIX = "trace-", ".jsonl.z"   # version 2: a zlib stream of JSON lines
PLAIN_SUFFIX = ".jsonl"                             # version 1 (still read): plain JSON lines
COMPRESS_LEVEL = 6
MAX_ARG_CHARS = 300           # a node's arg text is cut to this many characters

def trace_file_name(pid: int) -> str: return f"{FILE_PREFIX}{pid}{FILE_SUFFIX}"

# a flag whose name says it carries a secret: its value is left out of the recorded argv
_SECRET_FLAG = re.compile(r"^--?[\w.-]*(token|key|passw(or)?d|pwd|secret|auth|credential|cookie|session)[\w.-]*$", re.I)
REDACTED = "<redacted>"

def redact_argv(argv: list[str]) -> list[str]:
  """argv with the values of secret-looking flags masked: `--api-key=x` and `--token x` keep only the flag name."""
  out: list[str] = []
  hide_next = False
  for a in argv:
    a = str(a)
    if hide_next:
      out.append(REDACTED)
      hide_next = False
      continue
    name, eq, _ = a.partition("=")
    if _SECRET_FLAG.match(name):
      if eq: out.append(f"{name}={REDACTED}")
      else: out.append(a); hide_next = True
    else: out.append(a)
  return out

def open_private(path: str) -> IO[bytes]:
  """Open `path` for appending, created readable by its owner only (a trace holds a program's code and names)."""
  fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
  return os.fdopen(fd, "ab")

def dumps(record: Any) -> str: return json.dumps(record, separators=(",", ":"), ensure_ascii=False)

def make_private_dir(path: str) -> None:
  """Create `path` (and missing parents) with mode 0700."""
  os.makedirs(path, mode=0o700, exist_ok=True)

def json_safe(value: Any, depth: int = 0) -> Any:
  """A value JSON can hold: numbers, strings, bools and None as they are, lists and dicts recursively, else repr."""
  if value is None or isinstance(value, (bool, int, str)): return value
  if isinstance(value, float): return value if value == value and abs(value) != float("inf") else repr(value)
  if depth < 4 and isinstance(value, (list, tuple)): return [json_safe(v, depth + 1) for v in value]
  if depth < 4 and isinstance(value, dict): return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
  return repr(value)

class TraceWriter:
  """Appends records to `<folder>/trace-<pid>.jsonl.z`. A forked child notices the new pid and opens its own file."""
  def __init__(self, folder: str, run_id: str):
    self.folder, self.run_id = folder, run_id
    self.lock = threading.RLock()
    self.pid: int | None = None
    self.file: IO[bytes] | None = None
    self.zip: Any = None
    self.records = 0
    self.closed = False           # after close (at exit) late records, e.g. frees during shutdown, are dropped

  @property
  def path(self) -> str: return os.path.join(self.folder, trace_file_name(self.pid or os.getpid()))

  def _open(self) -> None:
    pid = os.getpid()
    if self.file is not None and self.pid == pid: return
    make_private_dir(self.folder)
    hold_folder(self.folder)   # a run being recorded is in use: the cache's size limit leaves it alone
    self.pid = pid
    self.file = open_private(os.path.join(self.folder, trace_file_name(pid)))
    self.zip = zlib.compressobj(COMPRESS_LEVEL)
    self.records = 0
    self._emit([{"t": "header", "format": FORMAT_NAME, "version": FORMAT_VERSION, "run": self.run_id, "pid": pid,
                 "ppid": os.getppid(), "clock": {"perf_ns": time.perf_counter_ns(), "unix_ns": time.time_ns()},
                 "argv": redact_argv(list(sys.argv))}])

  def _emit(self, records: list) -> None:
    assert self.file is not None
    data = "".join(dumps(r) + "\n" for r in records).encode("utf-8", "surrogatepass")
    self.file.write(self.zip.compress(data) + self.zip.flush(zlib.Z_SYNC_FLUSH))
    self.file.flush()
    self.records += len(records)

  def write(self, record: dict) -> None: self.write_many([record])

  def write_many(self, records: list) -> None:
    """Several records, compressed and flushed together (a rewrite and the nodes it refers to)."""
    if not records: return
    with self.lock:
      if self.closed and self.pid == os.getpid(): return
      self._open()
      self._emit(records)

  def close(self) -> None:
    """Write the `end` record (a file without one is from a process that died) and finish the stream."""
    with self.lock:
      if self.pid == os.getpid() and self.file is not None:
        self._emit([{"t": "end", "time": time.perf_counter_ns(), "records": self.records + 1}])
        self.file.write(self.zip.flush(zlib.Z_FINISH))
        self.file.close()
      if self.pid == os.getpid(): self.file, self.closed = None, True
