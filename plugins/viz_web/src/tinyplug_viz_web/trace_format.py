"""The trace format (docs/trace_format.md): one folder per run, one JSON-lines file per process.

Every record is one JSON object on one line, written and flushed as it happens, so a killed program leaves every
record but possibly a torn last line. Nothing in a trace is ever executed when it is read: it is plain JSON."""
from __future__ import annotations
import json, os, re, sys, threading, time
from typing import Any, IO

FORMAT_NAME = "tinyplug-trace"
FORMAT_VERSION = 1
FILE_PREFIX, FILE_SUFFIX = "trace-", ".jsonl"
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

def open_private(path: str) -> IO[str]:
  """Open `path` for appending, created readable by its owner only (a trace holds a program's code and names)."""
  fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
  return os.fdopen(fd, "a", encoding="utf-8")

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
  """Appends records to `<folder>/trace-<pid>.jsonl`. A forked child notices the new pid and opens its own file."""
  def __init__(self, folder: str, run_id: str):
    self.folder, self.run_id = folder, run_id
    self.lock = threading.RLock()
    self.pid: int | None = None
    self.file: IO[str] | None = None
    self.records = 0
    self.closed = False           # after close (at exit) late records, e.g. frees during shutdown, are dropped

  @property
  def path(self) -> str: return os.path.join(self.folder, trace_file_name(self.pid or os.getpid()))

  def _open(self) -> IO[str]:
    pid = os.getpid()
    if self.file is not None and self.pid == pid: return self.file
    make_private_dir(self.folder)
    self.pid = pid
    self.file = open_private(os.path.join(self.folder, trace_file_name(pid)))
    self.records = 0
    self._write_line({"t": "header", "format": FORMAT_NAME, "version": FORMAT_VERSION, "run": self.run_id, "pid": pid,
                      "ppid": os.getppid(), "clock": {"perf_ns": time.perf_counter_ns(), "unix_ns": time.time_ns()},
                      "argv": redact_argv(list(sys.argv))})
    return self.file

  def _write_line(self, record: dict) -> None:
    assert self.file is not None
    self.file.write(json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n")
    self.file.flush()
    self.records += 1

  def write(self, record: dict) -> None:
    with self.lock:
      if self.closed and self.pid == os.getpid(): return
      self._open()
      self._write_line(record)

  def write_many(self, records: list[dict]) -> None:
    """Several records in one write (then one flush): used for the nodes a rewrite record refers to."""
    if not records: return
    with self.lock:
      if self.closed and self.pid == os.getpid(): return
      f = self._open()
      f.write("".join(json.dumps(r, separators=(",", ":"), ensure_ascii=False) + "\n" for r in records))
      f.flush()
      self.records += len(records)

  def close(self) -> None:
    with self.lock:
      if self.pid == os.getpid():
        if self.file is not None: self.file.close()
        self.file, self.closed = None, True
