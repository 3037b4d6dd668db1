"""Hand-written OpenCL C kernels on MOCK+CL: GPU semantics the emulator must reproduce, and the faults it must catch."""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug.helpers import Context
from tinyplug_emulator.native import EmulatorError

# a work-group sum through local memory: 64 work-items, each adds 4 inputs, then a tree of 6 barrier phases
REDUCE = """__kernel void r_group_sum(__global float* restrict data0, __global const float* restrict data1) {
  __local float temp0[64];
  int lidx0 = get_local_id(0);
  int gidx0 = get_group_id(0);
  float acc = 0.0f;
  for (int i = 0; i < 4; i++) acc += data1[gidx0*256 + i*64 + lidx0];
  temp0[lidx0] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = 32; s > 0; s >>= 1) {
    if (lidx0 < s) temp0[lidx0] += temp0[lidx0 + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lidx0 == 0) data0[gidx0] = temp0[0];
}
"""
NO_BARRIER = REDUCE.replace("  temp0[lidx0] = acc;\n  barrier(CLK_LOCAL_MEM_FENCE);\n", "  temp0[lidx0] = acc;\n")

def reduce_inputs(groups: int = 3) -> tuple[np.ndarray, np.ndarray]:
  x = np.random.default_rng(0).integers(-50, 50, size=groups * 256).astype(np.float32)   # exact sums in float32
  return np.zeros(groups, np.float32), x

@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle", "check"])
def test_local_memory_reduction_is_exact_in_every_order(emu, run_kernel, order):
  out, x = reduce_inputs()
  with Context(EMU_ORDER=order):
    got = run_kernel(emu, REDUCE, [out, x], groups=(3, 1, 1), local=(64, 1, 1))[0]
  np.testing.assert_array_equal(got, x.reshape(3, 256).sum(axis=1))

def test_missing_barrier_is_caught(emu, run_kernel):
  assert NO_BARRIER != REDUCE
  out, x = reduce_inputs()
  want = x.reshape(3, 256).sum(axis=1)
  results = {}
  for order in ("forward", "reverse", "shuffle"):
    with Context(EMU_ORDER=order): results[order] = run_kernel(emu, NO_BARRIER, [out, x], (3, 1, 1), (64, 1, 1))[0]
  assert any(not np.array_equal(r, want) for r in results.values()), "no work-item order exposed the missing barrier"
  with Context(EMU_ORDER="check"), pytest.raises(EmulatorError, match="r_group_sum writes different results") as e:
    run_kernel(emu, NO_BARRIER, [out, x], (3, 1, 1), (64, 1, 1))
  assert e.value.kind == "order"

def test_rendered_grouped_reduction_without_its_barrier_is_caught(emu, run_kernel):
  """The opencl renderer's own GROUPTOP kernel: exact as rendered, wrong in some order once its barrier is deleted."""
  from tinyplug import Tensor
  from tinyplug.codegen import get_program
  from tinyplug.codegen.kernel import Opt, OptOps
  from tinyplug.schedule import create_schedule
  x = np.random.default_rng(1).integers(-20, 20, size=(4, 256)).astype(np.float32)
  t = Tensor(x, device="MOCK+CL").sum(axis=1)
  ast = create_schedule([t.uop])[0][-1].ast
  spec = get_program(ast, emu.renderer, opts=[Opt(OptOps.GROUPTOP, 0, 16)])
  assert "barrier(" in spec.src
  want = x.sum(axis=1)
  args = lambda: [np.zeros(4, np.float32), x.reshape(-1)]
  with Context(EMU_ORDER="check"):
    got = run_kernel(emu, spec.src, args(), spec.global_size, spec.local_size)[0]
  np.testing.assert_array_equal(got, want)
  broken = spec.src.replace("barrier(CLK_LOCAL_MEM_FENCE);", "", 1)
  with Context(EMU_ORDER="check"), pytest.raises(EmulatorError, match="different results"):
    run_kernel(emu, broken, args(), spec.global_size, spec.local_size)

DIVERGENT = """__kernel void divergent_barrier(__global int* restrict data0) {
  int lidx0 = get_local_id(0);
  if (lidx0 < 4) { barrier(CLK_LOCAL_MEM_FENCE); }
  data0[lidx0] = lidx0;
}
"""

def test_divergent_barrier_is_reported_with_the_kernel_name(emu, run_kernel):
  with pytest.raises(EmulatorError, match=r"barrier divergence in kernel divergent_barrier.*4 work-item\(s\) wait at a "
                                          r"barrier.*4 returned") as e:
    run_kernel(emu, DIVERGENT, [np.zeros(8, np.int32)], (1, 1, 1), (8, 1, 1))
  assert e.value.kind == "divergence"

TWO_SITES = """__kernel void two_barriers(__global int* restrict data0) {
  int lidx0 = get_local_id(0);
  if (lidx0 % 2 == 0) { barrier(CLK_LOCAL_MEM_FENCE); data0[lidx0] = lidx0; }
  else { data0[lidx0] = 2; barrier(CLK_LOCAL_MEM_FENCE); data0[lidx0] += 3; }
}
"""

def test_work_items_at_different_barriers_are_reported(emu, run_kernel):
  with pytest.raises(EmulatorError, match="two_barriers: .*wait at different barriers") as e:
    run_kernel(emu, TWO_SITES, [np.zeros(8, np.int32)], (1, 1, 1), (8, 1, 1))
  assert e.value.kind == "barrier_sites"

