"""BEAM builds candidates in worker processes (PARALLEL) and times them here: the kernel it picks computes the right
values, the workers change nothing about which kernel it picks, a crashing worker or a candidate that does not compile
costs that candidate only, and a second process reads the answer from the disk cache instead of searching."""
import json, os, subprocess, sys, textwrap, time, zlib
import numpy as np
import pytest
from tinyplug import Tensor, events
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.schedule import create_schedule
from tinyplug.search import runner
from tinyplug.testing.kernels import run_kernel

cpu_llvm = pytest.importorskip("tinyplug_cpu_llvm.compiler")
RNG = np.random.default_rng(7)

def _cpu_or_skip():
  if "CPU" not in Device.available(): pytest.skip("the CPU device (cpu_llvm) is not available")

def _matmul(n: int, m: int, k: int):
  a, b = RNG.standard_normal((n, k)).astype(np.float32), RNG.standard_normal((k, m)).astype(np.float32)
  ta, tb = Tensor(a, device="CPU").realize(), Tensor(b, device="CPU").realize()
  return ta @ tb, a @ b

def _search(out: Tensor, width: int, **settings) -> tuple[list, dict]:
  """(the actions the beam picks for `out`'s kernel, the search event) with `settings`, the cache ignored."""
  (item,), _ = create_schedule([out.uop])
  seen: list[dict] = []
  events.subscribe("search", seen.append)
  try:
    with Context(BEAM=width, IGNORE_BEAM_CACHE=1, CACHELEVEL=0, **settings):
      opts = runner.search_kernel(item.ast, Device["CPU"].renderer)
  finally: events.unsubscribe("search", seen.append)
  assert len(seen) == 1
  return opts, seen[0]

def test_parallel_search_picks_a_kernel_that_matches_numpy():
  _cpu_or_skip()
  out, ref = _matmul(48, 40, 64)
  opts, ev = _search(out, 2, PARALLEL=2)
  assert ev["built_in_workers"] > 0 and ev["timed"] > 2   # the workers built what was timed
  got, _ = run_kernel(out, "CPU", opts)
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
  with Context(BEAM=2, PARALLEL=2, CACHELEVEL=0, IGNORE_BEAM_CACHE=1):   # and through the engine
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)

