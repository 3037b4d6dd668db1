"""conv2d's declared gradient (gradient.custom_gradient): values of the input, weight and bias gradients against
PyTorch for every combination of stride, dilation, padding and groups, in 1, 2 and 3 spatial dims; the mechanism
itself (the marker is stripped before scheduling, second derivatives, errors); pooling's reshape path."""
from __future__ import annotations
import itertools, math
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyplug import Tensor
from tinyplug.gradient import custom_gradient
from tinyplug.uop.ops import Ops

TORCH_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}

def _rand(shape, seed):
  return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)

def check_conv(x_shape, w_shape, bias: bool, atol: float = 2e-5, seed: int = 0, **kw) -> None:
  """Forward and the three gradients (under a non-uniform upstream gradient) against torch."""
  nd = len(w_shape) - 2
  x, w = _rand(x_shape, seed), _rand(w_shape, seed + 1)
  b = _rand((w_shape[0],), seed + 2) if bias else None
  xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  bt = torch.tensor(b, requires_grad=True) if bias else None
  tpad = kw.get("padding", 0)
  if isinstance(tpad, tuple) and len(tpad) == 2 * nd:   # torch-flat (asymmetric) padding: pad first
    ref = TORCH_CONV[nd](F.pad(xt, tpad), wt, bt, **{k: v for k, v in kw.items() if k != "padding"})
  else: ref = TORCH_CONV[nd](xt, wt, bt, **kw)
  xs, ws = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  bs = Tensor(b, requires_grad=True) if bias else None
  out = xs.conv2d(ws, bs, **kw)
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=atol, rtol=1e-4, err_msg="forward")
  seed_grad = _rand(tuple(ref.shape), seed + 3)
  (ref * torch.tensor(seed_grad)).sum().backward()
  (out * Tensor(seed_grad)).sum().backward()
  np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), atol=atol, rtol=1e-4, err_msg="input gradient")
  np.testing.assert_allclose(ws.grad.numpy(), wt.grad.numpy(), atol=atol, rtol=1e-4, err_msg="weight gradient")
  if bias: np.testing.assert_allclose(bs.grad.numpy(), bt.grad.numpy(), atol=atol, rtol=1e-4, err_msg="bias gradient")

# every combination in 2-D: stride x dilation x padding x groups (the input sizes leave rows no window reaches for
# some strides, which the input gradient must give zeros)
COMBOS = list(itertools.product([1, 2, (2, 3)], [1, 2], [0, 1, (2, 0)], [1, 2]))

@pytest.mark.parametrize("stride,dilation,padding,groups", COMBOS, ids=lambda v: str(v).replace(" ", ""))
def test_conv2d_gradients_every_combination(stride, dilation, padding, groups):
  check_conv((2, 4, 9, 8), (6, 4 // groups, 3, 2), bias=True, stride=stride, dilation=dilation, padding=padding,
             groups=groups)

@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(dilation=2, groups=3), dict(stride=3, dilation=2, padding=2)],
                         ids=str)
