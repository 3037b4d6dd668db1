"""simdgroup_matrix matmul kernels (tinyplug_metal.simdgroup): every input/accumulator pair passes the MSL check,
the check rejects a tile loaded from the wrong address space, and the kernels compute A @ B on MOCK+METAL (whose
stand-in gives every thread of the SIMD-group the whole tile)."""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug import dtypes
from tinyplug.device import Device
from tinyplug_metal.check import MSLCheckError
from tinyplug_metal.simdgroup import COMBINATIONS, render_matmul

def test_every_combination_passes_the_check(msl_check):
  for dtype_in, dtype_acc in COMBINATIONS:
    spec = render_matmul(16, 32, 24, dtype_in, dtype_acc, tiles=(1, 2))
    assert f"simdgroup_{'float' if dtype_acc == dtypes.float else 'half' if dtype_acc == dtypes.half else 'bfloat'}8x8 acc0_1" in spec.src
    assert spec.global_size == (2, 2, 1) and spec.local_size == (32, 1, 1)
    msl_check(spec.src, f"{spec.name}.metal")

def test_a_tile_from_the_wrong_address_space_is_rejected(msl_check):
  src = render_matmul(8, 8, 8, dtypes.float, dtypes.float, tiles=(1, 1)).src
  bad = src.replace("  for (int k", "  float tp_private[64];\n  for (int k").replace("simdgroup_load(a0, data1+(row+0)*8+k, 8);",
                                                                                  "simdgroup_load(a0, tp_private, 8);")
  assert bad.count("tp_private") == 2
  with pytest.raises(MSLCheckError, match="no matching function for call to 'simdgroup_load'"): msl_check(bad)
  with pytest.raises(MSLCheckError, match="no matching function for call to 'simdgroup_store'"):
    msl_check(bad.replace("simdgroup_store(acc0_0, data0+(row+0)*8+col+0, 8);", "simdgroup_store(acc0_0, tp_private, 8);"))

def test_shapes_and_types_are_checked():
  with pytest.raises(ValueError, match="does not split into 2x2 blocks"): render_matmul(24, 16, 8)
  with pytest.raises(ValueError, match="M must divide by 8, N by 8, K by 8"): render_matmul(8, 8, 12, tiles=(1, 1))
  with pytest.raises(ValueError, match="multiply dtypes.float into dtypes.half"): render_matmul(8, 8, 8, dtypes.float, dtypes.half)

def _run(spec, a: np.ndarray, b: np.ndarray, out_dtype) -> np.ndarray:
  dev = Device["MOCK+METAL"]
  prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
  out = np.zeros((a.shape[0], b.shape[1]), out_dtype)
  bufs = [dev.allocator.alloc(x.nbytes) for x in (out, a, b)]
  for buf, x in zip(bufs[1:], (a, b)): dev.allocator.copyin(buf, memoryview(np.ascontiguousarray(x)).cast("B"))
  from tinyplug.helpers import Context
  with Context(EMU_ORDER="check"):
    prg(*bufs, global_size=spec.global_size, local_size=spec.local_size, wait=True)
  dev.allocator.copyout(memoryview(out).cast("B"), bufs[0])
  return out

@pytest.mark.parametrize("dtype_in,dtype_acc", [(dtypes.float, dtypes.float), (dtypes.half, dtypes.float), (dtypes.half, dtypes.half)], ids=str)
def test_matmul_on_the_emulator(mock_metal, dtype_in, dtype_acc):
  rng = np.random.default_rng(1)
  np_in, np_acc = (np.float32 if d == dtypes.float else np.float16 for d in (dtype_in, dtype_acc))
  a, b = rng.standard_normal((32, 40)).astype(np_in), rng.standard_normal((40, 48)).astype(np_in)
  got = _run(render_matmul(32, 48, 40, dtype_in, dtype_acc, tiles=(2, 3)), a, b, np_acc)
  want = a.astype(np.float32) @ b.astype(np.float32)
  tol = 1e-4 if np_acc == np.float32 else 2e-2
  np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)

def test_bfloat_matmul_on_the_emulator(mock_metal):
  torch = pytest.importorskip("torch")
  a, b = torch.randn(16, 16, dtype=torch.bfloat16), torch.randn(16, 8, dtype=torch.bfloat16)
  got = _run(render_matmul(16, 8, 16, dtypes.bfloat16, dtypes.float, tiles=(1, 1)),
             a.view(torch.int16).numpy(), b.view(torch.int16).numpy(), np.float32)
  np.testing.assert_allclose(got, (a.float() @ b.float()).numpy(), rtol=1e-5, atol=1e-5)
