"""How fast the VIZ web UI opens big things, in headless Chromium (needs playwright and /usr/bin/chromium).

  python benchmarks/viz_ui_speed.py

Records a trace with one graph_rewrite on a ~5,000-node graph with 2,500 matches, serves it, and times:
the first step response (bytes, seconds), the graph laid out and drawn, and a jump to match 400."""
from __future__ import annotations
import os, sys, tempfile, threading, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "plugins", "viz_web", "tests"))

def main() -> None:
  import json, urllib.request, uvicorn, tracegen
  from playwright.sync_api import sync_playwright
  from tinyplug_viz_web.commands import bind_socket
  from tinyplug_viz_web.server import create_app
  with tempfile.TemporaryDirectory() as d:
    folder = os.path.join(d, "big")
    with tracegen.recording(folder, "big"): tracegen.big_rewrite()
    sock = bind_socket(0)
    server = uvicorn.Server(uvicorn.Config(create_app(folder), log_level="warning", lifespan="off"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started: time.sleep(0.02)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    urllib.request.urlopen(base + "/api/trace", timeout=60).read()
    st = time.perf_counter(); body = urllib.request.urlopen(base + "/api/step?ctx=0&step=0", timeout=60).read()
    step_s = time.perf_counter() - st
    r = json.loads(body)
    print(f"step response: {len(body) / 1e3:.0f} KB, {step_s * 1e3:.0f} ms, {r['upto']} of {r['total']} matches")
    with sync_playwright() as p:
      b = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox", "--disable-gpu"])
      pg = b.new_page(viewport={"width": 1600, "height": 1000})
      pg.goto(base + "/"); pg.wait_for_function("() => document.body.dataset.ready === 'home'")
      for label, h, end in [("open 5,000-node graph (new page state)", "ctx=0&step=0", ":0"),
                            ("jump to match 400", "ctx=0&step=0&match=400", ":400")]:
        ms = pg.evaluate(f"""async () => {{ const t0 = performance.now(); location.hash = '{h}';
            while (!(document.body.dataset.ready || '').endsWith('{end}') ||
                   !(document.body.dataset.ready || '').startsWith('graph')) await new Promise(r => setTimeout(r, 5));
            return performance.now() - t0; }}""")
        print(f"{label}: {ms:.0f} ms ({pg.get_attribute('#graph', 'data-nodes')} nodes)")
      b.close()
    server.should_exit = True

if __name__ == "__main__":
  main()
