"""Per-op Python overhead on the CPU device: what building, scheduling and launching a small op costs.

  python benchmarks/overhead_bench.py                       # us per op for each workload, this checkout
  python benchmarks/overhead_bench.py --before /tmp/old     # A/B: this checkout and another, rounds alternating
  python benchmarks/overhead_bench.py --rounds 7 --only tiny_op,matmul_16
  python benchmarks/overhead_bench.py --all                 # also the rows whose kernels dominate (conv b32, 16M sum)
  LD_LIBRARY_PATH=<dir of the fake libcuda.so.1> python benchmarks/overhead_bench.py --device CUDA   # host side of CUDA

Most workloads' data is tiny, so the time is the Python path (graph building, schedule templates, launch), not the
kernels. Each round runs each workload in a fresh subprocess per checkout; the table shows the best round.
--before runs the other checkout with PYTHONPATH=<dir>:<dir>/plugins/*/src, its rounds interleaved with
ours so that load from other work hits both alike. Never run from tests: it takes a minute."""
from __future__ import annotations
import argparse, glob, json, os, subprocess, sys, time

WORKLOADS = {   # name: description
  "tiny_op": "(t + 1.0).realize() on one float",
  "first_result": "((x * k) + 1.0).exp().realize(), k new each time",
  "build_matmul_16": "a @ b built, not realized (16x16)",
  "matmul_16": "(a @ b).realize(), 16x16",
  "python_matmul_512": "512x512 a @ b built and scheduled, not run (its Python cost)",
  "matmul_512": "(a @ b).realize(), 512x512 (kernel included)",
  "conv_small": "x.conv2d(w, padding=1).realize(), 1x3x8x8 k3",
  "chain_10": "10 elementwise ops, one realize",
  "realize_10": "10 ops each realized",
  "sum_4k": "t.sum().realize(), 4096 floats",
  "softmax_64": "a.softmax(-1).realize(), 64x64",
  "conv_b32": "x.conv2d(w, padding=1).realize(), b32 3->32 32x32 k3 (kernels included)",
  "sum_16m": "t.sum().realize(), 16M floats (kernels included)",
}
# rows whose kernels take most of the time: run only with --only, or all of them with --all
HEAVY = ("conv_b32", "sum_16m")

_sync = lambda: None   # the device's synchronize, set by the worker: each batch is timed to its end

_count_calls = False   # --calls: Python function calls per op (cProfile's count; the same on a busy machine)

def _measure(fn, n: int, budget_s: float = 0.6) -> float:
  """Best time per call over repeated batches of n calls (us), or with --calls the Python calls per call."""
  fn(); fn()
  if _count_calls:
    import cProfile, io, pstats
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n): fn()
    _sync()
    prof.disable()
    return pstats.Stats(prof, stream=io.StringIO()).total_calls / n
  best, start = float("inf"), time.perf_counter()
  while time.perf_counter() - start < budget_s:
    st = time.perf_counter()
    for _ in range(n): fn()
    _sync()
    best = min(best, (time.perf_counter() - st) / n)
  return best * 1e6

