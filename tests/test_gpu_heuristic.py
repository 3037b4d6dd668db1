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
  assert "GROUP" in ops(rows) and rows.global_size[0] == 512 and rows.local_size[0] == 256
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
