"""Kernels with little work compile at O0 (a new small kernel is ready in a few ms instead of ~30); big ones at O3.
Both tiers must compute the same values."""
import numpy as np
import pytest
from tinyplug.device import Device
from tinyplug.tensor import Tensor
from tinyplug_cpu_llvm.compiler import QUICK_WORK

def _src_and_tier(n: int, k: float):
  from tinyplug.codegen import get_program
  from tinyplug.schedule import create_schedule
  x = Tensor(np.linspace(-2, 2, n, dtype=np.float32), device="CPU")
  items, _ = create_schedule([((x * k) + 1.0).exp().uop])
  dev = Device["CPU"]
  spec = get_program(items[-1].ast, dev.renderer)
  before = type(dev.compiler).compiles
  tiers = []
  orig = dev.compiler._tier
  dev.compiler._tier = lambda quick: tiers.append(orig(quick)[0]) or orig(quick)
  try: dev.compiler.compile(spec.src, quick=spec.work <= QUICK_WORK)
  finally: del dev.compiler._tier
  assert type(dev.compiler).compiles == before + 1
  return spec, tiers[0]

def test_small_kernel_is_quick_and_big_kernel_is_optimised():
  spec, opt = _src_and_tier(64, 1.25)
  assert spec.work <= QUICK_WORK and opt == 0
  spec, opt = _src_and_tier(1 << 16, 1.25)
  assert spec.work > QUICK_WORK and opt == Device["CPU"].compiler.opt

def test_hand_written_ir_counts_as_big():
  # compile_cached (no spec) is the full tier; a spec's work picks the quick one
  comp = Device["CPU"].compiler
  src = "define void @f() {\nentry:\n  ret void\n}"
  assert comp.key(src) != comp.key(src, quick=True)
  assert comp._tier(False)[0] == comp.opt

@pytest.mark.parametrize("n", [37, 1000, 5000])
def test_both_tiers_compute_the_same(n):
  a = np.random.default_rng(n).standard_normal(n).astype(np.float32)
  got = ((Tensor(a, device="CPU") * 0.75) + 1.0).exp().sum().numpy()
  np.testing.assert_allclose(got, np.exp(a * 0.75 + 1.0).sum(), rtol=1e-5)
