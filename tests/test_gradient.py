"""Autograd: the seed documents' examples, the chain rule, accumulation, and the gradient table itself."""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
from tinyplug import Tensor
from tinyplug.gradient import GRADIENT_RULES, compute_gradient
from tinyplug.uop.ops import GroupOp, Ops

pytestmark = pytest.mark.usefixtures("device")

def test_seed_polynomial():
  x = Tensor([2.0], requires_grad=True)
  y = x**2 + 3*x + 1
  loss = y.sum()
  assert x.item() == 2.0 and y.item() == 11.0
  grad, = loss.gradient(x)
  assert grad.item() == 7.0

def test_seed_chain_rule():
  x = Tensor([2.0], requires_grad=True)
  z = (x**2 + 1).log()
  assert z.item() == pytest.approx(math.log(5), rel=1e-6)
  grad, = z.sum().gradient(x)
  assert grad.item() == pytest.approx(0.8, rel=1e-6)

def test_gradient_returns_lazy_tensors_and_leaves_grad_alone():
  x = Tensor([1.0, 2.0], requires_grad=True)
  g, = (x * x).sum().gradient(x)
  assert x.grad is None and g.requires_grad is False and g.tolist() == [2.0, 4.0]

def test_chain_through_many_ops():
  def f(lib_x, lib_w):
    h = (lib_x @ lib_w).tanh()
    return ((h * h).sum(1) + h.exp().mean(1)).sqrt().sum()
  x, w = np.random.default_rng(0).uniform(-1, 1, (3, 4)).astype(np.float32), np.random.default_rng(1).uniform(-1, 1, (4, 5)).astype(np.float32)
  xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  f(xt, wt).backward()
  xp, wp = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  gx, gw = f(xp, wp).gradient(xp, wp)
  np.testing.assert_allclose(gx.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(gw.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-5)

def test_backward_accumulates_and_reuses_nodes():
  x = Tensor([3.0], requires_grad=True)
  y = x * x            # used twice below: both paths add up
  (y + y * x).sum().backward()
  assert x.grad.item() == pytest.approx(2 * 3 + 3 * 9)
  (x * 4).sum().backward()
  assert x.grad.item() == pytest.approx(33 + 4)

def test_backward_fills_every_float_tensor_that_did_not_opt_out():
  """As tinygrad: requires_grad=True is not needed (PyTorch code that sets it works the same); requires_grad=False,
  detach() and integer tensors opt out."""
  a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0])
  c, n = Tensor([5.0, 6.0], requires_grad=False), Tensor([1, 2])
  assert a.is_param and b.is_param and not c.is_param
  (a * b * c * n + b.detach()).sum().backward()
  assert a.grad.tolist() == [15.0, 48.0] and b.grad.tolist() == [5.0, 24.0]
  assert c.grad is None and n.grad is None
  b.is_param_(False)
  (a * b).sum().backward()
  assert a.grad.tolist() == [18.0, 52.0] and b.grad.tolist() == [5.0, 24.0]

def test_backward_needs_a_scalar_or_a_seed():
  x = Tensor([1.0, 2.0, 3.0], requires_grad=True)
  with pytest.raises(RuntimeError, match=r"scalar.*\(3,\)"): (x * 2).backward()
  (x * 2).backward(Tensor([1.0, 10.0, 100.0]))
  assert x.grad.tolist() == [2.0, 20.0, 200.0]
  with pytest.raises(RuntimeError, match=r"scalar.*\(3,\)"): (x * 2).gradient(x)

def test_detach_and_unrelated_targets():
  x = Tensor([2.0], requires_grad=True)
  g, = (x * x.detach()).sum().gradient(x)
  assert g.item() == 2.0
  other = Tensor([1.0], requires_grad=True)
  z, = (x * 2).sum().gradient(other)   # a target the graph does not use gets zeros, as in tinygrad
  assert z.tolist() == [0.0]
  with pytest.raises(RuntimeError, match="not in"): (x * 2).sum().gradient(other, materialize_grads=False)

def test_gradient_of_intermediate_and_leaf():
  x = Tensor([1.0, -2.0], requires_grad=True)
  h = x * 3
  gh, gx = (h * h).sum().gradient(h, x)
  assert gh.tolist() == [6.0, -12.0] and gx.tolist() == [18.0, -36.0]

def test_gradient_through_realized_input_and_broadcast():
  w = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True).realize()
  b = Tensor([0.5, -0.5], requires_grad=True)
  loss = (w + b).relu().sum()
  loss.backward()
  assert w.grad.tolist() == [[1.0, 1.0], [1.0, 1.0]] and b.grad.tolist() == [2.0, 2.0]

