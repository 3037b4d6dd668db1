"""Tensor methods that tinygrad has and tinyplug added for compatibility, each checked against torch (or numpy)."""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
from tinyplug import Tensor, dtypes

RNG = np.random.default_rng(0)
def rand(*shape, low=-1.0, high=1.0): return RNG.uniform(low, high, shape).astype(np.float32)

@pytest.mark.parametrize("name, low, high", [("asin", -0.99, 0.99), ("acos", -0.99, 0.99), ("atan", -30, 30),
                                             ("sinh", -5, 5), ("cosh", -5, 5), ("asinh", -30, 30), ("acosh", 1.01, 30),
                                             ("atanh", -0.99, 0.99), ("erf", -4, 4)])
def test_unary_forward_and_backward(name, low, high):
  x = rand(4, 6, low=low, high=high)
  t, tt = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  out, tout = getattr(t, name)(), getattr(torch, name)(tt)
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
  out.sum().backward(); tout.sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-4, atol=1e-5)

def test_atan_extremes():
  x = np.array([-np.inf, -1e30, -1.0, -0.0, 0.0, 1e-30, 1.0, 1e30, np.inf, np.nan], dtype=np.float32)
  np.testing.assert_allclose(Tensor(x).atan().numpy(), np.arctan(x), rtol=1e-6)

def test_copysign_signs_and_zeros():
  v = [-1.0, -0.0, 0.0, 2.0, math.inf, -math.inf, math.nan]
  x = np.array([a for a in v for _ in v], dtype=np.float32)
  y = np.array([b for _ in v for b in v], dtype=np.float32)
  out = Tensor(x).copysign(Tensor(y)).numpy()
  assert np.array_equal(np.signbit(out), np.signbit(np.copysign(x, y)))
  np.testing.assert_equal(out, np.copysign(x, y))
  np.testing.assert_equal(Tensor([1, -2, 3]).copysign(-1.0).numpy(), [-1.0, -2.0, -3.0])

def test_copysign_gradient_matches_torch():
  # torch: d copysign(x, y)/dx is sign(x)*sign(result), and 0 where x == 0 (either zero); y gets no gradient
  v = [-1.0, -0.0, 0.0, 2.0, math.inf, -math.inf, math.nan]
  x = np.array([a for a in v if math.isfinite(a) for _ in v], dtype=np.float32)
  y = np.array([b for a in v if math.isfinite(a) for b in v], dtype=np.float32)
  t, ty = Tensor(x, requires_grad=True), Tensor(y, requires_grad=True)
  tt, tty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
  t.copysign(ty).sum().backward(); torch.copysign(tt, tty).sum().backward()
  np.testing.assert_equal(t.grad.numpy(), tt.grad.numpy())
  np.testing.assert_equal(ty.grad.numpy(), tty.grad.numpy())

def test_logaddexp_fmod_isclose():
  a, b = np.array([-1.0, 2000.0, -300.0, -np.inf], np.float32), np.array([3.0, 2.0, -200.0, -np.inf], np.float32)
  np.testing.assert_allclose(Tensor(a).logaddexp(Tensor(b)).numpy(), np.logaddexp(a, b), rtol=1e-6)
  x, y = rand(20, low=-10, high=10), rand(20, low=0.5, high=3) * np.where(rand(20) > 0, 1, -1).astype(np.float32)
  np.testing.assert_allclose(Tensor(x).fmod(Tensor(y)).numpy(), np.fmod(x, y), atol=1e-5)
  np.testing.assert_equal(Tensor([7, -7, 7, -7]).fmod(Tensor([3, 3, -3, -3])).numpy(), np.fmod([7, -7, 7, -7], [3, 3, -3, -3]))
  p = np.array([1.0, 1.0 + 1e-7, np.inf, np.nan, 0.0], np.float32)
  q = np.array([1.0, 1.0, np.inf, np.nan, 1e-9], np.float32)
  for equal_nan in (False, True):
    np.testing.assert_equal(Tensor(p).isclose(Tensor(q), equal_nan=equal_nan).numpy(), np.isclose(p, q, equal_nan=equal_nan))

@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_modes(approximate):
  x = rand(50, low=-5, high=5)
  ref = torch.nn.functional.gelu(torch.tensor(x), approximate=approximate).numpy()
  np.testing.assert_allclose(Tensor(x).gelu(approximate=approximate).numpy(), ref, atol=1e-6)

# ---------------- sorting ----------------

