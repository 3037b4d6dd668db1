"""What a realize costs beyond its kernels: each workload's `build().realize()` against its kernels alone (the same
compiled programs launched on already allocated buffers, then the device's synchronize), interleaved in one
process, best of many batches. The difference is the Python path (graph building, schedule template, buffers,
launch arguments, pointing tensors at the result), plus whatever the first kernel pays for starting cold.

  python benchmarks/python_share.py                          # every workload, DEV's device (CPU by default)
  python benchmarks/python_share.py --only sum_16m,conv_b32 --reps 31
  PYTHONPATH=/tmp/before:/tmp/before/plugins/cpu_llvm/src python benchmarks/python_share.py   # another checkout
  CPU_THREADS=1 python benchmarks/python_share.py --cpu-time   # on a busy machine: this thread's CPU time

A timing, so run it on a quiet machine and say the load (it prints the load average)."""
from __future__ import annotations
import argparse, os, time
import numpy as np

def workloads(Tensor, rng) -> dict:
  def t(*shape): return Tensor(rng.random(shape, dtype=np.float32)).realize()
  a16, b16, a512, b512 = t(16, 16), t(16, 16), t(512, 512), t(512, 512)
  x, w, big, one, sm = t(32, 3, 32, 32), t(32, 3, 3, 3), t(1 << 24), t(1), t(64, 64)
  return {"tiny_op": (lambda: one + 1.0, 200), "matmul_16": (lambda: a16 @ b16, 100),
          "softmax_64": (lambda: sm.softmax(-1), 50), "matmul_512": (lambda: a512 @ b512, 5),
          "conv_b32": (lambda: x.conv2d(w, padding=1), 10), "sum_16m": (lambda: big.sum(), 5)}

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--only", default=None, help="comma list of workloads")
  ap.add_argument("--reps", type=int, default=15, help="batches of each (best is kept)")
  ap.add_argument("--cpu-time", action="store_true", help="this thread's CPU time instead of the wall clock: with "
                  "CPU_THREADS=1 (kernels on this thread) it hardly moves with other processes' load")
  args = ap.parse_args()
  from tinyplug.tensor import Tensor
  from tinyplug.schedule import create_schedule
  from tinyplug.engine.realize import get_runner
  from tinyplug.device import Device
  rows = workloads(Tensor, np.random.default_rng(0))
  clock = time.thread_time if args.cpu_time else time.perf_counter
  only = args.only.split(",") if args.only else list(rows)
  print(f"DEV={Device.DEFAULT}; {'CPU time of this thread' if args.cpu_time else 'wall clock'}; "
        f"load average at start: {os.getloadavg()[0]:.2f}")
  print("| workload | realize (us) | kernels alone (us) | Python and the rest (us) | kernels |\n|---|---|---|---|---|")
  for name in only:
    build, n = rows[name]
    for _ in range(3): build().realize()
    items, _ = create_schedule([build().uop])
    runs = [(get_runner(it.bufs[0].device, it.ast), [b.ensure_allocated() for b in it.bufs]) for it in items]
    dev = Device[items[0].bufs[0].device]
    def kernels():
      for r, bufs in runs: r(bufs, {}, wait=False)
      dev.synchronize()
    def full():
      build().realize()
      dev.synchronize()
    best = {kernels: float("inf"), full: float("inf")}
    for rep in range(args.reps):
      for f in ((kernels, full) if rep % 2 else (full, kernels)):   # interleaved: load hits both alike
        st = clock()
        for _ in range(n): f()
        best[f] = min(best[f], (clock() - st) / n)
    print(f"| {name} | {best[full] * 1e6:.1f} | {best[kernels] * 1e6:.1f} | {(best[full] - best[kernels]) * 1e6:.1f} | "
          f"{len(items)} |")
  print(f"load average at end: {os.getloadavg()[0]:.2f}")

if __name__ == "__main__":
  main()
