"""A/B of topk's and sort's values on the CPU: the network and the gather as one graph template (now: over a buffer
the kernels run from a plan) against the gather outside the network's template (before: the graph rebuilt and walked
by the scheduler per call), interleaved in one process, per-thread CPU time (CPU_THREADS=1 runs the kernels on the
timed thread), numpy and torch beside them.

  CPU_THREADS=1 python benchmarks/topk_ab.py [--reps 30] [--n 1024] [--k 16]"""
import argparse, os, time
import numpy as np
import torch
from tinyplug import Tensor

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--reps", type=int, default=30)
  ap.add_argument("--n", type=int, default=1024)
  ap.add_argument("--k", type=int, default=16)
  args = ap.parse_args()
  if os.environ.get("CPU_THREADS") != "1": raise SystemExit("run with CPU_THREADS=1: the kernels must run on the timed thread")
  torch.set_num_threads(1)
  n, k = args.n, args.k
  a = np.random.default_rng(0).random((n, n), dtype=np.float32)
  x, xt = Tensor(a).realize(), torch.tensor(a)
  rows = {
    f"topk {k} of rows, {n}x{n}": {
      "now": lambda: x.topk(k)[0].realize(),
      "before": lambda: x._gather_exact(1, x.detach()._network_order(1, True, k)).realize(),
      "numpy": lambda: -np.sort(-np.partition(a, -k, -1)[:, -k:], -1),
      "torch": lambda: xt.topk(k)[0]},
    f"sort rows, {n}x{n}": {
      "now": lambda: x.sort(-1)[0].realize(),
      "before": lambda: x._gather_exact(1, x._network_order(1, False)).realize(),
      "numpy": lambda: np.sort(a, -1),
      "torch": lambda: xt.sort(-1)[0]}}
  want = {name: np.sort(a, -1)[:, ::-1][:, :k] if name.startswith("topk") else np.sort(a, -1) for name in rows}
  for name, runs in rows.items():
    for peer, f in runs.items():   # compile, and check the values
      for _ in range(3): out = f()
      got = out if peer == "numpy" else out.numpy()
      assert np.array_equal(got, want[name]), (name, peer)
    times: dict[str, list[float]] = {p: [] for p in runs}
    for _ in range(args.reps):
      for peer, f in runs.items():
        st = time.thread_time(); f(); times[peer].append(time.thread_time() - st)
    for peer, v in times.items():
      print(f"{name:28s} {peer:7s} p10 {np.percentile(v, 10) * 1e3:7.3f} ms  median {np.median(v) * 1e3:7.3f} ms")
  print("load average", os.getloadavg())

if __name__ == "__main__": main()
