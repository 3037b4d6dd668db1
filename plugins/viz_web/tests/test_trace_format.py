"""Round trips of the trace format: what the recorder writes, the reader reads back; bad files give clear errors."""
import json, os, signal, stat, subprocess, sys, textwrap, time
import pytest
from tinyplug_viz_web.graph import replay
from tinyplug_viz_web.reader import TraceError, load_trace
from tinyplug_viz_web.trace_format import FORMAT_NAME, FORMAT_VERSION
from tracegen import trace_lines, write_compressed

def test_header_and_records_are_compressed_json_lines(small_trace):
  files = [f for f in os.listdir(small_trace) if f.startswith("trace-")]
  assert len(files) == 1 and files[0].endswith(".jsonl.z")
  lines = trace_lines(small_trace)
  header = json.loads(lines[0])
  assert header["t"] == "header" and header["format"] == FORMAT_NAME and header["version"] == FORMAT_VERSION == 2
  kinds = [json.loads(l)["t"] for l in lines]
  assert {"nodes", "ctx", "ctx_end", "rewrite", "kernel", "span", "schedule", "source"} <= set(kinds)
  assert kinds[-1] == "end"                                          # the process closed its trace
  # nodes are compact arrays: [op, dtype, [own id - source id, ...], arg]
  batch = next(json.loads(l) for l in lines if json.loads(l)["t"] == "nodes")
  assert all(isinstance(n, list) and 3 <= len(n) <= 4 and all(d > 0 for d in n[2]) for n in batch["n"])

def test_version_1_plain_traces_still_open(small_trace, tmp_path):
  """A version-1 file (plain JSON lines, one record per node) reads the same as its version-2 form."""
  out, nid = [], 0
  for l in trace_lines(small_trace):
    r = json.loads(l)
    if r["t"] == "nodes":
      for k, n in enumerate(r["n"]):
        i = r["id"] + k
        out.append(json.dumps({"t": "node", "id": i, "op": n[0], "dtype": n[1], "src": [i - d for d in n[2]],
                               "arg": n[3] if len(n) > 3 else ""}))
    elif r["t"] != "end": out.append(json.dumps(dict(r, version=1) if r["t"] == "header" else r))
  (tmp_path / "trace-5.jsonl").write_text("\n".join(out) + "\n")
  a, b = load_trace(small_trace), load_trace(str(tmp_path))
  assert dict(a.nodes.items()) == dict(b.nodes.items()) and [c.display for c in a.contexts] == [c.display for c in b.contexts]
  assert [len(s.matches) for c in a.contexts for s in c.steps] == [len(s.matches) for c in b.contexts for s in c.steps]

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

def test_garbage_line_mid_file_is_skipped_and_reported(small_trace, tmp_path):
  """One damaged line loses only that line: the rest of the trace opens, and the warning says what was skipped."""
  lines = trace_lines(small_trace)
  k = next(i for i, l in enumerate(lines) if json.loads(l)["t"] == "span")
  lines[k] = "{not json"
  write_compressed(str(tmp_path / "trace-7.jsonl.z"), lines)
  t, full = load_trace(str(tmp_path)), load_trace(small_trace)
  assert any(f"1 damaged line skipped (first at line {k + 1})" in w for w in t.warnings)
  assert len(t.spans) == len(full.spans) - 1 and len(t.contexts) == len(full.contexts)

