"""exp2/log2/sin of vector values (upcast lanes) call glibc's libmvec variant of the same width, not LLVM's vector
intrinsic (which lowers to one scalar libm call per lane)."""
import numpy as np
import pytest
from tinyplug.device import Device
from tinyplug.tensor import Tensor

def _source(t: Tensor) -> str:
  from tinyplug.codegen import get_program
  from tinyplug.schedule import create_schedule
  items, _ = create_schedule([t.uop])
  return get_program(items[-1].ast, Device["CPU"].renderer).src

@pytest.mark.parametrize("fn, ref, name, intrinsic", [(Tensor.exp, np.exp, "exp2f", "exp2"),
                                                      (Tensor.log, np.log, "log2f", "log2"), (Tensor.sin, np.sin, "sinf", "sin")])
def test_vector_math_calls_libmvec(fn, ref, name, intrinsic):
  if not Device["CPU"].renderer.vector_isas: pytest.skip("no libmvec on this host")
  a = np.random.default_rng(0).uniform(0.1, 3.0, 4096).astype(np.float32)
  src = _source(fn(Tensor(a, device="CPU")))
  assert f"@llvm.{intrinsic}.v" not in src
  assert "x float> @_ZGV" in src and f"v_{name}(" in src
  np.testing.assert_allclose(fn(Tensor(a, device="CPU")).numpy(), ref(a), rtol=2e-6, atol=1e-6)
