"""On-disk caches that check what they read back: the one place that decides whether the cache directory is safe
and whether an entry is intact.

Every entry is stored with `entry_digest(key, payload)`, a SHA-256 over its key and its bytes. Keys are themselves
hashes of everything the payload was made from (the kernel's source, compiler versions, target), so a payload
stored under another key (swapped, truncated, zeroed, random bytes) fails the check, is dropped, is made again by
the caller, and is reported once per cache and process. The digest catches damage and mix-ups; what keeps other
users from writing entries at all is the directory check: the cache directory must be owned by the current user
and not writable by group or others, and it is created 0700 (see docs/security.md).

Two stores: `SealedTable`, a table in an SQLite file (several processes at once: WAL, busy timeout), and sealed
files (`write_sealed`/`read_sealed`: a header naming the key and the digest, then the payload). `check_cache_tree`
verifies every entry under the directory in either form, for `tinyplug doctor`.

The whole directory has a size limit (CACHE_MAX_MB): every write is counted by `note_write`, which now and then
lets `tinyplug.cache_limit` evict the least recently written or used entries. Reading an entry a day or more after
it was written marks it used again (`created` of a row, a file's mtime), so what a warm run reads survives.
"""
from __future__ import annotations

import hashlib
import importlib.util
import operator
import os
import sqlite3
import stat
import sys
import tempfile
import threading
import time
from typing import Any

from tinyplug.helpers import ENV_VARS, ContextVar, cache_dir
from tinyplug.uop.dtype import DType
from tinyplug.uop.ops import Ops

SEALED_MAGIC = b"tinyplug-sealed-v1\n"

_warned: set[str] = set()
_lock = threading.Lock()
USED_AGAIN_AFTER = 86400.0   # seconds: an entry read this long after it was written (or last marked) is marked used


def entry_digest(key: str, payload: bytes) -> str:
  """The checksum stored with an entry: binds the payload to the key it was stored under."""
  return hashlib.sha256(key.encode() + b"\0" + bytes(payload)).hexdigest()


def report_once(topic: str, message: str) -> None:
  """Print `message` to stderr the first time `topic` comes up in this process (a damaged cache says so once)."""
  with _lock:
    if topic in _warned: return
    _warned.add(topic)
  print(f"tinyplug: {message}", file=sys.stderr)


def unsafe_reason(path: str) -> str | None:
  """Why an existing directory must not be trusted as a cache (owned by someone else, writable by group or
  others), or None when it is fine."""
  st = os.stat(path)
  if not stat.S_ISDIR(st.st_mode): return f"{path} is not a directory"
  if hasattr(os, "getuid") and st.st_uid != os.getuid():
    return f"{path} is owned by uid {st.st_uid}, not by the current user (uid {os.getuid()})"
  if hasattr(os, "getuid") and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
    return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}); run `chmod go-w {path}`"
  return None


def cache_root() -> str | None:
  """The cache directory, created 0700 when missing; None (reported once) when it is unsafe or cannot be made:
  then nothing is read from or written to disk and every program is compiled in memory."""
  path = cache_dir()
  try:
    if not os.path.isdir(path): os.makedirs(path, mode=0o700, exist_ok=True)
    reason = unsafe_reason(path)
  except OSError as e: reason = f"cannot create {path}: {e}"
  if reason is None: return path
  report_once("cache-dir", f"the disk cache is off: {reason}")
  return None


def cache_path(*parts: str) -> str | None:
  """A path inside the cache directory (its parent folders made 0700), or None when the directory is unsafe."""
  root = cache_root()
  if root is None: return None
  path = os.path.join(root, *parts)
  try: os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
  except OSError: return None
  return path


def _bad(cache: str, key: str, why: str) -> None:
  report_once(f"bad-entry:{cache}", f"dropped a damaged entry of the {cache} cache ({why}, key {key[:16]}...); "
              "it is made again (`tinyplug doctor` checks every entry)")


