"""A size limit for the whole cache directory (CACHE_MAX_MB, default 4000 MB; 0 = no limit), kept by evicting the
least recently written or used entries of every store, oldest first, until the cache holds at most TRIM_TO of it.

What counts as one entry (the rules are `measure` and `_folder_part` below):
- a row of an SQLite cache (`*.sqlite`, `*.db`; tables with key/payload/digest/created columns): its time is
  `created`, set when written and refreshed when read a day or more later. Rows are deleted, never the file (other
  processes have it open), in batches; then a VACUUM gives the pages back to the file system (while it runs,
  other processes read as usual and their writes wait, at worst until their busy timeout: a lost cache write).
- a file in a top-level folder (`opencl/<key>.bin`, `cuda/*.cubin`, `emulator/x.so` with its `x.so.sha256`): its
  mtime (sealed files and the emulator's libraries are touched when read a day or more after they were written).
- a folder in a top-level folder (`pocl/<slot>`, `viz/<run>`): one entry, its time the newest mtime inside. A
  folder on which, or on whose `lock` file, a live process holds a flock (a PoCL slot, a viz run being recorded:
  `diskcache.hold_folder`) is in use and never touched; one being deleted is flocked so no process claims it.
- never evicted and not counted: `downloads/` (data sets an offline machine cannot fetch again), symbolic links
  (never followed) and top-level dotfiles (the stamp below).

When: `diskcache.note_write` asks `check_due` at a process's first write to the cache (due when no process has
checked for CHECK_INTERVAL seconds: one stat of the stamp file) and after every `check_bytes` the process wrote.
A due check runs in a background process (`python -m tinyplug.cache_limit`, niced, after CHECK_DELAY seconds, so
it does not compete with a cold start's compiles for the cores): walking a large cache takes
seconds and the first trim of a big old SQLite file minutes, which no caller should wait for. Only one process at
a time checks (a non-blocking flock on the stamp), the others go on. Every step is atomic (a batch of rows in a
transaction, an unlink), so a trim stopped halfway leaves a smaller, intact cache. Nothing here raises into
`note_write`: the cache is an optimisation.
"""
from __future__ import annotations

import contextlib
import heapq
import os
import shutil
import sqlite3
import stat
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from tinyplug.diskcache import cache_root, report_once, unsafe_reason
from tinyplug.helpers import cache_dir, env_str, python_module_command

DEFAULT_MAX_MB = 4000
TRIM_TO = 0.8                 # a trim leaves this fraction of the limit, so the next one is not due at once
CHECK_INTERVAL = 600.0        # seconds between the checks that a process's first write triggers (any process)
CHECK_DELAY = 10              # seconds the background check waits: a cold start's compiles keep the cores
STAMP = ".trim"               # its mtime: the last check; flocked by the process checking
DB_SUFFIXES = (".sqlite", ".db")
DB_SIDE = ("-wal", "-shm", "-journal")
KEPT_PARTS = {"downloads"}   # top-level folders the limit leaves alone (not counted, never evicted)
_ROW_BATCH = 2000             # rows deleted per transaction: other processes' writes wait at most one batch


def limit_bytes() -> int:
  """CACHE_MAX_MB in bytes (0: no limit); a value that is not a whole number is a ValueError naming it."""
  raw = env_str("CACHE_MAX_MB").strip()
  if not raw: return DEFAULT_MAX_MB * 10**6
  if not raw.isdigit(): raise ValueError(f"CACHE_MAX_MB={raw!r} is not a whole number of megabytes (0: no limit)")
  return int(raw) * 10**6


