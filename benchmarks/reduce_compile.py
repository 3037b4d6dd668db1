"""Compile cost of cpu_bench.py's reduction workloads: the process CPU time of a workload's first call minus its
second (scheduling, codegen and LLVM for its new kernels), each in this process, the disk cache off.

  CACHELEVEL=0 python benchmarks/reduce_compile.py sum0,var0,argmax0
  # another checkout:
  CACHELEVEL=0 PYTHONPATH=/tmp/base:/tmp/base/plugins/cpu_llvm/src python benchmarks/reduce_compile.py sum0

Workloads that share kernels with an earlier one in the list pay less. Never run from tests."""
from __future__ import annotations
import os, sys, time
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_bench as cb

def main() -> None:
  from tinyplug.tensor import Tensor
  keys = sys.argv[1].split(",") if len(sys.argv) > 1 else list(cb.REDUCTIONS)
  rng, out = np.random.default_rng(0), {}
  for key in keys:
    shape, op, axis = cb.REDUCTIONS[key]
    x = Tensor(rng.random(cb.RED_SHAPES[shape], dtype=np.float32)).realize()
    fn = cb._reduction_fn("tensor", op, axis)
    def run():
      r = fn(x)
      for t in (r if isinstance(r, tuple) else (r,)): t.realize()
    st = time.process_time(); run(); first = time.process_time() - st
    st = time.process_time(); run(); second = time.process_time() - st
    out[key] = first - second
  print(" ".join(f"{k}={v * 1e3:.0f}ms" for k, v in out.items()))

if __name__ == "__main__": main()
