"""A/B of grad_sweep's eager forward + backward steps between two trees (and PyTorch), taking turns: each round runs
one process per side (before, after, torch), each timing --steps steps of every selected workload after 3 warm-up
steps; p10/median over all rounds' steps. Per-thread CPU time with --one-thread (CPU_THREADS=1, torch one thread),
wall time on all cores otherwise.
  CPU_THREADS=1 python benchmarks/conv_step_ab.py --before /tmp/base --one-thread --only "28x28" --rounds 4
  python benchmarks/conv_step_ab.py --before /tmp/base --only "28x28,56x56" --rounds 4
--before: a checkout (e.g. `git archive <commit> | tar -x -C /tmp/base`); this tree is "after"."""
from __future__ import annotations
import argparse, json, os, subprocess, sys, time
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def _worker(which: str, args) -> dict[str, list[float]]:
  import torch
  import torch.nn.functional as F
  from grad_sweep import workloads
  from tinyplug.tensor import Tensor
  if args.one_thread: torch.set_num_threads(1)
  clock = time.thread_time if args.one_thread else time.perf_counter
  words, rng, out = [w for w in args.only.split(",") if w], np.random.default_rng(0), {}
  for name, (shapes, ours, theirs) in workloads(Tensor, torch, F).items():
    if words and not any(w in name for w in words): continue
    data = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    if which == "torch":
      th = [torch.tensor(a, requires_grad=True) for a in data]
      def run() -> None:
        for t in th: t.grad = None
        theirs(*th).backward()
    else:
      tp = [Tensor(a, requires_grad=True).realize() for a in data]
      def run() -> None:
        for t in tp: t.grad = None
        ours(*tp).backward()
        Tensor.realize(*[t.grad for t in tp])
        tp[0].grad.numpy()
    for _ in range(3): run()
    times = []
    for _ in range(args.steps):
      st = clock(); run(); times.append(clock() - st)
    out[name] = times
  return out

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--before", required=True, help="the other checkout's root")
  ap.add_argument("--one-thread", action="store_true")
  ap.add_argument("--only", default="28x28")
  ap.add_argument("--rounds", type=int, default=4)
  ap.add_argument("--steps", type=int, default=10)
  ap.add_argument("--no-torch", action="store_true")
  ap.add_argument("--worker", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.worker:
    print(json.dumps(_worker(args.worker, args))); return
  if args.one_thread and os.environ.get("CPU_THREADS") != "1": sys.exit("--one-thread: run it with CPU_THREADS=1")
  flags = [f"--before={args.before}", f"--only={args.only}", f"--steps={args.steps}"] + \
    (["--one-thread"] if args.one_thread else [])
  sides = {"before": f"{args.before}:{args.before}/plugins/cpu_llvm/src", "after": f"{HERE}:{HERE}/plugins/cpu_llvm/src"}
  if not args.no_torch: sides["torch"] = sides["after"]
  times: dict[str, dict[str, list[float]]] = {s: {} for s in sides}
  loads = [os.getloadavg()[0]]
  for _ in range(args.rounds):
    for side, path in sides.items():
      env = dict(os.environ, PYTHONPATH=path)
      res = subprocess.run([sys.executable, __file__, "--worker", "torch" if side == "torch" else "tinyplug", *flags],
                           env=env, check=True, capture_output=True, text=True, cwd="/tmp")
      for name, ts in json.loads(res.stdout.strip().splitlines()[-1]).items(): times[side].setdefault(name, []).extend(ts)
    loads.append(os.getloadavg()[0])
  what = "per-thread CPU time, one thread" if args.one_thread else "wall time, all cores"
  print(f"{what}; {args.rounds} rounds x {args.steps} steps, sides taking turns; load average {min(loads):.1f}-{max(loads):.1f}\n")
  print("| fwd + bwd | " + " | ".join(f"{s} p10 / median" for s in sides) + " | before / after (p10) |" +
        (" torch / after (p10) |" if "torch" in sides else ""))
  print("|---|" + "---:|" * (len(sides) + 1 + ("torch" in sides)))
  for name in times["after"]:
    p10 = {s: np.percentile(times[s][name], 10) * 1e3 for s in sides}
    cells = " | ".join(f"{p10[s]:.2f} / {np.median(times[s][name]) * 1e3:.2f} ms" for s in sides)
    extra = f" {p10['torch'] / p10['after']:.2f}x |" if "torch" in sides else ""
    print(f"| {name} | {cells} | {p10['before'] / p10['after']:.2f}x |{extra}", flush=True)

if __name__ == "__main__": main()
