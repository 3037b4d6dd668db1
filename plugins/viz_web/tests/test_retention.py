"""Recorded runs do not pile up (issue 21, item 5): a new run prunes old ones to VIZ_KEEP runs within VIZ_KEEP_MB,
and `tinyplug viz clean` removes them; nothing but run folders is ever deleted."""
import os, shutil, subprocess, sys
from tinyplug_viz_web.retention import prune, recorded_runs

def make_runs(root, small_trace, n):
  runs = []
  for i in range(n):
    d = root / f"run{i}"
    shutil.copytree(small_trace, d)
    for f in os.listdir(d): os.utime(d / f, (1000 + i, 1000 + i))
    runs.append(str(d))
  return runs

def test_prune_keeps_the_newest_within_count_and_size(small_trace, tmp_path):
  runs = make_runs(tmp_path, small_trace, 5)
  (tmp_path / "notes").mkdir(); (tmp_path / "notes" / "todo.txt").write_text("mine")   # not a run: never touched
  assert [os.path.basename(r) for r in recorded_runs(str(tmp_path))] == ["run4", "run3", "run2", "run1", "run0"]
  removed = prune(str(tmp_path), keep=3, keep_bytes=10**9)
  assert sorted(os.path.basename(r) for r in removed) == ["run0", "run1"] and not os.path.exists(runs[0])
  size = sum(os.path.getsize(os.path.join(runs[4], f)) for f in os.listdir(runs[4]))
  prune(str(tmp_path), keep=10, keep_bytes=size, spare=runs[4])        # only the spared current run fits
  assert [os.path.basename(r) for r in recorded_runs(str(tmp_path))] == ["run4"]
  assert (tmp_path / "notes" / "todo.txt").read_text() == "mine"

def test_new_run_prunes_and_clean_removes(small_trace, tmp_path):
  cache = tmp_path / "cache"
  runs = make_runs(cache / "tinyplug" / "viz", small_trace, 4)
  env = dict(os.environ, XDG_CACHE_HOME=str(cache), VIZ="1", VIZ_KEEP="2", VIZ_SERVE="0")
  for k in ("TINYPLUG_VIZ_RUN", "VIZ_TRACE"): env.pop(k, None)
  script = "from tinyplug.tensor import Tensor\n(Tensor.empty(3) + Tensor.empty(3)).realize()\n"
  r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  left = recorded_runs(str(cache / "tinyplug" / "viz"))
  assert len(left) == 2 and os.path.basename(left[1]) == "run3"       # the new run and the newest old one
  env.pop("VIZ")
  r = subprocess.run([sys.executable, "-m", "tinyplug", "viz", "clean", "--keep", "1"], env=env, capture_output=True,
                     text=True, timeout=120)
  assert r.returncode == 0 and "removed 1 run" in r.stdout, r.stderr
  r = subprocess.run([sys.executable, "-m", "tinyplug", "viz", "clean"], env=env, capture_output=True, text=True,
                     timeout=120)
  assert "removed 1 run" in r.stdout and recorded_runs(str(cache / "tinyplug" / "viz")) == []
  env["VIZ_KEEP"] = "many"
  env["VIZ"] = "1"
  r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0 and "VIZ_KEEP='many' is not a whole number" in r.stderr