def test_max_ties_split_like_torch():
  vals = [[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]
  xt, xp = torch.tensor(vals, requires_grad=True), Tensor(vals, requires_grad=True)
  torch.amax(xt, 1).sum().backward()
  xp.max(1).sum().backward()
  np.testing.assert_allclose(xp.grad.numpy(), xt.grad.numpy(), rtol=1e-6)
  a, b = Tensor([1.0, 2.0, 3.0], requires_grad=True), Tensor([1.0, 5.0, 0.0], requires_grad=True)
  a.maximum(b).sum().backward()
  assert a.grad.tolist() == [0.5, 0.0, 1.0] and b.grad.tolist() == [0.5, 1.0, 0.0]

def test_relu_clip_gradient_at_the_kinks():
  x = Tensor([-1.0, 0.0, 1.0], requires_grad=True)
  x.relu().sum().backward()
  assert x.grad.tolist() == [0.0, 0.0, 1.0]
  y = Tensor([-1.0, 0.0, 1.0, 2.0], requires_grad=True)
  y.clip(0.0, 1.0).sum().backward()
  assert y.grad.tolist() == [0.0, 1.0, 1.0, 0.0]

def test_relu_gradient_reads_its_output_like_torch():
  # relu's gradient is computed from its output (0 exactly where the input is <= 0), so a materialized activation is
  # the one value forward and backward read; NaN passes the gradient and -0.0 does not, as in torch
  import torch
  a = np.array([-2.0, -0.0, 0.0, 1e-30, 3.0, np.nan, np.inf, -np.inf], dtype=np.float32)
  w = np.arange(1, 9, dtype=np.float32)
  x = Tensor(a, requires_grad=True)
  (x.relu() * Tensor(w)).sum().backward()
  xt = torch.tensor(a, requires_grad=True)
  (xt.relu() * torch.tensor(w)).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())
  (gg,) = (x * 3).relu().sum().gradient(x)   # through more math below it
  np.testing.assert_array_equal(gg.numpy(), np.where((a * 3 > 0) | np.isnan(a), 3.0, 0.0).astype(np.float32))

def test_second_use_after_numpy():
  x = Tensor([0.5, 1.5], requires_grad=True)
  y = x.sigmoid()
  y.numpy()
  y.sum().backward()
  s = 1 / (1 + np.exp(-np.array([0.5, 1.5])))
  np.testing.assert_allclose(x.grad.numpy(), s * (1 - s), rtol=1e-6)

def test_every_elementwise_op_has_a_rule():
  missing = [op for op in GroupOp.ALU | {Ops.CAST, Ops.BITCAST} | GroupOp.Movement | {Ops.REDUCE_AXIS, Ops.CONTIGUOUS, Ops.DETACH, Ops.COPY}
             if op not in GRADIENT_RULES and op not in (Ops.POW, Ops.MULACC)]
  assert missing == []

def test_compute_gradient_on_uops():
  x = Tensor([1.0, 2.0, 3.0])
  y = (x * x).sum()
  grads = compute_gradient(y.uop, Tensor(1.0).uop, {x.uop})
  assert Tensor.from_uop(grads[x.uop]).tolist() == [2.0, 4.0, 6.0]

def test_prod_gradient_with_zeros(device):
  import torch
  vals = [[1.0, 2.0, 0.0, 4.0], [0.0, 0.0, 3.0, 1.0], [2.0, 3.0, 4.0, 5.0]]
  for reduce in (lambda t: t.prod(1).sum(), lambda t: t.prod()):
    ref = torch.tensor(vals, requires_grad=True)
    reduce(ref).backward()
    x = Tensor(vals, requires_grad=True)
    reduce(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), ref.grad.numpy())

@pytest.mark.parametrize("shape,step", [
  ((0, 3), lambda t: (t * 2).sum()),
  ((2, 0), lambda t: t.exp().sum(1).sum()),
  ((2, 0), lambda t: t.mean(1).sum()),
  ((4, 0), lambda t: (t.sum(1) + 1).square().sum()),
])
def test_empty_input_gets_an_empty_gradient_like_torch(shape, step):
  # reductions of zero elements fold to their identity; backward() must still reach the input
  x, xt = Tensor.zeros(*shape, requires_grad=True), torch.zeros(*shape, requires_grad=True)
  loss, loss_t = step(x), step(xt)
  loss.backward(); loss_t.backward()
  assert loss.item() == pytest.approx(loss_t.item(), nan_ok=True)
  assert x.grad is not None and x.grad.shape == tuple(xt.grad.shape)
  np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())

def test_empty_matmul_gives_both_empty_gradients():
  a, b = Tensor.ones(2, 0, requires_grad=True), Tensor.ones(0, 3, requires_grad=True)
  out = a @ b
  out.sum().backward()
  np.testing.assert_array_equal(out.numpy(), np.zeros((2, 3), np.float32))
  assert a.grad.shape == (2, 0) and b.grad.shape == (0, 3)
