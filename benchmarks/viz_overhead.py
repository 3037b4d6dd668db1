"""What tracing costs: a small MLP training step with the visualizer's recorder off and on.

  python benchmarks/viz_overhead.py [--steps N]

"off": nothing subscribes to the event bus (the default, VIZ unset): producers only check `events.enabled`.
"on": the viz_web recorder is subscribed, exactly as VIZ=1 does, writing a trace to a temporary folder.
Each mode runs in a fresh subprocess (the kernel cache starts empty), so the first step includes codegen and the
later steps reuse compiled kernels. Prints per-step wall times and on/off ratios."""
from __future__ import annotations
import argparse, json, os, statistics, subprocess, sys, tempfile, time

CHILD = r"""
import json, os, sys, time
mode, steps = sys.argv[1], int(sys.argv[2])
from tinyplug.plugins import get_plugin_manager
get_plugin_manager()
from tinyplug import events
if mode == "on":
  from tinyplug_viz_web.capture import Recorder
  from tinyplug_viz_web.plugin import CAPTURED_KINDS
  rec = Recorder(os.environ["BENCH_TRACE"], "bench", worker=False)
  for kind in CAPTURED_KINDS: events.subscribe(kind, getattr(rec, "on_" + kind), "bench")
from tinyplug.tensor import Tensor
from tinyplug.nn import optim
w1 = Tensor.randn(16, 32, requires_grad=True); w2 = Tensor.randn(32, 4, requires_grad=True)
opt = optim.SGD([w1, w2], lr=0.01)
x = Tensor.randn(8, 16); y = Tensor([0, 1, 2, 3, 0, 1, 2, 3])
Tensor.training = True
times = []
for i in range(steps):
  st = time.perf_counter()
  opt.zero_grad()
  loss = (x @ w1).relu().matmul(w2).sparse_categorical_crossentropy(y)
  loss.backward()
  opt.step()
  loss.item()
  times.append(time.perf_counter() - st)
# the cost of an unsubscribed bus: the checks producers make, timed alone
n = 1_000_000
st = time.perf_counter()
for _ in range(n): events.enabled("rewrite")
check_ns = (time.perf_counter() - st) / n * 1e9
print(json.dumps({"times": times, "enabled_check_ns": check_ns}))
"""

def run(mode: str, steps: int) -> dict:
  with tempfile.TemporaryDirectory() as d:
    env = dict(os.environ, BENCH_TRACE=os.path.join(d, "trace"))
    for k in ("VIZ", "TINY_PLUGINS", "TINYPLUG_VIZ_RUN"): env.pop(k, None)
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(steps)], env=env, capture_output=True, text=True, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
    res["trace_bytes"] = size
    return res

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--steps", type=int, default=5)
  ap.add_argument("--repeat", type=int, default=2, help="fresh processes per mode; the best of each step is kept")
  args = ap.parse_args()
  results = {m: [run(m, args.steps) for _ in range(args.repeat)] for m in ("off", "on")}
  best = {m: [min(r["times"][i] for r in rs) for i in range(args.steps)] for m, rs in results.items()}
  print(f"{'step':>6} {'off (ms)':>10} {'on (ms)':>10} {'on/off':>7}")
  for i in range(args.steps):
    print(f"{i:>6} {best['off'][i]*1e3:10.1f} {best['on'][i]*1e3:10.1f} {best['on'][i]/best['off'][i]:7.2f}x")
  first = best["on"][0] / best["off"][0]
  steady = statistics.median(best["on"][1:]) / statistics.median(best["off"][1:]) if args.steps > 1 else float("nan")
  print(f"first step (codegen) on/off: {first:.2f}x; later steps (compiled) on/off: {steady:.2f}x")
  print(f"bus check with no subscriber: {min(r['enabled_check_ns'] for r in results['off']):.1f} ns per event site")
  print(f"trace size for {args.steps} steps: {results['on'][0]['trace_bytes'] / 1e6:.2f} MB")

if __name__ == "__main__":
  main()
