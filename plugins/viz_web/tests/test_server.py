"""Every endpoint of the web UI's server, through Starlette's TestClient; bad input gets a 4xx with a message."""
import json, os, socket, threading, time, warnings
import pytest
warnings.filterwarnings("ignore", message=".*httpx.*")
from starlette.testclient import TestClient
from tinyplug_viz_web.commands import bind_socket
from tinyplug_viz_web.server import create_app

@pytest.fixture(scope="module")
def client(small_trace):
  return TestClient(create_app(small_trace), base_url="http://127.0.0.1")

def _kernel(client, name):
  ctxs = client.get("/api/trace").json()["contexts"]
  return next(c for c in ctxs if c["display"] == name)

def test_index_and_static(client):
  r = client.get("/")
  assert r.status_code == 200 and "tinyplug" in r.text and "/static/app.js" in r.text
  for f in ("app.js", "layout_worker.js", "highlight.js", "style.css"): assert client.get(f"/static/{f}").status_code == 200

def test_trace_lists_contexts_and_steps(client):
  d = client.get("/api/trace").json()
  names = [c["display"] for c in d["contexts"]]
  assert "E_3" in names and "E_16" in names and any(n.startswith("schedule 1") for n in names)
  e16 = _kernel(client, "E_16")
  assert e16["has_code"] and e16["device"] == "PYTHON" and sum(s["matches"] for s in e16["steps"]) >= 2

def test_step_sends_graph_once_then_deltas(client):
  e16 = _kernel(client, "E_16")
  step = max(e16["steps"], key=lambda s: s["matches"])
  assert step["matches"] >= 1
  d = client.get(f"/api/step?ctx={e16['id']}&step={step['i']}").json()
  assert d["total"] == step["matches"] == len(d["deltas"]) == len(d["matches"])
  assert all(len(rec) == 4 for rec in d["nodes"].values())
  for delta in d["deltas"]: assert set(delta) == {"added", "removed", "changed", "after"}
  more = client.get(f"/api/step?ctx={e16['id']}&step={step['i']}&from=1").json()
  assert "nodes" not in more and more["deltas"] == d["deltas"][1:]

def test_match_detail_has_pattern_source_and_diff(client):
  e16 = _kernel(client, "E_16")
  step = next(s for s in e16["steps"] if s["matches"])
  d = client.get(f"/api/match?ctx={e16['id']}&step={step['i']}&match=1").json()
  assert d["loc"].endswith(f":{d['line']}") and d["owner"]
  assert any(ln == d["line"] for ln, _ in d["source"])
  assert d["diff"][0].startswith("---") and any(l.startswith("-") for l in d["diff"][2:])

def test_code_profile_search_hot_exports(client):
  e3 = _kernel(client, "E_3")
  code = client.get(f"/api/code?ctx={e3['id']}").json()
  assert "E_3" in code["src"] and code["uops"] and code["runs"] == 1
  prof = client.get("/api/profile").json()
  names = [t["name"] for t in prof["tracks"]]
  assert names[:2] == ["USER", "HOST"] and "PYTHON" in names and "PYTHON memory" in names
  chrome = client.get("/api/profile.chrome.json")
  assert "attachment" in chrome.headers["content-disposition"]
  events = chrome.json()["traceEvents"]
  assert any(e["ph"] == "X" and e["name"] == "E_3" for e in events) and any(e["ph"] == "C" for e in events)
  res = client.get("/api/search?q=E_16").json()["results"]
  assert res[0]["label"] == "E_16" and res[0]["target"]["ctx"] == _kernel(client, "E_16")["id"]
  assert any(r["kind"] == "pattern" for r in client.get("/api/search?q=symbolic.py").json()["results"])
  assert any(r["kind"] == "node" for r in client.get("/api/search?q=SPECIAL").json()["results"])
  hot = client.get("/api/hot").json()["rows"]
  assert hot and hot[0]["matches"] >= 1 and hot == sorted(hot, key=lambda r: -r["time_ns"])
  step = next(s for s in e3["steps"] if s["matches"])
  g = client.get(f"/api/export/graph.json?ctx={e3['id']}&step={step['i']}&match=1").json()
  assert g["format"] == "tinyplug-graph" and any(n["op"] == "SPECIAL" for n in g["nodes"])
  dot = client.get(f"/api/export/graph.dot?ctx={e3['id']}&step={step['i']}&match=1").text
  assert dot.startswith("digraph") and "SPECIAL" in dot and "->" in dot

