"""The Python of a non-jitted training step (issue 20): grad_sweep's fwd + bwd rows, each step's CPU time on this
thread split into its kernel launches (the plan's launches, copies included, timed one by one) and the rest (graph,
gradient, plan lookup, buffers, frees). Kernels run on the calling thread (CPU_THREADS=1), so both parts are this
thread's CPU time: steadier than the wall clock under load, not free of it (caches and clocks are shared).

  CPU_THREADS=1 python benchmarks/step_python.py --only cross_entropy,embedding --steps 500
  CPU_THREADS=1 PYTHONPATH=/tmp/before:/tmp/before/plugins/cpu_llvm/src python benchmarks/step_python.py --only cross_entropy

Only steps whose realize runs from a graph plan (engine/plan._run) have their launches timed; the others count whole
as Python (a row lists how many of its steps ran from a plan)."""
from __future__ import annotations
import argparse, os, statistics, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--only", default="cross_entropy", help="comma list of words in grad_sweep's workload names")
  ap.add_argument("--steps", type=int, default=300)
  args = ap.parse_args()
  if os.environ.get("CPU_THREADS") != "1": sys.exit("run it with CPU_THREADS=1 (kernels on this thread)")
  import torch
  import torch.nn.functional as F
  from tinyplug.tensor import Tensor
  from tinyplug.engine import plan
  from grad_sweep import workloads
  clock = time.thread_time_ns
  launched = [0, 0]   # CPU time inside launches, plan runs (this step)
  def timed_run(p, handle_of, vals_of=None):
    # engine/plan._run with each launch timed (the outputs are made as _run makes them)
    made = [make() if make is not None else plan._NOTHING for make in p.outs]
    for launch, refs, vals, _, _ in p.steps:
      handles = [handle_of(r) if r >= 0 else made[-r - 1][1] for r in refs]
      values = () if vals is None else vals_of(vals)
      st = clock()
      launch(handles, values)
      launched[0] += clock() - st
    launched[1] += 1
    return [u for u, _ in made]
  plan._run = timed_run
  words = [w for w in args.only.split(",") if w]
  rng = np.random.default_rng(0)
  print(f"per step, this thread's CPU time, {args.steps} steps; load average {os.getloadavg()[0]:.1f}\n")
  print("| fwd + bwd | step p10 / median | launches p10 / median | rest (Python) p10 / median | steps from a plan |")
  print("|---|---:|---:|---:|---:|")
  for name, (shapes, ours, _) in workloads(Tensor, torch, F).items():
    if words and not any(w in name for w in words): continue
    tp = [Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True).realize() for s in shapes]
    def step() -> None:
      for t in tp: t.grad = None
      ours(*tp).backward()
      Tensor.realize(*[t.grad for t in tp])
    for _ in range(10): step()
    total, kernels, planned = [], [], 0
    for _ in range(args.steps):
      launched[0] = launched[1] = 0
      st = clock()
      step()
      total.append(clock() - st)
      kernels.append(launched[0])
      planned += launched[1] > 0
    rest = sorted(t - k for t, k in zip(total, kernels))
    def cell(v: list[int]) -> str:
      v = sorted(v)
      return f"{v[len(v) // 10] / 1e3:.1f} / {statistics.median(v) / 1e3:.1f} us"
    print(f"| {name} | {cell(total)} | {cell(kernels)} | {cell(rest)} | {planned}/{args.steps} |", flush=True)

if __name__ == "__main__": main()
