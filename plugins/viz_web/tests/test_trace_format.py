"""Round trips of the trace format: what the recorder writes, the reader reads back; bad files give clear errors."""
import json, os, signal, stat, subprocess, sys, textwrap, time
import pytest
from tinyplug_viz_web.graph import replay
from tinyplug_viz_web.reader import TraceError, load_trace
from tinyplug_viz_web.trace_format import FORMAT_NAME, FORMAT_VERSION

def test_header_and_records_are_json_lines(small_trace):
  files = [f for f in os.listdir(small_trace) if f.startswith("trace-")]
  assert len(files) == 1
  lines = open(os.path.join(small_trace, files[0])).read().splitlines()
  header = json.loads(lines[0])
  assert header["t"] == "header" and header["format"] == FORMAT_NAME and header["version"] == FORMAT_VERSION
  kinds = {json.loads(l)["t"] for l in lines}
  assert {"node", "ctx", "ctx_end", "rewrite", "kernel", "span", "schedule"} <= kinds

def test_round_trip_contexts_steps_and_code(small_trace):
  t = load_trace(small_trace)
  kernels = [c for c in t.contexts if c.kind == "kernel"]
  assert [c.display for c in kernels] == ["E_3", "E_16"]
  e3 = kernels[0]
  assert e3.kernel["device"] == "PYTHON" and "E_3" in e3.kernel["src"]
  assert any(s.matches for s in e3.steps)
  assert t.nodes[e3.kernel["ast"]].op == "SINK"
  sched = [c for c in t.contexts if c.kind == "schedule"]
  assert sched and sched[0].schedule["items"][0]["ctx"] is not None
  runs = [s for s in t.spans if s.kind == "run"]
  assert {t.contexts[s.ctx].display for s in runs} == {"E_3", "E_16"}
  assert all(isinstance(s.start, int) and s.start > 2**32 for s in t.spans)   # 64-bit ns, no 32-bit us cap
  assert {s.kind for s in t.spans} >= {"codegen", "compile", "run", "alloc", "schedule"}

def test_replay_reaches_the_recorded_output(small_trace):
  t = load_trace(small_trace)
  for c in t.contexts:
    for s in c.steps:
      rep = replay(t, s)
      assert rep.roots[0] == s.input
      assert rep.roots[-1] == s.output, (c.display, s.title)

def test_matches_carry_pattern_location_owner_and_time(small_trace):
  t = load_trace(small_trace)
  ms = [m for c in t.contexts for s in c.steps for m in s.matches]
  assert ms
  assert all(m.file.endswith(".py") and m.line > 0 and m.owner and m.time_ns >= 0 for m in ms)

def test_missing_empty_and_corrupt_traces(tmp_path):
  with pytest.raises(TraceError, match="not found"): load_trace(str(tmp_path / "nope"))
  (tmp_path / "empty").mkdir()
  with pytest.raises(TraceError, match="no trace files"): load_trace(str(tmp_path / "empty"))
  bad = tmp_path / "bad"; bad.mkdir()
  (bad / "trace-1.jsonl").write_text("\x80\x00 garbage\n")
  with pytest.raises(TraceError, match="not a tinyplug trace"): load_trace(str(bad))
  pickled = tmp_path / "pickle"; pickled.mkdir()
  import pickle
  (pickled / "trace-1.jsonl").write_bytes(pickle.dumps({"t": "header"}))
  with pytest.raises(TraceError): load_trace(str(pickled))
  newer = tmp_path / "newer"; newer.mkdir()
  (newer / "trace-1.jsonl").write_text(json.dumps({"t": "header", "format": FORMAT_NAME, "version": 99, "pid": 1,
                                                   "clock": {"perf_ns": 0, "unix_ns": 0}}) + "\n")
  with pytest.raises(TraceError, match="version 99"): load_trace(str(newer))

def test_corrupt_middle_line_names_the_line(small_trace, tmp_path):
  src = [f for f in os.listdir(small_trace) if f.startswith("trace-")][0]
  lines = open(os.path.join(small_trace, src)).read().splitlines()
  lines[5] = "{not json"
  (tmp_path / "trace-7.jsonl").write_text("\n".join(lines) + "\n")
  with pytest.raises(TraceError, match="corrupt at line 6"): load_trace(str(tmp_path))

