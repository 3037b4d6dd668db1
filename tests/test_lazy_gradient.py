"""Lazy gradients (gradient_template.lazy_gradients, engine/plan._realize_lazy_gradient): backward() of a graph whose
gradient recipe is recorded hands out deferred gradients; one realized as it is runs from its schedule's graph plan
over the forward nodes, one read otherwise is replayed then. Values against torch either way, and the shortcut only
where the graph is the one recorded."""
from __future__ import annotations
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyplug import Tensor, TinyJit
from tinyplug import gradient_template as gt
from tinyplug.engine import plan
from tinyplug.helpers import Context

pytestmark = pytest.mark.usefixtures("device")

LABELS = (np.arange(64) * 7) % 10

@pytest.fixture(autouse=True)
def fresh_templates():
  gt._templates.clear()
  gt._seen.clear()
  yield

def _lazy(t: Tensor) -> bool: return t._defer is not None and type(t._defer[0]) is gt.LazyGradient

def _ce_step(x: Tensor, labels=LABELS, smoothing: float = 0.0) -> Tensor:
  x.grad = None
  x.sparse_categorical_crossentropy(Tensor(labels.astype(np.int32)), label_smoothing=smoothing).backward()
  return x.grad

def _torch_ce_grad(xn: np.ndarray, labels=LABELS, smoothing: float = 0.0) -> np.ndarray:
  xt = torch.tensor(xn, requires_grad=True)
  F.cross_entropy(xt, torch.tensor(labels), label_smoothing=smoothing).backward()
  return xt.grad.numpy()

def _warm(step, n: int = 3) -> None:
  for _ in range(n): Tensor.realize(step())

def test_repeated_step_runs_from_the_plan():
  xn = np.random.default_rng(0).standard_normal((64, 10)).astype(np.float32)
  x = Tensor(xn, requires_grad=True).realize()
  want = _torch_ce_grad(xn)
  lazy_steps = []
  for i in range(6):
    g = _ce_step(x)
    lazy_steps.append(_lazy(g))
    hits = plan.counters["lazy_gradient_hits"]
    Tensor.realize(g)
    assert plan.counters["lazy_gradient_hits"] == hits + lazy_steps[-1]
    assert not _lazy(x.grad)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5, atol=1e-7)
  # the first steps derive the gradient (the loss template, then its recipe); every step after is lazy
  assert lazy_steps[-3:] == [True] * 3 and not lazy_steps[0]

@pytest.mark.parametrize("change", ["shape", "dtype", "constant", "requires_grad"])
def test_another_graph_is_not_served(change):
  rng = np.random.default_rng(1)
  xn = rng.standard_normal((64, 10)).astype(np.float32)
  x = Tensor(xn, requires_grad=True).realize()
  _warm(lambda: _ce_step(x))
  assert _lazy(_ce_step(x))
  if change == "shape":
    xn2 = rng.standard_normal((32, 10)).astype(np.float32)
    x2 = Tensor(xn2, requires_grad=True).realize()
    g, want = _ce_step(x2, LABELS[:32]), _torch_ce_grad(xn2, LABELS[:32])
  elif change == "dtype":
    xn2 = xn.astype(np.float64)
    x2 = Tensor(xn2, requires_grad=True).realize()
    g, want = _ce_step(x2), _torch_ce_grad(xn2)
  elif change == "constant":
    g, want = _ce_step(x, smoothing=0.25), _torch_ce_grad(xn, smoothing=0.25)
  else:   # a second input that now takes part: another set of targets
    wn = rng.standard_normal((10,)).astype(np.float32)
    w = Tensor(wn, requires_grad=False).realize()
    def step():
      x.grad = w.grad = None
      (x * w).sparse_categorical_crossentropy(Tensor(LABELS.astype(np.int32))).backward()
      return x.grad
    _warm(step)
    assert _lazy(step())
    w.requires_grad = True
    g = step()
    assert not _lazy(g) and not _lazy(w.grad)
    xt, wt = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
    F.cross_entropy(xt * wt, torch.tensor(LABELS)).backward()
    np.testing.assert_allclose(w.grad.numpy(), wt.grad.numpy(), rtol=1e-4, atol=1e-6)
    want = xt.grad.numpy()
  assert not _lazy(g)   # a graph not differentiated before: derived, not served from the other's recipe
  np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-7)

def test_read_before_realize_builds_the_gradient():
  xn = np.random.default_rng(2).standard_normal((64, 10)).astype(np.float32)
  x = Tensor(xn, requires_grad=True).realize()
  _warm(lambda: _ce_step(x))
  g = _ce_step(x)
  assert _lazy(g)
  assert g.shape == (64, 10) and not _lazy(g)   # (any read of the graph builds it)
  hits = plan.counters["lazy_gradient_hits"]
  np.testing.assert_allclose((g * 2).numpy(), 2 * _torch_ce_grad(xn), rtol=1e-5, atol=1e-7)
  assert plan.counters["lazy_gradient_hits"] == hits

def test_accumulates_and_the_loss_stays_usable():
  xn = np.random.default_rng(3).standard_normal((64, 10)).astype(np.float32)
  x = Tensor(xn, requires_grad=True).realize()
  _warm(lambda: _ce_step(x))
  x.grad = None
  losses = []
  for _ in range(2):   # no zeroing between them: the second adds to the first
    loss = x.sparse_categorical_crossentropy(Tensor(LABELS.astype(np.int32)))
    loss.backward()
    losses.append(loss)
  x.grad.realize()
  xt = torch.tensor(xn, requires_grad=True)
  want_loss = F.cross_entropy(xt, torch.tensor(LABELS))
  want_loss.backward()
  np.testing.assert_allclose(x.grad.numpy(), 2 * xt.grad.numpy(), rtol=1e-5, atol=1e-7)
  for loss in losses: np.testing.assert_allclose(loss.item(), want_loss.item(), rtol=1e-5)

