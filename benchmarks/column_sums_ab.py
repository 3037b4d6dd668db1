"""A/B of memory-bound rows (issue 20: `v @ W`, column and row sums, argmax, an elementwise chain, matmuls) between
checkouts, each in its own process, the processes alternated --rounds times. Each process realizes every row --reps
times, three passes, and reports the p10; printed: per row and checkout, the median of the rounds' p10 and the best.
With CPU_THREADS=1 (and OPENBLAS_NUM_THREADS=1 for the numpy control row) it times per-thread CPU time, which moves
less with other work on a shared machine; otherwise wall time.

  CPU_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/column_sums_ab.py \\
    "main=/tmp/x/before:/tmp/x/before/plugins/cpu_llvm/src" "now=$PWD:$PWD/plugins/cpu_llvm/src" [--rounds 4]
(a label, then the PYTHONPATH of that checkout: `git archive main | tar -x -C /tmp/x/before` makes one)"""
from __future__ import annotations
import argparse, json, os, subprocess, sys, time
import numpy as np

def worker(reps: int) -> dict[str, float]:
  from tinyplug import Tensor
  rng = np.random.default_rng(0)
  vn, wn = rng.random(4096, dtype=np.float32), rng.random((4096, 4096), dtype=np.float32)
  an, bn = rng.random(1 << 24, dtype=np.float32), rng.random(1 << 24, dtype=np.float32)
  v, w, a, b = (Tensor(x).realize() for x in (vn, wn, an, bn))
  m5, m1, m2 = (Tensor(rng.random((n, n), dtype=np.float32)).realize() for n in (512, 1024, 2048))
  x3 = Tensor(rng.random((16, 4096, 256), dtype=np.float32)).realize()
  np.testing.assert_allclose((v @ w).numpy(), vn @ wn, rtol=1e-4)
  rows = {"v @ W 4096x4096": lambda: (v @ w).realize(), "sum(0) 4096x4096": lambda: w.sum(0).realize(),
          "mean(0) 4096x4096": lambda: w.mean(0).realize(), "max(0) 4096x4096": lambda: w.max(0).realize(),
          "sum(1) 4096x4096": lambda: w.sum(1).realize(), "sum(1) 16x4096x256": lambda: x3.sum(1).realize(),
          "max(1) 16x4096x256": lambda: x3.max(1).realize(), "argmax(1) 4096x4096": lambda: w.argmax(1).realize(),
          "argmax(0) 4096x4096": lambda: w.argmax(0).realize(),
          "((a*b)+a).relu()*0.5 16M": lambda: (((a * b) + a).relu() * 0.5).realize(),
          "matmul 512": lambda: (m5 @ m5).realize(), "matmul 1024": lambda: (m1 @ m1).realize(),
          "matmul 2048": lambda: (m2 @ m2).realize(), "numpy v @ W (control)": lambda: vn @ wn}
  clock = time.thread_time if os.environ.get("CPU_THREADS") == "1" else time.perf_counter
  times: dict[str, list[float]] = {}
  for _ in range(3):
    for name, f in rows.items():
      f()
      for _ in range(reps):
        st = clock(); f(); times.setdefault(name, []).append(clock() - st)
  return {k: float(np.percentile(t, 10)) for k, t in times.items()}

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("variants", nargs="*", help="label=PYTHONPATH")
  ap.add_argument("--rounds", type=int, default=4)
  ap.add_argument("--reps", type=int, default=10)
  ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.worker:
    print(json.dumps(worker(args.reps)))
    return
  variants = [v.split("=", 1) for v in args.variants] or [["this checkout", os.environ.get("PYTHONPATH", "")]]
  res: dict[str, dict[str, list[float]]] = {}
  for _ in range(args.rounds):
    for label, path in variants:
      env = dict(os.environ, PYTHONPATH=path)
      out = subprocess.run([sys.executable, __file__, "--worker", "--reps", str(args.reps)], env=env, check=True,
                           capture_output=True, text=True).stdout
      for k, t in json.loads(out.strip().splitlines()[-1]).items(): res.setdefault(k, {}).setdefault(label, []).append(t)
  labels = [label for label, _ in variants]
  print("| row | " + " | ".join(f"{label}: median of rounds' p10 (best)" for label in labels) + " |")
  print("|---|" + "---:|" * len(labels))
  for k, d in res.items():
    print(f"| {k} | " + " | ".join(f"{np.median(d[l]) * 1e3:.2f} ms ({min(d[l]) * 1e3:.2f})" for l in labels) + " |")
  print("load average", os.getloadavg())

if __name__ == "__main__": main()
