"""The gradient of overlapping max-pool windows (`_max_pool_backward`): gathered per input element from the windows
that read it, on a grid of stride phases. Values against torch for distinct inputs (1d, 2d, 3d; strides, dilation,
padding, ceil_mode); ties shared as the max reduction's own rule shares them (checked against the gradient of the
plain window view); and the kernel it makes."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyplug import dtypes, schedule
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(31)

def _distinct(shape) -> np.ndarray:
  # a permutation: no two elements tie, so torch's first-index rule and the shared rule agree
  return (RNG.permutation(int(np.prod(shape))).reshape(shape) / 7.0 - 3.0).astype(np.float32)

CASES = [((2, 3, 13, 11), dict(kernel_size=3, stride=2, padding=1)),
         ((2, 3, 12, 12), dict(kernel_size=3, stride=1, padding=1)),
         ((1, 2, 15, 14), dict(kernel_size=(3, 2), stride=(2, 1))),
         ((2, 2, 16, 16), dict(kernel_size=3, stride=2, dilation=2, padding=1)),
         ((2, 2, 14, 13), dict(kernel_size=3, stride=2, ceil_mode=True)),
         ((1, 3, 17, 17), dict(kernel_size=5, stride=3, padding=2)),
         ((2, 2, 9, 9), dict(kernel_size=2, stride=1))]

@pytest.mark.parametrize("shape,kw", CASES, ids=str)
def test_gradient_matches_torch(shape, kw):
  x = _distinct(shape)
  xt, xs = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
  ref, out = F.max_pool2d(xt, **kw), xs.max_pool2d(**kw)
  np.testing.assert_array_equal(out.numpy(), ref.detach().numpy())
  seed = RNG.standard_normal(tuple(ref.shape)).astype(np.float32)
  (ref * torch.tensor(seed)).sum().backward()
  (out * Tensor(seed)).sum().backward()
  np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), rtol=1e-6, atol=1e-6)

@pytest.mark.parametrize("dims", [1, 3])
def test_one_and_three_dim_pools(dims):
  shape = (2, 3, 19) if dims == 1 else (1, 2, 7, 8, 9)
  pool = F.max_pool1d if dims == 1 else F.max_pool3d
  x = _distinct(shape)
  xt, xs = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
  ref, out = pool(xt, 3, 2, 1), xs.max_pool2d((3,) * dims, 2, padding=1)
  np.testing.assert_array_equal(out.numpy(), ref.detach().numpy())
  ref.sum().backward(); out.sum().backward()
  np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), rtol=1e-6)

def test_ties_share_as_the_window_views_gradient():
  # ties (a constant patch, repeated values) split each window's gradient between its maxima: the same values as
  # differentiating the window view's max reduction directly
  x = np.round(RNG.standard_normal((2, 2, 11, 10)) * 1.5).astype(np.float32)
  x[0, 0, 2:6, 3:8] = 4.0
  seed = RNG.standard_normal((2, 2, 6, 5)).astype(np.float32)
  a, b = Tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
  (a.max_pool2d(3, 2, padding=1) * Tensor(seed)).sum().backward()
  view = b.contiguous().pad(((0, 0), (0, 0), (1, 1), (1, 1)), value=dtypes.min(dtypes.float32))._pool((3, 3), (2, 2))
  (view.max((-2, -1)) * Tensor(seed)).sum().backward()
  np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-6, atol=1e-7)
  assert np.count_nonzero(a.grad.numpy()[0, 0, 2:6, 3:8]) > 1   # the patch's gradient is shared, not given to one

def test_half_inputs_and_inf():
  x = _distinct((1, 2, 9, 9))
  x[0, 0, 4, 4] = np.inf
  xt, xs = torch.tensor(x, requires_grad=True), Tensor(x.astype(np.float16), requires_grad=True)
  F.max_pool2d(xt, 3, 2, 1).sum().backward()
  xs.max_pool2d(3, 2, padding=1).sum().backward()
  assert xs.grad.dtype == dtypes.float16
  np.testing.assert_allclose(xs.grad.numpy().astype(np.float32), xt.grad.numpy())

def test_the_gradient_is_one_elementwise_kernel():
  schedule._templates.clear()
  x = Tensor.empty(8, 16, 56, 56, requires_grad=True)
  x.max_pool2d(3, 2, padding=1).sum().backward()
  items, _ = create_schedule([x.grad.uop])
  kernels = [it.ast for it in items if it.ast.op is Ops.SINK]
  # the windows' max, the count of maxima per window, the gradient: the last reduces nothing
  assert len(kernels) == 3
  assert not any(u.op is Ops.REDUCE_AXIS or u.op is Ops.REDUCE for u in kernels[-1].toposort())

# ---- average pools over overlapping windows: the same gathering, each window's gradient over its divisor ----

AVG_CASES = [((2, 3, 13, 11), dict(kernel_size=3, stride=2, padding=1)),
             ((2, 3, 13, 11), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)),
             ((2, 2, 14, 13), dict(kernel_size=3, stride=2, ceil_mode=True)),
             ((2, 2, 14, 13), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False)),
             ((1, 2, 15, 14), dict(kernel_size=(3, 2), stride=(2, 1))),
             ((2, 2, 9, 9), dict(kernel_size=2, stride=1))]

@pytest.mark.parametrize("shape,kw", AVG_CASES, ids=str)
def test_avg_pool_gradient_matches_torch(shape, kw):
  x = RNG.standard_normal(shape).astype(np.float32)
  xt, xs = torch.tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
  ref, out = F.avg_pool2d(xt, **kw), xs.avg_pool2d(**kw)
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
  seed = RNG.standard_normal(tuple(ref.shape)).astype(np.float32)
  (ref * torch.tensor(seed)).sum().backward()
  (out * Tensor(seed)).sum().backward()
  np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)

def test_avg_pool_dilated_and_3d_match_the_window_views_gradient():
  # torch's avg_pool2d has no dilation: the reference is the window view's own gradient
  x = RNG.standard_normal((2, 2, 16, 15)).astype(np.float32)
  seed = RNG.standard_normal((2, 2, 6, 6)).astype(np.float32)
  a, b = Tensor(x, requires_grad=True), Tensor(x, requires_grad=True)
  (a.avg_pool2d(3, 2, dilation=2) * Tensor(seed)).sum().backward()
  (b._pool((3, 3), (2, 2), (2, 2)).mean((-2, -1)) * Tensor(seed)).sum().backward()
  np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-5, atol=1e-7)
  x3 = RNG.standard_normal((1, 2, 7, 8, 9)).astype(np.float32)
  xt, xs = torch.tensor(x3, requires_grad=True), Tensor(x3, requires_grad=True)
  F.avg_pool3d(xt, 3, 2, 1).square().sum().backward()
  xs.avg_pool2d((3, 3, 3), 2, padding=1).square().sum().backward()
  np.testing.assert_allclose(xs.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)
