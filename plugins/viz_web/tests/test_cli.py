"""`tinyplug viz cli` on a recorded trace, through the real `tinyplug` entry point."""
import json, os, subprocess, sys
import pytest

def viz(*args, env=None):
  e = dict(os.environ, **(env or {}))
  e.pop("VIZ", None)
  return subprocess.run([sys.executable, "-m", "tinyplug", "viz", *args], capture_output=True, text=True, env=e, timeout=120)

def test_lists_schedules_and_kernels(small_trace):
  r = viz("cli", small_trace, env={"NO_COLOR": "1"})
  assert r.returncode == 0, r.stderr
  assert "E_3" in r.stdout and "E_16" in r.stdout and "schedule 1" in r.stdout and "runs 1" in r.stdout
  assert "\x1b[" not in r.stdout

def test_colour_only_on_a_terminal_or_when_forced(small_trace):
  env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
  cmd = [sys.executable, "-m", "tinyplug", "viz", "cli", small_trace]
  piped = subprocess.run(cmd, capture_output=True, text=True, env=env)
  assert piped.returncode == 0 and "E_" in piped.stdout and "\x1b[" not in piped.stdout
  forced = subprocess.run(cmd, capture_output=True, text=True, env={**env, "FORCE_COLOR": "1"})
  assert "\x1b[" in forced.stdout
  both = subprocess.run(cmd, capture_output=True, text=True, env={**env, "FORCE_COLOR": "1", "NO_COLOR": "1"})
  assert "\x1b[" not in both.stdout

def test_schedule_lists_its_kernels(small_trace):
  r = viz("cli", small_trace, "-s", "TINY", "-i", "schedule 2", env={"NO_COLOR": "1"})
  assert r.returncode == 0, r.stderr
  assert "kernels (1)" in r.stdout and "E_16" in r.stdout

def test_step_prints_graphs_uops_and_code(small_trace):
  r = viz("cli", small_trace, "-s", "TINY", "-i", "E_3", "gpudims", env={"NO_COLOR": "1"})
  assert r.returncode == 0, r.stderr
  out = r.stdout
  for part in ("--- graph before", "--- match 1:", "--- graph after", "--- UOp list of E_3", "--- code of E_3"):
    assert part in out
  assert "-RANGE" in out and "+SPECIAL" in out
  same = viz("cli", small_trace, "-s", "E_3", "-i", "gpudims", env={"NO_COLOR": "1"})
  assert same.stdout == out

def test_single_match_and_track(small_trace):
  r = viz("cli", small_trace, "-s", "E_3", "-i", "gpudims", "1", env={"NO_COLOR": "1"})
  assert r.returncode == 0 and "--- graph after match 1" in r.stdout and "--- graph before" not in r.stdout
  r = viz("cli", small_trace, "-s", "PYTHON", env={"NO_COLOR": "1"})
  assert r.returncode == 0 and "E_3" in r.stdout and "run" in r.stdout

def test_json_gives_kernel_timings_and_asts(small_trace):
  r = viz("cli", small_trace, "--json")
  assert r.returncode == 0, r.stderr
  rows = [json.loads(l) for l in r.stdout.splitlines()]
  assert [k["name"] for k in rows] == ["E_3", "E_16"]
  for k in rows:
    assert k["type"] == "kernel" and k["runs"] == 1 and k["time_s"] > 0 and k["ast"].startswith("SINK") and k["src"]
  assert "\x1b[" not in r.stdout

def test_mistakes_are_clear(small_trace, tmp_path):
  r = viz("cli", small_trace, "-s", "E_4")
  assert r.returncode == 1 and "did you mean 'E_3'" in r.stderr and "Traceback" not in r.stderr
  r = viz("cli", small_trace, "-s", "E_3", "-i", "nosuchpass")
  assert r.returncode == 1 and "has no step" in r.stderr
  r = viz("cli", str(tmp_path / "missing"))
  assert r.returncode == 1 and "trace not found" in r.stderr
  (tmp_path / "bad").mkdir(); (tmp_path / "bad" / "trace-1.jsonl").write_text("garbage\n")
  r = viz("cli", str(tmp_path / "bad"))
  assert r.returncode == 1 and "not a tinyplug trace" in r.stderr and "Traceback" not in r.stderr

def test_works_without_a_profile(small_trace, tmp_path):
  from tracegen import trace_lines, write_compressed
  write_compressed(str(tmp_path / "trace-1.jsonl.z"), [l for l in trace_lines(small_trace) if '"t":"span"' not in l])
  r = viz("cli", str(tmp_path), "-s", "E_3", "-i", "gpudims", env={"NO_COLOR": "1"})
  assert r.returncode == 0 and "--- code of E_3" in r.stdout

def test_export_chrome_trace(small_trace, tmp_path):
  out = tmp_path / "p.json"
  r = viz("export", small_trace, "-o", str(out))
  assert r.returncode == 0, r.stderr
  data = json.loads(out.read_text())
  assert any(e.get("ph") == "X" and e["name"] == "E_3" for e in data["traceEvents"])

def test_program_exit_prints_path_without_serving(tmp_path):
  """VIZ=1 with no TTY: the trace path and the command to open it, and the program exits."""
  script = "from tinyplug.tensor import Tensor\na = Tensor.empty(3)\nb = Tensor.empty(3)\n(a + b).realize()\n"
  env = dict(os.environ, VIZ="1", VIZ_TRACE=str(tmp_path / "run"))
  env.pop("TINYPLUG_VIZ_RUN", None)
  r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
  assert r.returncode == 0, r.stderr
  assert f"tinyplug viz serve {tmp_path / 'run'}" in r.stderr
  listing = viz("cli", str(tmp_path / "run"), env={"NO_COLOR": "1"})
  assert listing.returncode == 0 and "E_3" in listing.stdout
