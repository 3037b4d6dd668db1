"""VIZ trace size and time to interactive, beside tinygrad's VIZ on the same run (issue 21, item 5).

  python benchmarks/viz_trace_size.py [--steps 3] [--no-tinygrad] [--no-browser]

The run: a 2-layer MLP (784-128-10, batch 32) trained with Adam for --steps steps, in a fresh subprocess per
framework. tinyplug records with VIZ=1 (VIZ_SERVE=0, into a temporary folder); tinygrad (if installed: it is a
dev-only peer, `pip install tinygrad==0.14.0`) with VIZ=-1 and DEV=CPU, which saves rewrites.pkl and profile.pkl
into TMPDIR. Prints both sizes and their ratio.

Time to interactive (tinyplug only): a fresh server on the trace (it starts reading the trace at once, as
`tinyplug viz serve` does after `VIZ=1 python train.py`), headless Chromium opens the page at once; the time from
navigation to the sidebar listing the run's schedules and kernels, painted. Reported twice: by the page's own clock
(performance.now() at the first painted frame) and as the driver sees it (it polls the page over a pipe, which adds
its own delay on a busy machine). Best and median of --rounds, each with a new server. `--trace PATH` measures only
that trace. Needs playwright and /usr/bin/chromium."""
from __future__ import annotations
import argparse, glob, os, shutil, subprocess, sys, tempfile, time

CHILD = r"""
import sys
framework, steps = sys.argv[1], int(sys.argv[2])
if framework == "tinygrad":
  from tinygrad import Tensor, nn, Context
  from tinygrad.nn.optim import Adam
  from tinygrad.nn.state import get_parameters
  training = Context(TRAINING=1)
else:
  import contextlib
  from tinyplug import Tensor, nn
  from tinyplug.nn.optim import Adam
  from tinyplug.nn.state import get_parameters
  training = contextlib.nullcontext()
Tensor.training = True
l1, l2 = nn.Linear(784, 128), nn.Linear(128, 10)
opt = Adam(get_parameters([l1, l2]))
with training:
  for i in range(steps):
    x, y = Tensor.randn(32, 784), Tensor.randint(32, high=10)
    loss = l2(l1(x).relu()).sparse_categorical_crossentropy(y)
    opt.zero_grad(); loss.backward(); opt.step()
    loss.item()
"""

def folder_size(path: str) -> int: return sum(os.path.getsize(f) for f in glob.glob(os.path.join(path, "*")) if os.path.isfile(f))

def record(framework: str, steps: int, out: str) -> float:
  env = dict(os.environ)
  for k in ("VIZ", "TINY_PLUGINS", "TINYPLUG_VIZ_RUN", "VIZ_TRACE", "DEBUG"): env.pop(k, None)
  if framework == "tinyplug": env.update(VIZ="1", VIZ_TRACE=out, VIZ_SERVE="0")
  else: env.update(VIZ="-1", DEV="CPU", TMPDIR=out)
  os.makedirs(out, exist_ok=True)
  if framework == "tinygrad" and not shutil.which("clang") and (clang := shutil.which("clang-19")):
    os.symlink(clang, os.path.join(out, "clang"))   # tinygrad's CPU device runs `clang`; Debian names it clang-19
    env["PATH"] = out + os.pathsep + env.get("PATH", "")
  st = time.perf_counter()
  subprocess.run([sys.executable, "-c", CHILD, framework, str(steps)], check=True, env=env, capture_output=True, timeout=900)
  return time.perf_counter() - st

def time_to_interactive(path: str, rounds: int = 3) -> list[tuple[float, float]]:
  sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "plugins", "viz_web", "tests"))
  from conftest import CHROMIUM, CHROMIUM_ARGS, serve_in_thread, stop_server
  from playwright.sync_api import sync_playwright
  out = []
  with sync_playwright() as p:
    b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    for _ in range(rounds):
      srv = serve_in_thread(path)   # a new server: the trace is read on the page's first request
      pg = b.new_page(viewport={"width": 1600, "height": 1000})
      st = time.perf_counter()
      pg.goto(srv[3] + "/")
      pg.wait_for_function("() => document.body.dataset.ready === 'home' && document.querySelectorAll('.ctx-head').length > 0"
                           " && window.__vizInteractiveMs !== undefined", timeout=120000)
      # (seen by the driver, which polls the page over a pipe; the page's own clock: navigation start -> painted)
      out.append((time.perf_counter() - st, pg.evaluate("window.__vizInteractiveMs") / 1e3))
      pg.close()
      stop_server(srv)
    b.close()
  return out

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--steps", type=int, default=3)
  ap.add_argument("--no-tinygrad", action="store_true")
  ap.add_argument("--no-browser", action="store_true")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--trace", help="measure only the time to interactive of this recorded trace")
  args = ap.parse_args()
  if args.trace:
    report_tti(args.trace, args.rounds)
    return
  with tempfile.TemporaryDirectory() as d:
    ours = os.path.join(d, "tinyplug")
    run_s = record("tinyplug", args.steps, ours)
    size = folder_size(ours)
    print(f"tinyplug: {size / 1e6:.2f} MB trace for {args.steps} steps (run {run_s:.1f} s)")
    if not args.no_tinygrad:
      try:
        import tinygrad  # noqa: F401
        theirs = os.path.join(d, "tinygrad")
        tg_s = record("tinygrad", args.steps, theirs)
        tg = sum(os.path.getsize(f) for f in glob.glob(os.path.join(theirs, "*.pkl*")))
        print(f"tinygrad: {tg / 1e6:.2f} MB (rewrites.pkl + profile.pkl, run {tg_s:.1f} s); tinyplug/tinygrad = {size / tg:.2f}")
      except ImportError: print("tinygrad: not installed (pip install tinygrad==0.14.0)")
      except subprocess.CalledProcessError as e: print(f"tinygrad: the run failed: {e.stderr.decode()[-300:]}")
    if not args.no_browser: report_tti(ours, args.rounds)

def report_tti(path: str, rounds: int) -> None:
  tti = time_to_interactive(path, rounds)
  for i, what in ((1, "page clock (navigation start -> first view painted)"), (0, "driver (goto -> ready seen)")):
    vals = sorted(t[i] for t in tti)
    print(f"tinyplug time to interactive, {what}: best {vals[0]:.2f} s, median {vals[len(vals) // 2]:.2f} s "
          f"(all: {', '.join(f'{t[i]:.2f}' for t in tti)})")

if __name__ == "__main__":
  main()
