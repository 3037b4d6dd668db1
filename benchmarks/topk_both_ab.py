"""topk / sort with values and indices on the CPU, this checkout against another (a `git archive` of main unpacked
somewhere) in alternating processes, both orders each round; torch and numpy beside. Per call: p10 and median of
--reps calls, per-thread CPU time (run with CPU_THREADS=1), or wall time with --wall (2 threads: under chrt -f 10).

  CPU_THREADS=1 python benchmarks/topk_both_ab.py --ref /tmp/main [--rounds 3] [--reps 15]
  chrt -f 10 python benchmarks/topk_both_ab.py --ref /tmp/main --wall

Rows: topk(16) values alone, indices alone, both (`v.realize(i)`), argsort, sort both, of 1024x1024 float32; peers:
torch.topk (both outputs), numpy's argpartition (the top 16's indices, unordered) and its values sorted with them."""
from __future__ import annotations
import argparse, os, subprocess, sys, time

ROWS = ("tk_vals", "tk_idx", "tk_both", "argsort", "sort_both")

def _side(args) -> None:
  """One process's timings (this checkout, or --root's), printed as `name p10 median` lines."""
  if args.root:   # the other checkout first on the path, the editable install's finder out of the way
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path[:0] = [args.root, os.path.join(args.root, "plugins/cpu_llvm/src")]
  import numpy as np
  clock = time.perf_counter if args.wall else time.thread_time
  a = np.random.default_rng(0).standard_normal((args.n, args.n), dtype=np.float32)
  if args.peers:
    import torch
    if not args.wall: torch.set_num_threads(1)
    xt, k = torch.tensor(a), args.k
    def argpart():
      i = np.argpartition(a, -k, -1)[:, -k:]
      v = np.take_along_axis(a, i, -1)
      o = np.argsort(-v, -1, kind="stable")
      return np.take_along_axis(v, o, -1), np.take_along_axis(i, o, -1)
    fs = {"torch_topk": lambda: xt.topk(k), "numpy_argpartition": argpart}
  else:
    from tinyplug import Tensor
    x, k = Tensor(a).realize(), args.k
    def tk_both(): v, i = x.topk(k); v.realize(i)
    def sort_both(): v, i = x.sort(-1); v.realize(i)
    fs = {"tk_vals": lambda: x.topk(k)[0].realize(), "tk_idx": lambda: x.topk(k)[1].realize(), "tk_both": tk_both,
          "argsort": lambda: x.sort(-1)[1].realize(), "sort_both": sort_both}
  for name, f in fs.items():
    for _ in range(3): f()
    ts = []
    for _ in range(args.reps):
      t0 = clock(); f(); ts.append(clock() - t0)
    print(name, np.percentile(ts, 10) * 1e3, np.median(ts) * 1e3, flush=True)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--ref", help="root of the other checkout (its tinyplug/ and plugins/)")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--reps", type=int, default=15)
  ap.add_argument("--n", type=int, default=1024)
  ap.add_argument("--k", type=int, default=16)
  ap.add_argument("--wall", action="store_true", help="wall clock (threads as configured) instead of thread time")
  ap.add_argument("--root", help=argparse.SUPPRESS)
  ap.add_argument("--peers", action="store_true", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.root is not None or args.peers: return _side(args)
  if not args.wall and os.environ.get("CPU_THREADS") != "1": raise SystemExit("per thread: run with CPU_THREADS=1")
  base = [sys.executable, __file__, "--reps", str(args.reps), "--n", str(args.n), "--k", str(args.k)] + \
    (["--wall"] if args.wall else [])
  sides = {"this": base + ["--root", ""], "ref": base + ["--root", args.ref], "peers": base + ["--peers"]}
  got: dict[tuple[str, str], list[tuple[float, float]]] = {}
  for r in range(args.rounds):
    for side in (("this", "ref", "peers") if r % 2 == 0 else ("peers", "ref", "this")):
      if side == "ref" and not args.ref: continue
      for line in subprocess.run(sides[side], capture_output=True, text=True, check=True).stdout.split("\n"):
        if line: got.setdefault((side, line.split()[0]), []).append(tuple(map(float, line.split()[1:])))
  for (side, name), v in got.items():
    print(f"{name:20s} {side:5s} p10 " + " ".join(f"{p:6.2f}" for p, _ in v) + "  median " + " ".join(f"{m:6.2f}" for _, m in v) + " ms")
  print("load average", os.getloadavg())

if __name__ == "__main__": main()
