"""Tensors with a zero-length axis on devices that launch a grid of work-groups: results as numpy's, and no
program is ever launched with a 0-wide grid (CUDA's driver rejects one with CUDA_ERROR_INVALID_VALUE; the emulator
crashed on one)."""
import numpy as np
import pytest
from tinyplug import Tensor
from tinyplug.engine import realize
from tinyplug.testing.suite import device_or_skip

@pytest.mark.parametrize("name", ["MOCK+CUDA", "CL"])
def test_zero_size_outputs_launch_nothing(name, monkeypatch):
  device_or_skip(name)
  launched = []
  run = realize.CompiledRunner.__call__
  def record(self, bufs, var_vals, wait=False):
    prg = self.prg
    def guarded(*a, global_size=None, **kw):
      launched.append((self.spec.name, global_size))
      return prg(*a, global_size=global_size, **kw)
    self.prg = guarded
    try: return run(self, bufs, var_vals, wait)
    finally: self.prg = prg
  monkeypatch.setattr(realize.CompiledRunner, "__call__", record)
  empty = np.ones((5, 0), np.float32)
  assert (Tensor.ones(5, 0, device=name) + Tensor(empty, device=name)).realize().numpy().shape == (5, 0)
  assert Tensor(empty, device=name).cumsum(0).realize().numpy().shape == (5, 0)
  assert Tensor.eye(0, device=name).realize().numpy().shape == (0, 0)
  np.testing.assert_equal(Tensor(empty, device=name).sum(1).numpy(), np.zeros(5, np.float32))   # a sum of nothing
  x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=name)
  np.testing.assert_equal(x[:, 3:].exp().realize().numpy(), np.zeros((2, 0), np.float32))
  assert launched, "nothing ran"   # the sum of nothing is a real kernel
  assert all(0 not in (g or ()) for _, g in launched), launched
