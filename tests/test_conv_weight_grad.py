"""A convolution's weight gradient (one group, 16+ input channels, stride 1) as a matmul per tap over (batch, out..),
read from a channels-last copy of the input so that its lanes run along the input channels; a large input sums per
image first. Values against torch (both forms, every dim count, dilation, padding, bias); the schedule's shape; the
heuristic's tile for it and for the unstrided whole row's two rows, on fake machines; the input gradient of the
unpadded input (padding within the kernel's reach) and the padded prime phase row."""
from __future__ import annotations
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyplug import schedule
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops import nn, template
from tinyplug.uop.ops import Ops

U = lambda axis, amt: Opt(OptOps.UPCAST, axis, amt)
TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}

def _rand(shape, seed):
  return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)

def check(x_shape, w_shape, bias: bool = False, **kw) -> None:
  """Forward, input, weight (and bias) gradients under a non-uniform upstream gradient, against torch."""
  x, w = _rand(x_shape, 0), _rand(w_shape, 1)
  b = _rand((w_shape[0],), 2) if bias else None
  xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  bt = torch.tensor(b, requires_grad=True) if bias else None
  ref = TORCH_CONV[len(w_shape) - 2](xt, wt, bt, **kw)
  xs, ws = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  bs = Tensor(b, requires_grad=True) if bias else None
  out = xs.conv2d(ws, bs, **kw)
  seed_grad = _rand(tuple(ref.shape), 3)
  (ref * torch.tensor(seed_grad)).sum().backward()
  (out * Tensor(seed_grad)).sum().backward()
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-4, rtol=1e-4, err_msg="forward")
  np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), atol=1e-4, rtol=1e-4, err_msg="input gradient")
  np.testing.assert_allclose(ws.grad.numpy(), wt.grad.numpy(), atol=2e-4, rtol=1e-4, err_msg="weight gradient")
  if bias: np.testing.assert_allclose(bs.grad.numpy(), bt.grad.numpy(), atol=1e-4, rtol=1e-4, err_msg="bias gradient")

CASES = [((3, 16, 10, 9), (8, 16, 3, 3), dict(padding=1)),
         ((2, 24, 11, 12), (5, 24, 3, 2), dict(dilation=2, padding=(2, 1))),   # 24 channels: not a whole vector
         ((2, 32, 7, 7), (20, 32, 1, 1), dict()),
         ((2, 16, 15), (6, 16, 5), dict(padding=2)),
         ((1, 16, 5, 6, 4), (4, 16, 2, 3, 2), dict(dilation=(1, 2, 1)))]

@pytest.mark.parametrize("per_image", [False, True], ids=["summed", "per_image"])
@pytest.mark.parametrize("x_shape,w_shape,kw", CASES, ids=lambda v: str(v).replace(" ", ""))
def test_weight_gradient_matches_torch(monkeypatch, per_image, x_shape, w_shape, kw):
  assert nn._wants_channels_last_wgrad(w_shape[1], 1, (1,) * (len(w_shape) - 2))
  taken = []
  monkeypatch.setattr(nn, "_per_image_wgrad", lambda *a: taken.append(a) or per_image)   # either form on small inputs
  template._templates.clear(); template._seen.clear()   # the weight gradient is a graph template: build it anew
  check(x_shape, w_shape, bias=True, **kw)
  assert taken   # the channels-last form was built

def test_which_form():
  assert nn._wants_channels_last_wgrad(16, 1, (1, 1))
  assert not nn._wants_channels_last_wgrad(8, 1, (1, 1))        # a vector's worth of channels or more
  assert not nn._wants_channels_last_wgrad(64, 2, (1, 1))       # grouped: the convolution over the batch
  assert not nn._wants_channels_last_wgrad(64, 1, (2, 2))       # strided: it already vectorizes along g's copy
  assert nn._per_image_wgrad(8 * 64 * 58 * 58, 8, 64 * 64 * 9)  # conv 64->64 56x56 b8
  assert not nn._per_image_wgrad(8 * 64 * 30 * 30, 8, 64 * 64 * 9)   # 28x28: the input is small
  assert not nn._per_image_wgrad(64 * 512 * 34 * 34, 64, 512 * 512 * 9)   # partials larger than the input
  assert not nn._per_image_wgrad(1 << 22, 1, 9)

