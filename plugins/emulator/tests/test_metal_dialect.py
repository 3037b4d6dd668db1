"""Metal Shading Language on the emulator through the metal_stdlib stand-in, with a hand-written kernel (the metal plugin's
own tests run its renderer's kernels on MOCK+METAL)."""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug.helpers import Context
from tinyplug_emulator.dialects import METAL
from tinyplug_emulator.native import EmulatorError

REDUCE = """#include <metal_stdlib>
using namespace metal;
kernel void r_tg_sum(device float* data0 [[buffer(0)]], const device float* data1 [[buffer(1)]],
                     uint3 gid [[threadgroup_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]]) {
  threadgroup float temp0[64];
  int lidx0 = lid.x;
  float4 v = float4(data1[gid.x*64 + lidx0], 0.0f, 1.0f, 2.0f);
  temp0[lidx0] = v.x + as_type<float>(as_type<int>(v.y));
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int s = 32; s > 0; s >>= 1) {
    if (lidx0 < s) temp0[lidx0] += temp0[lidx0 + s];
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  if (lidx0 == 0) data0[gid.x] = max(temp0[0], -1000.0f) + exp2(v.z) - 2.0f;
}
"""

def inputs(groups: int = 4):
  x = np.random.default_rng(0).integers(-50, 50, size=groups * 64).astype(np.float32)
  return [np.zeros(groups, np.float32), x], x.reshape(groups, 64).sum(axis=1)

@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle"])
def test_threadgroup_reduction(run_dialect_kernel, order):
  arrays, want = inputs()
  with Context(EMU_ORDER=order):
    got = run_dialect_kernel(METAL, REDUCE, arrays, (4, 1, 1), (64, 1, 1))[0]
  np.testing.assert_array_equal(got, want)

def test_missing_threadgroup_barrier_is_caught(run_dialect_kernel):
  broken = REDUCE.replace("  temp0[lidx0] = v.x + as_type<float>(as_type<int>(v.y));\n  threadgroup_barrier(mem_flags::mem_threadgroup);\n",
                          "  temp0[lidx0] = v.x + as_type<float>(as_type<int>(v.y));\n")
  assert broken != REDUCE
  with Context(EMU_ORDER="check"), pytest.raises(EmulatorError, match="r_tg_sum writes different results"):
    run_dialect_kernel(METAL, broken, inputs()[0], (4, 1, 1), (64, 1, 1))

def test_address_space_mistake_is_a_compile_error(run_dialect_kernel):
  from tinyplug_emulator.toolchain import ToolchainError
  bad = REDUCE.replace("if (lidx0 == 0) data0[gid.x]", "device float* p = temp0; if (lidx0 == 0) p[gid.x]")
  with pytest.raises(ToolchainError, match="clang failed on a metal kernel"):
    run_dialect_kernel(METAL, bad, inputs()[0], (4, 1, 1), (64, 1, 1))

SCALE = """#include <metal_stdlib>
using namespace metal;
kernel void scale(device float* data0 [[buffer(0)]], device float* data1 [[buffer(1)]], constant int& n [[buffer(2)]],
                  constant int& m [[buffer(3)]], uint3 lid [[thread_position_in_threadgroup]]) {
  data0[lid.x] = data1[lid.x] * n + m;
}
"""

def test_scalar_arguments_are_constant_references(run_dialect_kernel):
  x = np.arange(16, dtype=np.float32)
  got = run_dialect_kernel(METAL, SCALE, [np.zeros(16, np.float32), x], (1, 1, 1), (16, 1, 1), vals=(3, -2))[0]
  np.testing.assert_array_equal(got, x * 3 - 2)
