"""A stride-2 convolution's row (its lanes are gathers) over a long reduction (64 input channels x 3 x 3) is tiled up to
16 positions of the row by one vector of output channels; a short reduction keeps 4 positions x 16 channels x 2 rows.
Decisions on fake machines through the CPU renderer; values against torch on this one."""
import numpy as np
import pytest
import torch
from tinyplug import schedule
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(56)
U = lambda axis, amt: Opt(OptOps.UPCAST, axis, amt)

def conv_kernel(bs: int, cin: int, cout: int, side: int, padding: int) -> Kernel:
  schedule._templates.clear()   # no schedule made under another fake machine
  out = Tensor.empty(bs, cin, side, side).conv2d(Tensor.empty(cout, cin, 3, 3), stride=2, padding=padding)
  ast = [it.ast for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK][-1]
  return Kernel(ast, Device["CPU"].renderer)

@pytest.mark.parametrize("machine,lanes", [((64, 32), 16), ((32, 16), 8)], ids=["avx512", "avx2"])
def test_long_strided_rows_take_14_positions_by_one_vector(vector_machine, machine, lanes):
  vector_machine(*machine)
  # 28 wide: 4 x 16 x 2 before; AVX2 now takes 6 positions by two vectors there (tests/test_conv_avx2.py)
  if lanes == 16: assert heuristic_opts(conv_kernel(8, 64, 128, 56, 1))[:2] == [U(3, 14), U(1, lanes)]
  assert heuristic_opts(conv_kernel(8, 128, 128, 28, 1))[:2] == [U(3, 14), U(1, lanes)]  # 14 wide: whole

def test_short_reduction_keeps_two_rows_of_four(vector_machine):
  vector_machine(64, 32)
  assert heuristic_opts(conv_kernel(64, 32, 64, 26, 0))[:3] == [U(3, 4), U(1, 16), U(2, 2)]   # 288 products

@pytest.mark.parametrize("cin,cout,side", [(64, 32, 20), (64, 16, 13)])
def test_values_and_gradients_match_torch(cin, cout, side):
  x = RNG.standard_normal((2, cin, side, side)).astype(np.float32)
  w = RNG.standard_normal((cout, cin, 3, 3)).astype(np.float32)
  tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  px, pw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  out, want = tx.conv2d(tw, stride=2, padding=1), torch.nn.functional.conv2d(px, pw, stride=2, padding=1)
  np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-3)
  out.square().sum().backward()
  want.square().sum().backward()
  np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-3, atol=1e-2)
  np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=1e-3, atol=1e-1)
