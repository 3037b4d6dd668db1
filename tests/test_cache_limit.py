"""The disk cache's size limit (CACHE_MAX_MB, tinyplug/cache_limit.py): real files in a temporary XDG_CACHE_HOME,
trimmed oldest first across the SQLite rows, sealed files, the emulator's libraries, PoCL slots and viz runs."""
import fcntl, json, os, sqlite3, subprocess, sys, textwrap, time
import pytest
from tinyplug import cache_limit, diskcache
from tinyplug.diskcache import SealedTable, hold_folder, read_sealed, write_sealed
from tinyplug.helpers import temp_environ

KB = 1000

@pytest.fixture
def cache_home(tmp_path, monkeypatch):
  monkeypatch.setattr(diskcache, "_warned", set())
  monkeypatch.setattr(diskcache, "_checked", True)     # the tests trim explicitly, except where they say otherwise
  with temp_environ(XDG_CACHE_HOME=str(tmp_path / "xdg")): yield tmp_path / "xdg" / "tinyplug"

def _age(path, when):
  os.utime(path, (when, when), follow_symlinks=False)

def _old_row(db, table, key, when):
  with sqlite3.connect(db) as conn: conn.execute(f"UPDATE {table} SET created=? WHERE key=?", (when, key))

def _db_bytes(path):
  return sum(os.path.getsize(f"{path}{s}") for s in ("", "-wal") if os.path.exists(f"{path}{s}"))

def _fill(root, now):
  """40 entries of ~100 KB, one every 100 s, spread over every store; returns {name: time}."""
  t = SealedTable("codegen.sqlite", "programs_v1", "codegen")
  s = SealedTable("codegen.sqlite", "simplified_v1", "simplify")
  c = SealedTable("cpu_llvm.sqlite", "objs", "cpu_llvm")
  ages = {}
  for i in range(40):
    when, kind = now - 100 * (40 - i), i % 5
    name = f"e{i:02d}"
    blob = os.urandom(100 * KB)
    if kind in (0, 1):
      table, db = (t, "programs_v1") if kind == 0 else (s, "simplified_v1")
      table.put(name, blob)
      _old_row(root / "codegen.sqlite", db, name, when)
    elif kind == 2:
      c.put(name, blob)
      _old_row(root / "cpu_llvm.sqlite", "objs", name, when)
    elif kind == 3:
      write_sealed(str(root / "opencl" / f"{name}.bin"), name, blob)
      _age(root / "opencl" / f"{name}.bin", when)
    else:
      so = root / "emulator" / f"{name}.so"
      so.parent.mkdir(exist_ok=True)
      so.write_bytes(blob)
      (root / "emulator" / f"{name}.so.sha256").write_text("x" * 64)
      _age(so, when); _age(str(so) + ".sha256", when)
    ages[name] = when
  return ages

def _present(root):
  """Names of the entries still there (rows and files)."""
  names = set()
  for db, tables in (("codegen.sqlite", ("programs_v1", "simplified_v1")), ("cpu_llvm.sqlite", ("objs",))):
    with sqlite3.connect(root / db) as conn:
      for table in tables: names |= {k for (k,) in conn.execute(f"SELECT key FROM {table}")}
  names |= {p.stem for p in (root / "opencl").glob("*.bin")}
  names |= {p.name[:-3] for p in (root / "emulator").glob("*.so")}
  return names