class SealedTable:
  """`key -> payload` in a table of an SQLite file under the cache directory, each row with its digest. A row whose
  digest does not match is deleted and reads as a miss. Any SQLite error makes a read miss and a write a no-op:
  the disk cache is an optimisation, never a reason to fail."""

  def __init__(self, filename: str, table: str, label: str | None = None):
    self.filename, self.table, self.label = filename, table, label or table
    self._conn: sqlite3.Connection | None = None
    self._conn_for: tuple[int, str] | None = None
    self._lock = threading.Lock()

  def _connection(self) -> sqlite3.Connection | None:
    # the directory is checked (cache_root: two stats and a makedirs) when a connection opens, not on every read:
    # a warm first step reads ~130 entries. A new process (a forked child) or another cache directory opens anew.
    if self._conn is not None and self._conn_for == (os.getpid(), os.path.join(cache_dir(), self.filename)):
      return self._conn
    path = cache_path(self.filename)
    if path is None: return None
    if self._conn is None or self._conn_for != (os.getpid(), path):
      conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
      conn.execute("PRAGMA busy_timeout=30000")
      conn.execute("PRAGMA journal_size_limit=67108864")   # a WAL truncated to 64 MB after each checkpoint
      try: conn.execute("PRAGMA journal_mode=WAL")
      except sqlite3.OperationalError: pass   # another process is switching it right now; it stays usable
      # no fsync per write (~6 ms each, one per kernel and cache in a cold run): under WAL a crash can lose the
      # newest entries, never damage the file, and a lost cache entry is only made again
      conn.execute("PRAGMA synchronous=NORMAL")
      conn.execute(f"CREATE TABLE IF NOT EXISTS {self.table} "
                   "(key TEXT PRIMARY KEY, payload BLOB NOT NULL, digest TEXT NOT NULL, created REAL)")
      self._conn, self._conn_for = conn, (os.getpid(), path)
    return self._conn

  def get(self, key: str) -> bytes | None:
    try:
      with self._lock:
        if (conn := self._connection()) is None: return None
        row = conn.execute(f"SELECT payload, digest, created FROM {self.table} WHERE key=?", (key,)).fetchone()
    except (sqlite3.Error, OSError): return None
    return None if row is None else self._checked(key, *row, time.time())

  def get_many(self, keys: list[str]) -> dict[str, bytes]:
    """`get` of many keys in one query per GET_MANY_CHUNK keys: {key: payload} of those present and intact (a damaged
    row is deleted and reported as `get` does; a missing key is left out)."""
    rows: list = []
    try:
      with self._lock:
        if (conn := self._connection()) is None: return {}
        for i in range(0, len(keys), GET_MANY_CHUNK):
          part = keys[i:i + GET_MANY_CHUNK]
          rows += conn.execute(f"SELECT key, payload, digest, created FROM {self.table} WHERE key IN "
                               f"({','.join('?' * len(part))})", part).fetchall()
    except (sqlite3.Error, OSError): return {}
    now = time.time()
    found = {row[0]: self._checked(*row, now) for row in rows if isinstance(row[0], str)}
    return {key: payload for key, payload in found.items() if payload is not None}

  def _checked(self, key: str, payload: Any, digest: Any, created: Any, now: float) -> bytes | None:
    """A row's payload if it is intact (a damaged one is deleted and reported once), its use noted when old."""
    payload = bytes(payload) if isinstance(payload, (bytes, memoryview)) else None
    if payload is None or digest != entry_digest(key, payload):
      _bad(self.label, key, "checksum mismatch" if payload is not None else "not bytes")
      self.delete(key)
      return None
    if not isinstance(created, (int, float)) or created < now - USED_AGAIN_AFTER: self._mark_used(key)
    return payload

  def _mark_used(self, key: str) -> None:
    try:
      with self._lock:
        if (conn := self._connection()) is not None:
          conn.execute(f"UPDATE {self.table} SET created=? WHERE key=?", (time.time(), key))
    except (sqlite3.Error, OSError): pass

  def put(self, key: str, payload: bytes) -> None:
    try:
      with self._lock:
        if (conn := self._connection()) is None: return
        conn.execute(f"INSERT OR REPLACE INTO {self.table} (key, payload, digest, created) VALUES (?, ?, ?, ?)",
                     (key, sqlite3.Binary(payload), entry_digest(key, payload), time.time()))
    except (sqlite3.Error, OSError): return
    note_write(len(payload) + len(key) + 64)

  def delete(self, key: str) -> None:
    try:
      with self._lock:
        if (conn := self._connection()) is not None: conn.execute(f"DELETE FROM {self.table} WHERE key=?", (key,))
    except (sqlite3.Error, OSError): pass

  def drop(self, key: str, why: str) -> None:
    """Delete an entry whose digest matched but whose content the caller found unusable, and say so once."""
    _bad(self.label, key, why)
    self.delete(key)