def worker(only: list[str]) -> dict:
  import numpy as np
  from tinyplug.tensor import Tensor
  from tinyplug.device import Device
  global _sync
  _sync = Device[Device.DEFAULT].synchronize
  rng = np.random.default_rng(0)
  out = {}
  if "tiny_op" in only:
    state = [Tensor(np.zeros(1, np.float32)).realize()]
    def tiny(): state[0] = (state[0] + 1.0).realize()
    out["tiny_op"] = _measure(tiny, 200)
  if "first_result" in only:
    small = Tensor(rng.random(1024, dtype=np.float32)).realize()
    def first():
      k = float(rng.random()) + 1.0
      ((small * k) + 1.0).exp().realize()
    out["first_result"] = _measure(first, 20)
  a, b = [Tensor(rng.random((16, 16), dtype=np.float32)).realize() for _ in range(2)]
  if "build_matmul_16" in only: out["build_matmul_16"] = _measure(lambda: a @ b, 200)
  if "matmul_16" in only: out["matmul_16"] = _measure(lambda: (a @ b).realize(), 100)
  if "python_matmul_512" in only:
    from tinyplug.schedule import create_schedule
    a5, b5 = [Tensor(rng.random((512, 512), dtype=np.float32)).realize() for _ in range(2)]
    out["python_matmul_512"] = _measure(lambda: create_schedule([(a5 @ b5).uop]), 100)
  if "matmul_512" in only:
    a5, b5 = [Tensor(rng.random((512, 512), dtype=np.float32)).realize() for _ in range(2)]
    out["matmul_512"] = _measure(lambda: (a5 @ b5).realize(), 5, budget_s=1.5)
  if "conv_small" in only:
    x = Tensor(rng.random((1, 3, 8, 8), dtype=np.float32)).realize()
    w = Tensor(rng.random((4, 3, 3, 3), dtype=np.float32)).realize()
    out["conv_small"] = _measure(lambda: x.conv2d(w, padding=1).realize(), 50)
  v = Tensor(rng.random(64, dtype=np.float32)).realize()
  def chain(realize_each: bool):
    t = v
    for i in range(10):
      t = t * 1.5 + 0.5 if i % 2 else (t - 0.25).relu()
      if realize_each: t = t.realize()
    t.realize()
  if "chain_10" in only: out["chain_10"] = _measure(lambda: chain(False), 50)
  if "realize_10" in only: out["realize_10"] = _measure(lambda: chain(True), 20) / 10
  if "sum_4k" in only:
    t4 = Tensor(rng.random(4096, dtype=np.float32)).realize()
    out["sum_4k"] = _measure(lambda: t4.sum().realize(), 100)
  if "softmax_64" in only:
    s64 = Tensor(rng.random((64, 64), dtype=np.float32)).realize()
    out["softmax_64"] = _measure(lambda: s64.softmax(-1).realize(), 50)
  if "conv_b32" in only:
    xb = Tensor(rng.random((32, 3, 32, 32), dtype=np.float32)).realize()
    wb = Tensor(rng.random((32, 3, 3, 3), dtype=np.float32)).realize()
    out["conv_b32"] = _measure(lambda: xb.conv2d(wb, padding=1).realize(), 10, budget_s=1.5)
  if "sum_16m" in only:
    t16 = Tensor(rng.random(1 << 24, dtype=np.float32)).realize()
    out["sum_16m"] = _measure(lambda: t16.sum().realize(), 5, budget_s=1.5)
  return out

def run_checkout(root: str | None, only: list[str], device: str = "CPU", calls: bool = False) -> dict:
  env = dict(os.environ, DEV=device)
  if calls: env["OVERHEAD_BENCH_CALLS"] = "1"
  if root is not None:
    root = os.path.abspath(root)
    plugins = sorted(glob.glob(os.path.join(root, "plugins", "*", "src")))   # its own plugins too (cpu_llvm, cuda, ...)
    paths = [root, *plugins, env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(paths)
  cmd = [sys.executable, os.path.abspath(__file__), "--worker", ",".join(only)]
  res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=root or os.getcwd())
  if res.returncode != 0: raise RuntimeError(f"worker failed ({root or 'this checkout'}):\n{res.stderr[-3000:]}")
  return json.loads(res.stdout.strip().splitlines()[-1])

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--before", help="another checkout to compare against (A/B, rounds interleaved)")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--only", default=None, help=f"comma list (default: all but {', '.join(HEAVY)})")
  ap.add_argument("--calls", action="store_true", help="count Python function calls per op instead of timing")
  ap.add_argument("--all", action="store_true", help="every workload, the heavy ones included")
  ap.add_argument("--device", default="CPU", help="DEV for the workers, e.g. CUDA (with LD_LIBRARY_PATH at "
                  "plugins/cuda/tests' fake libcuda.so.1 it measures the host side of the CUDA path without a GPU)")
  ap.add_argument("--worker", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.worker is not None:
    global _count_calls
    _count_calls = bool(os.environ.get("OVERHEAD_BENCH_CALLS"))
    print(json.dumps(worker(args.worker.split(","))))
    return
  only = [w for w in args.only.split(",") if w] if args.only else [w for w in WORKLOADS if args.all or w not in HEAVY]
  if bad := [w for w in only if w not in WORKLOADS]: ap.error(f"unknown workloads {bad}; known: {', '.join(WORKLOADS)}")
  here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  sides = [("after", here)] + ([("before", args.before)] if args.before else [])
  best: dict[str, dict[str, float]] = {name: {} for name, _ in sides}
  for r in range(args.rounds):
    for name, root in (sides if r % 2 == 0 else sides[::-1]):
      for k, v in run_checkout(root, only, args.device, args.calls).items(): best[name][k] = min(best[name].get(k, float("inf")), v)
  unit = "Python calls per op" if args.calls else "us per op"
  print(f"DEV={args.device}; load average: {os.getloadavg()[0]:.2f}; best of {args.rounds} rounds, {unit}")
  if args.before:
    print("| workload | before | after | before / after |\n|---|---|---|---|")
    for k in only:
      b, a = best["before"][k], best["after"][k]
      print(f"| {WORKLOADS[k]} | {b:.1f} | {a:.1f} | {b / a:.2f}x |")
  else:
    print(f"| workload | {'calls' if args.calls else 'us'} |\n|---|---|")
    for k in only: print(f"| {WORKLOADS[k]} | {best['after'][k]:.1f} |")

if __name__ == "__main__":
  main()