@pytest.mark.parametrize("dim, descending", [(-1, False), (0, True), (1, False), (1, True)])
def test_sort_matches_torch_stable(dim, descending):
  x = np.round(rand(5, 6, 7) * 3)   # many ties: the order of equal values must be the stable one
  v, i = Tensor(x).sort(dim, descending)
  tv = torch.sort(torch.tensor(x), dim=dim, descending=descending, stable=True)
  np.testing.assert_equal(v.numpy(), tv.values.numpy())
  np.testing.assert_equal(i.numpy(), tv.indices.numpy())
  assert i.dtype == dtypes.int32

def test_sort_nan_ints_and_small():
  x = np.array([3.0, np.nan, -1.0, np.inf, 0.5], np.float32)
  for desc in (False, True):
    tv = torch.sort(torch.tensor(x), descending=desc, stable=True)
    v, i = Tensor(x).sort(descending=desc)
    np.testing.assert_equal(v.numpy(), tv.values.numpy()); np.testing.assert_equal(i.numpy(), tv.indices.numpy())
  v, i = Tensor([2**31 - 1, -5, 2**31 - 1, 0, -2**31], dtype=dtypes.int32).sort()
  assert v.tolist() == [-2**31, -5, 0, 2**31 - 1, 2**31 - 1] and i.tolist() == [4, 1, 3, 0, 2]
  assert [t.tolist() for t in Tensor([4.0]).sort()] == [[4.0], [0]]

def test_argsort_and_topk():
  x = rand(6, 9)
  np.testing.assert_equal(Tensor(x).argsort(1, True).numpy(), torch.argsort(torch.tensor(x), dim=1, descending=True, stable=True).numpy())
  for k, dim, largest in [(3, -1, True), (2, 0, False)]:
    v, i = Tensor(x).topk(k, dim, largest)
    tv = torch.topk(torch.tensor(x), k, dim, largest)
    np.testing.assert_equal(v.numpy(), tv.values.numpy()); np.testing.assert_equal(i.numpy(), tv.indices.numpy())
  with pytest.raises(ValueError, match="topk"): Tensor(x).topk(10)

@pytest.mark.parametrize("name", ["cummax", "cummin"])
def test_running_extremes_with_indices(name):
  x = np.round(rand(4, 11) * 2)   # ties: torch reports the last index reaching the extreme
  v, i = getattr(Tensor(x), name)(1)
  tv = getattr(torch, name)(torch.tensor(x), 1)
  np.testing.assert_equal(v.numpy(), tv.values.numpy()); np.testing.assert_equal(i.numpy(), tv.indices.numpy())

def test_logcumsumexp():
  x = rand(3, 8, low=-50, high=50)
  np.testing.assert_allclose(Tensor(x).logcumsumexp(1).numpy(), torch.logcumsumexp(torch.tensor(x), 1).numpy(), rtol=1e-5)

def test_zero_dim_scans_and_softmax():
  t = Tensor(2.5)
  assert t.cumsum(0).item() == 2.5 and t.softmax().item() == 1.0 and t.log_softmax(-1).item() == 0.0
  assert t.sum(0).item() == 2.5
  x = rand(3, 4)
  np.testing.assert_allclose(Tensor(x).softmin(1).numpy(), torch.nn.functional.softmin(torch.tensor(x), 1).numpy(), rtol=1e-6)

# ---------------- einsum and diagonals ----------------

@pytest.mark.parametrize("formula, shapes", [
  ("ij->ji", [(3, 4)]), ("ij,jk", [(3, 4), (4, 5)]), ("ijk,ikl->jil", [(2, 3, 4), (2, 4, 5)]),
  ("ii->i", [(4, 4)]), ("ii", [(4, 4)]), ("...ii->...", [(2, 3, 3)]), ("...id,...jd->...ij", [(2, 3, 4), (2, 5, 4)]),
  ("i...j,ji...->...", [(2, 3, 4, 5), (5, 2, 4)]), ("ik,jkl,il->ij", [(2, 3), (5, 3, 7), (2, 7)]), ("->", [()]),
  ("i,i", [(5,), (5,)])])
