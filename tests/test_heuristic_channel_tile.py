"""A long reduction's 17-32-wide row that is not a whole number of vectors (conv_transpose2d's 28x28 phase
convolutions) beside an output axis read as contiguous vectors (the channel-innermost weight copy) is tiled the other
way round: 4-8 positions of the row by cpu_tile's width of channels. Decisions on fake machines through the CPU
renderer; values and gradients against torch."""
import numpy as np
import pytest
import torch
from tinyplug import schedule
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import _channel_vector_tile, cpu_tile, heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops import nn
from tinyplug.tensor_ops.nn import _phased_conv_transpose
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(28)

def kernels(out: Tensor) -> list[Kernel]:
  return [Kernel(it.ast, Device["CPU"].renderer) for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK]

def phase_kernels(side: int, cin: int = 64, cout: int = 32, monkeypatch=None) -> list[Kernel]:
  schedule._templates.clear()   # no schedule made under another fake machine
  # the phases stored channels-outermost, as those whose channels are no whole tile are (32 of them are stored
  # channel-innermost: tests/test_strided_phases_channels_last.py)
  if monkeypatch is not None: monkeypatch.setattr(nn, "_phase_channels_last", lambda *a: False)
  # the per-phase form, which conv_transpose2d k4 s2 now replaces by one sub-pixel kernel (a strided convolution's
  # input gradient still takes it)
  out = _phased_conv_transpose(Tensor.empty(8, cin, side, side), Tensor.empty(cin, cout, 4, 4), 1, (2, 2), (1, 1), (1, 1), (0, 0))
  return [k for k in kernels(out) if k.reduce_axes and k.loop_axes[-1].src[0].arg == side]

@pytest.mark.parametrize("machine,positions", [((64, 32), 7), ((32, 16), 4)], ids=["avx512", "avx2"])
def test_convt_phase_rows_of_28_take_two_vectors_of_channels(vector_machine, monkeypatch, machine, positions):
  # as many positions (a divisor of the row, 4 to 8) as the vector registers hold accumulators for: 7 x 2 of AVX-512's
  # 32, 4 x 2 of AVX2's 16
  r = vector_machine(*machine)
  ks = phase_kernels(28, monkeypatch=monkeypatch)
  assert len(ks) == 4
  for k in ks:
    opts = heuristic_opts(k)
    assert opts[:2] == [Opt(OptOps.UPCAST, 3, positions), Opt(OptOps.UPCAST, 1, cpu_tile(r)[0])], opts   # 28 x 8 before
    assert Opt(OptOps.UPCAST, 3, 28) not in opts and not any(o.op is OptOps.PADTO for o in opts)

def test_rows_of_whole_vectors_and_short_or_strided_rows_are_left_alone(vector_machine, monkeypatch):
  vector_machine(16, 32)   # NEON: 28 is 7 vectors of 4
  assert all(_channel_vector_tile(k) is None for k in phase_kernels(28, monkeypatch=monkeypatch))
  vector_machine(64, 32)
  assert all(_channel_vector_tile(k) is None for k in phase_kernels(32))   # 32: two whole vectors
  assert all(_channel_vector_tile(k) is None for k in phase_kernels(14))   # 14: not longer than one vector
  assert all(_channel_vector_tile(k) is None for k in phase_kernels(26))   # 26: no divisor from 4 to 8
  schedule._templates.clear()
  s2 = kernels(Tensor.empty(8, 64, 56, 56).conv2d(Tensor.empty(128, 64, 3, 3), stride=2, padding=1))[-1]
  assert _channel_vector_tile(s2) is None   # the stride-2 row's lanes are gathers: _small_window_tile's 14 x 16
  assert heuristic_opts(s2)[:2] == [Opt(OptOps.UPCAST, 3, 14), Opt(OptOps.UPCAST, 1, 16)]

@pytest.mark.parametrize("side,cin,cout", [(28, 16, 32), (20, 8, 16), (13, 8, 32)])
def test_values_and_gradients_match_torch(side, cin, cout):
  x = RNG.standard_normal((2, cin, side, side)).astype(np.float32)
  w = RNG.standard_normal((cin, cout, 4, 4)).astype(np.float32)
  tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  out = tx.conv_transpose2d(tw, stride=2, padding=1)
  px, pw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  want = torch.nn.functional.conv_transpose2d(px, pw, stride=2, padding=1)
  np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-3)
  out.square().sum().backward()
  want.square().sum().backward()
  np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-3, atol=1e-2)
  np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=1e-3, atol=1e-1)
