"""Optimisers against PyTorch (and a numpy LAMB): the same initial weights, the same steps, the same weights after."""
from __future__ import annotations
import numpy as np
import pytest
import torch
from tinyplug import Tensor
from tinyplug.nn.optim import SGD, Adam, AdamW, LAMB, OptimizerGroup, clip_grad_norm_
import tinyplug.engine.realize as engine_realize

RNG = np.random.default_rng(0)
W1, B1, W2 = (RNG.standard_normal(s).astype(np.float32) * 0.5 for s in ((4, 5), (5,), (5, 3)))
X = RNG.standard_normal((6, 4)).astype(np.float32)
T = RNG.standard_normal((6, 3)).astype(np.float32)

def loss_of(lib, x, t, w1, b1, w2):
  """A two-layer MLP: every layer's gradient depends on the other's weights (catches update-order hazards)."""
  h = (x @ w1 + b1).relu()
  return ((h @ w2 - t) ** 2).mean()

def train_ours(make_opt, steps: int = 4, per_step=None) -> list[np.ndarray]:
  ps = [Tensor(a.copy(), requires_grad=True) for a in (W1, B1, W2)]
  opt = make_opt(ps)
  x, t = Tensor(X), Tensor(T)
  with Tensor.train():
    for i in range(steps):
      opt.zero_grad()
      loss_of(Tensor, x, t, *ps).backward()
      if per_step: per_step(opt, ps, i)
      opt.step()
  return [p.numpy() for p in ps]

def train_torch(make_opt, steps: int = 4, per_step=None) -> list[np.ndarray]:
  ps = [torch.tensor(a.copy(), requires_grad=True) for a in (W1, B1, W2)]
  opt = make_opt(ps)
  x, t = torch.tensor(X), torch.tensor(T)
  for i in range(steps):
    opt.zero_grad()
    loss_of(torch, x, t, *ps).backward()
    if per_step: per_step(opt, ps, i)
    opt.step()
  return [p.detach().numpy() for p in ps]

def assert_same(ours: list[np.ndarray], theirs: list[np.ndarray], rtol=1e-5, atol=1e-6) -> None:
  for i, (a, b) in enumerate(zip(ours, theirs)): np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"p{i}")

@pytest.mark.parametrize("kw", [dict(), dict(momentum=0.9), dict(momentum=0.9, nesterov=True),
                                dict(weight_decay=0.1), dict(momentum=0.8, weight_decay=0.05, nesterov=True)])
def test_sgd(kw):
  assert_same(train_ours(lambda ps: SGD(ps, lr=0.1, **kw)), train_torch(lambda ps: torch.optim.SGD(ps, lr=0.1, **kw)))

def test_sgd_every_device(device):
  kw = dict(momentum=0.9, weight_decay=0.01)
  assert_same(train_ours(lambda ps: SGD(ps, lr=0.1, **kw), steps=2),
              train_torch(lambda ps: torch.optim.SGD(ps, lr=0.1, **kw), steps=2))

@pytest.mark.parametrize("kw", [dict(), dict(b1=0.8, b2=0.99, eps=1e-6)])
def test_adam(kw):
  tkw = {"betas": (kw["b1"], kw["b2"]), "eps": kw["eps"]} if kw else {}
  assert_same(train_ours(lambda ps: Adam(ps, lr=0.01, **kw), steps=5),
              train_torch(lambda ps: torch.optim.Adam(ps, lr=0.01, **tkw), steps=5))

def test_adam_every_device(device):
  assert_same(train_ours(lambda ps: Adam(ps, lr=0.01), steps=2), train_torch(lambda ps: torch.optim.Adam(ps, lr=0.01), steps=2))

@pytest.mark.parametrize("wd", [0.01, 0.3])
def test_adamw(wd):
  assert_same(train_ours(lambda ps: AdamW(ps, lr=0.01, weight_decay=wd), steps=5),
              train_torch(lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=wd), steps=5))

class NumpyLAMB:
  """The LAMB rule (You et al. 2019), with Adam's bias correction, written out in numpy as the reference."""
  def __init__(self, ps, lr, b1=0.9, b2=0.999, eps=1e-6, wd=0.0):
    self.ps, self.lr, self.b1, self.b2, self.eps, self.wd, self.t = ps, lr, b1, b2, eps, wd, 0
    self.m = [np.zeros_like(p.detach().numpy()) for p in ps]
    self.v = [np.zeros_like(p.detach().numpy()) for p in ps]
  def zero_grad(self):
    for p in self.ps: p.grad = None
  def step(self):
    self.t += 1
    with torch.no_grad():
      for i, p in enumerate(self.ps):
        g, w = p.grad.numpy(), p.detach().numpy()
        self.m[i] = self.b1 * self.m[i] + (1 - self.b1) * g
        self.v[i] = self.b2 * self.v[i] + (1 - self.b2) * g * g
        up = (self.m[i] / (1 - self.b1 ** self.t)) / (np.sqrt(self.v[i] / (1 - self.b2 ** self.t)) + self.eps)
        up = up + self.wd * w
        r1, r2 = np.linalg.norm(w), np.linalg.norm(up)
        ratio = r1 / r2 if r1 > 0 and r2 > 0 else 1.0
        p -= torch.tensor(self.lr * ratio * up)

