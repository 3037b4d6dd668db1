"""Python time of `y.realize()` for small graphs over a realized 4x4 input, built anew each call (issue 20, session 30):
p10 over 2000 calls after 200 warm ones, of the build and of the realize, in microseconds; thread CPU time by default
(trust it on a shared machine, with CPU_THREADS=1), wall time with --wall (2 threads: run it under `chrt -f 10`).

  CPU_THREADS=1 python benchmarks/realize_chain.py
  CPU_THREADS=1 PYTHONPATH=/tmp/main-tree:/tmp/main-tree/plugins/cpu_llvm/src python benchmarks/realize_chain.py"""
import argparse, time
import numpy as np
from tinyplug import Tensor

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--wall", action="store_true", help="wall time instead of thread CPU time")
  args = ap.parse_args()
  clock = time.perf_counter_ns if args.wall else time.thread_time_ns
  x = Tensor(np.zeros((4, 4), np.float32)).realize()
  cases = {"t+1": lambda: x + 1.0, "(t+1)*2": lambda: (x + 1.0) * 2.0, "pad.contig": lambda: x.pad((1, 1, 1, 1)).contiguous(),
           "T.contig": lambda: x.T.contiguous(), "exp(t*1.5+1)": lambda: (x * 1.5 + 1.0).exp()}
  for name, f in cases.items():
    for _ in range(200): f().realize()
    builds, realizes = [], []
    for _ in range(2000):
      t0 = clock(); y = f(); t1 = clock(); y.realize(); t2 = clock()
      builds.append(t1 - t0); realizes.append(t2 - t1)
    print(f"{name:14s} build p10 {np.percentile(builds, 10) / 1e3:6.1f} us  realize p10 {np.percentile(realizes, 10) / 1e3:6.1f} us")

if __name__ == "__main__": main()
