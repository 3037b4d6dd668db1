"""On a Mac (skipped elsewhere): Apple's Metal compiler accepts every kernel these tests render, and the METAL device
runs kernels with threadgroup memory, half, bfloat, scalar arguments and vector loads to numpy's results.
`pytest --pyargs tinyplug_metal.tests` runs this with the rest of the plugin's tests."""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug import Tensor, dtypes
from tinyplug.device import Device

def test_apples_compiler_accepts_every_rendered_kernel(metal, render, kernel_table):
  from tinyplug_metal.runtime import MetalProgram
  dev, failed, count = Device[metal], [], 0
  for name, build, opts in kernel_table:
    if "bf16" in name and not dev.supports_bfloat: continue
    for spec in render(build(), renderer=dev.renderer, opts=opts):
      count += 1
      try: MetalProgram(dev, spec.name, spec.src)
      except Exception as e: failed.append(f"{name}: {str(e)[:1500]}")
  assert count and not failed, "\n\n".join(failed[:3])

def test_elementwise_reduction_matmul(metal):
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((64, 48)).astype(np.float32), rng.standard_normal((48, 32)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(Tensor(a).sum(axis=1).numpy(), a.sum(1), rtol=1e-5, atol=1e-4)
  np.testing.assert_allclose(Tensor(a).softmax(axis=1).numpy(), np.exp(a) / np.exp(a).sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
  h = rng.standard_normal(64).astype(np.float16)
  np.testing.assert_array_equal((Tensor(h) * Tensor(h) + 1).numpy(), h * h + np.float16(1))
  x = np.array([7, -7, -2**31, 5, 0, 9], np.int32)
  y = np.array([2, 2, -1, 0, 0, -1], np.int32)
  assert (Tensor(x) // Tensor(y)).numpy().tolist() == (Tensor(x, device="PYTHON") // Tensor(y, device="PYTHON")).numpy().tolist()

def test_bfloat(metal):
  if not Device[metal].supports_bfloat: pytest.skip("bfloat needs MSL 3.1 (macOS 14)")
  torch = pytest.importorskip("torch")
  b = torch.randn(64, dtype=torch.bfloat16)
  tb = Tensor(b.view(torch.int16).numpy()).bitcast(dtypes.bfloat16)
  np.testing.assert_array_equal((tb * tb - 2).bitcast(dtypes.int16).numpy(), (b * b - 2).view(torch.int16).numpy())

def test_kernel_times_come_from_the_gpu(metal):
  from tinyplug.helpers import Context
  with Context(DEBUG=0):
    t = Tensor.ones(1024, 1024).contiguous().realize()
    dev = Device[metal]
    (t * 2).realize()
    dev.synchronize()
  assert dev.last_gpu_seconds is not None and 0 < dev.last_gpu_seconds < 10