def test_lamb():
  assert_same(train_ours(lambda ps: LAMB(ps, lr=0.01, weight_decay=0.01), steps=4),
              train_torch(lambda ps: NumpyLAMB(ps, lr=0.01, wd=0.01), steps=4), rtol=1e-4, atol=1e-5)

def test_learning_rate_is_a_tensor():
  """Changing opt.lr between steps changes the update, like a scheduler on param_groups."""
  def ours_sched(opt, ps, i): opt.lr.assign(Tensor([0.1 / (i + 1)]))
  def torch_sched(opt, ps, i):
    for g in opt.param_groups: g["lr"] = 0.1 / (i + 1)
  assert_same(train_ours(lambda ps: SGD(ps, lr=0.1, momentum=0.9), per_step=ours_sched),
              train_torch(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), per_step=torch_sched))

@pytest.mark.parametrize("norm_type", [2.0, float("inf")])
def test_clip_grad_norm(norm_type):
  norms = {}
  def ours_clip(opt, ps, i): norms.setdefault("ours", []).append(clip_grad_norm_(opt, 0.5, norm_type).item())
  def torch_clip(opt, ps, i): norms.setdefault("torch", []).append(torch.nn.utils.clip_grad_norm_(ps, 0.5, norm_type).item())
  assert_same(train_ours(lambda ps: SGD(ps, lr=0.1), per_step=ours_clip),
              train_torch(lambda ps: torch.optim.SGD(ps, lr=0.1), per_step=torch_clip))
  np.testing.assert_allclose(norms["ours"], norms["torch"], rtol=1e-5)

def test_optimizer_group():
  def ours(ps): return OptimizerGroup(SGD(ps[:2], lr=0.1, momentum=0.9), Adam(ps[2:], lr=0.01))
  def theirs(ps): return torch.optim.SGD(ps[:2], lr=0.1, momentum=0.9), torch.optim.Adam(ps[2:], lr=0.01)
  class Both:
    def __init__(self, opts): self.opts = opts
    def zero_grad(self): [o.zero_grad() for o in self.opts]
    def step(self): [o.step() for o in self.opts]
  assert_same(train_ours(ours), train_torch(lambda ps: Both(theirs(ps))))

def test_step_is_one_schedule(monkeypatch):
  calls = []
  original = engine_realize.realize
  monkeypatch.setattr(engine_realize, "realize", lambda uops: calls.append(len(uops)) or original(uops))
  ps = [Tensor(a.copy(), requires_grad=True) for a in (W1, B1, W2)]
  opt = Adam(ps, lr=0.01)
  with Tensor.train():
    loss_of(Tensor, Tensor(X), Tensor(T), *ps).backward()
    calls.clear()
    opt.step()
  assert len(calls) == 1, f"Adam.step() realized {len(calls)} times"

def test_state_stays_in_place():
  """Parameters and optimiser state keep their buffers across steps (what a TinyJit replay relies on)."""
  from tinyplug.engine.realize import buffer_of
  ps = [Tensor(a.copy(), requires_grad=True) for a in (W1, B1, W2)]
  opt = Adam(ps, lr=0.01)
  before = None
  with Tensor.train():
    for _ in range(3):
      opt.zero_grad()
      loss_of(Tensor, Tensor(X), Tensor(T), *ps).backward()
      opt.step()
      now = [buffer_of(t.uop) for t in ps + opt.m + opt.v + [opt.b1_t]]
      if before is not None: assert all(a is b for a, b in zip(before, now))
      before = now

def test_requires_grad_none_becomes_true_and_buffers_are_kept():
  w, frozen = Tensor(W1.copy()), Tensor(B1.copy(), requires_grad=False)
  assert w.requires_grad is None
  opt = SGD([w, frozen], lr=0.1)
  assert w.requires_grad is True and opt.params == [w] and opt.buffers == [frozen]

def test_errors():
  w = Tensor(W1.copy(), requires_grad=True)
  opt = SGD([w], lr=0.1)
  with pytest.raises(RuntimeError, match="Tensor.training"): opt.step()
  with Tensor.train():
    with pytest.raises(RuntimeError, match="no gradient"): opt.step()
  with pytest.raises(ValueError, match="learning rate"): SGD([w], lr=-1)
  with pytest.raises(ValueError, match="no parameters"): Adam([Tensor([1.0], requires_grad=False)])
  with pytest.raises(ValueError, match="b1"): Adam([w], b1=1.0)

@pytest.mark.parametrize("make", [lambda ps: Adam(ps, lr=0.01), lambda ps: LAMB(ps, lr=0.01, weight_decay=0.1)])
def test_state_offloaded_to_another_device(make):
  """Optimiser state moved to another device with `to_` (CPU offload): the step runs there, the parameters stay where
  they were, and the weights are those of the optimiser kept on the parameters' device."""
  want = train_ours(make)
  ps = [Tensor(a.copy(), requires_grad=True) for a in (W1, B1, W2)]
  opt = make(ps)
  for s in opt.m + opt.v + [opt.b1_t, opt.b2_t]: s.to_("PYTHON")
  x, t = Tensor(X), Tensor(T)
  with Tensor.train():
    for _ in range(4):
      opt.zero_grad()
      loss_of(Tensor, x, t, *ps).backward()
      opt.step()
  assert all(p.device == x.device for p in ps) and opt.m[0].device == "PYTHON" and opt.b1_t.device == "PYTHON"
  assert_same([p.numpy() for p in ps], want)