GET_MANY_CHUNK = 500   # keys per query of get_many (SQLite allows at least 999 parameters)


def write_sealed(path: str, key: str, payload: bytes) -> None:
  """Write `payload` to `path` atomically with a header naming its key and digest (errors are ignored)."""
  try:
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
      f.write(SEALED_MAGIC + key.encode() + b"\n" + entry_digest(key, payload).encode() + b"\n" + payload)
    os.replace(tmp, path)
  except OSError: return
  note_write(len(payload) + len(key) + 100)


def _parse_sealed(data: bytes) -> tuple[str, str, bytes] | None:
  if not data.startswith(SEALED_MAGIC): return None
  parts = data[len(SEALED_MAGIC):].split(b"\n", 2)
  if len(parts) != 3: return None
  try: return parts[0].decode(), parts[1].decode(), parts[2]
  except UnicodeDecodeError: return None


def read_sealed(path: str, key: str, label: str) -> bytes | None:
  """The payload of a sealed file stored under `key`, or None: missing, or damaged (then deleted, reported once)."""
  try:
    with open(path, "rb") as f: data, mtime = f.read(), os.fstat(f.fileno()).st_mtime
  except OSError: return None
  parsed = _parse_sealed(data)
  why = ("not a sealed cache file" if parsed is None else "stored under another key" if parsed[0] != key else
         "checksum mismatch" if parsed[1] != entry_digest(key, parsed[2]) else None)
  if why is None:
    if mtime < time.time() - USED_AGAIN_AFTER: mark_used(path)
    return parsed[2]   # type: ignore[index]
  _bad(label, key, why)
  try: os.unlink(path)
  except OSError: pass
  return None


# ---------------- the size limit's hooks (the limit itself: tinyplug/cache_limit.py) ----------------

_written = 0              # bytes this process wrote to the cache since it last checked the limit
_checked = False          # whether this process has checked the limit at all
_held_folders: list[int] = []


def note_write(nbytes: int) -> None:
  """Count `nbytes` written to the cache by this process (0: a write the caller cannot measure, e.g. PoCL's).
  At the first call of a process the limit is checked if no process did for a while (one stat), and again after
  every `cache_limit.check_bytes` written, in a background process: never a directory walk here. Never raises."""
  global _written, _checked
  _written += nbytes
  if _checked and _written < _check_every: return
  force, _checked, _written = _checked, True, 0
  try:
    from tinyplug import cache_limit
    if cache_limit.check_due(force): cache_limit.start_check()
    _set_check_every(cache_limit)
  except Exception: pass   # the cache is an optimisation: its limit never fails a write


_check_every = 16 * 10**6

def _set_check_every(cache_limit: Any) -> None:
  global _check_every
  try: _check_every = cache_limit.check_bytes(cache_limit.limit_bytes())
  except ValueError: pass


def mark_used(path: str) -> None:
  """Mark a cache file used now (its mtime), so the size limit evicts it after older ones. Errors are ignored."""
  try: os.utime(path)
  except OSError: pass


