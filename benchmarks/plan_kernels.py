"""sort / topk rows (issue 20) on one thread, measured per thread so a busy machine disturbs it less: the first call
(build; run with CACHELEVEL=0 for a cold one), the whole call `x.sort(-1)[0].realize()` (or topk(16)) as thread CPU
time, then each kernel of its realize plan (engine/plan.py) on the plan's own buffers, with the bytes it moves and
how many buffers the plan allocates. The result is checked against numpy.

  CPU_THREADS=1 python benchmarks/plan_kernels.py [sort|topk] [--n 1024] [--reps 30]
  (A/B: run it with PYTHONPATH=<a git archive>:<it>/plugins/cpu_llvm/src in turns with this checkout)"""
from __future__ import annotations
import argparse, os, time
import numpy as np
from tinyplug import Tensor
from tinyplug.device import handle_of
from tinyplug.engine import plan

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("work", nargs="?", default="sort", choices=("sort", "topk"))
  ap.add_argument("--n", type=int, default=1024)
  ap.add_argument("--reps", type=int, default=30)
  args = ap.parse_args()
  a = np.random.default_rng(0).random((args.n, args.n), dtype=np.float32)
  x = Tensor(a).realize()
  fn = (lambda t: t.sort(-1)[0]) if args.work == "sort" else (lambda t: t.topk(16)[0])
  want = np.sort(a, -1) if args.work == "sort" else -np.sort(-a, -1)[:, :16]
  st = time.perf_counter()
  assert np.array_equal(fn(x).numpy(), want)
  first = time.perf_counter() - st
  calls = []
  for _ in range(args.reps):
    st = time.thread_time()
    fn(x).realize()
    calls.append(time.thread_time() - st)
  c = np.array(calls) * 1e3
  print(f"{args.work} {args.n}x{args.n}: first call {first:.2f} s; whole call thread CPU p10 {np.percentile(c, 10):.2f} / "
        f"median {np.median(c):.2f} ms; load {os.getloadavg()}")
  plans = [p for _, p in plan._plans.values() if p is not None]
  if not plans: return print("no realize plan recorded (REALIZE_PLANS=0, DEBUG or a listener?)")
  p = plans[-1]
  made = [m() if m is not None else (None, None) for m in p.outs]
  hx = handle_of(x.uop.base)
  times: list[list[float]] = [[] for _ in p.steps]
  for _ in range(args.reps):
    for k, (launch, refs, _, _, _) in enumerate(p.steps):
      hs = [hx if r >= 0 else made[-r - 1][1] for r in refs]
      st = time.thread_time()
      launch(hs, ())
      times[k].append(time.thread_time() - st)
  total = 0.0
  for k, (_, refs, _, _, mem) in enumerate(p.steps):
    ms = float(np.median(times[k])) * 1e3
    total += ms
    print(f"{k:3d} buffers {refs}: {ms:.3f} ms, {mem / 1e6:.1f} MB, {mem / 1e6 / ms:.1f} GB/s")
  print(f"{len(p.steps)} kernels over {sum(m is not None for m in p.outs)} new buffers: {total:.2f} ms (medians)")

if __name__ == "__main__":
  main()
