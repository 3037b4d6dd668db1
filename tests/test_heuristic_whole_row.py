"""A reduction's row that the CPU register tile would pad but whole half-vectors divide (56 on AVX-512: 3.5 vectors,
padded to 64 an eighth of the work wasted) is upcast whole, with as many rows as the tile's accumulators allow.
Decisions on fake machines through the CPU renderer; values against torch and numpy."""
import numpy as np
import pytest
import torch
from tinyplug import schedule
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import cpu_tile, heuristic_opts, unpadded_row_tile
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(56)

def last_kernel(out: Tensor) -> Kernel:
  return Kernel([it.ast for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK][-1], Device["CPU"].renderer)

def conv_kernel(side: int, cin: int = 64, cout: int = 64) -> Kernel:
  schedule._templates.clear()   # no schedule made under another fake machine
  return last_kernel(Tensor.empty(8, cin, side, side).conv2d(Tensor.empty(cout, cin, 3, 3), padding=1))

def test_a_56_wide_conv_row_is_upcast_whole_by_four_channels(vector_machine):
  r = vector_machine(64, 32)
  k = conv_kernel(56)
  assert unpadded_row_tile(k, 56, *cpu_tile(r)) == (56, 4)
  opts = heuristic_opts(k)
  assert opts[:2] == [Opt(OptOps.UPCAST, 3, 56), Opt(OptOps.UPCAST, 1, 4)]
  assert not any(o.op is OptOps.PADTO for o in opts)

@pytest.mark.parametrize("side", [32, 64])
def test_rows_the_tile_divides_are_not_this_rule(vector_machine, side):
  vector_machine(64, 32)
  k = conv_kernel(side)
  assert unpadded_row_tile(k, side, *cpu_tile(Device["CPU"].renderer)) is None
  assert not any(o.op is OptOps.PADTO for o in heuristic_opts(k))
  if side == 32: assert Opt(OptOps.UPCAST, 3, 32) in heuristic_opts(k)

def test_rows_the_tile_would_not_pad_and_narrow_machines_are_left_alone(vector_machine):
  r = vector_machine(64, 32)
  assert unpadded_row_tile(conv_kernel(48), 48, *cpu_tile(r)) is None          # 48 -> 64 is a third more: not padded
  assert not any(o.op is OptOps.PADTO for o in heuristic_opts(conv_kernel(48)))   # (48 is whole vectors: _whole_row_tile)
  r = vector_machine(32, 16)   # AVX2: a 16 x 4 tile; 56 is more than twice its width
  assert unpadded_row_tile(conv_kernel(56), 56, *cpu_tile(r)) is None
  assert Opt(OptOps.UPCAST, 3, 56) not in heuristic_opts(conv_kernel(56))

def test_values_match_torch_and_numpy():
  x, w = RNG.standard_normal((2, 16, 56, 56)).astype(np.float32), RNG.standard_normal((24, 16, 3, 3)).astype(np.float32)
  b = RNG.standard_normal(24).astype(np.float32)
  want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), padding=1).numpy()
  np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), Tensor(b), padding=1).numpy(), want, rtol=1e-4, atol=1e-4)
  a, c = RNG.standard_normal((100, 300)).astype(np.float32), RNG.standard_normal((300, 56)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(c)).numpy(), a @ c, rtol=1e-4, atol=1e-4)

def test_conv_gradient_matches_torch():
  x, w = RNG.standard_normal((2, 8, 56, 56)).astype(np.float32), RNG.standard_normal((16, 8, 3, 3)).astype(np.float32)
  tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  tx.conv2d(tw, padding=1).square().sum().backward()
  px, pw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  torch.nn.functional.conv2d(px, pw, padding=1).square().sum().backward()
  np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-3, atol=1e-3)
  np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=1e-3, atol=1e-2)
