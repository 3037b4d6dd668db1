"""The page and the server treat a trace as untrusted data (issue 19, item 3): names from a trace never become markup,
the server serves only source text the trace itself captured, every response carries a strict CSP, and requests for
another host name (DNS rebinding) are refused. The two attacks of the issue are replayed in a real browser."""
import json, os, urllib.request
import pytest
from conftest import CHROMIUM, record_in_subprocess, ready, serve_in_thread, stop_server
from tracegen import EVIL_NAME

SECRET = "TOP-SECRET-9f1c2e"

def crafted_trace(folder, secret_file):
  """A hand-written trace: markup in a context's kind and name, a match whose pattern 'file' is a private local file."""
  os.makedirs(folder)
  recs = [
    {"t": "header", "format": "tinyplug-trace", "version": 1, "run": "evil", "pid": 1, "ppid": 0,
     "clock": {"perf_ns": 0, "unix_ns": 0}, "argv": []},
    {"t": "ctx", "id": 0, "kind": '<img src=x onerror="window.__pwned=2">', "parent": None,
     "name": '<img src=y onerror="window.__pwned=3">', "loc": '"><img src=z onerror="window.__pwned=4">', "start": 10},
    {"t": "node", "id": 0, "op": "CONST", "dtype": "int", "src": [], "arg": "<b onmouseover=\"window.__pwned=5\">1</b>"},
    {"t": "node", "id": 1, "op": "NEG", "dtype": "int", "src": [0], "arg": ""},
    {"t": "node", "id": 2, "op": "SINK", "dtype": "void", "src": [1], "arg": ""},
    {"t": "node", "id": 3, "op": "SINK", "dtype": "void", "src": [0], "arg": ""},
    {"t": "rewrite", "id": 0, "ctx": 0, "pass": None, "name": "x\" onmouseover=\"window.__pwned=6", "caller": f"{secret_file}:1",
     "start": 11, "end": 12, "input": 2, "output": 3, "matches": [[1, 0, secret_file, 1, "<i>evil</i>", 5]]},
  ]
  with open(os.path.join(folder, "trace-1.jsonl"), "w") as f:
    for r in recs: f.write(json.dumps(r) + "\n")
  return folder

@pytest.fixture(scope="module")
def evil_traces(tmp_path_factory):
  base = tmp_path_factory.mktemp("evil")
  secret = base / "secret.py"
  secret.write_text(f"PASSWORD = '{SECRET}'\n")
  (base / "src").mkdir()
  recorded = record_in_subprocess(str(base / "recorded"), "recorded", f"evil_pattern_file({str(base / 'src')!r})")
  return recorded, crafted_trace(str(base / "crafted"), str(secret))

def get(url, host=None):
  req = urllib.request.Request(url, headers={"Host": host} if host else {})
  try:
    with urllib.request.urlopen(req, timeout=30) as r: return r.status, dict(r.headers), r.read().decode()
  except urllib.error.HTTPError as e: return e.code, dict(e.headers), e.read().decode()

@pytest.fixture(scope="module")
def servers(evil_traces):
  s = [serve_in_thread(p) for p in evil_traces]
  yield [x[3] for x in s]
  for x in s: stop_server(x)

# ---- server side ----

def test_security_headers_on_every_response(servers):
  for path in ("/", "/api/trace", "/static/app.js", "/api/nothing", "/static/../server.py"):
    status, headers, _ = get(servers[0] + path)
    csp = headers.get("content-security-policy", "")
    assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, (path, csp)
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert headers.get("x-content-type-options") == "nosniff" and headers.get("x-frame-options") == "DENY", path

@pytest.mark.parametrize("host,ok", [("evil.example.com", False), ("127.0.0.1.nip.io", False), ("localhost.evil.com", False),
                                     ("127.0.0.1", True), ("localhost", True), ("[::1]", True)])
def test_refuses_other_host_names(servers, host, ok):
  """DNS rebinding: a page on evil.example.com whose name now resolves to 127.0.0.1 still sends Host: evil.example.com."""
  port = servers[0].rsplit(":", 1)[1]
  status, _, body = get(servers[0] + "/api/trace", host=f"{host}:{port}")
  if ok: assert status == 200
  else: assert status == 421 and "evil" not in body.lower() or status == 421

