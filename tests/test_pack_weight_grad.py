"""The pack pass (passes/pack.py) on matmuls whose operands or result are stored transposed: the weight gradient of
`x @ W` (W stored in x out) is autograd's reduction over the rows stored transposed, so the operand packed into
column panels must be the one read along the stored rows (the gradient), and x, stored with the reduction across its
rows, is copied with its rows along the reduction where it is at least twice the L2. Fake cache sizes are fed through
the CPU renderer so small matmuls pack; values are checked against torch."""
import numpy as np
import pytest
import torch
from tinyplug import nn, schedule
from tinyplug.codegen import get_program
from tinyplug.device import Device
from tinyplug.passes.pack import pack_width
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor

KB, MB = 1 << 10, 1 << 20
RNG = np.random.default_rng(11)

@pytest.fixture
def l2(monkeypatch):
  """l2(bytes): the CPU renderer now has an L2 of that size (32 KB L1, 32 MB L3)."""
  r = Device["CPU"].renderer
  def set_to(size: int) -> None:
    monkeypatch.setattr(r, "cache_bytes", (32 * KB, size, 32 * MB))
    schedule._templates.clear()   # the pack pass decides by the machine: no schedule made for another fake one
  yield set_to
  schedule._templates.clear()

def _data(*shape) -> np.ndarray:
  return RNG.standard_normal(shape).astype(np.float32)

def _weight_grad(rows: int, n_in: int, n_out: int):
  xn, wn, gn = _data(rows, n_in), _data(n_in, n_out), _data(rows, n_out)
  x, w, g = (Tensor(v).realize() for v in (xn, wn, gn))
  x.requires_grad = w.requires_grad = True
  ((x @ w) * g).sum().backward()
  xt, wt = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
  ((xt @ wt) * torch.tensor(gn)).sum().backward()
  return x, w, g, xt, wt

def _copied_inputs(t: Tensor, *inputs: Tensor) -> list[int]:
  """Which of `inputs` the schedule of `t` copies in a kernel of its own (a kernel reading one buffer)."""
  items, _ = create_schedule([t.uop])
  return [i for i, x in enumerate(inputs) for it in items if len(it.bufs) == 2 and it.bufs[1] is x.uop.buffer]

def _panel_copies(t: Tensor, *inputs: Tensor) -> list[int]:
  """Which of `inputs` the schedule of `t` copies into column panels ((n // W, k, W): a kernel named E_..._W)."""
  r = Device["CPU"].renderer
  items, _ = create_schedule([t.uop])
  return [i for i, x in enumerate(inputs) for it in items if len(it.bufs) == 2 and it.bufs[1] is x.uop.buffer and
          get_program(it.ast, r).name.endswith(f"_{pack_width(r)}")]

def test_weight_gradient_packs_the_gradient_and_copies_x_along_the_reduction(l2):
  l2(64 * KB)   # B (the gradient, 256 x 192) and x (256 x 256) both at least twice the L2
  x, w, g, xt, wt = _weight_grad(256, 256, 192)
  # panels of g (read along W's stored rows) and x's rows along the reduction; packing x into panels instead left g
  # read one strided row per reduction step
  assert sorted(_copied_inputs(w.grad, x, g)) == [0, 1] and _panel_copies(w.grad, x, g) == [1]
  np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-3)

def test_x_below_twice_the_l2_is_read_in_place(l2, monkeypatch):
  # an 8-row register tile (AVX-512); a 4-row one copies x from half the L2 (tests/test_pack_narrow_tile.py)
  r = Device["CPU"].renderer
  monkeypatch.setattr(r, "vector_bytes", 64)
  monkeypatch.setattr(r, "vector_registers", 32)
  l2(256 * KB)   # B (256 x 512, 512 KB) packs; x (256 x 256, 256 KB) is read as it is stored
  x, w, g, xt, wt = _weight_grad(256, 256, 512)
  assert _copied_inputs(w.grad, x, g) == [1]
  np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-3)

