"""The pack pass (passes/pack.py) pads a B that is no whole number of panels wide (1000 classes, an odd vocabulary)
with zero columns to the next panel, from PACK_PAD_MIN_PANELS panels on; narrower odd widths stay unpacked. Fake
cache sizes are fed through the CPU renderer so small matmuls pack; values are checked against numpy and torch."""
import numpy as np
import pytest
import torch
from tinyplug import schedule
from tinyplug.device import Device
from tinyplug.passes.pack import PACK_PAD_MIN_PANELS, pack_width
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor

KB, MB = 1 << 10, 1 << 20
RNG = np.random.default_rng(5)

@pytest.fixture
def small_l2(monkeypatch):
  monkeypatch.setattr(Device["CPU"].renderer, "cache_bytes", (32 * KB, 64 * KB, 32 * MB))
  schedule._templates.clear()   # the pack pass decides by the machine: no schedule made for another fake one
  yield pack_width(Device["CPU"].renderer)
  schedule._templates.clear()

def _data(*shape) -> np.ndarray:
  return RNG.standard_normal(shape).astype(np.float32)

@pytest.mark.parametrize("case", ["x @ W", "x @ W.T", "batched"])
def test_odd_width_is_packed_in_padded_panels(small_l2, case):
  n = PACK_PAD_MIN_PANELS * small_l2 + 5
  xn = _data(*((2,) if case == "batched" else ()), 256, 256)
  wn = _data(n, 256) if case == "x @ W.T" else _data(*((2,) if case == "batched" else ()), 256, n)
  x, w = Tensor(xn).realize(), Tensor(wn).realize()
  t = x @ w.T if case == "x @ W.T" else x @ w
  assert len(create_schedule([t.uop])[0]) == 2   # the padded panels, then the matmul
  want = xn @ wn.T if case == "x @ W.T" else xn @ wn
  np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-3)

def test_padded_panels_under_gradients(small_l2):
  n = PACK_PAD_MIN_PANELS * small_l2 + 3
  xn, wn, gn = _data(256, 256), _data(n, 256), _data(256, n)
  x, w = Tensor(xn, requires_grad=True).realize(), Tensor(wn, requires_grad=True).realize()
  ((x @ w.T) * Tensor(gn)).sum().backward()
  xt, wt = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
  ((xt @ wt.T) * torch.tensor(gn)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)

def test_narrow_odd_width_stays_unpacked(small_l2):
  n = (PACK_PAD_MIN_PANELS - 1) * small_l2 + 5
  xn, wn = _data(256, 256), _data(256, n)
  t = Tensor(xn).realize() @ Tensor(wn).realize()
  assert len(create_schedule([t.uop])[0]) == 1
  np.testing.assert_allclose(t.numpy(), xn @ wn, rtol=1e-4, atol=1e-3)
