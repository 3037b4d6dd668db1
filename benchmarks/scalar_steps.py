#!/usr/bin/env python3
"""A Python scalar that changes every step (issue 19, item 6): `x * (1 + i/steps)` realized `steps` times on a small
tensor. Prints the peak RSS, the kernels kept in memory, the kernels built by codegen and the LLVM compiles.

    CACHELEVEL=0 python benchmarks/scalar_steps.py 1000                      # now: scalars become kernel arguments
    CACHELEVEL=0 SCALAR_ARGS=0 python benchmarks/scalar_steps.py 1000        # a kernel per value (bounded caches)
    CACHELEVEL=0 SCALAR_ARGS=0 KERNEL_CACHE_SIZE=100000 python benchmarks/scalar_steps.py 1000   # ~ before: unbounded
"""
import resource, sys, time
import tinyplug.codegen
from tinyplug import Tensor
from tinyplug.engine import realize as R
from tinyplug_cpu_llvm.compiler import LLVMCompiler

built = [0]
_get_program = tinyplug.codegen.get_program
def _counting(*args, **kwargs):
  built[0] += 1
  return _get_program(*args, **kwargs)
tinyplug.codegen.get_program = _counting

def rss_mb() -> float: return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
x = Tensor.ones(16).contiguous().realize()
st = time.perf_counter()
for i in range(steps):
  (x * (1.0 + i / steps)).realize()
  if i in (0, 1, 99, steps - 1):
    print(f"step {i + 1:5d}: peak rss {rss_mb():6.0f} MB, kernels kept {len(R._runners):5d}, built {built[0]:5d}, "
          f"LLVM compiles {LLVMCompiler.compiles:5d}, {time.perf_counter() - st:7.1f} s")