def test_workers_import_nothing_from_the_working_directory(monkeypatch, tmp_path):
  """A module in the working directory that this process does not import from (here: a struct.py) is not imported by
  the workers either (`python -m` would put the directory first on their path)."""
  _cpu_or_skip()
  from tinyplug.search.pool import close_pool
  marker = tmp_path / "imported"
  (tmp_path / "struct.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
  monkeypatch.chdir(tmp_path)
  close_pool()   # the workers start in this directory
  try:
    out, _ = _matmul(16, 16, 32)
    _, ev = _search(out, 2, PARALLEL=2)
  finally: close_pool()
  assert not marker.exists() and ev["built_in_workers"] > 0

def test_parallel_and_serial_pick_the_same_given_the_same_timings(monkeypatch):
  """With each program's time a function of its source, both ways time the same candidates in the same order
  and pick the same actions."""
  _cpu_or_skip()
  timed: list = []
  def fake_run(self, prg, spec):
    timed.append(spec.applied_opts)
    return 1e-3 * (1 + zlib.crc32(spec.src.encode()) % 1000)
  monkeypatch.setattr(runner.Timer, "run_once", fake_run)
  out, _ = _matmul(32, 24, 16)
  serial, ev_serial = _search(out, 2, PARALLEL=0)
  serial_timed, timed[:] = list(timed), []
  parallel, ev_parallel = _search(out, 2, PARALLEL=2)
  assert ev_serial["built_in_workers"] == 0 and ev_parallel["built_in_workers"] == ev_parallel["timed"] > 0
  assert timed == serial_timed and parallel == serial and len(timed) > 10

class FlakyLLVMCompiler(cpu_llvm.LLVMCompiler):
  """The CPU compiler, except that it kills its process on any UPCAST by 4 and hangs on any UPCAST by 8 (in a compile
  worker; here it raises), and refuses any UPCAST by 2."""
  def compile_program(self, spec):
    ups = {o.arg for o in spec.applied_opts if o.op is OptOps.UPCAST}
    if 4 in ups or 8 in ups:
      if os.environ.get("TINYPLUG_TEST_PARENT") == str(os.getpid()): raise RuntimeError("would crash or hang")
      if 4 in ups: os._exit(3)
      time.sleep(3600)
    if 2 in ups: raise RuntimeError("this compiler refuses UPCAST by 2")
    return super().compile_program(spec)

@pytest.mark.slow
def test_a_crashing_worker_or_a_failed_compile_drops_only_that_candidate(monkeypatch, capfd):
  _cpu_or_skip()
  out, ref = _matmul(32, 32, 32)
  dev = Device["CPU"]
  monkeypatch.setattr(dev, "compiler", FlakyLLVMCompiler(dev.compiler.cpu, dev.compiler.features, dev.compiler.opt))
  monkeypatch.setenv("TINYPLUG_TEST_PARENT", str(os.getpid()))
  monkeypatch.setattr(runner, "BUILD_TIMEOUT", 3.0)
  opts, ev = _search(out, 2, PARALLEL=2, DEBUG=1)
  assert not any(o.op is OptOps.UPCAST and o.arg in (2, 4, 8) for o in opts)
  assert ev["failed"] >= 3 and ev["timed"] > 0
  printed = capfd.readouterr().out
  assert "the compile worker exited with status 3" in printed and "building took over 3 s: stopped" in printed
  monkeypatch.undo()
  got, _ = run_kernel(out, "CPU", opts)
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
  again, ev = _search(out, 1, PARALLEL=2)   # the pool goes on working after the crashes
  assert ev["built_in_workers"] > 0

SCRIPT = textwrap.dedent("""
  import json, numpy as np
  from tinyplug import Tensor, events
  from tinyplug.helpers import Context
  searches, kernels = [], []
  events.subscribe("search", searches.append)
  events.subscribe("kernel", lambda e: kernels.append([[o.op.name, o.axis, o.arg] for o in e["opts"]]))
  a = np.arange(24 * 40, dtype=np.float32).reshape(24, 40) / 100
  b = np.arange(40 * 16, dtype=np.float32).reshape(40, 16) / 50
  with Context(BEAM=1, PARALLEL=2):
    got = (Tensor(a, device="CPU") @ Tensor(b, device="CPU")).numpy()
  print(json.dumps({"searches": len(searches), "ok": bool(np.allclose(got, a @ b, rtol=1e-5)), "kernel": kernels[-1]}))
""")

def _run_script(cache: str) -> dict:
  env = {**os.environ, "XDG_CACHE_HOME": cache, "DEV": "CPU"}
  env.pop("IGNORE_BEAM_CACHE", None)
  out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
  assert out.returncode == 0, out.stderr
  return json.loads(out.stdout.strip().splitlines()[-1])

def test_a_second_process_reads_the_search_from_disk_and_a_damaged_cache_is_ignored(tmp_path):
  _cpu_or_skip()
  first, second = _run_script(str(tmp_path)), _run_script(str(tmp_path))
  assert first["searches"] == 1 and first["ok"]
  assert second["searches"] == 0 and second["ok"] and second["kernel"] == first["kernel"]
  db = tmp_path / "tinyplug" / "search.db"
  assert db.exists()
  for name in os.listdir(db.parent):   # the search database (and its journal) overwritten with garbage
    if name.startswith("search.db"): (db.parent / name).write_bytes(os.urandom(4096))
  third = _run_script(str(tmp_path))
  assert third["searches"] == 1 and third["ok"]


def test_workers_that_cannot_build_the_kernel_leave_it_to_this_process(monkeypatch, capfd):
  """A worker whose pass pipeline differs from this process's (another plugin set) refuses the job rather than build
  other programs; the search then builds every candidate here, and still finds a right kernel."""
  _cpu_or_skip()
  import tinyplug.codegen as codegen
  out, ref = _matmul(16, 24, 32)
  real = codegen.pipeline_key
  monkeypatch.setattr(codegen, "pipeline_key", lambda: "another plugin set " + real())
  opts, ev = _search(out, 1, PARALLEL=2, DEBUG=1)
  assert ev["built_in_workers"] == 0 and ev["timed"] > 2
  assert "the compile workers cannot build this kernel" in capfd.readouterr().out
  monkeypatch.undo()
  got, _ = run_kernel(out, "CPU", opts)
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)

def test_a_worker_still_starting_is_not_a_stuck_build():
  """The build bound counts from a worker's READY: one still importing (a loaded machine) is left to start for
  START_ALLOWANCE more, one that is ready and over the bound is stopped, and a started worker builds."""
  _cpu_or_skip()
  from tinyplug.search import pool as pool_mod
  pool = pool_mod.CompilePool(1)
  try:
    w = pool._spare.get()
    w.busy_since = time.monotonic() - 2.0   # asked for a build 2 s ago, no READY read yet
    pool.stop_stuck(1.0)
    assert w.proc.poll() is None and w.stopped_after is None
    w.ready = True
    pool.stop_stuck(1.0)
    assert w.proc.wait(timeout=30) != 0 and w.stopped_after == 1.0
    fresh = pool_mod._Worker()
    try:
      out, _ = _matmul(8, 8, 8)
      (item,), _ = create_schedule([out.uop])
      timer = runner.Timer(item.ast, Device["CPU"].renderer, "CPU")
      with Context(PARALLEL=1): timer._pool()
      spec, lib = fresh.build(timer._job_key, timer._job, [])
      assert fresh.ready and spec.src and lib
    finally: fresh.close()
  finally:
    pool.close()
    pool_mod.close_pool()   # the one Timer._pool made
