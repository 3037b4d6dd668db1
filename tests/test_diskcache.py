"""The disk caches check what they read back: damaged or swapped entries are dropped and reported once, an unsafe
cache directory is not used, and `tinyplug doctor` verifies every entry."""
import os, sqlite3, stat
import pytest
from tinyplug import diskcache
from tinyplug.diskcache import SealedTable, check_cache_tree, entry_digest, read_sealed, write_sealed
from tinyplug.helpers import temp_environ

@pytest.fixture
def cache_home(tmp_path, monkeypatch):
  monkeypatch.setattr(diskcache, "_warned", set())
  with temp_environ(XDG_CACHE_HOME=str(tmp_path)): yield tmp_path / "tinyplug"

def _rows(path, table):
  with sqlite3.connect(path) as conn: return dict(conn.execute(f"SELECT key, payload FROM {table}").fetchall())

def test_sealed_table_round_trip_and_created_private(cache_home):
  t = SealedTable("t.sqlite", "objs", "test")
  t.put("k1", b"payload one")
  assert t.get("k1") == b"payload one" and t.get("missing") is None
  assert stat.S_IMODE(os.stat(cache_home).st_mode) == 0o700

@pytest.mark.parametrize("damage", ["swap", "truncate", "empty", "random"])
def test_damaged_row_is_dropped_and_reported_once(cache_home, capsys, damage):
  t = SealedTable("t.sqlite", "objs", "test")
  t.put("k1", b"A" * 100)
  t.put("k2", b"B" * 100)
  new = {"swap": b"B" * 100, "truncate": b"A" * 50, "empty": b"", "random": os.urandom(100)}[damage]
  with sqlite3.connect(cache_home / "t.sqlite") as conn:
    conn.execute("UPDATE objs SET payload=? WHERE key='k1'", (new,))
    conn.execute("UPDATE objs SET payload=? WHERE key='k2'", (b"A" * 100,))
  assert len(check_cache_tree(str(cache_home))["bad"]) == 2
  assert t.get("k1") is None and t.get("k2") is None
  err = capsys.readouterr().err
  assert err.count("dropped a damaged entry of the test cache") == 1, err
  assert _rows(cache_home / "t.sqlite", "objs") == {}          # dropped, so the next run makes them again
  t.put("k1", b"A" * 100)
  assert t.get("k1") == b"A" * 100
  assert check_cache_tree(str(cache_home)) == {"dir": str(cache_home), "unsafe": None, "entries": 1, "bad": []}

@pytest.mark.parametrize("damage", ["swap", "random"])
def test_many_rows_read_at_once_are_checked_one_by_one(cache_home, capsys, monkeypatch, damage):
  """get_many (a warm schedule's programs in one query, in chunks) returns what get would for each key: a damaged row
  is dropped and reported, a missing key left out, the intact rows returned."""
  monkeypatch.setattr(diskcache, "GET_MANY_CHUNK", 2)
  t = SealedTable("t.sqlite", "objs", "test")
  for i in range(5): t.put(f"k{i}", bytes([65 + i]) * 100)
  new = {"swap": b"A" * 100, "random": os.urandom(100)}[damage]
  with sqlite3.connect(cache_home / "t.sqlite") as conn:
    conn.execute("UPDATE objs SET payload=? WHERE key='k3'", (new,))
  got = t.get_many([f"k{i}" for i in range(5)] + ["missing"])
  assert got == {f"k{i}": bytes([65 + i]) * 100 for i in (0, 1, 2, 4)}
  assert capsys.readouterr().err.count("dropped a damaged entry of the test cache") == 1
  assert "k3" not in _rows(cache_home / "t.sqlite", "objs")   # dropped, so it is made again
  assert t.get_many([]) == {}