def test_several_new_gradients_are_built_at_once():
  rng = np.random.default_rng(4)
  an, bn = rng.standard_normal((32, 16)).astype(np.float32), rng.standard_normal((32, 16)).astype(np.float32)
  a, b = Tensor(an, requires_grad=True).realize(), Tensor(bn, requires_grad=True).realize()
  at, bt = torch.tensor(an, requires_grad=True), torch.tensor(bn, requires_grad=True)
  ((at - bt) ** 2).mean().backward()
  for _ in range(5):   # (realized together, they are built anyway: not handed out deferred)
    a.grad = b.grad = None
    ((a - b) ** 2).mean().backward()
    assert not _lazy(a.grad) and not _lazy(b.grad)
    Tensor.realize(a.grad, b.grad)
    np.testing.assert_allclose(a.grad.numpy(), at.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b.grad.numpy(), bt.grad.numpy(), rtol=1e-5, atol=1e-7)

def test_a_sibling_built_first():
  rng = np.random.default_rng(8)
  an, cn = rng.standard_normal((32, 16)).astype(np.float32), rng.standard_normal((32, 16)).astype(np.float32)
  a, c = Tensor(an, requires_grad=True).realize(), Tensor(cn, requires_grad=False).realize()
  at = torch.tensor(an, requires_grad=True)
  ((at - torch.tensor(cn)) ** 2).mean().backward()
  def step() -> Tensor:
    a.grad = None
    loss = ((a - c) ** 2).mean()
    loss.backward()
    return loss
  for _ in range(3): step(); a.grad.realize()
  loss = step()   # kept: a target too, its gradient (the ones the backward starts from) comes from the same replay
  assert _lazy(a.grad) and _lazy(loss.grad)
  assert loss.grad.item() == 1.0   # replays the recipe: a's realize then builds its graph from it, the usual way
  hits = plan.counters["lazy_gradient_hits"]
  a.grad.realize()
  assert plan.counters["lazy_gradient_hits"] == hits and not _lazy(a.grad)
  np.testing.assert_allclose(a.grad.numpy(), at.grad.numpy(), rtol=1e-5, atol=1e-7)

def test_not_while_a_listener_or_debug_or_jit():
  xn = np.random.default_rng(5).standard_normal((64, 10)).astype(np.float32)
  x = Tensor(xn, requires_grad=True).realize()
  want = _torch_ce_grad(xn)
  _warm(lambda: _ce_step(x))
  with Context(DEBUG=1):   # a lazy gradient is built and realized the usual way (the realize prints its kernels)
    g = _ce_step(x)
    hits = plan.counters["lazy_gradient_hits"]
    g.realize()
    assert plan.counters["lazy_gradient_hits"] == hits
  np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5, atol=1e-7)
  @TinyJit
  def jitted(labels: Tensor) -> Tensor:
    x.grad = None
    x.sparse_categorical_crossentropy(labels).backward()
    return x.grad.realize()
  for i in range(4):
    out = jitted(Tensor(LABELS.astype(np.int32)).realize())
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-7)

def test_a_deferred_loss_is_not_built():
  xn = np.random.default_rng(6).standard_normal((64, 10)).astype(np.float32)
  x = Tensor(xn, requires_grad=True).realize()
  _warm(lambda: _ce_step(x))
  xt = torch.tensor(xn, requires_grad=True)
  want = F.cross_entropy(xt, torch.tensor(LABELS))
  want.backward()
  for keep_loss in (False, True):
    x.grad = None
    loss = x.sparse_categorical_crossentropy(Tensor(LABELS.astype(np.int32)))   # over data just made: deferred
    assert loss._defer is not None
    loss.backward()
    assert loss._uop is None and _lazy(x.grad)   # its graph never built
    assert loss.grad.item() == 1.0               # d(loss)/d(loss), as backward() gives every target
    if keep_loss: np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-5)   # read first: built then
    x.grad.realize()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(loss.item(), want.item(), rtol=1e-5)

def test_a_loss_sharing_its_inputs_with_another_deferred_output_is_built():
  xn = np.random.default_rng(7).standard_normal((64, 10)).astype(np.float32)
  x = Tensor(xn, requires_grad=True).realize()
  _warm(lambda: _ce_step(x))
  x.grad = None
  labels = Tensor(LABELS.astype(np.int32))
  first, second = x.sparse_categorical_crossentropy(labels), x.sparse_categorical_crossentropy(labels)
  assert first._defer is not None and second._defer is not None
  # the second one's graph, once built, would hold the nodes the first one's gradient realizes: the usual way
  first.backward()
  assert first._uop is not None
  want = _torch_ce_grad(xn)
  np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5, atol=1e-7)
  second.backward()   # (built by then: the first one's realize built every deferred output before pointing them)
  np.testing.assert_allclose(x.grad.numpy(), 2 * want, rtol=1e-5, atol=1e-7)
  xt = torch.tensor(xn)
  np.testing.assert_allclose(second.item(), F.cross_entropy(xt, torch.tensor(LABELS)).item(), rtol=1e-5)
