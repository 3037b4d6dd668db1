"""Each kernel of a 3x3 conv2d's forward realize on one thread and on all, in turns in one process: the wall time of
every launch as the runtime ran it (its threads and shares), p10 / median over the rounds, and one thread's p10 over
all threads' (how well each kernel splits). Run under `chrt -f 10` on a shared machine; pass b,cin,cout,side,stride,pad
and the number of rounds:
  chrt -f 10 python benchmarks/conv_forward_threads.py 8,64,128,56,2,1 15
Another checkout: PYTHONPATH=<checkout>:<checkout>/plugins/cpu_llvm/src."""
from __future__ import annotations
import os, sys, time
from collections import defaultdict
import numpy as np
from tinyplug.helpers import Context
from tinyplug.tensor import Tensor
from tinyplug_cpu_llvm import runtime as rt
from tinyplug_cpu_llvm.machine import usable_cores

def main() -> None:
  bs, cin, cout, side, stride, pad = (int(v) for v in sys.argv[1].split(","))
  rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 15
  launches: list | None = None
  plain = rt.CPUProgram.__call__
  def timed(self, *bufs, **kw):
    st = time.perf_counter()
    out = plain(self, *bufs, **kw)
    if launches is not None: launches.append((self.name, time.perf_counter() - st))
    return out
  rt.CPUProgram.__call__ = timed
  rng = np.random.default_rng(0)
  x = Tensor(rng.random((bs, cin, side, side), dtype=np.float32)).realize()
  w = Tensor(rng.random((cout, cin, 3, 3), dtype=np.float32)).realize()
  def run() -> None: x.conv2d(w, stride=stride, padding=pad).realize()
  counts = (1, usable_cores())
  kernels: dict[tuple[str, int], list[float]] = defaultdict(list)
  totals: dict[int, list[float]] = defaultdict(list)
  for n in counts:
    with Context(CPU_THREADS=n): run(); run()
  for _ in range(rounds):
    for n in counts:
      with Context(CPU_THREADS=n):
        run()   # untimed: the workers stay awake, as in a loop of calls
        launches = []
        st = time.perf_counter(); run(); totals[n].append(time.perf_counter() - st)
        for name, took in launches: kernels[(name, n)].append(took)
        launches = None
  def ms(v: list[float]) -> str: return f"{np.percentile(v, 10) * 1e3:.3f} / {np.median(v) * 1e3:.3f}"
  print(f"{sys.argv[1]}: load {os.getloadavg()[0]:.1f}; ms p10 / median; realize on 1 thread {ms(totals[1])}, "
        f"on {counts[1]} {ms(totals[counts[1]])}")
  for name in dict.fromkeys(k[0] for k in kernels):
    one, many = kernels[(name, 1)], kernels[(name, counts[1])]
    print(f"  {name:28s} 1: {ms(one)}  {counts[1]}: {ms(many)}  ratio {np.percentile(one, 10) / np.percentile(many, 10):.2f}")

if __name__ == "__main__":
  main()
