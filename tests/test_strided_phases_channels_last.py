"""A strided convolution's input-gradient phases stored channel-innermost (nn._phase_channels_last): each phase kernel
is tiled a few positions of its row by two vectors of channels (heuristic `_channels_inner_tile`), whose stores are
whole vectors, and the interleave reads 16 channels of each phase at once (`_phase_opts`). Decisions on fake
machines through the CPU renderer; forward and both gradients against torch."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import _channels_inner_tile, heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops.nn import _phase_channels_last
from tinyplug.uop.ops import Ops
from machine_fakes import forget_built_graphs

def step_kernels(b: int, cin: int, cout: int, side: int, stride: int, pad: int) -> list[Kernel]:
  forget_built_graphs()   # nothing built under another machine
  x, w = Tensor.empty(b, cin, side, side, requires_grad=True), Tensor.empty(cout, cin, 3, 3, requires_grad=True)
  out = x.conv2d(w, stride=stride, padding=pad)
  items, _ = create_schedule([t.uop for t in (out, *out.square().sum().gradient(x, w))])
  return [Kernel(it.ast, Device["CPU"].renderer) for it in items if it.ast.op is Ops.SINK]

def phases(ks: list[Kernel], cin: int) -> list[Kernel]:
  """The input-gradient phase convolutions: reductions whose output's innermost axis is the input's channels."""
  return [k for k in ks if k.reduce_axes and len(k.loop_axes) == 4 and k.loop_axes[-1].src[0].arg == cin]

def interleave(ks: list[Kernel]) -> Kernel:
  return next(k for k in ks if not k.reduce_axes and len([u for u in k.sink.toposort() if u.op is Ops.DEFINE_GLOBAL]) == 5)

def test_the_rule_picks_short_rows_of_whole_channel_tiles():
  assert _phase_channels_last(64, 14, 1) and _phase_channels_last(64, 28, 1) and _phase_channels_last(32, 15, 1)
  assert not _phase_channels_last(32, 13, 1)    # the strided CNN's 26-wide input: 13 has no divisor from 4 to 8
  assert not _phase_channels_last(64, 16, 1)    # a whole vector: the row tile stores vectors already
  assert not _phase_channels_last(48, 14, 1)    # no whole tile of 32 channels
  assert not _phase_channels_last(64, 14, 2)    # groups
  # longer rows up to 64 too (36, 40, 42, 56: channels-outermost they took the generic tile, 25-65% of the roof)
  assert _phase_channels_last(64, 42, 1) and _phase_channels_last(64, 56, 1) and _phase_channels_last(32, 36, 1)
  assert not _phase_channels_last(64, 48, 1)    # whole vectors
  assert not _phase_channels_last(64, 70, 1)    # past PHASE_ROW_MAX
  assert not _phase_channels_last(64, 41, 1)    # no divisor from 4 to 8

@pytest.mark.parametrize("side,row,positions", [(28, 14, 7), (56, 28, 7), (84, 42, 7), (80, 40, 8)])
def test_phases_are_tiled_positions_by_two_channel_vectors(vector_machine, side, row, positions):
  vector_machine(64, 32)
  ks = step_kernels(8, 64, 128, side, 2, 1)
  ph = phases(ks, 64)
  assert len(ph) == 4, [k.loop_axes for k in ks]
  for k in ph:
    assert [r.src[0].arg for r in k.loop_axes] == [8, row, row, 64]   # (b, q, q, channels): stored channel-innermost
    assert heuristic_opts(k) == [Opt(OptOps.UPCAST, 2, positions), Opt(OptOps.UPCAST, 3, 32)]
  opts = heuristic_opts(interleave(ks))
  assert Opt(OptOps.UPCAST, 1, 16) in opts and opts[-1] == Opt(OptOps.UPCAST, 1, 16), opts   # 16 channels at once

def test_avx2_and_other_rows_keep_their_tiles(vector_machine):
  # AVX2: 16 registers hold no 7 x 2 vector accumulators and a 14 row has no divisor from 4 to 6, so the phases pad
  # the row to 15 for 5 positions by two vectors of channels (7 by one vector before; 14 x 16 generic tiles spilled)
  vector_machine(32, 16)
  for k in phases(step_kernels(8, 64, 128, 28, 2, 1), 64):
    assert _channels_inner_tile(k) == [Opt(OptOps.PADTO, 2, 5), Opt(OptOps.UPCAST, 2, 5), Opt(OptOps.UPCAST, 3, 16)]
  vector_machine(64, 32)
  ks = step_kernels(4, 32, 64, 26, 2, 0)   # the strided CNN's layer: phases stay channels-outermost
  assert not phases(ks, 32) and all(_channels_inner_tile(k) is None for k in ks)

def check(b: int, cin: int, cout: int, side: int, stride: int, pad: int, bias: bool) -> None:
  rng = np.random.default_rng(side * 10 + pad)
  x, w = rng.uniform(-1, 1, (b, cin, side, side)).astype(np.float32), rng.uniform(-1, 1, (cout, cin, 3, 3)).astype(np.float32)
  bv = rng.uniform(-1, 1, (cout,)).astype(np.float32)
  xt, wt, bt = (torch.tensor(v, requires_grad=True) for v in (x, w, bv))
  ref = F.conv2d(xt, wt, bt if bias else None, stride=stride, padding=pad)
  xs, ws, bs = (Tensor(v, requires_grad=True) for v in (x, w, bv))
  out = xs.conv2d(ws, bs if bias else None, stride=stride, padding=pad)
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-4, rtol=1e-4, err_msg="forward")
  up = rng.uniform(-1, 1, tuple(ref.shape)).astype(np.float32)
  (ref * torch.tensor(up)).sum().backward()
  (out * Tensor(up)).sum().backward()
  np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), atol=1e-4, rtol=1e-4, err_msg="input gradient")
  np.testing.assert_allclose(ws.grad.numpy(), wt.grad.numpy(), atol=1e-3, rtol=1e-4, err_msg="weight gradient")
  if bias: np.testing.assert_allclose(bs.grad.numpy(), bt.grad.numpy(), atol=1e-3, rtol=1e-4, err_msg="bias gradient")

# phase rows of 14 (even and odd inputs, padding 1 and 0), 15, 10, 42 and 36 (odd input); 64 and 32 input channels
@pytest.mark.parametrize("b,cin,cout,side,pad,bias", [(2, 64, 32, 28, 1, False), (2, 32, 16, 27, 1, True),
                                                      (1, 32, 32, 29, 0, False), (2, 32, 8, 28, 0, True),
                                                      (1, 64, 16, 20, 1, False), (1, 32, 64, 84, 1, False),
                                                      (1, 32, 64, 71, 0, True)])
def test_values_and_gradients_match_torch(b, cin, cout, side, pad, bias):
  check(b, cin, cout, side, 2, pad, bias)

@pytest.mark.parametrize("side,cin,cout,seed", [(14, 16, 32, 3), (40, 64, 32, 7)])
def test_conv_transpose2d_by_phases_matches_torch(side, cin, cout, seed):
  # a k3 s2 transposed convolution is convolved by phases too (no sub-pixel form: 3 taps do not split in 2): 14-wide
  # and 40-wide phase rows, stored channel-innermost; the gradient weighted per output
  rng = np.random.default_rng(seed)
  x, w = rng.uniform(-1, 1, (1, cin, side, side)).astype(np.float32), rng.uniform(-1, 1, (cin, cout, 3, 3)).astype(np.float32)
  xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  ref = F.conv_transpose2d(xt, wt, stride=2, padding=1, output_padding=1)
  xs, ws = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  out = xs.conv_transpose2d(ws, stride=2, padding=1, output_padding=1)
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-4, rtol=1e-4)
  up = rng.uniform(-1, 1, tuple(ref.shape)).astype(np.float32)
  (ref * torch.tensor(up)).sum().backward()
  (out * Tensor(up)).sum().backward()
  np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), atol=1e-3, rtol=1e-4)
  np.testing.assert_allclose(ws.grad.numpy(), wt.grad.numpy(), atol=1e-3, rtol=1e-4)