def _grad_kernels(x_shape, w_shape, **kw) -> list:
  schedule._templates.clear()   # no schedule made under another fake machine
  x, w = Tensor.empty(*x_shape, requires_grad=True), Tensor.empty(*w_shape, requires_grad=True)
  (gw,) = x.conv2d(w, **kw).square().sum().gradient(w)
  return [it.ast for it in create_schedule([gw.uop])[0] if it.ast.op is Ops.SINK]

def _shapes(k: Kernel) -> tuple[list[int], list[int]]:
  return [r.src[0].arg for r in k.loop_axes], [r.src[0].arg for r in k.reduce_axes]

@pytest.mark.parametrize("machine,lanes", [((64, 32), 16), ((32, 16), 8)], ids=["avx512", "avx2"])
def test_weight_gradient_tile_runs_along_input_channels(vector_machine, machine, lanes):
  vector_machine(*machine)
  # (cout, kh, kw, cin) summed over (b, h, w): cin, the innermost output axis, is the channels-last copy's
  # contiguous one; cout outermost, the loop threads share
  asts = _grad_kernels((8, 64, 28, 28), (64, 64, 3, 3), padding=1)
  (k,) = [k for k in (Kernel(a, Device["CPU"].renderer) for a in asts) if _shapes(k) == ([64, 3, 3, 64], [8, 28, 28])]
  opts = heuristic_opts(k)
  assert opts[0].op is OptOps.UPCAST and opts[0].axis == 3 and opts[0].arg % lanes == 0, opts

def test_large_input_sums_per_image(vector_machine):
  vector_machine(64, 32)
  asts = _grad_kernels((8, 64, 56, 56), (64, 64, 3, 3), padding=1)
  shapes = [_shapes(Kernel(a, Device["CPU"].renderer)) for a in asts]
  assert ([8, 3, 3, 64, 64], [56, 56]) in shapes and ([3, 3, 64, 64], [8]) in shapes, shapes

def _forward_kernel(side: int) -> Kernel:
  """The direct convolution's kernel (AVX2 takes Winograd for these sizes by default)."""
  schedule._templates.clear()
  with Context(WINO=0): out = Tensor.empty(8, 64, side, side).conv2d(Tensor.empty(64, 64, 3, 3), padding=1)
  return Kernel([it.ast for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK][-1], Device["CPU"].renderer)

@pytest.mark.parametrize("machine", [(64, 32), (32, 16)], ids=["avx512", "avx2"])
def test_long_whole_row_takes_two_rows(vector_machine, machine):
  vector_machine(*machine)
  # 26: no 4-8 positions divide it, so the row stays whole (28, 20, 30: a channel tile, below)
  assert heuristic_opts(_forward_kernel(26))[:3] == [U(3, 26), U(2, 2), U(1, 4)]   # 26 x 4 before

def test_short_row_turns_to_channel_vectors(vector_machine):
  # a 28-wide row reads a channel-innermost weight copy: 7 positions, each a broadcast, by two vectors of channels
  vector_machine(64, 32)
  assert heuristic_opts(_forward_kernel(28))[:2] == [U(3, 7), U(1, 32)]
  assert heuristic_opts(_forward_kernel(30))[:2] == [U(3, 6), U(1, 32)]
  assert nn._short_row(28, 64, 576) and nn._short_row(20, 16, 64)
  assert not nn._short_row(24, 64, 576)    # 8 x 8 tiles
  assert not nn._short_row(26, 64, 576)    # no 4-8 positions divide it
  assert not nn._short_row(28, 8, 576) and not nn._short_row(28, 64, 9)

def test_rows_under_a_vector_turn_to_channel_vectors(vector_machine):
  # a 7- or 14-wide row (a deep layer's) as whole rows filled 7 or 14 of 16 lanes of each vector and read the weight
  # across its rows (one Zen 4 thread, 512->512 7x7 b8 forward: 49.5 ms; turned around 21.8 ms)
  vector_machine(64, 32)
  for side in (7, 14):
    opts = heuristic_opts(_forward_kernel(side))
    assert opts[0] in (U(3, 7), U(3, 14)) and opts[1].op is OptOps.UPCAST and opts[1].axis == 1 and opts[1].arg % 16 == 0, opts
  assert all(nn._short_row(side, 64, 576) for side in (4, 5, 6, 7, 10, 12, 14, 15))
  assert not any(nn._short_row(side, 64, 576) for side in (3, 8, 9, 11, 13, 16))   # 8 lanes fill, or no 4-8 divide

