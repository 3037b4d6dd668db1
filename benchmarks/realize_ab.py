"""The Python of a repeated plain realize, A/B: each variant (another checkout through PYTHONPATH, or settings such as
REALIZE_PLANS=0) runs in its own process, the variants take turns for --rounds rounds, and each case's p10 and median
(over --n realizes per round, microseconds, wall clock) are kept from the best round.

The cases are small (a kernel of about a microsecond), so the time is the realize's own Python: building the graph,
scheduling, launching, pointing the tensor at its buffer and freeing the result; `matmul 512` is the whole realize of
cpu_bench's row, kernel included.

  python benchmarks/realize_ab.py --variant "before:PYTHONPATH=/work/main:/work/main/plugins/cpu_llvm/src"
  python benchmarks/realize_ab.py --variant "plans off:REALIZE_PLANS=0" --rounds 5

A timing: say the CPU and the load (printed) with the numbers."""
from __future__ import annotations
import argparse, json, os, subprocess, sys, time

CASES = ("(a @ b).realize() 16x16", "x.sum().realize() 64x64", "x.conv2d(w).realize() 1x3x8x8",
         "x.softmax(-1).realize() 64x64", "(a + b).realize() 16x16 (no template)",
         "(((a*b)+c).relu()*0.5).realize() 1024 (no template)", "(a @ b).realize() 512x512")

def worker(n: int) -> dict:
  import numpy as np
  from tinyplug.tensor import Tensor
  rng = np.random.default_rng(0)
  def t(*shape): return Tensor(rng.random(shape, dtype=np.float32)).realize()
  a, b, x, xi, w, m, A, B = t(16, 16), t(16, 16), t(64, 64), t(1, 3, 8, 8), t(4, 3, 3, 3), t(64, 64), t(512, 512), t(512, 512)
  p, q, r = t(1024), t(1024), t(1024)
  fns = [lambda: (a @ b).realize(), lambda: x.sum().realize(), lambda: xi.conv2d(w, padding=1).realize(),
         lambda: m.softmax(-1).realize(), lambda: (a + b).realize(), lambda: (((p * q) + r).relu() * 0.5).realize(),
         lambda: (A @ B).realize()]
  times: list[list[int]] = [[] for _ in fns]
  for f in fns:
    for _ in range(20): f()
  for rep in range(n):   # the cases interleaved, so a slow spell hits all of them
    for i, f in enumerate(fns):
      if i == len(fns) - 1 and rep % 10: continue   # the 512 matmul every tenth round: ~1.3 ms each
      st = time.perf_counter_ns(); f(); times[i].append(time.perf_counter_ns() - st)
  def pct(v: list[int], q: float) -> float: return sorted(v)[int(len(v) * q)] / 1e3
  return {c: (pct(v, .1), pct(v, .5)) for c, v in zip(CASES, times)}

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--variant", action="append", default=[], help="NAME:KEY=VALUE[,KEY=VALUE] (run with these "
                  "environment variables); the checkout this script is in runs as 'this'")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--n", type=int, default=1000)
  ap.add_argument("--worker", action="store_true")
  args = ap.parse_args()
  if args.worker:
    print(json.dumps(worker(args.n)))
    return
  variants = [("this", {})]
  for text in args.variant:
    name, _, env = text.partition(":")
    variants.append((name, dict(kv.split("=", 1) for kv in env.split(",") if kv)))
  try:
    from first_step import _cpu_name
    print(f"CPU: {_cpu_name()}")
  except Exception: pass
  print(f"load average at start {os.getloadavg()[0]:.2f}")
  best: dict[str, dict] = {}
  for rnd in range(args.rounds):
    for name, env in (variants if rnd % 2 == 0 else variants[::-1]):
      out = subprocess.run([sys.executable, __file__, "--worker", "--n", str(args.n)], capture_output=True, text=True,
                           env={**os.environ, "DEV": os.environ.get("DEV", "CPU"), **env}, check=True).stdout
      r = json.loads(out.strip().splitlines()[-1])
      prev = best.setdefault(name, r)
      best[name] = {c: min(prev[c], r[c]) for c in r}
  print(f"load average at end {os.getloadavg()[0]:.2f}; us per realize, p10 / median, best of {args.rounds} rounds")
  print("| case | " + " | ".join(n for n, _ in variants) + " | " +
        " | ".join(f"{n} / this" for n, _ in variants[1:]) + " |")
  print("|---|" + "---:|" * (2 * len(variants) - 1))
  for c in CASES:
    cells = [f"{best[n][c][0]:.1f} / {best[n][c][1]:.1f}" for n, _ in variants]
    ratios = [f"{best[n][c][0] / best['this'][c][0]:.2f}x" for n, _ in variants[1:]]
    print(f"| {c} | " + " | ".join(cells + ratios) + " |")

if __name__ == "__main__":
  main()
