import os, subprocess, sys, threading, time
sys.path.insert(0, os.path.dirname(__file__))
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SHOTS = os.environ.get("VIZ_SCREENSHOTS")   # set to a folder to keep screenshots of every browser test

def record_in_subprocess(folder: str, run: str, *examples: str) -> str:
  """Record tracegen examples in a fresh interpreter: kernel names and the compile cache start empty there,
  whatever other tests in this process did."""
  code = (f"import sys; sys.path.insert(0, {HERE!r})\n"
          "from tinyplug.plugins import get_plugin_manager\nget_plugin_manager()\nimport tracegen\n"
          f"with tracegen.recording({folder!r}, {run!r}):\n" + "".join(f"  tracegen.{e}\n" if "(" in e else
                                                                      f"  tracegen.{e}()\n" for e in examples))
  env = dict(os.environ)
  for k in ("VIZ", "TINY_PLUGINS", "TINYPLUG_VIZ_RUN"): env.pop(k, None)
  subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=600)
  return folder

@pytest.fixture(scope="session")
def small_trace(tmp_path_factory):
  """The seed's first example, plus a kernel with simplifications: contexts with rewrites, code and a profile."""
  return record_in_subprocess(str(tmp_path_factory.mktemp("viz") / "run-small"), "run-small",
                              "add_two_vectors", "simplify_example")

@pytest.fixture(scope="session")
def big_trace(tmp_path_factory):
  return record_in_subprocess(str(tmp_path_factory.mktemp("viz") / "run-big"), "run-big", "big_rewrite")

# ---- a real server in a thread, and a real browser (for the browser tests) ----

def serve_in_thread(path: str):
  """(server, thread, socket, base url) of the web UI serving `path` on a free loopback port."""
  import uvicorn
  from tinyplug_viz_web.commands import bind_socket
  from tinyplug_viz_web.server import create_app
  sock = bind_socket(0)
  port = sock.getsockname()[1]
  server = uvicorn.Server(uvicorn.Config(create_app(path), log_level="warning", lifespan="off"))
  t = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
  t.start()
  while not server.started: time.sleep(0.02)
  return server, t, sock, f"http://127.0.0.1:{port}"

def stop_server(s) -> None:
  server, t, sock, _ = s
  server.should_exit = True
  t.join(10)
  sock.close()

# off CI, a machine without Debian's chromium skips the browser tests; in CI a missing browser fails them
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM) and not os.environ.get("CI"), reason="needs /usr/bin/chromium")

def served(trace_fixture: str):
  """A module-scoped fixture giving the base url of the web UI serving the trace the fixture `trace_fixture` makes."""
  @pytest.fixture(scope="module")
  def url(request):
    srv = serve_in_thread(request.getfixturevalue(trace_fixture))
    yield srv[3]
    stop_server(srv)
  return url

@pytest.fixture(scope="session")
def browser():
  from playwright.sync_api import sync_playwright
  with sync_playwright() as p:   # launch() gives every run a fresh, temporary user-data-dir
    b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield b
    b.close()

@pytest.fixture
def page(browser, request):
  pg = browser.new_page(viewport={"width": 1600, "height": 1000})
  errors = pg.viz_errors = []   # script errors, and anything the page's CSP refused (a feature it would break)
  pg.on("pageerror", lambda e: errors.append(str(e)))
  pg.on("console", lambda m: errors.append(m.text) if m.type == "error" and "Content Security Policy" in m.text else None)
  yield pg
  if SHOTS: os.makedirs(SHOTS, exist_ok=True); pg.screenshot(path=os.path.join(SHOTS, f"{request.node.name}.png"))
  pg.close()
  assert not errors, errors

def ready(pg, prefix, timeout=15000):
  # a function, not an expression string: Playwright would eval a string, which the page's CSP refuses
  pg.wait_for_function("p => (document.body.dataset.ready || '').startsWith(p)", arg=prefix, timeout=timeout)

@pytest.fixture(scope="session")
def fusion_trace(tmp_path_factory):
  """Two schedules on CPU: a softmax row kernel beside reductions that need kernels of their own, and a softmax whose
  rows are over ROW_FUSE_MAX."""
  return record_in_subprocess(str(tmp_path_factory.mktemp("viz") / "run-fusion"), "run-fusion", "fusion_example")