def test_only_captured_source_is_served(servers):
  """The crafted trace names a private file as a pattern's location: its contents never leave the server."""
  for path in ("/api/match?ctx=0&step=0&match=1", "/api/hot", "/api/step?ctx=0&step=0", "/api/trace", "/api/search?q=secret"):
    status, _, body = get(servers[1] + path)
    assert status == 200, (path, body)
    assert SECRET not in body, path

def test_recorded_pattern_source_comes_from_the_trace(evil_traces, servers, tmp_path):
  """The source shown for a match is the text captured when recording, even after the file is gone."""
  from tinyplug_viz_web.reader import load_trace
  t = load_trace(evil_traces[0])
  c = next(c for c in t.contexts if c.name == "evil_kernel")
  path = c.steps[0].matches[0].file
  assert os.path.basename(path) == EVIL_NAME
  ctx = c.id
  os.rename(path, path + ".moved")
  try:
    status, _, body = get(servers[0] + f"/api/match?ctx={ctx}&step=0&match=1")
  finally: os.rename(path + ".moved", path)
  d = json.loads(body)
  assert status == 200 and any("PatternMatcher" in text for _, text in d["source"])

# ---- in the browser: the two attacks ----

if not os.path.exists(CHROMIUM) and not os.environ.get("CI"):
  pytest.skip("needs /usr/bin/chromium", allow_module_level=True)

def pwned(page): return page.evaluate("window.__pwned === undefined ? null : window.__pwned")

def test_attack_file_name_with_quotes_runs_nothing(page, servers, evil_traces):
  """Attack 1: a pattern recorded from a file named `q" onmouseover="..." x=".py`; hovering its match runs nothing."""
  page.goto(servers[0] + "/")
  ready(page, "home")
  page.locator(".ctx-head", has_text="evil_kernel").click()
  ready(page, "graph:")
  chip = page.locator("#match-list .chip[data-match='1']")
  chip.hover()
  page.keyboard.press("ArrowRight")
  ready(page, "graph:")
  page.wait_for_function("() => document.querySelector('#match-info').textContent.includes('Replaced')")
  for sel in ("#match-list .chip", "#match-info", "#details", ".step", ".ctx-head"):
    for el in page.locator(sel).all(): el.hover(force=True)
  assert pwned(page) is None
  assert EVIL_NAME in chip.get_attribute("title")               # the name is shown as text, not parsed as markup
  assert page.evaluate("document.querySelectorAll('[onmouseover]').length") == 0

def test_attack_crafted_trace_runs_nothing_and_leaks_nothing(page, servers):
  """Attack 2: a crafted trace with markup in its names and a private file as a pattern location."""
  page.goto(servers[1] + "/")
  ready(page, "home")
  assert pwned(page) is None
  assert page.evaluate("document.querySelectorAll('img, [onerror], [onmouseover]').length") == 0
  head = page.locator(".ctx-head").first
  assert "<img src=y" in head.inner_text()                       # shown literally
  head.click()
  ready(page, "graph:")
  page.keyboard.press("ArrowRight")
  ready(page, "graph:")
  page.wait_for_function("() => document.querySelector('#match-info').textContent.includes('Replaced')")
  for el in page.locator("g.node, .chip, .step, .loc").all(): el.hover(force=True)
  page.click("#nav-hot")
  ready(page, "hot")
  assert pwned(page) is None
  assert SECRET not in page.content()

def test_csp_blocks_injected_inline_script(page, servers):
  """Even markup that reached the DOM could not run: the policy allows no inline script or handler."""
  page.goto(servers[0] + "/")
  ready(page, "home")
  page.evaluate("""() => { const d = document.createElement('div');
    d.innerHTML = '<img src=x onerror="window.__pwned=9">'; document.body.appendChild(d);
    const s = document.createElement('script'); s.textContent = 'window.__pwned = 10'; document.body.appendChild(s); }""")
  page.wait_for_timeout(300)
  assert pwned(page) is None
  assert any("Content Security Policy" in e for e in page.viz_errors)   # refused by the policy, as it should be
  page.viz_errors.clear()
