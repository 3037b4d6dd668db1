"""The pack pass (passes/pack.py) on a machine whose register tile has 4 rows (AVX2: 16 vector registers of 32 bytes,
`cpu_tile` 16 x 4): a matmul of few rows (from 16) packs B, from a B of half the L2 and a reduction of 64, and an A
stored K x M (`x.T @ g`, a weight gradient whose B is too small to pack) is copied with its rows along the reduction.
An AVX-512 machine (32 registers of 64 bytes, an 8-row tile) keeps reading both as they are stored. Fake machines are
fed through the CPU renderer; values are checked against numpy."""
import numpy as np
import pytest
from tinyplug import schedule
from tinyplug.device import Device
from tinyplug.passes.pack import should_pack
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor

KB, MB = 1 << 10, 1 << 20
RNG = np.random.default_rng(23)
AVX2, AVX512 = (32, 16), (64, 32)

@pytest.fixture
def machine(monkeypatch):
  """machine(l2, vector_regs): the CPU renderer now has that L2 (32 KB L1, 32 MB L3) and vector registers."""
  r = Device["CPU"].renderer
  def set_to(l2: int, vector_regs: tuple[int, int]):
    monkeypatch.setattr(r, "cache_bytes", (32 * KB, l2, 32 * MB))
    monkeypatch.setattr(r, "vector_bytes", vector_regs[0])
    monkeypatch.setattr(r, "vector_registers", vector_regs[1])
    schedule._templates.clear()   # the pack pass decides by the machine: no schedule made for another fake one
    return r
  yield set_to
  schedule._templates.clear()

def _copied(t: Tensor, *inputs: Tensor) -> list[int]:
  """Which of `inputs` the schedule of `t` copies in a kernel of its own (a kernel reading one buffer)."""
  items, _ = create_schedule([t.uop])
  return [i for i, x in enumerate(inputs) for it in items if len(it.bufs) == 2 and it.bufs[1] is x.uop.buffer]

def _realized(*shape) -> tuple[Tensor, np.ndarray]:
  a = RNG.standard_normal(shape).astype(np.float32)
  return Tensor(a).realize(), a

def test_few_rows_pack_on_a_narrow_tile(machine):
  r = machine(512 * KB, AVX2)
  assert should_pack(64, 128, 9216, 4, r)          # the linear layer 64x9216 -> 128
  assert should_pack(16, 1024, 4096, 4, r)         # four tile rows
  assert not should_pack(8, 1024, 4096, 4, r)      # too few rows of A to pay for the copy
  assert should_pack(256, 128, 1024, 4, r)         # B of 512 KB: from half the L2 on
  assert not should_pack(256, 64, 512, 4, r)       # B of 128 KB
  assert should_pack(1024, 1024, 64, 4, r) and not should_pack(1024, 1024, 32, 4, r)   # reductions from 64
  r = machine(512 * KB, AVX512)                    # an 8-row tile: from 256 rows, as before
  assert not should_pack(64, 128, 9216, 4, r) and not should_pack(128, 1024, 2048, 4, r)
  assert should_pack(256, 1024, 2048, 4, r) and not should_pack(256, 128, 1024, 4, r)
  assert not should_pack(1024, 1024, 64, 4, r)

@pytest.mark.parametrize("regs,rows,copied", [(AVX2, 16, [1]), (AVX2, 70, [1]), (AVX2, 8, []), (AVX512, 64, [])])
def test_few_rows_forward_values(machine, regs, rows, copied):
  machine(16 * KB, regs)   # B of 128 KB, its panels (512 x 16 floats) 32 KB
  (a, an), (b, bn) = _realized(rows, 512), _realized(512, 64)
  t = a @ b
  assert _copied(t, a, b) == copied
  np.testing.assert_allclose(t.numpy(), an @ bn, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("regs,width,copied", [(AVX2, 1024, [0]), (AVX2, 256, [0]), (AVX2, 64, []), (AVX512, 1024, [])])
def test_weight_gradient_copies_x_where_the_gradient_does_not_pack(machine, regs, width, copied):
  # x (64 x 1024) 256 KB, (64 x 256) 64 KB: from half the L2 on; (64 x 64) 16 KB; the gradient 16 KB: too small to pack
  machine(64 * KB, regs)
  (x, xn), (g, gn) = _realized(64, width), _realized(64, 64)
  t = x.T @ g
  assert _copied(t, x, g) == copied
  np.testing.assert_allclose(t.numpy(), xn.T @ gn, rtol=1e-4, atol=1e-3)

def test_linear_step_gradients_on_a_narrow_tile(machine):
  machine(16 * KB, AVX2)
  (x, xn), (w, wn) = _realized(64, 512), _realized(512, 64)
  x.requires_grad = w.requires_grad = True
  (x @ w).relu().square().sum().backward()
  y = np.maximum(xn @ wn, 0)
  np.testing.assert_allclose(w.grad.numpy(), xn.T @ (2 * y), rtol=1e-4, atol=1e-2)
  np.testing.assert_allclose(x.grad.numpy(), (2 * y) @ wn.T, rtol=1e-4, atol=1e-2)

def test_short_reduction_packs_on_a_narrow_tile(machine):
  machine(16 * KB, AVX2)   # B (64 x 512) 128 KB, a reduction of 64
  (a, an), (b, bn) = _realized(256, 64), _realized(64, 512)
  t = a @ b
  assert _copied(t, a, b) == [1]
  np.testing.assert_allclose(t.numpy(), an @ bn, rtol=1e-4, atol=1e-3)
