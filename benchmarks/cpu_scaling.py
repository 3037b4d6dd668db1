"""How the CPU device's kernels scale with threads (CPU_THREADS), on a fused elementwise kernel and a row reduction.

  python benchmarks/cpu_scaling.py [max_threads [parallel_min_work]]

Times the compiled program alone (no scheduling), best of 20, on buffers already touched (no page faults)."""
from __future__ import annotations
import sys, time
import numpy as np

def main() -> None:
  from tinyplug.tensor import Tensor
  from tinyplug.helpers import Context
  from tinyplug.engine import realize as R
  max_threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
  if len(sys.argv) > 2:   # tuning: the smallest kernel (loop-body executions) worth threads
    import tinyplug_cpu_llvm.runtime as rt
    rt.PARALLEL_MIN_WORK = int(sys.argv[2])
  threads = sorted({1, 2, max_threads} | ({4} if max_threads >= 4 else set()))
  print("| kernel | elements | " + " | ".join(f"{t} thr" for t in threads) + " | GB/s at max |")
  print("|---|---|" + "---|" * (len(threads) + 1))
  for kind in ("chain", "rowsum"):
    for n in (1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24):
      before = set(R._runners)
      if kind == "chain":
        a, b, c = [Tensor(np.random.rand(n).astype(np.float32)).realize() for _ in range(3)]
        (((a * b) + c).relu() * 0.5).realize()
        nbytes = 16 * n
      else:
        a = Tensor(np.random.rand(n // 256, 256).astype(np.float32)).realize()
        a.sum(1).realize()
        nbytes = 4 * n
      runner = [R._runners[k] for k in R._runners if k not in before][-1]
      n_bufs = len({u.arg for u in runner.spec.uops if u.op.name == "DEFINE_GLOBAL"})
      sizes = [b.dtype.size * b.dtype.itemsize for b in sorted((u for u in runner.spec.uops if u.op.name == "DEFINE_GLOBAL"),
                                                                 key=lambda u: u.arg)]
      hs = [np.random.rand(max(s // 4, 1)).astype(np.float32) for s in sizes][:n_bufs]
      res = {}
      for t in threads:
        with Context(CPU_THREADS=t): res[t] = min(runner.prg(*hs) for _ in range(20))
      print(f"| {kind} | {n} | " + " | ".join(f"{res[t]*1e6:.1f} us" for t in threads) +
            f" | {nbytes / res[max_threads] / 1e9:.1f} |")

if __name__ == "__main__": main()