def test_conv1d_gradients(kw):
  check_conv((2, 3, 17), (6, 3 // kw.get("groups", 1), 3), bias=True, **kw)

@pytest.mark.parametrize("kw", [dict(), dict(stride=(1, 2, 2), padding=1), dict(dilation=(2, 1, 1), groups=2)], ids=str)
def test_conv3d_gradients(kw):
  check_conv((1, 2, 6, 7, 5), (4, 2 // kw.get("groups", 1), 2, 3, 2), bias=False, **kw)

def test_conv2d_asymmetric_padding_and_depthwise():
  check_conv((2, 3, 7, 6), (3, 1, 3, 3), bias=True, padding=(1, 0, 2, 1), groups=3)
  check_conv((1, 2, 6, 6), (4, 2, 1, 1), bias=False, stride=2)          # 1x1 kernel, stride leaves rows unread
  check_conv((1, 2, 5, 5), (3, 2, 5, 5), bias=True)                       # the kernel covers the whole input

def test_conv2d_gradients_every_device(device):
  check_conv((2, 4, 8, 7), (4, 2, 3, 3), bias=True, stride=2, padding=1, groups=2, atol=1e-4)

def test_mnist_shaped_layers_every_device(device):
  # the training benchmark's layer shapes (small batch): odd output widths (26, 13, 11) take the small-window tile
  check_conv((3, 1, 28, 28), (16, 1, 3, 3), bias=True, atol=1e-4)
  check_conv((3, 16, 13, 13), (32, 16, 3, 3), bias=True, atol=1e-4)

def test_conv2d_second_derivative():
  # d/dx of sum(d out/d w * v) needs the gradient of the declared gradient: it is built of convolutions again
  x, w, v = _rand((1, 2, 6, 6), 0), _rand((3, 2, 3, 3), 1), _rand((3, 2, 3, 3), 2)
  xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  (gw,) = torch.autograd.grad(F.conv2d(xt, wt, padding=1).square().sum(), wt, create_graph=True)
  (gw * torch.tensor(v)).sum().backward()
  xs, ws = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  (gws,) = xs.conv2d(ws, padding=1).square().sum().gradient(ws)
  (gx,) = (gws * Tensor(v)).sum().gradient(xs)
  np.testing.assert_allclose(gws.numpy(), gw.detach().numpy(), atol=1e-4, rtol=1e-4)
  np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), atol=1e-4, rtol=1e-4)

def test_conv_backward_has_no_window_gradient_kernel():
  # the declared gradient needs no (batch, cin, out.., kernel..) kernel (4*8*12*12*9 = 41472 elements here): the
  # largest buffer is the output gradient padded by dilation*(kernel-1) - padding on each side for the transposed
  # convolution (which gives the unpadded input's gradient alone)
  from tinyplug.schedule import create_schedule
  x, w = Tensor.empty(4, 8, 12, 12, requires_grad=True), Tensor.empty(16, 8, 3, 3, requires_grad=True)
  loss = x.conv2d(w, padding=1).relu().sum()
  gx, gw = loss.gradient(x, w)
  items, _ = create_schedule([gx.uop, gw.uop])
  sizes = [it.buf_uops[0].arg for it in items]
  assert max(sizes) == 4 * 16 * 14 * 14, sizes
  assert not any(u.op is Ops.CUSTOM_GRAD for it in items for u in it.ast.toposort())

# ---------------- the mechanism ----------------

def _straight_through(g, out, x): return (g,)

def test_custom_gradient_replaces_the_ops_gradient():
  x = Tensor([0.3, 1.7, -2.2], requires_grad=True)
  y = custom_gradient(x.round(), (x,), _straight_through)   # round has zero gradient; this one passes g through
  np.testing.assert_allclose(y.numpy(), [0.0, 2.0, -2.0])
  (y * Tensor([1.0, 2.0, 3.0])).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0, 3.0])

def _scaled(g, out, x, *, k): return (g * k,)

def test_custom_gradient_params_and_hash_consing():
  x = Tensor([1.0, 2.0], requires_grad=True)
  a, b = custom_gradient(x * 2, (x,), _scaled, k=5.0), custom_gradient(x * 2, (x,), _scaled, k=5.0)
  assert a.uop is b.uop   # equal calls build one node
  (g,) = a.sum().gradient(x)
  np.testing.assert_allclose(g.numpy(), [5.0, 5.0])

def _wrong_count(g, out, x): return (g, g)

def test_custom_gradient_wrong_number_of_gradients_is_an_error():
  x = Tensor([1.0], requires_grad=True)
  with pytest.raises(RuntimeError, match="gave 2 gradients for 1 inputs"):
    custom_gradient(x * 3, (x,), _wrong_count).sum().gradient(x)

# ---------------- pooling over non-overlapping windows (a reshape) ----------------

