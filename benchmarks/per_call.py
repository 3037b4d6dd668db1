"""The cost of one call of a small op a user runs in a loop (a tiny elementwise op, short row reductions, argmax of
64x1000), tinyplug against numpy and torch, each in its own process, taking turns for --rounds rounds (both orders).
Each case is the best of 7 batches of 2000 calls after --warmup calls, in microseconds: thread CPU time by default (trust it on a shared
machine, with CPU_THREADS=1), wall time with --wall (2 threads: run it under `chrt -f 10`).

  CPU_THREADS=1 python benchmarks/per_call.py --before /tmp/main-tree --rounds 4
  chrt -f 10 python benchmarks/per_call.py --wall --before /tmp/main-tree --rounds 4

--before PATH adds another checkout (`git archive main | tar -x -C PATH`) as the peer "before"."""
from __future__ import annotations
import argparse, collections, os, statistics, subprocess, sys, time

CASES = {"tiny": "(t + 1.0).realize() of 8 floats", "sum1": "x.sum(1) 128x10", "max1": "x.max(1) 128x10",
         "lse": "x.logsumexp(1) 128x10", "argmax": "x.argmax(1) 64x1000", "max1k": "x.max(1) 64x1000"}

def _cases(lib: str) -> dict:
  import numpy as np
  rng = np.random.default_rng(0)
  rows, wide, tiny = rng.random((128, 10), dtype=np.float32), rng.random((64, 1000), dtype=np.float32), np.zeros(8, np.float32)
  if lib == "numpy":
    t = [tiny]
    def step(): t[0] = t[0] + 1.0
    def lse(x):
      m = x.max(1, keepdims=True)
      return np.log(np.exp(x - m).sum(1)) + m.squeeze(1)
    return {"tiny": step, "sum1": lambda: rows.sum(1), "max1": lambda: rows.max(1), "lse": lambda: lse(rows),
            "argmax": lambda: wide.argmax(1), "max1k": lambda: wide.max(1)}
  if lib == "torch":
    import torch
    torch.set_num_threads(int(os.environ.get("CPU_THREADS", "0") or 0) or len(os.sched_getaffinity(0)))
    r, w, t = torch.from_numpy(rows), torch.from_numpy(wide), [torch.from_numpy(tiny)]
    def step(): t[0] = t[0] + 1.0
    return {"tiny": step, "sum1": lambda: r.sum(1), "max1": lambda: r.amax(1), "lse": lambda: r.logsumexp(1),
            "argmax": lambda: w.argmax(1), "max1k": lambda: w.amax(1)}
  from tinyplug.tensor import Tensor
  r, w, t = Tensor(rows).realize(), Tensor(wide).realize(), [Tensor(tiny).realize()]
  def step(): t[0] = (t[0] + 1.0).realize()
  return {"tiny": step, "sum1": lambda: r.sum(1).realize(), "max1": lambda: r.max(1).realize(),
          "lse": lambda: r.logsumexp(1).realize(), "argmax": lambda: w.argmax(1).realize(),
          "max1k": lambda: w.max(1).realize()}

def worker(lib: str, names: list[str], wall: bool, warmup: int) -> None:
  clock = time.perf_counter_ns if wall else time.thread_time_ns
  cases = _cases(lib)
  for name in names:
    fn, best = cases[name], float("inf")
    for _ in range(warmup): fn()
    for _ in range(7):
      st = clock()
      for _ in range(2000): fn()
      best = min(best, (clock() - st) / 2000 / 1000)
    print(name, best, flush=True)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--worker", help=argparse.SUPPRESS)
  ap.add_argument("--cases", default=",".join(CASES), help="comma list of: " + ", ".join(CASES))
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--wall", action="store_true", help="wall time instead of thread CPU time")
  ap.add_argument("--before", help="another checkout's root, run as the peer 'before'")
  ap.add_argument("--no-peers", action="store_true", help="leave numpy and torch out")
  ap.add_argument("--warmup", type=int, default=200, help="calls before the timed ones (a loop's steady state)")
  args = ap.parse_args()
  names = args.cases.split(",")
  if args.worker: return worker(args.worker, names, args.wall, args.warmup)
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  path = lambda r: f"{r}:{r}/plugins/cpu_llvm/src"
  peers = {"tinyplug": ("tinyplug", path(root))}
  if args.before: peers["before"] = ("tinyplug", path(os.path.abspath(args.before)))
  if not args.no_peers: peers.update(numpy=("numpy", ""), torch=("torch", ""))
  got: dict = collections.defaultdict(list)
  for r in range(args.rounds):
    for peer in (list(peers) if r % 2 == 0 else list(reversed(peers))):
      lib, pythonpath = peers[peer]
      env = dict(os.environ, PYTHONPATH=pythonpath)
      cmd = [sys.executable, os.path.abspath(__file__), "--worker", lib, "--cases", args.cases, "--warmup",
             str(args.warmup)] + (["--wall"] if args.wall else [])
      out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd="/")
      if out.returncode: sys.exit(f"{peer} failed:\n{out.stderr[-3000:]}")
      for line in out.stdout.splitlines():
        name, value = line.split()
        got[(name, peer)].append(float(value))
  clock = "wall" if args.wall else "thread CPU time"
  print(f"us per call ({clock}, CPU_THREADS={os.environ.get('CPU_THREADS', 'all')}, best / median of {args.rounds} "
        f"rounds, load {os.getloadavg()[0]:.1f})")
  print("| case | " + " | ".join(peers) + " |" + (" before / now |" if args.before else ""))
  print("|---|" + "---:|" * (len(peers) + bool(args.before)))
  for name in names:
    cells = [f"{min(got[(name, p)]):.2f} / {statistics.median(got[(name, p)]):.2f}" for p in peers]
    ratio = f" {min(got[(name, 'before')]) / min(got[(name, 'tinyplug')]):.2f}x |" if args.before else ""
    print(f"| {CASES[name]} | " + " | ".join(cells) + " |" + ratio)

if __name__ == "__main__": main()
