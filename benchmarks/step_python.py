"""The Python of a non-jitted training step (issue 20): grad_sweep's fwd + bwd rows, each step's time split into its
kernel launches (the plan's launches, copies included, timed one by one) and the rest (graph, gradient, plan lookup,
buffers, frees: the time between the kernels).

  CPU_THREADS=1 python benchmarks/step_python.py --only cross_entropy,embedding --steps 500
  CPU_THREADS=1 PYTHONPATH=/tmp/before:/tmp/before/plugins/cpu_llvm/src python benchmarks/step_python.py --only cross_entropy
  python benchmarks/step_python.py --only embedding --wall --variant "before:/tmp/before" --variant "after:." --rounds 5

By default kernels run on the calling thread (CPU_THREADS=1) and both parts are this thread's CPU time: steadier than
the wall clock under load, not free of it (caches and clocks are shared). `--wall` takes wall time on all cores (the
rest then holds thread wake-ups too). `--skip-kernels` launches nothing (values are garbage, the graphs the same): the
rest with caches warm, against the rest in a real step, whose Python runs after the kernels streamed their buffers
through the caches. `--variant LABEL:ROOT` (twice or more) runs each checkout's tinyplug in a process of its own, in
turns, `--rounds` times, and gives p10 / median of the rounds' medians.

Only steps whose realize runs from a graph plan (engine/plan._run) have their launches timed; the others count whole
as Python (a row lists how many of its steps ran from a plan)."""
from __future__ import annotations
import argparse, json, os, statistics, subprocess, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

def _measure(args) -> dict[str, dict]:
  """Per selected row: each step's total, launch and rest times (ns) and how many steps ran from a plan."""
  import torch
  import torch.nn.functional as F
  from tinyplug.tensor import Tensor
  from tinyplug.engine import plan
  from grad_sweep import workloads
  clock = time.perf_counter_ns if args.wall else time.thread_time_ns
  launched = [0, 0]   # time inside launches, plan runs (this step)
  skip = args.skip_kernels
  def timed_run(p, handle_of, vals_of=None):
    # engine/plan._run with each launch timed (the outputs are made as _run makes them)
    made = [make() if make is not None else plan._NOTHING for make in p.outs]
    for launch, refs, vals, _, _ in p.steps:
      handles = [handle_of(r) if r >= 0 else made[-r - 1][1] for r in refs]
      values = () if vals is None else vals_of(vals)
      st = clock()
      if not skip: launch(handles, values)
      launched[0] += clock() - st
    launched[1] += 1
    return [u for u, _ in made]
  plan._run = timed_run
  words = [w for w in args.only.split(",") if w]
  rng = np.random.default_rng(0)
  out = {}
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
    out[name] = {"total": total, "kernels": kernels, "rest": [t - k for t, k in zip(total, kernels)], "planned": planned}
  return out

def _cell(v: list[float]) -> str:
  v = sorted(v)
  return f"{v[len(v) // 10] / 1e3:.1f} / {statistics.median(v) / 1e3:.1f} us"

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--only", default="cross_entropy", help="comma list of words in grad_sweep's workload names")
  ap.add_argument("--steps", type=int, default=300)
  ap.add_argument("--wall", action="store_true", help="wall time (any CPU_THREADS) instead of this thread's CPU time")
  ap.add_argument("--skip-kernels", action="store_true", help="launch nothing: the rest with warm caches")
  ap.add_argument("--variant", action="append", default=[], help="LABEL:ROOT of a checkout, run in turns (twice or more)")
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if not args.wall and os.environ.get("CPU_THREADS") != "1":
    sys.exit("run it with CPU_THREADS=1 (kernels on this thread), or with --wall")
  what = ("wall time" if args.wall else "this thread's CPU time") + (", kernels skipped" if args.skip_kernels else "")
  if args.worker:
    print(json.dumps(_measure(args)))
    return
  if not args.variant:
    print(f"per step, {what}, {args.steps} steps; load average {os.getloadavg()[0]:.1f}\n")
    print("| fwd + bwd | step p10 / median | launches p10 / median | rest (Python) p10 / median | steps from a plan |")
    print("|---|---:|---:|---:|---:|")
    for name, r in _measure(args).items():
      print(f"| {name} | {_cell(r['total'])} | {_cell(r['kernels'])} | {_cell(r['rest'])} | {r['planned']}/{args.steps} |",
            flush=True)
    return
  variants = [v.split(":", 1) for v in args.variant]
  rests: dict[str, dict[str, list[float]]] = {label: {} for label, _ in variants}
  kernels: dict[str, dict[str, list[float]]] = {label: {} for label, _ in variants}
  loads = [os.getloadavg()[0]]
  passed = ["--only", args.only, "--steps", str(args.steps)] + ["--wall"] * args.wall + \
    ["--skip-kernels"] * args.skip_kernels
  for _ in range(args.rounds):
    for label, root in variants:
      root = os.path.abspath(root)
      env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.path.join(root, "plugins", "cpu_llvm", "src")]))
      got = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", *passed], env=env,
                           capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
      for name, r in json.loads(got).items():
        rests[label].setdefault(name, []).append(statistics.median(r["rest"]))
        kernels[label].setdefault(name, []).append(statistics.median(r["kernels"]))
    loads.append(os.getloadavg()[0])
  print(f"per step, {what}: the rest (not in launches) and the launches, p10 / median of {args.rounds} rounds' medians "
        f"of {args.steps} steps; load average {min(loads):.1f}-{max(loads):.1f}\n")
  labels = [label for label, _ in variants]
  print("| fwd + bwd | " + " | ".join(f"{label}: rest | {label}: launches" for label in labels) + " |")
  print("|---|" + "---:|---:|" * len(labels))
  for name in rests[labels[0]]:
    cells = [f"{_cell(rests[label][name])} | {_cell(kernels[label][name])}" for label in labels]
    print(f"| {name} | {' | '.join(cells)} |", flush=True)

if __name__ == "__main__": main()