def test_trim_evicts_the_oldest_of_every_store_to_under_the_limit(cache_home):
  now = time.time()
  ages = _fill(cache_home, now)
  (cache_home / "downloads").mkdir()
  (cache_home / "downloads" / "mnist.gz").write_bytes(b"d" * 3000 * KB)   # data sets: kept, not counted
  before = cache_limit.measure()
  assert before.counted > 4000 * KB and 3000 * KB <= before.parts["downloads"] < 3010 * KB   # sizes on disk
  db_size = _db_bytes(cache_home / "codegen.sqlite")
  with temp_environ(CACHE_MAX_MB="2"):
    res = cache_limit.maybe_trim(force=True)
  assert res is not None and res.before == before.counted and res.after <= 2000 * KB, res
  assert res.after == cache_limit.measure().counted and res.rows > 0 and res.files > 0
  kept = _present(cache_home)
  assert 8 <= len(kept) < 40
  newest_gone = max(ages[n] for n in ages if n not in kept)
  assert all(ages[n] > newest_gone for n in kept), "an older entry survived a newer one"
  assert all(ages[n] >= ages[m] for n in kept for m in ages if m not in kept)
  assert os.path.getsize(cache_home / "downloads" / "mnist.gz") == 3000 * KB
  # the rows' pages went back to the file system, and the kept rows still read back intact
  assert _db_bytes(cache_home / "codegen.sqlite") < db_size / 2
  for n in kept & {f"e{i:02d}" for i in range(0, 40, 5)}: assert SealedTable("codegen.sqlite", "programs_v1").get(n) is not None
  assert not (cache_home / "emulator" / "e04.so.sha256").exists()   # a library goes with its checksum file

def test_a_file_made_elsewhere_keeps_its_newest_rows_and_shrinks(cache_home):
  cache_home.mkdir(parents=True, mode=0o700)
  path = cache_home / "old.sqlite"
  with sqlite3.connect(path) as conn:   # made by another program (a WAL, no busy timeout of ours)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (key TEXT PRIMARY KEY, payload BLOB NOT NULL, digest TEXT NOT NULL, created REAL)")
    for i in range(30):
      blob = os.urandom(100 * KB)
      conn.execute("INSERT INTO t VALUES (?, ?, ?, ?)", (f"k{i}", blob, diskcache.entry_digest(f"k{i}", blob), 1000.0 + i))
  size = os.path.getsize(path) + os.path.getsize(str(path) + "-wal")
  res = cache_limit.trim(1000 * KB)
  with sqlite3.connect(path) as conn:
    keys = sorted(int(k[1:]) for (k,) in conn.execute("SELECT key FROM t"))
  assert keys == list(range(30 - len(keys), 30)) and 0 < len(keys) <= 8, keys   # the newest, under 800 KB
  assert os.path.getsize(path) < size / 2 and res.after <= 1000 * KB

def test_pocl_slots_and_viz_runs_in_use_are_left_alone(cache_home):
  now = time.time()
  for slot in range(3):
    kcache = cache_home / "pocl" / str(slot) / "kcache" / "ab" / "prog"
    kcache.mkdir(parents=True)
    (kcache / "program.so").write_bytes(b"k" * 500 * KB)
    (cache_home / "pocl" / str(slot) / "lock").touch()
    for p in (kcache / "program.so", kcache):
      _age(p, now - 1000 + slot)
  run_live, run_old = cache_home / "viz" / "20260101-000000-1", cache_home / "viz" / "20250101-000000-2"
  for run in (run_live, run_old):
    run.mkdir(parents=True)
    (run / "trace-1.jsonl.z").write_bytes(b"v" * 500 * KB)
    _age(run / "trace-1.jsonl.z", now - 5000)
  with open(cache_home / "pocl" / "1" / "lock", "a") as held:   # slot 1 belongs to a live process (this one)
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert hold_folder(str(run_live))                          # a run being recorded
    res = cache_limit.trim(1000 * KB)
    assert res.folders == 3   # slots 0 and 2, the old viz run
    assert (cache_home / "pocl" / "1" / "kcache" / "ab" / "prog" / "program.so").exists()
    assert (run_live / "trace-1.jsonl.z").exists() and not run_old.exists()
    for slot in (0, 2):   # a dead slot is emptied; its lock file stays for the next process
      assert os.listdir(cache_home / "pocl" / str(slot)) == ["lock"]
  # nobody holds slot 0 after the trim: a process claims it as before
  with open(cache_home / "pocl" / "0" / "lock", "a") as f: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)