@pytest.mark.parametrize("side", [28, 20, 30, 21, 14, 7, 12, 5])
def test_short_row_values(side):
  # both gradients too: the input gradient is again a short-row convolution over the weight's copy
  check((2, 32, side, side), (16, 32, 3, 3), padding=1, bias=True)

def test_two_row_forward_matches_torch():
  check((2, 64, 28, 28), (32, 64, 3, 3), padding=1)

def test_prime_phase_row_is_padded_by_one(vector_machine):
  # a 58-wide unpadded input's stride-2 input gradient: phases of 29, which no tile divides
  vector_machine(64, 32)
  schedule._templates.clear()
  x, w = Tensor.empty(2, 64, 58, 58, requires_grad=True), Tensor.empty(128, 64, 3, 3, requires_grad=True)
  (gx,) = x.conv2d(w, stride=2).square().sum().gradient(x)
  asts = [it.ast for it in create_schedule([gx.uop])[0] if it.ast.op is Ops.SINK]
  ks = [k for k in (Kernel(a, Device["CPU"].renderer) for a in asts)
        if k.reduce_axes and k.loop_axes[-1].src[0].arg == 29]
  assert ks
  for k in ks: assert heuristic_opts(k)[:3] == [Opt(OptOps.PADTO, 3, 15), U(3, 15), U(1, 16)]   # 8 x 4 unrolled before

def test_prime_phase_row_values():
  check((1, 16, 46, 46), (8, 16, 3, 3), stride=2)   # 23-wide phases
  check((2, 16, 27, 27), (16, 16, 3, 3), stride=2, padding=1)   # 27 + 2 odd: the window is cut after

@pytest.mark.parametrize("kw", [dict(padding=3), dict(padding=3, stride=2), dict(padding=(0, 2, 1, 0)),
                                dict(padding=1, stride=2, dilation=2)], ids=str)
def test_input_gradient_of_the_unpadded_input(kw):
  # within the kernel's reach the input gradient is the unpadded input's alone; beyond it (3 > 2), through the pad
  x_shape, w_shape = (2, 16, 9, 8), (8, 16, 3, 3)
  if isinstance(kw["padding"], tuple):   # torch-flat: pad first for torch
    x, w = _rand(x_shape, 0), _rand(w_shape, 1)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    F.conv2d(F.pad(xt, kw["padding"]), wt).square().sum().backward()
    xs, ws = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    xs.conv2d(ws, padding=kw["padding"]).square().sum().backward()
    np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(ws.grad.numpy(), wt.grad.numpy(), atol=2e-4, rtol=1e-4)
  else: check(x_shape, w_shape, bias=True, **kw)

@pytest.mark.parametrize("machine,want", [((64, 32), [U(3, 4), U(0, 64)]), ((32, 16), [U(3, 4), U(0, 16)])],
                         ids=["avx512", "avx2"])
def test_a_4x4_window_gradient_takes_one_row_of_taps(vector_machine, machine, want):
  # a stride-2 4x4 weight gradient (a conv_transpose2d k4 s2's, as the convolution over the batch): 4x4 taps by a
  # vector of output channels would hold 16 broadcasts beside 16 accumulators; one row of 4 taps by vectors of
  # channels instead, their accumulators in half the registers: 4 vectors on AVX-512, 2 on AVX2 (whose 4x4x16
  # spilled too, session 23, and so did 4 x 32's 16 accumulators, session 24)
  vector_machine(*machine)
  asts = _grad_kernels((2, 32, 58, 58), (64, 32, 4, 4), stride=2, padding=1)
  (k,) = [k for k in (Kernel(a, Device["CPU"].renderer) for a in asts) if _shapes(k)[0] == [64, 32, 4, 4]]
  assert heuristic_opts(k)[:len(want)] == want

def test_a_4x4_window_gradient_values():
  check((2, 32, 16, 16), (64, 32, 4, 4), stride=2, padding=1)
  x, w = _rand((2, 64, 8, 8), 0), _rand((64, 32, 4, 4), 1)   # conv_transpose2d k4 s2 p1's weight gradient
  xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  F.conv_transpose2d(xt, wt, stride=2, padding=1).square().sum().backward()
  xs, ws = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  xs.conv_transpose2d(ws, stride=2, padding=1).square().sum().backward()
  np.testing.assert_allclose(ws.grad.numpy(), wt.grad.numpy(), atol=1e-3, rtol=1e-4)
  np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), atol=1e-3, rtol=1e-4)