@pytest.mark.parametrize("size,kernel,stride", [((7, 6), 2, None), ((11, 11), 2, None), ((9, 8), (2, 3), (3, 4)),
                                                ((5, 6), 3, 3)], ids=str)
def test_non_overlapping_pools(size, kernel, stride):
  x = _rand((2, 3, *size), 7)
  xt, xs = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
  for tf, ours in ((F.max_pool2d, Tensor.max_pool2d), (F.avg_pool2d, Tensor.avg_pool2d)):
    xt.grad, xs.grad = None, None
    ref, out = tf(xt, kernel, stride), ours(xs, kernel, stride)
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), atol=1e-6)
    seed = _rand(tuple(ref.shape), 8)
    (ref * torch.tensor(seed)).sum().backward()
    (out * Tensor(seed)).sum().backward()
    np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), atol=1e-6)

def _cnn_grads(device: str) -> list[np.ndarray]:
  from tinyplug import nn
  from tinyplug.device import Device
  from tinyplug.nn.state import get_parameters
  previous = Device._default
  Device.DEFAULT = device
  try:
    Tensor.manual_seed(1)
    c1, c2 = nn.Conv2d(1, 4, 3), nn.Conv2d(4, 4, 3)
    params = get_parameters([c1, c2])
    for p in params: p.requires_grad_(True)
    x = Tensor(_rand((4, 1, 8, 8), 3))
    # the parameters are not realized: their random init is computed inline wherever they are read
    loss = c2(c1(x).relu().max_pool2d(2)).relu().square().sum()
    return [g.numpy() for g in loss.gradient(*params)]
  finally: Device._default = previous

def test_maxpool_gradient_of_an_inline_input_matches_the_interpreter():
  # the max mask is compared against the pooled values: an input recomputed in two CPU kernels could round apart
  # (FMA contraction) and leave windows without gradient (zeros, or NaN from 0/0)
  for ours, ref in zip(_cnn_grads("CPU"), _cnn_grads("PYTHON")):
    assert np.isfinite(ours).all()
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=1e-4)

def _multiply_adds(t: Tensor) -> int:
  """Multiply-adds of the reductions in t's schedule: each kernel's output elements times its reduction's length."""
  import math
  from tinyplug.codegen.kernel import Kernel
  from tinyplug.device import Device
  from tinyplug.schedule import create_schedule
  items, _ = create_schedule([t.uop])
  total = 0
  for it in items:
    k = Kernel(it.ast, Device["CPU"].renderer)
    if k.reduce_axes: total += math.prod(r.src[0].arg for r in k.loop_axes + k.reduce_axes)
  return total

@pytest.mark.parametrize("stride,dilation", [(2, 1), (3, 1), ((2, 1), 1), (2, 2)], ids=str)
def test_strided_input_gradient_skips_the_zeros(stride, dilation):
  # one stride-1 convolution per phase of the input: each input position meets only the taps that reach it, so the
  # input gradient's multiply-adds are about those of the forward convolution, not prod(stride) times them; the
  # weight gradient's output is k x k (not cut down from a larger one). Values against torch.
  x, w = _rand((4, 6, 21, 20), 5), _rand((8, 6, 3, 3), 6)
  xs, ws = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  out = xs.conv2d(ws, stride=stride, dilation=dilation)
  forward = _multiply_adds(out)   # the gradients' schedules compute the forward convolution too
  assert forward == math.prod(out.shape) * 6 * 9
  (out * out).sum().backward()
  assert _multiply_adds(xs.grad) - forward <= 1.6 * forward
  assert _multiply_adds(ws.grad) - forward <= 1.1 * forward
  xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  ref = F.conv2d(xt, wt, stride=stride, dilation=dilation)
  (ref * ref).sum().backward()
  np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), atol=1e-3, rtol=1e-4)
  np.testing.assert_allclose(ws.grad.numpy(), wt.grad.numpy(), atol=1e-3, rtol=1e-4)
