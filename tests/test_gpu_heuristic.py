"""The heuristic's choices for GPU-style renderers (work-groups), read off the rendered kernels (nothing runs), and
the values of grouped reductions on the emulator."""
import numpy as np
import pytest
from tinyplug import Tensor
from tinyplug.codegen.kernel import OptOps
from tinyplug.testing.kernels import empty, render_kernels

ocl = pytest.importorskip("tinyplug_opencl.renderer")

def ops(spec) -> list[str]: return [o.op.name for o in spec.applied_opts]

def test_row_reductions_and_few_outputs_share_each_output_across_a_work_group():
  gpu = ocl.OpenCLRenderer()
  (rows,) = [s for s in render_kernels(empty(512, 4096).max(1), gpu)]
  assert "GROUP" in ops(rows) and rows.global_size[0] == 512 and rows.local_size[0] == 128
  assert "float4" in rows.src   # a row's threads read four neighbours as one vector load before sharing the row
  partial, total = render_kernels(empty(1 << 24).sum(), gpu)
  assert partial.name == "r_256_65536" and "GROUP" in ops(partial) and "GROUP" in ops(total)
  (small_mm,) = render_kernels(empty(48, 32) @ empty(32, 64), gpu)   # 32-long dot products: one per thread
  assert "GROUP" not in ops(small_mm)

def test_no_shared_reductions_where_work_items_run_one_by_one():
  cpu_cl = ocl.OpenCLRenderer(parallel_work_items=False)
  for spec in render_kernels(empty(512, 4096).max(1), cpu_cl) + render_kernels(empty(1 << 24).sum(), cpu_cl):
    assert "GROUP" not in ops(spec), spec.applied_opts

def test_work_groups_span_output_axes_with_the_innermost_fastest():
  (spec,) = render_kernels(empty(64, 128) * 2, ocl.OpenCLRenderer())
  locals_ = [o for o in spec.applied_opts if o.op is OptOps.LOCAL]
  assert [o.axis for o in locals_] == [0, 1]          # applied outermost first: axis 1 becomes dimension 0
  assert spec.local_size[0] == locals_[-1].arg and spec.local_size[1] == locals_[0].arg
  (conv,) = [s for s in render_kernels(empty(2, 8, 56, 56).conv2d(empty(8, 8, 3, 3), padding=1), ocl.OpenCLRenderer())
             if s.name.startswith("r_")]
  assert conv.local_size[0] == 14   # a 56-wide row upcast by 4 takes all 14 of its columns, not a power of two

def test_a_huge_reduction_splits_into_more_partials():
  first, _ = render_kernels(empty(1 << 28).sum(), ocl.OpenCLRenderer())
  assert first.name == "r_4096_65536"

@pytest.mark.parametrize("shape,axis", [((1 << 18,), None), ((300, 4096), 1), ((4096, 40), 0), ((6, 1000), 1)])
def test_grouped_reductions_match_numpy_on_the_emulator(shape, axis):
  from tinyplug.testing.suite import device_or_skip
  device_or_skip("MOCK+CL")
  x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
  t = Tensor(x, device="MOCK+CL")
  np.testing.assert_allclose(t.sum(axis).numpy(), x.sum(axis), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(t.max(axis).numpy(), x.max(axis))

@pytest.mark.parametrize("device", ["MOCK+CL", "PYTHON"])
@pytest.mark.parametrize("group,local", [(64, None), (96, None), (256, None), (128, 2), (32, 4)])
def test_groups_combine_in_two_rounds_and_stay_exact(device, group, local):
  # groups of 64+ combine in two rounds (a strided share per lane, then the lanes); a local axis beside the group
  # keeps each output's partials apart
  from tinyplug.codegen.kernel import Opt
  from tinyplug.testing.kernels import run_kernel
  from tinyplug.testing.suite import device_or_skip
  device_or_skip(device)
  x = np.random.default_rng(1).standard_normal((8, group * 6), dtype=np.float32)
  opts = [Opt(OptOps.GROUP, 0, group)] + ([Opt(OptOps.LOCAL, 0, local)] if local else [])
  for op, ref in (("sum", x.sum(1)), ("max", x.max(1))):
    got, src = run_kernel(getattr(Tensor(x, device=device).realize(), op)(1), device, opts)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)
    barriers = src.count("barrier(") + src.count("BARRIER")   # OpenCL C, or the PYTHON device's listing
    assert barriers == (2 if group >= 64 else 1), src
