"""log2/sin of vector values (upcast lanes) call glibc's libmvec variant of the same width, not LLVM's vector
intrinsic (which lowers to one scalar libm call per lane); exp2 is the core's polynomial as vector math, whatever the
inputs (libmvec's exp2 took a scalar path for each lane that overflowed, underflowed or was -inf)."""
import numpy as np
import pytest
from tinyplug.device import Device
from tinyplug.tensor import Tensor

def _source(t: Tensor) -> str:
  from tinyplug.codegen import get_program
  from tinyplug.schedule import create_schedule
  items, _ = create_schedule([t.uop])
  return get_program(items[-1].ast, Device["CPU"].renderer).src

@pytest.mark.parametrize("fn, ref, name, intrinsic", [(Tensor.log, np.log, "log2f", "log2"), (Tensor.sin, np.sin, "sinf", "sin")])
def test_vector_math_calls_libmvec(fn, ref, name, intrinsic):
  if not Device["CPU"].renderer.vector_isas: pytest.skip("no libmvec on this host")
  a = np.random.default_rng(0).uniform(0.1, 3.0, 4096).astype(np.float32)
  src = _source(fn(Tensor(a, device="CPU")))
  assert f"@llvm.{intrinsic}.v" not in src
  assert "x float> @_ZGV" in src and f"v_{name}(" in src
  np.testing.assert_allclose(fn(Tensor(a, device="CPU")).numpy(), ref(a), rtol=2e-6, atol=1e-6)

@pytest.mark.parametrize("values", ["ordinary", "extremes"])
def test_exp_is_vector_math_without_calls(values):
  rng = np.random.default_rng(1)
  a = rng.uniform(-3.0, 3.0, 4096).astype(np.float32)
  if values == "extremes":   # overflow, underflow into the denormals and to 0, infinities, NaN, a causal mask's -inf
    a[::7], a[1::7], a[2::7], a[3::7] = 120.0, -100.0, -np.inf, np.inf
    a[4::97], a[5::97], a[6::97] = np.nan, -87.0, 88.5
  src = _source(Tensor(a, device="CPU").exp())
  assert "call" not in src and "@llvm.exp2" not in src
  assert "fmul contract <16 x float>" in src or "fmul contract <8 x float>" in src or "fmul contract <4 x float>" in src
  with np.errstate(over="ignore"):
    want = np.exp(a)
  got = Tensor(a, device="CPU").exp().numpy()
  # exp is exp2(x * log2(e)): that product's rounding is relative error |x| * 2^-24 in the result (|x| ~ 100: ~1e-5)
  np.testing.assert_allclose(got, want, rtol=2e-6 if values == "ordinary" else 1.5e-5, atol=0)
  assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