def hold_folder(path: str) -> bool:
  """Create `path` (0700) and keep a shared flock on it for the life of the process: the size limit never deletes
  a folder a live process holds (a viz run being recorded). Returns whether the lock is held."""
  try:
    import fcntl
    os.makedirs(path, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
  except (OSError, ImportError): return False
  try: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
  except OSError:
    os.close(fd)
    return False
  _held_folders.append(fd)
  return True


def _check_sqlite(path: str) -> tuple[int, list[str]]:
  count, bad = 0, []
  try:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
      tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
      for table in tables:
        cols = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        if not {"key", "payload", "digest"} <= cols: continue
        for key, payload, digest in conn.execute(f"SELECT key, payload, digest FROM {table}"):
          count += 1
          if not isinstance(payload, bytes) or digest != entry_digest(str(key), payload):
            bad.append(f"{os.path.basename(path)}: table {table}, key {str(key)[:16]}...: checksum mismatch")
    finally: conn.close()
  except sqlite3.Error as e: bad.append(f"{os.path.basename(path)}: not a readable SQLite database ({e})")
  return count, bad


def check_cache_tree(root: str | None = None) -> dict[str, Any]:
  """Verify every entry under the cache directory: {"dir", "unsafe" (reason or None), "entries", "bad": [...]}.
  SQLite files (`*.sqlite`, `*.db`) are checked table by table (tables with key/payload/digest columns), and
  every file that starts with the sealed header is checked against its digest."""
  root = root or cache_dir()
  out: dict[str, Any] = {"dir": root, "unsafe": None, "entries": 0, "bad": []}
  if not os.path.isdir(root): return out
  out["unsafe"] = unsafe_reason(root)
  for folder, _, files in os.walk(root):
    for name in sorted(files):
      path = os.path.join(folder, name)
      if name.endswith((".sqlite", ".db")):
        count, bad = _check_sqlite(path)
        out["entries"] += count
        out["bad"] += bad
        continue
      try:
        with open(path, "rb") as f: head = f.read(len(SEALED_MAGIC))
        if head != SEALED_MAGIC: continue
        with open(path, "rb") as f: parsed = _parse_sealed(f.read())
      except OSError: continue
      out["entries"] += 1
      if parsed is None or parsed[1] != entry_digest(parsed[0], parsed[2]):
        out["bad"].append(f"{os.path.relpath(path, root)}: checksum mismatch")
  return out


# ---------------- keys ----------------

_source_digests: dict[str, str] = {}

def package_digest(module: str) -> str:
  """A hash of every .py file of the top-level package of `module` (once per process): part of the keys of entries
  that code of that package computed, so an edited or upgraded package never reads an older one's results."""
  top = module.split(".")[0]
  if (d := _source_digests.get(top)) is not None: return d
  h = hashlib.sha256(top.encode())
  spec = importlib.util.find_spec(top)
  files: list[tuple[str, str]] = []
  if spec is not None and spec.submodule_search_locations:
    for root in spec.submodule_search_locations:
      for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        files += [(os.path.relpath(os.path.join(dirpath, f), root), os.path.join(dirpath, f)) for f in filenames
                  if f.endswith(".py")]
  elif spec is not None and spec.origin and os.path.isfile(spec.origin): files = [(os.path.basename(spec.origin), spec.origin)]
  for rel, path in sorted(files):
    h.update(rel.encode())
    with open(path, "rb") as f: h.update(hashlib.sha256(f.read()).digest())
  _source_digests[top] = d = h.hexdigest()
  return d


# ---------------- what is there, and clearing it ----------------

def cache_usage(root: str | None = None) -> dict[str, Any]:
  """{"dir", "exists", "bytes", "parts": {top-level entry: bytes}} of the cache directory (nothing is read but sizes)."""
  root = root or cache_dir()
  out: dict[str, Any] = {"dir": root, "exists": os.path.isdir(root), "bytes": 0, "parts": {}}
  if not out["exists"]: return out
  for name in sorted(os.listdir(root)):
    path, size = os.path.join(root, name), 0
    if os.path.isdir(path) and not os.path.islink(path):
      for folder, _, files in os.walk(path):
        size += sum(os.lstat(os.path.join(folder, f)).st_size for f in files)
    else: size = os.lstat(path).st_size
    out["parts"][name] = size
    out["bytes"] += size
  return out

def clear_cache(root: str | None = None) -> int:
  """Delete everything in the cache directory (it is rebuilt as it is used); returns the bytes freed. Refuses a
  directory that is not safe to treat as ours (unsafe_reason) rather than delete someone else's files."""
  import shutil
  root = root or cache_dir()
  if not os.path.isdir(root): return 0
  if os.path.islink(root): raise OSError(f"{root} is a symbolic link: not clearing it; remove it yourself")
  if (why := unsafe_reason(root)) is not None: raise OSError(f"not clearing {root}: {why}")
  freed = cache_usage(root)["bytes"]
  for name in os.listdir(root):
    path = os.path.join(root, name)
    if os.path.isdir(path) and not os.path.islink(path): shutil.rmtree(path, ignore_errors=True)
    else:
      try: os.unlink(path)
      except OSError: pass
  return freed


# ---------------- what keys are made of (codegen's and the schedule's caches) ----------------

def _canon(x: Any, depth: int = 0) -> str:
  """A text of `x` that is the same in every process (sets sorted, objects by their fields)."""
  if depth > 4: return "..."
  if isinstance(x, (str, int, float, bool, type(None), DType, Ops)): return repr(x)
  if isinstance(x, (list, tuple)): return "[" + ",".join(_canon(v, depth + 1) for v in x) + "]"
  if isinstance(x, (set, frozenset)): return "{" + ",".join(sorted(_canon(v, depth + 1) for v in x)) + "}"
  if isinstance(x, dict): return "{" + ",".join(sorted(f"{_canon(k, depth + 1)}:{_canon(v, depth + 1)}" for k, v in x.items())) + "}"
  if hasattr(x, "__dict__"):
    return type(x).__qualname__ + _canon({k: v for k, v in vars(x).items() if not k.startswith("_")}, depth + 1)
  return type(x).__qualname__

# id(renderer) -> (the renderer, its attributes' names and values, their text): what _settings_of worked out last
_settings_memo: dict[int, tuple[Any, tuple, tuple, str]] = {}

def _attributes(renderer: Any) -> tuple[tuple, tuple]:
  """The names and values of the renderer's own attributes and of its classes' (through its bases)."""
  names: list[str] = []
  values: list[Any] = []
  for d in [vars(c) for c in type(renderer).__mro__] + [vars(renderer)]:
    names += d.keys()
    values += d.values()
  return tuple(names), tuple(values)

def _settings_of(renderer: Any) -> str:
  """_settings_text of the renderer, worked out again only when one of its attributes (or its classes') was set to
  another object since the last time: ~0.15 ms per kernel of a warm start otherwise. (Settings are replaced, never
  edited in place; the memo holds the values, so an id is never reused while it compares them.)"""
  names, values = _attributes(renderer)
  if (hit := _settings_memo.get(id(renderer))) is not None and hit[0] is renderer and hit[1] == names and \
     all(map(operator.is_, hit[2], values)): return hit[3]
  if len(_settings_memo) >= 16: _settings_memo.clear()
  text = _settings_text(renderer)
  _settings_memo[id(renderer)] = (renderer, names, values, text)
  return text

def _settings_text(renderer: Any) -> str:
  """The renderer's declared capabilities and settings: class attributes (through its bases) and instance fields."""
  fields: dict[str, Any] = {}
  for cls in reversed(type(renderer).__mro__):
    for k, v in vars(cls).items():
      if not k.startswith("__") and not callable(v) and not isinstance(v, (property, staticmethod, classmethod)):
        fields[k] = v
  fields.update(vars(renderer))
  return _canon({k: v for k, v in fields.items() if not k.startswith("_")})

NOT_IN_CODE = frozenset({"DEBUG", "TRAINING", "JIT", "JIT_GRAPH", "VIZ", "REALIZE_PLANS", "GRADIENT_TEMPLATES"})

def pass_modules(steps: tuple) -> set[str]:
  """The modules the passes of `steps` come from (their source is part of a key)."""
  modules = set()
  for s in steps:
    ref = getattr(s.spec, "rewrite", None)
    if ref is not None: modules.add(ref.split(":")[0] if isinstance(ref, str) else getattr(ref, "__module__", "?"))
  return modules

def modules_text(modules: set[str]) -> list[str]:
  """Each module with the digest of its package's source, in order."""
  return sorted(f"{m}:{package_digest(m)}" for m in modules)

def settings_text() -> str:
  """Every setting, and every documented environment variable (a module may read one into a constant), but those
  that shape the tensor graph or what is shown, never a kernel's code (a kernel of a model's train step is the same
  program in eval mode: it was lowered and compiled again)."""
  return repr(sorted((k, repr(v.value)) for k, v in ContextVar.registry.items() if k not in NOT_IN_CODE) +
              sorted((k, os.environ.get(k)) for k in ENV_VARS if k not in ContextVar.registry))

def renderer_text(renderer: Any) -> str:
  """The renderer's class and settings, and the threads kernels are shared across (a property: CPU_THREADS=0 means
  every usable core, which taskset changes)."""
  return "\n".join([type(renderer).__module__ + "." + type(renderer).__qualname__, _settings_of(renderer),
                    f"threads {renderer.threads}"])