def test_lost_lines_mid_file_skip_what_refers_to_them(small_trace, tmp_path):
  """Lines missing mid-file (a lost batch of nodes): records that need them are skipped, nothing raises KeyError."""
  lines = trace_lines(small_trace)
  batches = [i for i, l in enumerate(lines) if json.loads(l)["t"] == "nodes"]
  del lines[batches[len(batches) // 2]]
  write_compressed(str(tmp_path / "trace-8.jsonl.z"), lines)
  t = load_trace(str(tmp_path))
  assert any("refer to lost records" in w for w in t.warnings), t.warnings
  assert t.contexts
  from tinyplug_viz_web.model import TraceView
  view = TraceView(t)
  opened = lost = 0
  for c in t.contexts:   # a step replays, or says clearly that it needs a lost node
    for s in c.steps:
      try: view.step_graph(c.id, s.index, upto=len(s.matches)); opened += 1
      except KeyError as e: assert "is not in the trace" in str(e); lost += 1
  assert opened > lost >= 0

def test_repeated_node_batch_is_skipped(small_trace, tmp_path):
  """Damaged data can repeat an earlier batch of nodes (deflate copies earlier bytes): it is skipped, not fatal."""
  lines = trace_lines(small_trace)
  k = [i for i, l in enumerate(lines) if json.loads(l)["t"] == "nodes"]
  lines.insert(k[2] + 1, lines[k[1]])
  write_compressed(str(tmp_path / "trace-4.jsonl.z"), lines)
  t = load_trace(str(tmp_path))
  assert any("skipped 1 nodes record" in w for w in t.warnings) and t.contexts

def test_damaged_compressed_data_keeps_what_came_before(small_trace, tmp_path):
  data = bytearray(open(os.path.join(small_trace, os.listdir(small_trace)[0]), "rb").read())
  for i in range(len(data) * 2 // 3, len(data) * 2 // 3 + 64): data[i] ^= 0x5A
  (tmp_path / "trace-3.jsonl.z").write_bytes(bytes(data))
  t = load_trace(str(tmp_path))
  assert any("damaged" in w for w in t.warnings) and t.contexts

def test_truncated_file_is_read_up_to_the_cut(small_trace, tmp_path):
  data = open(os.path.join(small_trace, os.listdir(small_trace)[0]), "rb").read()
  (tmp_path / "trace-9.jsonl.z").write_bytes(data[:len(data) // 2])   # as a killed writer leaves it
  t = load_trace(str(tmp_path))
  assert t.contexts and t.incomplete == [int(json.loads(trace_lines(small_trace)[0])["pid"])]
  assert any("did not finish" in w for w in t.warnings)

def test_worker_files_are_merged(small_trace, tmp_path):
  """A run folder with one file per process: ids of each file are kept apart and everything is merged."""
  lines = trace_lines(small_trace)
  head = json.loads(lines[0])
  write_compressed(str(tmp_path / "trace-100.jsonl.z"), [json.dumps(dict(head, pid=100))] + lines[1:])
  write_compressed(str(tmp_path / "trace-101.jsonl.z"), [json.dumps(dict(head, pid=101, ppid=100))] + lines[1:])
  one, two = load_trace(small_trace), load_trace(str(tmp_path))
  assert len(two.contexts) == 2 * len(one.contexts) and len(two.nodes) == 2 * len(one.nodes)
  assert {c.pid for c in two.contexts} == {100, 101}
  for c in two.contexts:
    for s in c.steps: assert replay(two, s).roots[-1] == s.output
  # memory tracks stay per process: two processes' buffers are not one device's
  from tinyplug_viz_web.model import TraceView
  mem = [tr["name"] for tr in TraceView(two).profile()["tracks"] if tr["type"] == "memory"]
  assert mem == ["PYTHON memory", "PYTHON (pid 101) memory"]

def test_latest_run_is_the_one_that_finished_last(small_trace, tmp_path):
  from tinyplug_viz_web.reader import latest_run
  import shutil
  for name, t in (("a-started-last", 100), ("b-finished-last", 200)):
    shutil.copytree(small_trace, tmp_path / name)
    for f in os.listdir(tmp_path / name): os.utime(tmp_path / name / f, (t, t))
  os.utime(tmp_path / "a-started-last", (300, 300))                 # folder touched last, files written earlier
  assert os.path.basename(latest_run(str(tmp_path))) == "b-finished-last"

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
  text = "\n".join(trace_lines(str(tmp_path / "run")))
  for secret in ("abc123", "tok456", "pw789", "s3\""): assert secret not in text
  argv = json.loads(text.splitlines()[0])["argv"]
  assert argv[:3] == ["train.py", "--api-key=<redacted>", "--token"] and "--lr" in argv and "0.1" in argv