def test_sealed_files(cache_home, capsys):
  os.makedirs(cache_home, mode=0o700)
  p1, p2 = str(cache_home / "a.bin"), str(cache_home / "b.bin")
  write_sealed(p1, "key-a", b"binary a")
  write_sealed(p2, "key-b", b"binary b")
  assert read_sealed(p1, "key-a", "test") == b"binary a"
  os.replace(p2, p1)                                            # b's file under a's name: the header says key-b
  assert read_sealed(p1, "key-a", "test") is None and not os.path.exists(p1)
  write_sealed(p1, "key-a", b"binary a")
  data = open(p1, "rb").read()
  open(p1, "wb").write(data[:-3])                               # truncated
  assert check_cache_tree(str(cache_home))["bad"] == ["a.bin: checksum mismatch"]
  assert read_sealed(p1, "key-a", "test") is None
  assert capsys.readouterr().err.count("dropped a damaged entry") == 1

def test_group_writable_cache_dir_is_refused(cache_home, capsys):
  os.makedirs(cache_home)
  os.chmod(cache_home, 0o777)
  t = SealedTable("t.sqlite", "objs", "test")
  t.put("k", b"x")
  assert t.get("k") is None and not os.path.exists(cache_home / "t.sqlite")
  assert "writable by group or others" in capsys.readouterr().err
  assert "writable by group or others" in check_cache_tree(str(cache_home))["unsafe"]

def test_cache_dir_of_another_user_is_refused(cache_home, monkeypatch, capsys):
  os.makedirs(cache_home, mode=0o700)
  monkeypatch.setattr(os, "getuid", lambda: os.stat(cache_home).st_uid + 1)
  assert diskcache.cache_root() is None
  assert "not by the current user" in capsys.readouterr().err

def test_doctor_names_damaged_entries(cache_home):
  from tinyplug.doctor import _cache_info
  t = SealedTable("t.sqlite", "objs", "test")
  t.put("k1", b"A")
  with sqlite3.connect(cache_home / "t.sqlite") as conn: conn.execute("UPDATE objs SET digest=?", (entry_digest("k1", b"B"),))
  info = _cache_info()
  assert info["entries"] == 1 and len(info["bad_entries"]) == 1 and "t.sqlite" in info["bad_entries"][0]

def test_doctor_cli_reports_a_damaged_cache(cache_home):
  import subprocess, sys
  t = SealedTable("t.sqlite", "objs", "test")
  t.put("k1", b"A")
  with sqlite3.connect(cache_home / "t.sqlite") as conn: conn.execute("UPDATE objs SET payload=?", (b"Z",))
  out = subprocess.run([sys.executable, "-m", "tinyplug", "doctor"], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "XDG_CACHE_HOME": str(cache_home.parent)})
  assert out.returncode != 0 and "damaged cache entry" in out.stdout and "no problems found" not in out.stdout

def test_damaged_search_row_searches_again(cache_home, capsys):
  from tinyplug import Tensor
  from tinyplug.device import Device
  from tinyplug.helpers import Context
  from tinyplug.schedule import create_schedule
  from tinyplug.search import runner
  items, _ = create_schedule([(Tensor.empty(8, 8, device="CPU") * 3).sum(1).uop])
  ast, renderer = items[-1].ast, Device["CPU"].renderer
  with Context(CACHELEVEL=2, IGNORE_BEAM_CACHE=0):
    first = runner.run_search("beam", ast, renderer, 1)
    rows = _rows(cache_home / "search.db", "search_v2")
    assert len(rows) == 1 and runner.run_search("beam", ast, renderer, 1) == first
    for garbage in [b"not json", b'[["NOPE", 0, 2]]', b'[["UPCAST", 99, 4]]', b'{"a": 1}']:
      with sqlite3.connect(cache_home / "search.db") as conn:   # a well-sealed row whose content is unusable
        for k in rows: conn.execute("UPDATE search_v2 SET payload=?, digest=? WHERE key=?", (garbage, entry_digest(k, garbage), k))
      again = runner.run_search("beam", ast, renderer, 1)         # searched again (timings may pick other actions)
      assert runner.apply_all(runner.Kernel(ast, renderer), again) is not None
      stored = _rows(cache_home / "search.db", "search_v2")
      assert stored.keys() == rows.keys() and stored != {k: garbage for k in rows}
  assert capsys.readouterr().err.count("dropped a damaged entry of the search cache") == 1