OOB_STORE = """__kernel void oob_store(__global float* restrict data0, __global const float* restrict data1) {
  int gidx0 = get_group_id(0);
  int lidx0 = get_local_id(0);
  data0[gidx0*4 + lidx0 + 1] = data1[gidx0*4 + lidx0];
}
"""

def test_out_of_bounds_store_is_reported_in_bounds_mode(emu, run_kernel):
  x = np.arange(16, dtype=np.float32)
  with Context(EMU_BOUNDS=1), pytest.raises(EmulatorError) as e:
    run_kernel(emu, OOB_STORE, [np.zeros(16, np.float32), x], (4, 1, 1), (4, 1, 1))
  assert e.value.kind == "bounds"
  msg = str(e.value)
  assert "out-of-bounds store to buffer 0 (16 x float) at index 16 in kernel oob_store" in msg, msg
  assert "local (3, 0, 0) in group (3, 0, 0) (global (15, 0, 0))" in msg, msg

OOB_LOAD = """__kernel void oob_load(__global float* restrict data0, __global const float* restrict data1, int shift) {
  int gidx0 = get_group_id(0);
  data0[gidx0] = data1[gidx0 + shift];
}
"""

def test_out_of_bounds_load_before_the_start_is_reported(emu, run_kernel):
  with Context(EMU_BOUNDS=2), pytest.raises(EmulatorError, match=r"out-of-bounds load from buffer 1 \(8 x float\) at "
                                                                   r"index -1 in kernel oob_load"):
    run_kernel(emu, OOB_LOAD, [np.zeros(8, np.float32), np.ones(8, np.float32)], (8, 1, 1), (1, 1, 1), vals=(-1,))

def test_in_bounds_kernel_passes_bounds_mode(emu, run_kernel):
  with Context(EMU_BOUNDS=1):
    got = run_kernel(emu, OOB_LOAD, [np.zeros(8, np.float32), np.arange(8, dtype=np.float32)], (7, 1, 1), (1, 1, 1),
                     vals=(1,))[0]
  np.testing.assert_array_equal(got[:7], np.arange(1, 8, dtype=np.float32))

DIV = """__kernel void int_div(__global int* restrict data0, __global int* restrict data1, __global const int* restrict data2,
                      __global const int* restrict data3) {
  int gidx0 = get_group_id(0);
  data0[gidx0] = data2[gidx0] / data3[gidx0];
  data1[gidx0] = data2[gidx0] % data3[gidx0];
}
"""

def test_integer_division_by_zero_does_not_kill_the_host(emu, run_kernel):
  a = np.array([7, -7, 5, -2**31, 9], np.int32)
  b = np.array([2, 2, 0, -1, 0], np.int32)
  q, r = run_kernel(emu, DIV, [np.zeros(5, np.int32), np.zeros(5, np.int32), a, b], (5, 1, 1), (1, 1, 1))[:2]
  assert q[[0, 1]].tolist() == [3, -3] and r[[0, 1]].tolist() == [1, -1]   # C truncation, as on a GPU
  assert q[2] == -1 and q[4] == -1 and r[2] == 5 and r[4] == 9               # trapping lanes completed, run goes on

WILD = """__kernel void wild_pointer(__global float* restrict data0) {
  __global float* p = (__global float*)(0x10);
  data0[0] = p[get_group_id(0)];
}
"""

def test_wild_pointer_is_an_error_not_a_crash(emu, run_kernel):
  with pytest.raises(EmulatorError, match="wild_pointer read address 0x10, outside every buffer") as e:
    run_kernel(emu, WILD, [np.zeros(1, np.float32)], (1, 1, 1), (1, 1, 1))
  assert e.value.kind == "segfault"
  np.testing.assert_array_equal(run_kernel(emu, REDUCE, list(reduce_inputs(1)), (1, 1, 1), (64, 1, 1))[0],
                                reduce_inputs(1)[1].sum(keepdims=True))   # the emulator still works afterwards

HALF = """#pragma OPENCL EXTENSION cl_khr_fp16 : enable
__kernel void half_chain(__global half* restrict data0, __global const half* restrict data1) {
  int gidx0 = get_group_id(0);
  half x = data1[gidx0];
  data0[gidx0] = x * x + x;
}
"""

def test_half_rounds_after_every_operation(emu, run_kernel):
  x = np.array([1.0009766, 3.1, -2.7, 0.3337, 65.2], np.float16)
  got = run_kernel(emu, HALF, [np.zeros(5, np.float16), x], (5, 1, 1), (1, 1, 1))[0]
  want = (x * x) + x                         # numpy rounds the product to half before adding
  np.testing.assert_array_equal(got, want)
  fused = (x.astype(np.float32) * x.astype(np.float32) + x.astype(np.float32)).astype(np.float16)
  assert not np.array_equal(fused, want)     # the inputs are ones where single rounding would differ

def test_multi_dimensional_ids(emu, run_kernel):
  src = """__kernel void ids(__global int* restrict data0) {
  int g = get_global_id(0) + get_global_size(0) * (get_global_id(1) + get_global_size(1) * get_global_id(2));
  data0[g] = get_group_id(0) + 10*get_local_id(1) + 100*get_group_id(2) + 1000*get_local_size(0);
}
"""
  got = run_kernel(emu, src, [np.zeros(2*3 * 2*2 * 3, np.int32)], (2, 2, 3), (3, 2, 1))[0].reshape(3, 4, 6)
  z, y, x = np.meshgrid(np.arange(3), np.arange(4), np.arange(6), indexing="ij")
  np.testing.assert_array_equal(got, x // 3 + 10 * (y % 2) + 100 * z + 3000)