def test_linear_weight_gradient_keeps_its_order(l2):
  # nn.Linear's weight is stored (out, in) and its gradient comes out of autograd permuted twice: read as one permute
  # the order stored is the reduction's own, and x (read along `in`, the stored rows) is the operand in panels
  l2(64 * KB)
  xn, gn = _data(256, 256), _data(256, 320)
  layer = nn.Linear(256, 320, bias=False)
  x, g = Tensor(xn).realize(), Tensor(gn).realize()
  wn = layer.weight.numpy()
  (layer(x) * g).sum().backward()
  assert _panel_copies(layer.weight.grad, x, g) == [0]
  np.testing.assert_allclose(layer.weight.grad.numpy(), gn.T @ xn, rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(wn, layer.weight.numpy())

@pytest.mark.parametrize("batched", [False, True])
def test_a_transposed_product_is_packed_in_its_stored_order(l2, batched):
  l2(64 * KB)
  lead = (2,) if batched else ()
  an, bn = _data(*lead, 256, 256), _data(*lead, 256, 192)
  a, b = Tensor(an).realize(), Tensor(bn).realize()
  t = (a @ b).transpose(-1, -2)
  assert len(create_schedule([t.uop])[0]) >= 2   # a copy in panels before the matmul
  np.testing.assert_allclose(t.numpy(), np.swapaxes(an @ bn, -1, -2), rtol=1e-4, atol=1e-3)

def _sequence_weight_grad(xn: np.ndarray, gn: np.ndarray) -> tuple[nn.Linear, Tensor, Tensor]:
  layer = nn.Linear(xn.shape[-1], gn.shape[-1], bias=False)
  x, g = Tensor(xn).realize(), Tensor(gn).realize()
  (layer(x) * g).sum().backward()
  return layer, x, g

def test_linear_on_sequences_packs_as_on_a_flat_batch(l2):
  # a Linear layer on (batch, tokens, features) sums its weight gradient over two axes; both operands store them as one
  # run of memory, so the reduction is the flat batch's (256 rows): x goes into panels as there (unmerged, neither
  # operand was copied and each reduction step read a row of the unpacked one)
  l2(64 * KB)
  xn, gn = _data(4, 64, 256), _data(4, 64, 320)
  layer, x, g = _sequence_weight_grad(xn, gn)
  flat, xf, gf = _sequence_weight_grad(xn.reshape(256, 256), gn.reshape(256, 320))
  assert _panel_copies(layer.weight.grad, x, g) == _panel_copies(flat.weight.grad, xf, gf) == [0]
  np.testing.assert_allclose(layer.weight.grad.numpy(), gn.reshape(256, 320).T @ xn.reshape(256, 256), rtol=1e-4, atol=1e-3)

def test_sequence_gradient_assembled_from_parts_still_packs(l2):
  # q, k and v from one projection: the gradient reaching the weight is the three parts' gradients side by side (a
  # view that pads, no plain strides); its token axes still merge into one reduction
  l2(64 * KB)
  xn, parts = _data(4, 64, 256), [_data(4, 64, 96) for _ in range(3)]
  layer = nn.Linear(256, 288, bias=False)
  x = Tensor(xn).realize()
  gs = [Tensor(p).realize() for p in parts]
  sum((c * g).sum() for c, g in zip(layer(x).chunk(3, dim=-1), gs)).backward()
  assert _panel_copies(layer.weight.grad, x) == [0]
  want = np.concatenate(parts, -1).reshape(256, 288).T @ xn.reshape(256, 256)
  np.testing.assert_allclose(layer.weight.grad.numpy(), want, rtol=1e-4, atol=1e-3)

def test_token_axes_apart_in_memory_are_left_as_two(l2):
  # x stored (tokens, batch, features) and read as (batch, tokens, features): its two summed axes are no single run of
  # memory, so merging them would need a copy of its own; the reduction stays over two axes, the values the same
  l2(64 * KB)
  xs, gn = _data(64, 4, 256), _data(4, 64, 320)
  layer = nn.Linear(256, 320, bias=False)
  x, g = Tensor(xs).realize(), Tensor(gn).realize()
  (layer(x.permute(1, 0, 2)) * g).sum().backward()
  assert _panel_copies(layer.weight.grad, x, g) == []
  want = gn.reshape(256, 320).T @ xs.transpose(1, 0, 2).reshape(256, 256)
  np.testing.assert_allclose(layer.weight.grad.numpy(), want, rtol=1e-4, atol=1e-3)

def test_gradient_in_a_heads_layout_is_copied_before_the_input_gradient(l2):
  # the gradient reaching a q/k/v projection's output is stored in its heads' layout (part, batch, head, token, dim):
  # read as (batch, token, features) every step along the reduction divides its index by the parts and heads, so the
  # input gradient's matmul reads a copy in order (a kernel reading that buffer alone); values unchanged
  l2(64 * KB)
  xn, gn = _data(4, 64, 256), _data(3, 4, 3, 64, 32)
  layer = nn.Linear(256, 288, bias=False)
  x, g = Tensor(xn).realize(), Tensor(gn).realize()
  x.requires_grad = True
  heads = layer(x).reshape(4, 64, 3, 3, 32).permute(2, 0, 3, 1, 4)
  (heads * g).sum().backward()
  assert _copied_inputs(x.grad, g) == [0]
  dy = gn.transpose(1, 3, 0, 2, 4).reshape(4, 64, 288)
  np.testing.assert_allclose(x.grad.numpy(), dy @ layer.weight.numpy(), rtol=1e-4, atol=1e-3)
