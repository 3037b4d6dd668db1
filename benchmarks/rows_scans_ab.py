"""argmax, logsumexp, cumsum and cummax (issue 20's rows behind a peer), A/B: each tinyplug variant (another checkout
through PYTHONPATH) and numpy/torch run in their own processes, taking turns for --rounds rounds; every case's p10 and median
over all rounds' samples (milliseconds, wall clock, the result computed) are printed with the load average.

  git -C /work/main archive main | tar -x -C /tmp/ab-main
  python benchmarks/rows_scans_ab.py --variant "before:PYTHONPATH=/tmp/ab-main" --rounds 5

CACHELEVEL=0 in every tinyplug process (the disk cache would hand one variant's kernels to the other)."""
from __future__ import annotations
import argparse, json, os, subprocess, sys, time

CASES = {   # name: (shape, op, axis)
  "argmax(1) 4096x4096": ((4096, 4096), "argmax", 1), "argmax(0) 4096x4096": ((4096, 4096), "argmax", 0),
  "cumsum(1) 1024x1024": ((1024, 1024), "cumsum", 1), "cumsum(0) 1024x1024": ((1024, 1024), "cumsum", 0),
  "logsumexp(1) 128x10": ((128, 10), "lse", 1), "logsumexp(1) 4096x4096": ((4096, 4096), "lse", 1),
  "cummax(1) 1024x1024": ((1024, 1024), "cummax", 1)}

def worker(lib: str, n: int) -> dict:
  import numpy as np
  rng = np.random.default_rng(0)
  arrays = {shape: rng.random(shape, dtype=np.float32) for shape, _, _ in CASES.values()}
  if lib == "tinyplug":
    from tinyplug.tensor import Tensor
    xs = {s: Tensor(a).realize() for s, a in arrays.items()}
    ops = {"argmax": lambda x, ax: x.argmax(ax).realize(), "cumsum": lambda x, ax: x.cumsum(ax).realize(),
           "lse": lambda x, ax: x.logsumexp(ax).realize(), "cummax": lambda x, ax: [t.realize() for t in x.cummax(ax)]}
  elif lib == "torch":
    import torch
    xs = {s: torch.from_numpy(a) for s, a in arrays.items()}
    ops = {"argmax": lambda x, ax: x.argmax(ax), "cumsum": lambda x, ax: x.cumsum(ax),
           "lse": lambda x, ax: x.logsumexp(ax), "cummax": lambda x, ax: x.cummax(ax)}
  else:
    xs = arrays
    def lse(x, ax):
      m = x.max(ax, keepdims=True)
      return np.log(np.exp(x - m).sum(ax)) + m.squeeze(ax)
    # numpy has no cummax with indices: its running max alone (np.maximum.accumulate)
    ops = {"argmax": lambda x, ax: x.argmax(ax), "cumsum": lambda x, ax: x.cumsum(ax), "lse": lse,
           "cummax": lambda x, ax: np.maximum.accumulate(x, ax)}
  out = {}
  for name, (shape, op, ax) in CASES.items():
    f, x = ops[op], xs[shape]
    for _ in range(3): f(x, ax)
    times = []
    for _ in range(n):
      st = time.perf_counter_ns(); f(x, ax); times.append(time.perf_counter_ns() - st)
    out[name] = times
  return out

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--variant", action="append", default=[],
                  help="NAME:KEY=VALUE[,KEY=VALUE]: tinyplug again with that env")
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--n", type=int, default=15, help="samples per case per round")
  ap.add_argument("--worker", default=None)
  args = ap.parse_args()
  if args.worker:
    print(json.dumps(worker(args.worker, args.n)))
    return
  runs = [(name, "tinyplug", dict(kv.split("=", 1) for kv in env.split(",")))
          for name, env in (v.split(":", 1) for v in args.variant)]
  runs = runs + [("after", "tinyplug", {}), ("numpy", "numpy", {}), ("torch", "torch", {})]
  samples: dict = {name: {} for name, _, _ in runs}
  for rnd in range(args.rounds):
    for name, lib, env in runs:
      print(f"round {rnd + 1}: {name}", file=sys.stderr, flush=True)
      res = subprocess.run([sys.executable, __file__, "--worker", lib, "--n", str(args.n)], capture_output=True,
                           text=True, env={**os.environ, "CACHELEVEL": "0", **env}, check=True)
      for case, v in json.loads(res.stdout.strip().splitlines()[-1]).items():
        samples[name].setdefault(case, []).extend(v)
  load = " ".join(f"{v:.2f}" for v in os.getloadavg())
  print(f"load average {load}; ms, p10 / median over {args.rounds} rounds x {args.n}")
  names = [name for name, _, _ in runs]
  print("| case | " + " | ".join(names) + " |")
  print("|---" * (len(names) + 1) + "|")
  def cell(v: list[int]) -> str:
    v = sorted(v)
    return f"{v[len(v) // 10] / 1e6:.3g} / {v[len(v) // 2] / 1e6:.3g}"
  for case in CASES: print(f"| {case} | " + " | ".join(cell(samples[n][case]) for n in names) + " |")

if __name__ == "__main__": main()