def test_truncated_last_line_is_skipped_with_a_warning(small_trace, tmp_path):
  src = [f for f in os.listdir(small_trace) if f.startswith("trace-")][0]
  data = open(os.path.join(small_trace, src)).read()
  cut = data.index("\n", len(data) // 2) + 12
  (tmp_path / "trace-9.jsonl").write_text(data[:cut])   # cut mid-line, as a killed writer leaves it
  t = load_trace(str(tmp_path))
  assert t.warnings and "cut off" in t.warnings[0]
  assert t.contexts

def test_worker_files_are_merged(small_trace, tmp_path):
  """A run folder with one file per process: ids of each file are kept apart and everything is merged."""
  src = [f for f in os.listdir(small_trace) if f.startswith("trace-")][0]
  lines = open(os.path.join(small_trace, src)).read().splitlines()
  head = json.loads(lines[0])
  (tmp_path / "trace-100.jsonl").write_text("\n".join([json.dumps(dict(head, pid=100))] + lines[1:]) + "\n")
  worker = dict(head, pid=101, ppid=100)
  (tmp_path / "trace-101.jsonl").write_text("\n".join([json.dumps(worker)] + lines[1:]) + "\n")
  one, two = load_trace(small_trace), load_trace(str(tmp_path))
  assert len(two.contexts) == 2 * len(one.contexts) and len(two.nodes) == 2 * len(one.nodes)
  assert {c.pid for c in two.contexts} == {100, 101}
  for c in two.contexts:
    for s in c.steps: assert replay(two, s).roots[-1] == s.output

SCRIPT = textwrap.dedent("""
  import sys, time
  sys.path.insert(0, {tests!r})
  from tinyplug.plugins import get_plugin_manager
  get_plugin_manager()
  import tracegen
  tracegen.add_two_vectors()
  print("traced", flush=True)
  time.sleep(60)
""")

def _run_env(trace: str) -> dict:
  env = dict(os.environ, VIZ="1", VIZ_TRACE=trace, VIZ_SERVE="0")
  env.pop("TINYPLUG_VIZ_RUN", None)
  return env

def test_killed_process_leaves_a_readable_trace(tmp_path):
  trace = str(tmp_path / "killed")
  p = subprocess.Popen([sys.executable, "-c", SCRIPT.format(tests=os.path.dirname(__file__))], env=_run_env(trace),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    assert p.stdout.readline().strip() == "traced"
    p.send_signal(signal.SIGKILL)
    p.wait(10)
  finally:
    if p.poll() is None: p.kill()
  t = load_trace(trace)
  assert [c.display for c in t.contexts if c.kind == "kernel"] == ["E_3"]
  assert any(s.kind == "run" for s in t.spans)

WORKERS = textwrap.dedent("""
  import sys, multiprocessing as mp
  sys.path.insert(0, {tests!r})
  from tinyplug.plugins import get_plugin_manager
  get_plugin_manager()
  import tracegen
  def work():
    from tinyplug.plugins import get_plugin_manager
    get_plugin_manager()
    tracegen.simplify_example()
  if __name__ == "__main__":
    tracegen.add_two_vectors()
    for method in ("fork", "spawn"):
      p = mp.get_context(method).Process(target=work); p.start(); p.join()
      assert p.exitcode == 0
""")

def test_worker_processes_join_the_run(tmp_path):
  trace = str(tmp_path / "workers")
  script = tmp_path / "workers.py"
  script.write_text(WORKERS.format(tests=os.path.dirname(__file__)))
  r = subprocess.run([sys.executable, str(script)], env=_run_env(trace), capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr
  assert "tinyplug viz serve" in r.stderr           # VIZ_SERVE=0: the path and the command, no server
  assert len(os.listdir(trace)) == 3                # the parent and two workers, one file each
  t = load_trace(trace)
  assert len({c.pid for c in t.contexts}) == 3
  assert sorted(c.display for c in t.contexts if c.kind == "kernel") == ["E_16", "E_16 n2", "E_3"]

def test_trace_files_are_private_and_argv_is_redacted(tmp_path):
  """Traces hold code and names of a user's program: created 0600 in a 0700 folder; secrets in argv are masked."""
  code = textwrap.dedent(f"""
    import sys
    sys.argv = ["train.py", "--api-key=abc123", "--token", "tok456", "--password", "pw789", "--lr", "0.1", "-v",
                "--AUTH_SECRET=s3"]
    sys.path.insert(0, {os.path.dirname(__file__)!r})
    import tracegen
    with tracegen.recording({str(tmp_path / 'run')!r}, "argv"): tracegen.add_two_vectors()
  """)
  subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
  files = os.listdir(tmp_path / "run")
  assert stat.S_IMODE(os.stat(tmp_path / "run").st_mode) == 0o700
  for f in files: assert stat.S_IMODE(os.stat(tmp_path / "run" / f).st_mode) == 0o600
  text = open(tmp_path / "run" / files[0]).read()
  for secret in ("abc123", "tok456", "pw789", "s3\""): assert secret not in text
  argv = json.loads(text.splitlines()[0])["argv"]
  assert argv[:3] == ["train.py", "--api-key=<redacted>", "--token"] and "--lr" in argv and "0.1" in argv