def test_a_symbolic_link_out_of_the_cache_is_not_followed(cache_home, tmp_path):
  outside = tmp_path / "outside"
  (outside / "dir").mkdir(parents=True)
  (outside / "precious.bin").write_bytes(b"p" * 500 * KB)
  (outside / "dir" / "more.bin").write_bytes(b"p" * 500 * KB)
  (cache_home / "opencl").mkdir(parents=True)
  (cache_home / "pocl" / "0" / "kcache").mkdir(parents=True)
  os.symlink(outside / "precious.bin", cache_home / "opencl" / "link.bin")
  os.symlink(outside / "dir", cache_home / "cuda")
  os.symlink(outside / "dir", cache_home / "pocl" / "0" / "kcache" / "dirlink")
  os.symlink(outside / "precious.bin", cache_home / "pocl" / "0" / "kcache" / "filelink")
  (cache_home / "opencl" / "real.bin").write_bytes(b"r" * 900 * KB)
  for p in (cache_home / "opencl" / "link.bin", cache_home / "cuda", cache_home / "pocl" / "0" / "kcache" / "dirlink"):
    _age(p, 1000.0)
  assert cache_limit.measure().counted < 1000 * KB   # links are not counted by their targets' sizes
  res = cache_limit.trim(100 * KB)
  assert res.after < 100 * KB and not (cache_home / "opencl" / "real.bin").exists()
  assert (outside / "precious.bin").read_bytes() == b"p" * 500 * KB
  assert (outside / "dir" / "more.bin").read_bytes() == b"p" * 500 * KB
  assert os.path.islink(cache_home / "cuda") and os.path.islink(cache_home / "opencl" / "link.bin")
  os.rename(cache_home, tmp_path / "moved")   # the cache directory itself a link: trim refuses it
  os.symlink(tmp_path / "moved", cache_home)
  with pytest.raises(OSError, match="symbolic link"): cache_limit.trim(100 * KB)

def test_damaged_and_odd_files_do_not_break_the_trim(cache_home):
  now = time.time()
  t = SealedTable("codegen.sqlite", "programs_v1")
  for i in range(10):
    t.put(f"k{i}", os.urandom(100 * KB))
    _old_row(cache_home / "codegen.sqlite", "programs_v1", f"k{i}", now - 100 * (10 - i))
  (cache_home / "broken.sqlite").write_bytes(os.urandom(300 * KB))       # not a database
  (cache_home / "empty.db").touch()
  with sqlite3.connect(cache_home / "other.db") as conn:                 # a table of another shape, a NULL time
    conn.execute("CREATE TABLE notes (a, b)")
    conn.execute("INSERT INTO notes VALUES (1, 2)")
    conn.execute("CREATE TABLE rows (key TEXT, payload BLOB, digest TEXT, created REAL)")
    conn.execute("INSERT INTO rows VALUES ('n', ?, 'x', NULL)", (b"z" * 200 * KB,))
  (cache_home / "opencl").mkdir()
  os.mkfifo(cache_home / "opencl" / "pipe.bin")                           # never opened
  (cache_home / "opencl" / "half.tmp").write_bytes(b"t" * 100 * KB)      # a crashed writer's leftover
  (cache_home / "strange").mkdir()
  (cache_home / "strange" / "deep" / "er").mkdir(parents=True)
  (cache_home / "strange" / "deep" / "er" / "f").write_bytes(b"s" * 100 * KB)
  (cache_home / "top-level-file").write_bytes(b"f" * 50 * KB)
  res = cache_limit.trim(1500 * KB)
  assert any("broken.sqlite" in s for s in res.skipped), res.skipped
  assert res.before > 1500 * KB >= res.after, res   # the damaged file's 300 KB count, so more rows go
  assert (cache_home / "broken.sqlite").exists()          # never unlinked: another process may have it open
  with sqlite3.connect(cache_home / "other.db") as conn:
    assert conn.execute("SELECT count(*) FROM notes").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM rows").fetchone()[0] == 0   # no time: the oldest
  kept = [i for i in range(10) if t.get(f"k{i}") is not None]
  assert kept == list(range(10 - len(kept), 10)) and 3 <= len(kept) < 10, kept   # the newest rows