@pytest.mark.parametrize("url,status", [
  ("/api/step?ctx=999&step=0", 404), ("/api/step?ctx=abc&step=0", 400), ("/api/step?step=0", 400),
  ("/api/step?ctx=0&step=999", 404), ("/api/match?ctx=0&step=0&match=999", 404), ("/api/code?ctx=-5", 404),
  ("/api/export/graph.exe?ctx=0&step=0", 404), ("/api/nothing", 404),
])
def test_bad_requests_get_a_message(client, url, status):
  r = client.get(url)
  assert r.status_code == status
  if url.startswith("/api/") and url != "/api/nothing": assert r.json()["error"]
  assert "Traceback" not in r.text

@pytest.mark.parametrize("path", ["/static/../server.py", "/static/%2e%2e/server.py", "/static/..%2fserver.py",
                                  "/static/%2e%2e%2f%2e%2e%2fpyproject.toml", "/static//etc/passwd"])
def test_static_refuses_path_traversal(client, path):
  r = client.get(path)
  assert r.status_code in (400, 404)
  assert "create_app" not in r.text and "root:" not in r.text

@pytest.mark.parametrize("kind", ["missing", "empty", "corrupt", "truncated"])
def test_bad_trace_gives_a_clear_page(tmp_path, small_trace, kind):
  path = tmp_path / kind
  if kind == "empty": path.mkdir()
  if kind == "corrupt": path.mkdir(); (path / "trace-1.jsonl").write_text("this is not a trace\n")
  if kind == "truncated":
    path.mkdir()
    from tracegen import trace_lines
    (path / "trace-1.jsonl").write_text("\n".join(trace_lines(small_trace))[:40])
  c = TestClient(create_app(str(path)), base_url="http://127.0.0.1")
  page = c.get("/")
  assert page.status_code == 422 and "cannot open this trace" in page.text and "Traceback" not in page.text
  api = c.get("/api/trace")
  assert api.status_code == 422 and api.json()["error"]

def test_listens_on_loopback_only(monkeypatch):
  monkeypatch.setenv("VIZ_PORT", "0")
  sock = bind_socket(None)
  try:
    host, port = sock.getsockname()[:2]
    assert host == "127.0.0.1" and port > 0
  finally: sock.close()
  with pytest.raises(ValueError, match="not a port"):
    monkeypatch.setenv("VIZ_PORT", "http"); bind_socket(None)

def test_real_server_serves_concurrently(big_trace, monkeypatch):
  """A slow request (a 5,000-node step) does not block a small one: heavy work runs in threads. The step is held
  until the small request has been answered; a server doing the work on its event loop could not answer it."""
  import urllib.request
  from conftest import serve_in_thread, stop_server
  from tinyplug_viz_web.model import TraceView
  entered, release = threading.Event(), threading.Event()
  real_step = TraceView.step_graph
  def held_step(self, *args, **kwargs):
    entered.set()
    release.wait(60)
    return real_step(self, *args, **kwargs)
  monkeypatch.setattr(TraceView, "step_graph", held_step)
  srv = serve_in_thread(big_trace)
  base = srv[3]
  def fetch(path, timeout=60):
    with urllib.request.urlopen(base + path, timeout=timeout) as r: return r.status, r.read()
  results: dict = {}
  th = threading.Thread(target=lambda: results.update(slow=fetch("/api/step?ctx=0&step=0&upto=2500")))
  try:
    assert fetch("/api/trace")[0] == 200
    th.start()
    assert entered.wait(30), "the big step request never reached the trace"
    assert fetch("/api/trace", timeout=20)[0] == 200   # answered while the big step is still being worked on
    assert "slow" not in results
    release.set()
    th.join(60)
    assert results["slow"][0] == 200
    # a big step opens with a part of its matches, well under 1 MB
    status, body = fetch("/api/step?ctx=0&step=0")
    assert len(body) < 1_000_000 and json.loads(body)["upto"] >= 100
  finally:
    release.set()
    stop_server(srv)