def test_einsum_matches_numpy(formula, shapes):
  ops = [rand(*s) for s in shapes]
  np.testing.assert_allclose(Tensor.einsum(formula, *[Tensor(o) for o in ops]).numpy(), np.einsum(formula, *ops),
                             rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(Tensor.einsum(formula, [Tensor(o) for o in ops]).numpy(), np.einsum(formula, *ops),
                             rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("formula, shapes", [("ij,jk->ik", [(3, 4), (5, 6)]), ("ij,jk->ik", [(3, 4)]),
                                             ("...ik...,jk", [(2, 3), (2, 3)]), ("i...j,ji...->...", [(2, 3, 4), (2, 3, 4)])])
def test_einsum_errors(formula, shapes):
  with pytest.raises(RuntimeError, match="einsum"): Tensor.einsum(formula, *[Tensor(rand(*s)) for s in shapes])

def test_einsum_gradient():
  a, b = rand(3, 4), rand(4, 2)
  ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
  Tensor.einsum("ij,jk->ik", ta, tb).sum().backward()
  np.testing.assert_allclose(ta.grad.numpy(), np.ones((3, 2)) @ b.T, rtol=1e-5)

@pytest.mark.parametrize("shape, offset, d1, d2", [((5, 5), 0, 0, 1), ((3, 6), 2, 0, 1), ((6, 3), -2, 0, 1),
                                                   ((2, 4, 5), 1, -2, -1), ((4, 2, 3), 0, 2, 0), ((3, 3), 5, 0, 1)])
def test_diagonal(shape, offset, d1, d2):
  x = rand(*shape)
  np.testing.assert_equal(Tensor(x).diagonal(offset, d1, d2).numpy(), np.diagonal(x, offset, d1, d2))

def test_diag():
  x = rand(4)
  np.testing.assert_equal(Tensor(x).diag().numpy(), np.diag(x))

# ---------------- selection and scatter ----------------

def test_masked_select_and_nonzero():
  x = rand(4, 5)
  m = x > 0.2
  np.testing.assert_equal(Tensor(x).masked_select(Tensor(m)).numpy(), x[m])
  np.testing.assert_equal(Tensor(x).masked_select(Tensor(True)).numpy(), x.reshape(-1))
  np.testing.assert_equal(Tensor([0, 1, 2, 3, 4]).masked_select(Tensor([True, False, True, False, False]), size=3).numpy(),
                          [0, 2, 0])
  np.testing.assert_equal(Tensor(m).nonzero().numpy(), np.argwhere(m))
  np.testing.assert_equal(Tensor([1, 0, 2, 0, 3]).nonzero(size=5, fill_value=-1).numpy(), [[0], [2], [4], [-1], [-1]])
  assert Tensor(x).masked_select(Tensor(x > 5)).shape == (0,)

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_last_write_wins(dim):
  idx = torch.tensor(RNG.integers(0, 3, (3, 4, 5)))
  x, src = torch.tensor(rand(4, 5, 6)), torch.tensor(rand(4, 5, 6))
  ref = x.scatter(dim, idx, src)
  out = Tensor(x.numpy()).scatter(dim, Tensor(idx.numpy().astype(np.int32)), Tensor(src.numpy()))
  np.testing.assert_equal(out.numpy(), ref.numpy())
  np.testing.assert_allclose(Tensor(x.numpy()).scatter(dim, Tensor(idx.numpy().astype(np.int32)), 2.0, reduce="add").numpy(),
                             x.scatter(dim, idx, 2.0, reduce="add").numpy(), rtol=1e-6)

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
  idx = torch.tensor(RNG.integers(0, 3, (3, 4, 5)))
  x, src = torch.tensor(rand(3, 4, 5)), torch.tensor(rand(3, 4, 5))
  ref = x.scatter_reduce(1, idx, src, reduce, include_self=include_self)
  out = Tensor(x.numpy()).scatter_reduce(1, Tensor(idx.numpy().astype(np.int32)), Tensor(src.numpy()), reduce,
                                         include_self=include_self)
  np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)

# ---------------- resampling, windows, losses ----------------

@pytest.mark.parametrize("mode, align, size", [("linear", False, (7,)), ("linear", True, (13,)), ("nearest", False, (5, 9)),
                                               ("nearest-exact", False, (9, 4)), ("linear", False, (6, 11)),
                                               ("linear", True, (3, 4, 5))])
def test_interpolate(mode, align, size):
  x = rand(2, 3, *[8, 6, 4][:len(size)])
  torch_mode = mode if mode != "linear" else {1: "linear", 2: "bilinear", 3: "trilinear"}[len(size)]
  kw = dict(align_corners=align) if mode == "linear" else {}
  ref = torch.nn.functional.interpolate(torch.tensor(x), size=size, mode=torch_mode, **kw).numpy()
  np.testing.assert_allclose(Tensor(x).interpolate(size, mode=mode, align_corners=align).numpy(), ref, atol=1e-6)

@pytest.mark.parametrize("src, dst, align", [((64, 64), (10, 10), False), ((7, 9), (20, 13), False),
                                              ((32, 16), (8, 40), False), ((9, 9), (17, 5), True)])
def test_interpolate_bilinear_uint8_matches_torch_exactly(src, dst, align):
  # torch resizes uint8 images in fixed point, one dim at a time: rounding the float result is off by one in ~20%
  x = RNG.integers(0, 256, (2, 3, *src)).astype(np.uint8)
  ref = torch.nn.functional.interpolate(torch.tensor(x), size=dst, mode="bilinear", align_corners=align).numpy()
  out = Tensor(x).interpolate(dst, mode="linear", align_corners=align)
  assert out.dtype == dtypes.uint8
  np.testing.assert_array_equal(out.numpy(), ref)

def test_interpolate_nearest_keeps_integer_dtype():
  x = RNG.integers(0, 255, (1, 1, 9, 9)).astype(np.uint8)
  out = Tensor(x).interpolate((4, 5), mode="nearest")
  assert out.dtype == dtypes.uint8
  np.testing.assert_equal(out.numpy(), torch.nn.functional.interpolate(torch.tensor(x), size=(4, 5), mode="nearest").numpy())

@pytest.mark.parametrize("dim, size, step", [(0, 2, 1), (0, 7, 3), (2, 2, 8), (-1, 2, 2), (1, 0, 8)])
def test_unfold(dim, size, step):
  x = rand(8, 3, 3) if dim == 0 else rand(3, 3, 3)
  np.testing.assert_equal(Tensor(x).unfold(dim, size, step).numpy(), torch.tensor(x).unfold(dim, size, step).numpy())

def test_repeat_interleave_pad_to_shrink_to():
  x = rand(3, 4)
  for dim in (None, 0, 1, -1):
    np.testing.assert_equal(Tensor(x).repeat_interleave(3, dim).numpy(), torch.tensor(x).repeat_interleave(3, dim).numpy())
  assert Tensor(x).pad_to(5, None).shape == (5, 4) and Tensor(x).pad_to((5, 6), value=1).numpy()[4, 5] == 1
  np.testing.assert_equal(Tensor(x).shrink_to(2, 3).numpy(), x[:2, :3])

@pytest.mark.parametrize("p, dim", [(2.0, 1), (1.0, 0), (3.0, -1), (0, 1), (math.inf, 0)])
def test_normalize(p, dim):
  x = rand(5, 6)
  np.testing.assert_allclose(Tensor(x).normalize(p, dim).numpy(),
                             torch.nn.functional.normalize(torch.tensor(x), p, dim).numpy(), rtol=1e-5, atol=1e-7)

@pytest.mark.parametrize("kwargs", [dict(), dict(stride=2, padding=1, output_padding=1), dict(groups=2, dilation=2)])
def test_conv_transpose2d_method(kwargs):
  x, w, b = rand(2, 4, 5, 6), rand(4, 3, 3, 2), rand(6 if kwargs.get("groups") else 3)
  if kwargs.get("groups"): w = rand(4, 3, 3, 2)
  ref = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), **kwargs).numpy()
  np.testing.assert_allclose(Tensor(x).conv_transpose2d(Tensor(w), Tensor(b), **kwargs).numpy(), ref, atol=1e-5)

def test_nll_loss_method():
  x, y = rand(6, 5), RNG.integers(0, 5, (6,))
  ref = torch.nn.functional.nll_loss(torch.log_softmax(torch.tensor(x), 1), torch.tensor(y)).item()
  assert abs(Tensor(x).log_softmax(1).nll_loss(Tensor(y.astype(np.int32))).item() - ref) < 1e-5

def test_scatter_refuses_a_src_of_another_dtype():
  x, idx = Tensor.zeros(3, 4, dtype=dtypes.half), Tensor([[0, 1, 2, 0]], dtype=dtypes.int32)
  with pytest.raises(RuntimeError, match="src is dtypes.float"): x.scatter(0, idx, Tensor.ones(1, 4))
  with pytest.raises(RuntimeError, match="src is dtypes.float"): x.scatter_reduce(0, idx, Tensor.ones(1, 4), reduce="sum")
  assert x.scatter(0, idx, 2.0).numpy()[0].tolist() == [2.0, 0.0, 0.0, 2.0]   # a Python number takes self's dtype
