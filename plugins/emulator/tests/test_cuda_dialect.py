"""CUDA C on the emulator, with hand-written kernels (no CUDA renderer exists yet): the same runtime and checks."""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug.helpers import Context
from tinyplug_emulator.dialects import CUDA
from tinyplug_emulator.native import EmulatorError

REDUCE = """extern "C" __global__ void __launch_bounds__(64) r_block_sum(float* __restrict__ data0, const float* __restrict__ data1) {
  __shared__ float temp0[64];
  int lidx0 = threadIdx.x;
  int gidx0 = blockIdx.x;
  temp0[lidx0] = data1[gidx0*64 + lidx0];
  __syncthreads();
  for (int s = 32; s > 0; s >>= 1) {
    if (lidx0 < s) temp0[lidx0] += temp0[lidx0 + s];
    __syncthreads();
  }
  if (lidx0 == 0) data0[gidx0] = temp0[0];
}
"""

def inputs(groups: int = 8):
  x = np.random.default_rng(0).integers(-50, 50, size=groups * 64).astype(np.float32)
  return [np.zeros(groups, np.float32), x], x.reshape(groups, 64).sum(axis=1)

@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle"])
def test_block_reduction_with_shared_memory(run_dialect_kernel, order):
  arrays, want = inputs()
  with Context(EMU_ORDER=order, EMU_THREADS=2):   # __shared__ is per host thread: groups may run in parallel
    got = run_dialect_kernel(CUDA, REDUCE, arrays, (8, 1, 1), (64, 1, 1))[0]
  np.testing.assert_array_equal(got, want)

def test_missing_syncthreads_is_caught(run_dialect_kernel):
  broken = REDUCE.replace("  temp0[lidx0] = data1[gidx0*64 + lidx0];\n  __syncthreads();\n",
                          "  temp0[lidx0] = data1[gidx0*64 + lidx0];\n")
  assert broken != REDUCE
  arrays, _ = inputs()
  with Context(EMU_ORDER="check"), pytest.raises(EmulatorError, match="r_block_sum writes different results"):
    run_dialect_kernel(CUDA, broken, arrays, (8, 1, 1), (64, 1, 1))

def test_divergent_syncthreads_is_reported(run_dialect_kernel):
  src = """extern "C" __global__ void early_exit(int* __restrict__ data0) {
  if (threadIdx.x >= 16) return;
  __syncthreads();
  data0[threadIdx.x] = 1;
}
"""
  with pytest.raises(EmulatorError, match="barrier divergence in kernel early_exit"):
    run_dialect_kernel(CUDA, src, [np.zeros(32, np.int32)], (1, 1, 1), (32, 1, 1))

def test_half_rounds_per_operation_and_oob_store(run_dialect_kernel):
  src = """#include <cuda_fp16.h>
extern "C" __global__ void half_chain(half* __restrict__ data0, const half* __restrict__ data1, const int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  half x = data1[i];
  data0[i + n] = x * x + x;
}
"""
  x = np.array([1.0009766, 3.1, -2.7, 0.3337, 65.2, 1.5, -0.25, 7.0], np.float16)
  got = run_dialect_kernel(CUDA, src, [np.zeros(8, np.float16), x], (2, 1, 1), (4, 1, 1), vals=(0,))[0]
  np.testing.assert_array_equal(got, x * x + x)
  with Context(EMU_BOUNDS=1), pytest.raises(EmulatorError, match=r"out-of-bounds store to buffer 0 \(8 x half\) at index 8 "
                                                                   r"in kernel half_chain"):
    run_dialect_kernel(CUDA, src, [np.zeros(8, np.float16), x], (2, 1, 1), (4, 1, 1), vals=(1,))
