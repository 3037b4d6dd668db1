"""A/B timing of sort and topk rows (issue 20): tinyplug checkouts (or settings) against each other, with numpy and
torch for reference, taking turns in one command so the machine's load hits every side alike.

  python benchmarks/sort_ab.py --variant "before:PYTHONPATH=/tmp/old:/tmp/old/plugins/cpu_llvm/src" --rounds 3

Each side runs in its own subprocess per round (warm-up first, so compiling is not timed) and times `--reps`
synchronised runs of each workload; prints p10 and median per side and workload, and the load average."""
from __future__ import annotations
import argparse, json, os, subprocess, sys, time

WORKLOADS = {"sort": "sort rows, 1024x1024", "topk": "topk 16 of rows, 1024x1024"}

def worker(side: str, reps: int) -> dict[str, list[float]]:
  import numpy as np
  a = np.random.default_rng(0).random((1024, 1024), dtype=np.float32)
  if side == "numpy":
    fns = {"sort": lambda: np.sort(a, -1), "topk": lambda: -np.sort(-np.partition(a, -16, -1)[:, -16:], -1)}
  elif side == "torch":
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    t = torch.from_numpy(a)
    fns = {"sort": lambda: t.sort(-1)[0], "topk": lambda: t.topk(16)[0]}
  else:
    from tinyplug import Tensor
    x = Tensor(a).realize()
    fns = {"sort": lambda: x.sort(-1)[0].realize().numpy(), "topk": lambda: x.topk(16)[0].realize().numpy()}
  out = {}
  for name, fn in fns.items():
    for _ in range(2): fn()
    times = []
    for _ in range(reps):
      t0 = time.perf_counter(); fn(); times.append(time.perf_counter() - t0)
    out[name] = times
  return out

def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--variant", action="append", default=[], help="NAME:KEY=VALUE[,KEY=VALUE] (a tinyplug side)")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--reps", type=int, default=5)
  ap.add_argument("--peers", default="numpy,torch")
  ap.add_argument("--worker")
  args = ap.parse_args()
  if args.worker:
    print(json.dumps(worker(args.worker, args.reps))); return
  sides = {"tinyplug": {}}
  for text in args.variant:
    name, _, env = text.partition(":")
    sides[name] = dict(kv.split("=", 1) for kv in env.split(","))
  for p in filter(None, args.peers.split(",")): sides[p] = {}
  times: dict[str, dict[str, list[float]]] = {s: {w: [] for w in WORKLOADS} for s in sides}
  for rnd in range(args.rounds):
    for side, env in (sides.items() if rnd % 2 == 0 else reversed(sides.items())):
      print(f"round {rnd + 1}: {side}", file=sys.stderr, flush=True)
      kind = side if side in ("numpy", "torch") else "tinyplug"
      res = subprocess.run([sys.executable, __file__, "--worker", kind, "--reps", str(args.reps)],
                           env={**os.environ, **env}, capture_output=True, text=True, check=True)
      for w, ts in json.loads(res.stdout.strip().splitlines()[-1]).items(): times[side][w] += ts
  pct = lambda ts, q: sorted(ts)[min(len(ts) - 1, int(q * len(ts)))] * 1e3
  print(f"load average: {os.getloadavg()}")
  print("| side | " + " | ".join(f"{WORKLOADS[w]} p10 / median (ms)" for w in WORKLOADS) + " |")
  print("|---|" + "---|" * len(WORKLOADS))
  for side in sides:
    print(f"| {side} | " + " | ".join(f"{pct(times[side][w], 0.1):.2f} / {pct(times[side][w], 0.5):.2f}"
                                      for w in WORKLOADS) + " |")

if __name__ == "__main__":
  main()
