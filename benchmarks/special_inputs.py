"""Transcendentals on ordinary and on special inputs (issue 20): the same op over values that overflow, underflow, are
-inf (a causal mask) or 0, beside the same op over ordinary values. A vector math library that handles special lanes
one at a time makes the second many times slower; the table shows whether that happens.

  CPU_THREADS=1 python benchmarks/special_inputs.py          # per-thread CPU time, best of --reps
  CPU_THREADS=1 python benchmarks/special_inputs.py --only softmax,exp

Per-thread CPU time of the whole realize on the calling thread (CPU_THREADS=1 runs the kernels there), so other work
on the machine moves it little."""
from __future__ import annotations
import argparse, os, sys, time
import numpy as np

def cases(Tensor) -> dict:
  rng = np.random.default_rng(0)
  n = 4 << 20
  normal = rng.standard_normal(n)
  masked = np.where(rng.random(n) < 0.5, -np.inf, normal)
  def t(a): return Tensor(np.asarray(a, dtype=np.float32)).realize()
  x, big, neg, m = t(normal), t(normal * 1000), t(-np.abs(normal) * 1000), t(masked)
  pos, zeros = t(np.abs(normal) + 0.1), t(np.where(rng.random(n) < 0.5, 0.0, -1.0))
  sq, sqm = t(normal.reshape(2048, 2048)), t(masked.reshape(2048, 2048))
  q = t(rng.standard_normal((8, 12, 128, 64)))
  return {
    "exp, ordinary": lambda: x.exp(), "exp, |x| ~ 1000": lambda: big.exp(), "exp, x ~ -1000": lambda: neg.exp(),
    "exp, half -inf": lambda: m.exp(), "sigmoid, ordinary": lambda: x.sigmoid(), "sigmoid, |x| ~ 1000": lambda: big.sigmoid(),
    "tanh, ordinary": lambda: x.tanh(), "tanh, |x| ~ 1000": lambda: big.tanh(),
    "log, ordinary": lambda: pos.log(), "log, zeros and negatives": lambda: zeros.log(),
    "softmax 2048^2, ordinary": lambda: sq.softmax(-1), "softmax 2048^2, half -inf": lambda: sqm.softmax(-1),
    "sdpa 8x12x128x64": lambda: q.scaled_dot_product_attention(q, q),
    "sdpa 8x12x128x64, causal": lambda: q.scaled_dot_product_attention(q, q, is_causal=True),
  }

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--reps", type=int, default=7)
  ap.add_argument("--only", default="", help="comma list of words; run the cases whose name contains one")
  args = ap.parse_args()
  if os.environ.get("CPU_THREADS") != "1": sys.exit("run with CPU_THREADS=1: the kernels must run on the timed thread")
  from tinyplug.tensor import Tensor
  sys.path.insert(0, os.path.dirname(__file__))
  from first_step import _cpu_name
  words = [w for w in args.only.split(",") if w]
  print(f"CPU: {_cpu_name()}; per-thread CPU time, best of {args.reps}; load average {os.getloadavg()[0]:.1f}\n")
  print("| case | tinyplug |\n|---|---:|")
  for name, fn in cases(Tensor).items():
    if words and not any(w in name for w in words): continue
    fn().realize()
    best = float("inf")
    for _ in range(args.reps):
      st = time.thread_time(); fn().realize(); best = min(best, time.thread_time() - st)
    print(f"| {name} | {best * 1e3:.2f} ms |", flush=True)

if __name__ == "__main__": main()