def test_a_second_process_sharing_the_sqlite_file_keeps_working(cache_home, tmp_path):
  now = time.time()
  cache_home.mkdir(parents=True, mode=0o700)
  with sqlite3.connect(cache_home / "codegen.sqlite") as conn:
    conn.execute("CREATE TABLE programs_v1 (key TEXT PRIMARY KEY, payload BLOB NOT NULL, digest TEXT NOT NULL, created REAL)")
  t = SealedTable("codegen.sqlite", "programs_v1")
  for i in range(60):
    t.put(f"old{i}", os.urandom(50 * KB))
  with sqlite3.connect(cache_home / "codegen.sqlite") as conn: conn.execute("UPDATE programs_v1 SET created=?", (now - 9999,))
  worker = textwrap.dedent("""
    import os, sys, time
    from tinyplug.diskcache import SealedTable
    t = SealedTable("codegen.sqlite", "programs_v1")
    wrong = done = 0
    deadline = time.time() + float(sys.argv[1])
    while time.time() < deadline or done < 50:
      key, blob = f"new{done}", os.urandom(20000) + str(done).encode()
      t.put(key, blob)
      got = t.get(key)
      wrong += got is not None and got != blob   # a miss is allowed (a write that waited too long), never wrong bytes
      done += 1
    t.put("after", b"still works")
    print(wrong, done, t.get("after") == b"still works")
  """)
  env = {**os.environ, "CACHE_MAX_MB": "0"}   # the worker itself never trims
  proc = subprocess.Popen([sys.executable, "-c", worker, "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
  time.sleep(0.5)
  results = [cache_limit.trim(1000 * KB) for _ in range(3)]
  out, err = proc.communicate(timeout=120)
  assert proc.returncode == 0, err
  wrong, done, works = out.split()
  assert wrong == "0" and int(done) >= 50 and works == "True", out
  assert sum(r.rows for r in results) >= 40 and not err
  assert t.get("after") == b"still works"
  from tinyplug.diskcache import check_cache_tree
  assert check_cache_tree(str(cache_home))["bad"] == []

def test_the_first_write_of_a_process_starts_a_check_once_in_a_while(cache_home, monkeypatch, tmp_path):
  # the background check imports nothing from the working directory (`python -m` would put it first on the path)
  marker, cwd = tmp_path / "imported", tmp_path / "cwd"
  cwd.mkdir()
  (cwd / "sqlite3.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
  monkeypatch.chdir(cwd)
  t = SealedTable("codegen.sqlite", "programs_v1")
  with temp_environ(CACHE_MAX_MB="0"):
    for i in range(30): t.put(f"k{i}", os.urandom(100 * KB))
  with sqlite3.connect(cache_home / "codegen.sqlite") as conn: conn.execute("UPDATE programs_v1 SET created=1000")
  monkeypatch.setattr(diskcache, "_checked", False)
  monkeypatch.setattr(cache_limit, "CHECK_DELAY", 0)
  with temp_environ(CACHE_MAX_MB="1"):
    t.put("new", b"n" * 100 * KB)   # a new process's first write: a background process trims the cache
    deadline = time.time() + 60
    while cache_limit.measure().counted > 1000 * KB and time.time() < deadline: time.sleep(0.2)
    assert cache_limit.measure().counted <= 1000 * KB and t.get("new") == b"n" * 100 * KB and not marker.exists()
    started = []
    monkeypatch.setattr(cache_limit, "start_check", lambda: started.append(1))
    monkeypatch.setattr(diskcache, "_checked", False)
    t.put("next", b"x")                                     # another process soon after: one stat, nothing started
    for i in range(5): t.put(f"more{i}", b"y" * 100 * KB)   # under check_bytes (16 MB): nothing either
    assert started == []
    monkeypatch.setattr(diskcache, "_written", 0)
    for i in range(170): t.put(f"many{i}", b"z" * 100 * KB)  # 17 MB written by this process: it checks again
    assert started == [1]

def test_a_bad_limit_is_reported_and_never_fails_the_caller(cache_home, monkeypatch, capsys):
  monkeypatch.setattr(diskcache, "_checked", False)
  with temp_environ(CACHE_MAX_MB="lots"):
    SealedTable("t.sqlite", "objs").put("k", b"v")
    assert SealedTable("t.sqlite", "objs").get("k") == b"v"
  assert "CACHE_MAX_MB='lots' is not a whole number" in capsys.readouterr().err

def test_reading_an_old_entry_marks_it_used(cache_home):
  t = SealedTable("t.sqlite", "objs")
  t.put("k", b"v")
  _old_row(cache_home / "t.sqlite", "objs", "k", 1000.0)
  assert t.get("k") == b"v"
  with sqlite3.connect(cache_home / "t.sqlite") as conn:
    assert conn.execute("SELECT created FROM objs").fetchone()[0] > time.time() - 60
  path = str(cache_home / "opencl" / "a.bin")
  write_sealed(path, "a", b"binary")
  _age(path, 1000.0)
  assert read_sealed(path, "a", "test") == b"binary" and os.path.getmtime(path) > time.time() - 60

def _cli(env, *args):
  return subprocess.run([sys.executable, "-m", "tinyplug", "cache", *args], capture_output=True, text=True, env=env,
                        timeout=120)

def test_cli_shows_usage_against_the_limit_and_trims(cache_home):
  now = time.time()
  _fill(cache_home, now)
  env = {**os.environ, "XDG_CACHE_HOME": str(cache_home.parent), "CACHE_MAX_MB": "2"}
  out = _cli(env)
  assert out.returncode == 0 and "of limit 2.0 MB (CACHE_MAX_MB=2) OVER THE LIMIT" in out.stdout, out.stdout
  assert "codegen.sqlite" in out.stdout and "emulator" in out.stdout
  info = json.loads(_cli(env, "--json").stdout)
  assert info["limit_bytes"] == 2 * 10**6 and info["over_limit"] and info["counted_bytes"] > 2 * 10**6
  from tinyplug.doctor import _cache_info, cache_problems
  with temp_environ(CACHE_MAX_MB="2"):
    assert any("over its limit of 2 MB (CACHE_MAX_MB)" in p for p in cache_problems(_cache_info()))
  out = _cli(env, "trim")
  assert out.returncode == 0 and out.stdout.startswith(f"trimmed {cache_home} from ") and "evicted" in out.stdout, out
  info = json.loads(_cli(env, "--json").stdout)
  assert not info["over_limit"] and info["counted_bytes"] <= 2 * 10**6
  with temp_environ(CACHE_MAX_MB="2"): assert cache_problems(_cache_info()) == []
  assert "nothing to trim" in _cli(env, "trim").stdout
  assert "of no limit" in _cli({**env, "CACHE_MAX_MB": "0"}).stdout
  assert "no limit to trim to" in _cli({**env, "CACHE_MAX_MB": "0"}, "trim").stdout
  out = _cli({**env, "CACHE_MAX_MB": "0"}, "trim", "--max-mb", "1")
  assert out.returncode == 0 and "CACHE_MAX_MB=1" in out.stdout
  assert json.loads(_cli(env, "--json").stdout)["counted_bytes"] <= 1 * 10**6
  bad = _cli({**env, "CACHE_MAX_MB": "2GB"})
  assert bad.returncode == 2 and "CACHE_MAX_MB='2GB' is not a whole number" in bad.stderr
