"""A/B of grad_sweep rows between two checkouts (and torch), taking turns: on a shared machine only such interleaved
runs compare. Each round runs one `grad_sweep.py --worker` process per side (the best of --reps steps); the table gives
p10 and median over the rounds and the load average seen.

  python benchmarks/grad_sweep_ab.py /work/main . --only "embedding,x[idx]" --rounds 5            # per-thread CPU time
  python benchmarks/grad_sweep_ab.py /work/main . --only "x[idx]" --wall                          # wall time, all cores

Each checkout's own `tinyplug` and CPU plugin are imported (PYTHONPATH), with this interpreter's other plugins."""
from __future__ import annotations
import argparse, json, os, subprocess, sys
import numpy as np

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("before", help="checkout A (its root folder)")
  ap.add_argument("after", help="checkout B")
  ap.add_argument("--only", required=True, help="grad_sweep's --only: comma list of words in the workload names")
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--reps", type=int, default=5)
  ap.add_argument("--wall", action="store_true", help="wall time on all cores instead of per-thread CPU time")
  args = ap.parse_args()
  sides = {"A": (os.path.abspath(args.before), "tinyplug"), "B": (os.path.abspath(args.after), "tinyplug"),
           "torch": (os.path.abspath(args.after), "torch")}
  times: dict[str, dict[str, list[float]]] = {s: {} for s in sides}
  loads = [os.getloadavg()[0]]
  for _ in range(args.rounds):
    for side, (root, worker) in sides.items():
      # the checkout's CPU plugin too: the installed one is whichever checkout was installed
      path = os.pathsep.join([root, os.path.join(root, "plugins", "cpu_llvm", "src")])
      env = dict(os.environ, PYTHONPATH=path, **({} if args.wall else {"CPU_THREADS": "1"}))
      cmd = [sys.executable, os.path.join(root, "benchmarks", "grad_sweep.py"), "--worker", worker, "--reps",
             str(args.reps), "--only", args.only] + ([] if args.wall else ["--one-thread"])
      out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
      for name, t in json.loads(out).items(): times[side].setdefault(name, []).append(t * 1e3)
    loads.append(os.getloadavg()[0])
  kind = "wall time, all cores" if args.wall else "per-thread CPU time, one thread"
  print(f"{kind}; {args.rounds} rounds, best of {args.reps} each; load average {min(loads):.1f}-{max(loads):.1f}\n")
  print("| fwd + bwd | A p10 / median | B p10 / median | torch p10 / median |\n|---|---:|---:|---:|")
  for name in times["A"]:
    cells = [f"{np.percentile(times[s][name], 10):.2f} / {np.median(times[s][name]):.2f} ms" for s in sides]
    print(f"| {name} | {' | '.join(cells)} |")

if __name__ == "__main__": main()