def check_bytes(limit: int) -> int:
  """After this many bytes written, a process checks the limit again (an eighth of it, 16 MB to 256 MB)."""
  return min(256 * 10**6, max(16 * 10**6, limit // 8))


@dataclass
class Entry:
  """One evictable thing: files deleted together, or a folder deleted as one."""
  time: float
  size: int
  paths: list[str]
  folder: bool = False


@dataclass
class Usage:
  root: str
  exists: bool = False
  bytes: int = 0                                  # everything under the directory (symbolic links as links)
  counted: int = 0                                # what the limit counts: bytes less downloads and links
  parts: dict[str, int] = field(default_factory=dict)
  entries: list[Entry] = field(default_factory=list)
  dbs: list[str] = field(default_factory=list)
  in_use: int = 0                                 # bytes in folders a live process holds
  skipped: list[str] = field(default_factory=list)  # what could not be read (reported, never fatal)


def _is_db(name: str) -> bool: return name.endswith(DB_SUFFIXES)


def _disk(st: os.stat_result) -> int:
  """The bytes a file takes on disk (its blocks: PoCL's many small files take more than their sizes)."""
  return st.st_blocks * 512 if getattr(st, "st_blocks", 0) else st.st_size


def _lsize(path: str) -> tuple[int, float]:
  st = os.lstat(path)
  return _disk(st), st.st_mtime


def _tree(path: str) -> tuple[int, float]:
  """Bytes and newest mtime of every file under `path` (links are counted as links, never followed)."""
  size, newest = 0, os.lstat(path).st_mtime
  for folder, dirs, files in os.walk(path):   # os.walk does not descend into links to folders
    for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
      try: s, m = _lsize(os.path.join(folder, name))
      except OSError: continue
      size, newest = size + s, max(newest, m)
  return size, newest


@contextlib.contextmanager
def _flocked(path: str, folder: bool) -> Iterator[bool]:
  """An exclusive, non-blocking flock on a file or folder: yields False when another process holds it."""
  import fcntl
  try: fd = os.open(path, (os.O_RDONLY | os.O_DIRECTORY) if folder else os.O_RDWR)
  except OSError:
    yield not os.path.exists(path)
    return
  try:
    try: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      yield False
      return
    yield True
  finally: os.close(fd)


def folder_in_use(path: str) -> bool:
  """Whether a live process holds a flock on the folder or on its `lock` file."""
  with _flocked(path, True) as free:
    if not free: return True
    lock = os.path.join(path, "lock")
    if not os.path.isfile(lock) or os.path.islink(lock): return False
    with _flocked(lock, False) as free: return not free


def measure(root: str | None = None) -> Usage:
  """Sizes per top-level part, and every evictable entry (SQLite files are listed, their rows read by `trim`)."""
  u = Usage(root or cache_dir())
  u.exists = os.path.isdir(u.root) and not os.path.islink(u.root)
  if not u.exists: return u
  for name in sorted(os.listdir(u.root)):
    path = os.path.join(u.root, name)
    try:
      st = os.lstat(path)
      if stat.S_ISLNK(st.st_mode) or name.startswith("."):
        size, counted = _disk(st), 0
      elif stat.S_ISDIR(st.st_mode):
        size = _folder_part(u, path) if name not in KEPT_PARTS else _tree(path)[0]
        counted = size if name not in KEPT_PARTS else 0
      else:
        size = counted = _disk(st)
        if _is_db(name): u.dbs.append(path)
        elif not name.endswith(DB_SIDE): u.entries.append(Entry(st.st_mtime, size, [path]))
    except OSError as e:
      u.skipped.append(f"{name}: {e.strerror or e}")
      continue
    u.parts[name] = size
    u.bytes += size
    u.counted += counted
  return u


def _folder_part(u: Usage, part: str) -> int:
  """Entries of one top-level folder: its files (a `.sha256` beside its file goes with it) and its folders."""
  total, groups = 0, {}
  for entry in os.scandir(part):
    try:
      st = entry.stat(follow_symlinks=False)
      if stat.S_ISLNK(st.st_mode):
        total += _disk(st)
        continue
      if stat.S_ISDIR(st.st_mode):
        size, newest = _tree(entry.path)
        total += size
        if folder_in_use(entry.path): u.in_use += size
        else: u.entries.append(Entry(newest, size, [entry.path], folder=True))
        continue
    except OSError as e:
      u.skipped.append(f"{os.path.relpath(entry.path, u.root)}: {e.strerror or e}")
      continue
    total += _disk(st)
    if _is_db(entry.name):
      u.dbs.append(entry.path)
      continue
    if entry.name.endswith(DB_SIDE): continue
    g = groups.setdefault(entry.name.removesuffix(".sha256"), Entry(0.0, 0, []))
    g.time, g.size = max(g.time, st.st_mtime), g.size + _disk(st)
    g.paths.append(entry.path)
  u.entries += groups.values()
  return total


# ---------------- SQLite rows ----------------

def _connect(path: str) -> sqlite3.Connection:
  conn = sqlite3.connect(path, timeout=10, isolation_level=None)
  conn.execute("PRAGMA busy_timeout=10000")
  return conn


def _row_tables(conn: sqlite3.Connection) -> list[tuple[str, bool]]:
  """(table, has `created`) for every table that holds cache rows."""
  out = []
  for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
    cols = {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}
    if {"key", "payload", "digest"} <= cols: out.append((table, "created" in cols))
  return out


@dataclass
class _Db:
  path: str
  conn: sqlite3.Connection
  tables: list[tuple[str, bool]]
  fixed: int       # bytes no row deletion frees: its -wal and -shm
  scale: float     # live pages per byte of rows: a row's share of the file


def _open_db(path: str, skipped: list[str]) -> _Db | None:
  try:
    conn = _connect(path)
    try: conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()   # a WAL that grew goes back first
    except sqlite3.Error: pass
    tables = _row_tables(conn)
    page, pages, free = (conn.execute(f"PRAGMA {p}").fetchone()[0]
                         for p in ("page_size", "page_count", "freelist_count"))
    size = "coalesce(sum(length(key)+length(payload)+length(digest)), 0)"
    rows = sum(conn.execute(f'SELECT {size} FROM "{t}"').fetchone()[0] for t, _ in tables)
    side = sum(_disk(os.lstat(path + s)) for s in DB_SIDE if os.path.isfile(path + s))
    live = (pages - free) * page
    return _Db(path, conn, tables, side + (live if rows == 0 else 0), min(8.0, max(1.0, live / rows)) if rows else 0.0)
  except (sqlite3.Error, OSError) as e:
    skipped.append(f"{os.path.basename(path)}: not trimmed ({e})")
    return None


def _rows(db: _Db, table: str, has_created: bool) -> Iterator[tuple[float, int, Any]]:
  """(-time, size, db) of a table's rows, newest first (rows with no time count as the oldest)."""
  when = "coalesce(created, 0)" if has_created else "0"
  cur = db.conn.execute(f'SELECT {when}, length(key)+length(payload)+length(digest) FROM "{table}" ORDER BY 1 DESC')
  try: yield from ((-float(t), int(n * db.scale), db) for t, n in cur)
  finally: cur.close()


def _delete_rows(db: _Db, cutoff: float) -> int:
  deleted = 0
  for table, has_created in db.tables:
    when = "coalesce(created, 0)" if has_created else "0"
    while True:
      n = db.conn.execute(f'DELETE FROM "{table}" WHERE rowid IN (SELECT rowid FROM "{table}" WHERE {when} <= ? '
                          f'LIMIT {_ROW_BATCH})', (cutoff,)).rowcount
      deleted += n
      if n < _ROW_BATCH: break
  return deleted


def _give_back(db: _Db, deleted: int) -> None:
  """Return the free pages to the file system after rows were deleted (or when an eighth of the file is free):
  VACUUM (the files have no auto_vacuum, which costs every insert an extra page write, +0.16 ms), or an
  incremental vacuum where a file has it."""
  conn = db.conn
  free, pages = (conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("freelist_count", "page_count"))
  if free == 0 or (deleted == 0 and free * 8 < pages): return
  if conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 0: conn.execute("VACUUM")
  else: conn.execute("PRAGMA incremental_vacuum").fetchall()
  conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


# ---------------- files and folders ----------------

def _delete_entry(e: Entry, cutoff: float) -> bool:
  """Delete an entry unless it changed since it was measured (written again: newer) or a process holds it."""
  if not e.folder:
    for path in e.paths:
      try:
        st = os.lstat(path)
        if stat.S_ISREG(st.st_mode) and st.st_mtime <= cutoff: os.unlink(path)
      except OSError: pass
    return True
  path = e.paths[0]
  lock = os.path.join(path, "lock")
  with _flocked(path, True) as free:
    if not free: return False
    has_lock = os.path.isfile(lock) and not os.path.islink(lock)
    with (_flocked(lock, False) if has_lock else contextlib.nullcontext(True)) as free:
      if not free: return False
      for entry in os.scandir(path):
        if entry.name == "lock" and has_lock: continue   # the slot stays, empty, for the next process
        if entry.is_dir(follow_symlinks=False): shutil.rmtree(entry.path, ignore_errors=True)
        else:
          with contextlib.suppress(OSError): os.unlink(entry.path)
      if not has_lock:
        with contextlib.suppress(OSError): os.rmdir(path)
  return True


# ---------------- the trim ----------------

def _size_or_0(path: str) -> int:
  try: return _disk(os.lstat(path))
  except OSError: return 0


@dataclass
class TrimResult:
  before: int
  after: int
  limit: int
  rows: int = 0
  files: int = 0
  folders: int = 0
  skipped: list[str] = field(default_factory=list)


def trim(limit: int, root: str | None = None, target: int | None = None, usage: Usage | None = None) -> TrimResult:
  """Evict the oldest entries until what the limit counts is at most `target` (TRIM_TO of `limit`); returns what
  was done. The caller holds the stamp's lock (or accepts a concurrent trim: each step is atomic)."""
  root = root or cache_dir()
  if os.path.islink(root): raise OSError(f"{root} is a symbolic link: not trimming it")
  if os.path.isdir(root) and (why := unsafe_reason(root)) is not None: raise OSError(f"not trimming {root}: {why}")
  u = usage or measure(root)   # (maybe_trim has just measured: a large cache's walk takes seconds)
  res = TrimResult(u.counted, u.counted, limit, skipped=u.skipped)
  if not u.exists or limit <= 0 or u.counted <= limit and target is None: return res
  target = int(limit * TRIM_TO) if target is None else target
  dbs = [d for p in u.dbs if (d := _open_db(p, res.skipped)) is not None]
  try:
    opened = {d.path for d in dbs}
    kept = u.in_use + sum(d.fixed for d in dbs) + sum(_size_or_0(p) for p in u.dbs if p not in opened)
    files = sorted(((-e.time, e.size, e) for e in u.entries), key=lambda x: x[0])
    sources = [_rows(d, t, c) for d in dbs for t, c in d.tables]
    cutoff = None
    for neg_time, size, _ in heapq.merge(files, *sources, key=lambda x: x[0]):
      if kept + size > target:
        cutoff = -neg_time
        break
      kept += size
    for src in sources: src.close()   # their statements end before rows are deleted and VACUUM runs
    deleted = {d.path: 0 for d in dbs}
    if cutoff is not None:
      for e in u.entries:
        if e.time <= cutoff and _delete_entry(e, cutoff):
          if e.folder: res.folders += 1
          else: res.files += len(e.paths)
      for d in dbs:
        try: deleted[d.path] = _delete_rows(d, cutoff)
        except sqlite3.Error as e: res.skipped.append(f"{os.path.basename(d.path)}: rows not deleted ({e})")
      res.rows = sum(deleted.values())
    for d in dbs:   # also after an earlier trim whose VACUUM could not run
      try: _give_back(d, deleted[d.path])
      except sqlite3.Error as e: res.skipped.append(f"{os.path.basename(d.path)}: space not given back yet ({e})")
  finally:
    for d in dbs: d.conn.close()
  res.after = measure(root).counted
  return res


def maybe_trim(force: bool = False) -> TrimResult | None:
  """Trim the cache when it is over its limit, in this process; unless `force`, only when no process checked in the
  last CHECK_INTERVAL seconds. Returns what was done, or None (no check, or within the limit). Never raises."""
  try:
    if (due := _due(force)) is None: return None
    root, stamp, limit = due
    with _flocked(stamp, False) as free:
      if not free: return None   # another process is checking right now
      os.utime(stamp)
      if (u := measure(root)).counted <= limit: return None
      return trim(limit, root, usage=u)
  except ValueError as e: report_once("cache-limit", f"the disk cache is not trimmed: {e}")
  except Exception as e: report_once("cache-trim", f"could not trim the disk cache: {type(e).__name__}: {e}")
  return None


def _fresh(stamp: str) -> bool:
  try: return 0 <= time.time() - os.stat(stamp).st_mtime < CHECK_INTERVAL
  except OSError: return False


def _due(force: bool) -> tuple[str, str, int] | None:
  """(cache directory, its stamp file, made if missing, limit in bytes) when a check is due: a limit is set, the
  directory is safe, and (unless `force`) no process checked in the last CHECK_INTERVAL seconds."""
  limit = limit_bytes()
  if limit <= 0 or (root := cache_root()) is None: return None
  stamp = os.path.join(root, STAMP)
  if not force and _fresh(stamp): return None
  os.close(os.open(stamp, os.O_WRONLY | os.O_CREAT, 0o600))
  return root, stamp, limit


def check_due(force: bool = False) -> bool:
  """Whether this process should start a check (`force`: it wrote `check_bytes` since its last one): when it is
  due, the stamp is touched at once, so that other processes starting now do not start one too. Never raises."""
  try:
    if (due := _due(force)) is None: return False
    os.utime(due[1])
    return True
  except ValueError as e: report_once("cache-limit", f"the disk cache is not trimmed: {e}")
  except OSError: pass
  return False


def start_check() -> None:
  """Run `maybe_trim` in a background process that outlives this one (through `sh -c '... &'`, so no child is
  left to wait for), CHECK_DELAY seconds from now: not while this process starts up. Never raises."""
  import subprocess
  script = 'd=$1; shift; (sleep "$d"; exec "$@") </dev/null >/dev/null 2>&1 &'
  try:
    argv, env = python_module_command("tinyplug.cache_limit")
    subprocess.run(["/bin/sh", "-c", script, "sh", str(CHECK_DELAY), *argv], env=env, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10, check=False)
  except (OSError, subprocess.SubprocessError): pass


if __name__ == "__main__":
  with contextlib.suppress(OSError): os.nice(10)
  # started by check_due, which made the stamp: a cache cleared or removed since is left as it is
  if os.path.isfile(os.path.join(cache_dir(), STAMP)): maybe_trim(force=True)
