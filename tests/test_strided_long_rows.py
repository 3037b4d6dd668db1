"""A strided convolution's output row over a long reduction takes the long strided row's tile (a few positions by a
vector of output channels, heuristic `_small_window_tile`) at any width with a divisor from 8 to 16: rows of 8, 16,
24, 32 and over 32 took the generic tile before (a vector of gathered positions by a few channels, 1.1-3.5x slower).
Decisions on a fake AVX-512 machine through the CPU renderer; values and gradients against torch on this one."""
import numpy as np
import pytest
import torch
from tinyplug import schedule
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import _long_gather_row, heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(42)

def conv_kernel(side: int, cin: int = 64, cout: int = 128, stride: int = 2, pad: int = 1, k: int = 3) -> Kernel:
  schedule._templates.clear()   # no schedule made under another fake machine
  out = Tensor.empty(8, cin, side, side).conv2d(Tensor.empty(cout, cin, k, k), stride=stride, padding=pad)
  asts = [it.ast for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK]
  return Kernel(asts[-1], Device["CPU"].renderer)   # the convolution (after the pad and weight copies)

@pytest.mark.parametrize("side,positions", [(16, 8), (32, 16), (48, 12), (64, 16), (84, 14), (112, 14)])
def test_long_strided_rows_take_positions_by_a_vector_of_channels(vector_machine, side, positions):
  vector_machine(64, 32)
  k = conv_kernel(side)
  assert _long_gather_row(k)
  assert heuristic_opts(k)[:2] == [Opt(OptOps.UPCAST, 3, positions), Opt(OptOps.UPCAST, 1, 16)]

def test_rows_it_does_not_take(vector_machine):
  vector_machine(64, 32)
  # the 28- and 14-wide rows were the long strided tile's already (unchanged: 14 x 16)
  assert heuristic_opts(conv_kernel(56))[:2] == [Opt(OptOps.UPCAST, 3, 14), Opt(OptOps.UPCAST, 1, 16)]
  assert not _long_gather_row(conv_kernel(64, cin=32))     # 288 products per output: a short reduction
  assert not _long_gather_row(conv_kernel(64, stride=1))   # an unstrided row's lanes are contiguous
  assert not _long_gather_row(conv_kernel(46))             # 23 wide: no divisor from 8 to 16
  assert not _long_gather_row(conv_kernel(56, k=1, pad=0)) # one reduce axis: a strided 1x1 convolution

@pytest.mark.parametrize("side,stride,pad", [(32, 2, 1), (48, 2, 1), (34, 2, 0), (66, 3, 1)])
def test_values_and_gradients_match_torch(side, stride, pad):
  # 16, 24, 16 and 22 wide (over 64 channels: the long strided tile on this machine when it has wide vectors);
  # input and weight gradients too
  x = RNG.standard_normal((2, 64, side, side)).astype(np.float32)
  w = RNG.standard_normal((32, 64, 3, 3)).astype(np.float32)
  xt, wt = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  out = xt.conv2d(wt, stride=stride, padding=pad)
  g = RNG.standard_normal(out.shape).astype(np.float32)
  (out * Tensor(g)).sum().backward()
  xr, wr = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  ref = torch.nn.functional.conv2d(xr, wr, stride=stride, padding=pad)
  (ref * torch.tensor(g)).sum().backward()
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(wt.grad.numpy(), wr.grad.numpy(), rtol=1e-4, atol=2e-3)
