"""Optimisers: SGD (momentum, nesterov, weight decay), LARS, Adam, AdamW, LAMB, Muon, and an OptimizerGroup.

A step builds every update lazily with `assign` (parameters, momentum buffers, moment estimates, step counters) and
realizes them together, so one step is one schedule: `opt.step()`, or `loss.realize(*opt.schedule_step())` to also
compute the loss in the same schedule. As in tinygrad, stepping needs `Tensor.training` (use `Tensor.train()`).
"""
from __future__ import annotations
import math
from tinyplug.tensor import Tensor
from tinyplug.uop.dtype import dtypes

def _dedup(ts: list[Tensor]) -> list[Tensor]:
  seen: dict[int, Tensor] = {}
  for t in ts: seen.setdefault(id(t), t)
  return list(seen.values())

def _own_buffer(t: Tensor) -> Tensor:
  """`t` realized now into a buffer of its own, so that steps assign into it in place (and a jit sees one buffer)."""
  return t.realize()

def _state_like(t: Tensor) -> Tensor:
  """A zero-filled optimiser state tensor with a buffer of its own."""
  return _own_buffer(Tensor.zeros(*t.shape, dtype=t.dtype if dtypes.is_float(t.dtype) else dtypes.float32,
                                  device=t.device, requires_grad=False))

class Optimizer:
  """Base class: holds the parameters (tensors with requires_grad) and the buffers (the rest, realized each step)."""
  def __init__(self, params: list[Tensor], lr: float):
    if lr < 0: raise ValueError(f"invalid learning rate: {lr}")
    params = list(params)
    for p in params:
      if p.requires_grad is None: p.requires_grad_(True)
    self.params: list[Tensor] = _dedup([p for p in params if p.requires_grad])
    if not self.params: raise ValueError("the optimizer got no parameters with requires_grad (an empty model?)")
    self.buffers: list[Tensor] = _dedup([p for p in params if not p.requires_grad])
    # parameters get their buffers now (one schedule for all), so that the first step already updates them in place
    # and compiles the same kernels as every later step
    self.params[0].realize(*self.params[1:])
    self.device = self.params[0].device
    # the learning rate is a tensor so that a schedule can change it without recompiling: opt.lr.assign(...)
    self.lr = _own_buffer(Tensor([lr], dtype=dtypes.float32, device=self.device, requires_grad=False))

  def zero_grad(self) -> None:
    """Forget the gradients of all parameters."""
    for p in self.params: p.grad = None

  def step(self) -> None:
    """Update every parameter from its .grad (one schedule)."""
    ts = self.schedule_step()
    ts[0].realize(*ts[1:])

  def schedule_step(self) -> list[Tensor]:
    """Assign the updates lazily; returns the tensors to realize (state, parameters, buffers)."""
    before, params = self._staged_step()
    return before + params

  def _staged_step(self) -> tuple[list[Tensor], list[Tensor]]:
    """(tensors to compute first: state, staged new values, buffers; then the parameters, assigned from the staged)."""
    if not Tensor.training:
      raise RuntimeError("Tensor.training is False: optimiser steps run in training mode; wrap the step in "
                         "`with Tensor.train():` or decorate it with `@Tensor.train()`")
    for i, p in enumerate(self.params):
      if p.grad is None:
        raise RuntimeError(f"parameter {i} (shape {p.shape}) has no gradient: call loss.backward() before step(), "
                           "and make sure every parameter given to the optimiser is used by the loss")
    new_values, extra = self._step()
    # the scheduler runs every read of a parameter's old value before the write (and stages values only where two
    # updates read each other's old values)
    for t, v in zip(self.params, new_values): t.assign(v.cast(t.dtype))
    return extra + self.buffers, list(self.params)

  def _lr(self, t: Tensor) -> Tensor: return self.lr.reshape(()).cast(t.dtype)
  def _step(self) -> tuple[list[Tensor], list[Tensor]]:
    """(the new value of each parameter, the optimiser state tensors updated with assign)."""
    raise NotImplementedError

class OptimizerGroup(Optimizer):
  """Several optimisers (e.g. different learning rates for different parameters) stepped as one."""
  def __init__(self, *optimizers: Optimizer):
    self.optimizers = list(optimizers)
    self.params = [p for o in self.optimizers for p in o.params]
    self.buffers = [b for o in self.optimizers for b in o.buffers]
  def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]
  def zero_grad(self) -> None:
    for o in self.optimizers: o.zero_grad()
  def schedule_step(self) -> list[Tensor]:
    parts = [o._staged_step() for o in self.optimizers]   # all reads of old values first, then all parameter writes
    return [t for before, _ in parts for t in before] + [t for _, params in parts for t in params]

class LARS(Optimizer):
  """SGD with momentum and a layer-wise trust ratio `tcoef` (LARS); with tcoef=0 it is plain SGD."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.9, weight_decay: float = 1e-4,
               nesterov: bool = False, classic: bool = False, tcoef: float = 0.001):
    super().__init__(params, lr)
    if momentum < 0: raise ValueError(f"invalid momentum: {momentum}")
    if weight_decay < 0: raise ValueError(f"invalid weight_decay: {weight_decay}")
    if nesterov and momentum <= 0: raise ValueError("nesterov momentum needs momentum > 0")
    self.momentum, self.wd, self.nesterov, self.classic, self.tcoef = momentum, weight_decay, nesterov, classic, tcoef
    self.b = [_state_like(t) for t in self.params] if momentum else []

  def _step(self) -> tuple[list[Tensor], list[Tensor]]:
    new_values = []
    for i, t in enumerate(self.params):
      g = t.grad.cast(t.dtype)
      scale = self._lr(t)
      if self.tcoef != 0:  # trust ratio from the norms of the weights and of the raw gradient
        r1, r2 = t.detach().square().sum().sqrt(), g.square().sum().sqrt()
        scale = scale * (r1 > 0).where((r2 > 0).where(self.tcoef * r1 / (r2 + self.wd * r1), 1.0), 1.0)
      if self.wd: g = g + self.wd * t.detach()
      if self.classic: g = g * scale                # classic momentum: the learning rate goes into the buffer
      if self.momentum:
        self.b[i].assign(self.momentum * self.b[i] + g)
        g = (g + self.momentum * self.b[i]) if self.nesterov else self.b[i]
      if not self.classic: g = g * scale            # the popular (PyTorch) rule: momentum, then learning rate
      new_values.append(t.detach() - g)
    return new_values, self.b

def SGD(params: list[Tensor], lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0,
        nesterov: bool = False, classic: bool = False) -> LARS:
  """Stochastic gradient descent, PyTorch's rules: g += wd*p; b = momentum*b + g; p -= lr*(g + momentum*b or b)."""
  return LARS(params, lr, momentum, weight_decay, nesterov, classic, tcoef=0.0)

class LAMB(Optimizer):
  """LAMB (layer-wise adaptive Adam); with adam=True it is Adam/AdamW (decoupled weight decay)."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6,
               weight_decay: float = 0.0, adam: bool = False):
    super().__init__(params, lr)
    for name, b in (("b1", b1), ("b2", b2)):
      if not 0.0 <= b < 1.0: raise ValueError(f"invalid {name}: {b} (must be in [0, 1))")
    if weight_decay < 0: raise ValueError(f"invalid weight_decay: {weight_decay}")
    if eps < 0: raise ValueError(f"invalid eps: {eps}")
    self.b1, self.b2, self.eps, self.wd, self.adam = b1, b2, eps, weight_decay, adam
    # b1**step and b2**step, kept on the device so a jitted step needs no Python-side counter
    self.b1_t = _own_buffer(Tensor.ones(1, dtype=dtypes.float32, device=self.device, requires_grad=False))
    self.b2_t = _own_buffer(Tensor.ones(1, dtype=dtypes.float32, device=self.device, requires_grad=False))
    self.m = [_state_like(t) for t in self.params]
    self.v = [_state_like(t) for t in self.params]

  def _step(self) -> tuple[list[Tensor], list[Tensor]]:
    new_values = []
    self.b1_t.assign(self.b1_t * self.b1)
    self.b2_t.assign(self.b2_t * self.b2)
    bias1 = (1 - self.b1_t).reshape(())
    bias2 = (1 - self.b2_t).reshape(())
    for i, t in enumerate(self.params):
      # the update is computed where the state lives (state moved to the CPU with `to_` offloads it) and only the
      # result goes back to the parameter's device
      here = self.m[i].device
      g, w = t.grad.to(here).cast(self.m[i].dtype), t.detach().to(here)
      self.m[i].assign(self.b1 * self.m[i] + (1 - self.b1) * g)
      self.v[i].assign(self.b2 * self.v[i] + (1 - self.b2) * (g * g))
      m_hat = self.m[i] / bias1.to(here).cast(g.dtype)
      v_hat = self.v[i] / bias2.to(here).cast(g.dtype)
      up = m_hat / (v_hat.sqrt() + self.eps)
      if self.wd: up = up + self.wd * w.cast(up.dtype)
      if not self.adam:
        r1, r2 = w.cast(up.dtype).square().sum().sqrt(), up.square().sum().sqrt()
        up = up * (r1 > 0).where((r2 > 0).where(r1 / r2, 1.0), 1.0)
      new_values.append(t.detach() - self._lr(t) * up.to(t.device).cast(t.dtype))
    return new_values, [self.b1_t, self.b2_t] + self.m + self.v

def Adam(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> LAMB:
  """Adam (Kingma & Ba), bias-corrected, as torch.optim.Adam without weight decay."""
  return LAMB(params, lr, b1, b2, eps, 0.0, adam=True)

def AdamW(params: list[Tensor], lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8,
          weight_decay: float = 0.01) -> LAMB:
  """Adam with decoupled weight decay, as torch.optim.AdamW."""
  return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True)

def newton_schulz(g: Tensor, steps: int, coefficients: tuple[float, float, float] = (3.4445, -4.775, 2.0315),
                  eps: float = 1e-7) -> Tensor:
  """An approximately orthogonal matrix with the singular vectors of the 2-D `g` (Muon's quintic Newton-Schulz
  iteration: X <- a*X + (b*A + c*A@A) @ X with A = X @ X.T, starting from g / |g|)."""
  if g.ndim != 2: raise ValueError(f"newton_schulz needs a 2-D matrix, got shape {g.shape}")
  if len(coefficients) != 3: raise ValueError(f"newton_schulz needs 3 coefficients, got {coefficients}")
  a, b, c = coefficients
  x = g.transpose() if g.shape[0] > g.shape[1] else g   # iterate on the wide side: the Gram matrix is the small one
  x = x / x.square().sum().sqrt().maximum(eps)
  for _ in range(steps):
    gram = x.matmul(x.transpose())
    x = a * x + (b * gram + c * gram.matmul(gram)).matmul(x)
  return x.transpose() if g.shape[0] > g.shape[1] else x

class Muon(Optimizer):
  """Muon (momentum, then orthogonalised by Newton-Schulz), with torch.optim.Muon's rules: b = lerp(b, g, 1-momentum);
  u = lerp(g, b, momentum) with nesterov else b; p = p*(1 - lr*wd) - lr*sqrt(max(1, rows/cols))*NS(u).
  Parameters of more than 2 dimensions are flattened to (shape[0], -1) for the iteration."""
  def __init__(self, params: list[Tensor], lr: float = 0.001, momentum: float = 0.95, weight_decay: float = 0.1,
               ns_steps: int = 5, ns_coefficients: tuple[float, float, float] = (3.4445, -4.775, 2.0315),
               nesterov: bool = True, eps: float = 1e-7):
    super().__init__(params, lr)
    if not 0.0 <= momentum < 1.0: raise ValueError(f"invalid momentum: {momentum} (must be in [0, 1))")
    if weight_decay < 0: raise ValueError(f"invalid weight_decay: {weight_decay}")
    if len(ns_coefficients) != 3: raise ValueError(f"ns_coefficients must be 3 numbers, got {ns_coefficients}")
    for i, p in enumerate(self.params):
      if p.ndim < 2: raise ValueError(f"Muon updates matrices; parameter {i} has shape {p.shape}")
    self.momentum, self.wd, self.ns_steps, self.ns_coefficients = momentum, weight_decay, ns_steps, tuple(ns_coefficients)
    self.nesterov, self.eps = nesterov, eps
    self.b = [_state_like(t) for t in self.params]

  def _step(self) -> tuple[list[Tensor], list[Tensor]]:
    new_values = []
    for i, t in enumerate(self.params):
      g = t.grad.cast(self.b[i].dtype)
      self.b[i].assign(self.momentum * self.b[i] + (1 - self.momentum) * g)
      u = g + self.momentum * (self.b[i] - g) if self.nesterov else self.b[i]
      rows, cols = t.shape[0], math.prod(t.shape[1:])
      u = newton_schulz(u.reshape(rows, cols), self.ns_steps, self.ns_coefficients, self.eps).reshape(t.shape)
      lr = self._lr(t)
      scale = math.sqrt(max(1.0, rows / cols))
      new_values.append(t.detach() * (1 - lr * self.wd) - (lr * scale) * u.cast(t.dtype))
    return new_values, self.b

# ---------------- gradient clipping ----------------

def clip_grad_norm_(params: list[Tensor] | Optimizer, max_norm: float, norm_type: float = 2.0) -> Tensor:
  """Scale the gradients so that their joint norm is at most `max_norm` (lazily); returns the norm before clipping.

  Same rule as torch.nn.utils.clip_grad_norm_: grads *= min(1, max_norm / (norm + 1e-6))."""
  ps = params.params if isinstance(params, Optimizer) else list(params)
  grads = [p for p in ps if p.grad is not None]
  if not grads: raise RuntimeError("clip_grad_norm_: no parameter has a gradient (call backward() first)")
  if math.isinf(norm_type):
    norms = [p.grad.abs().max().cast(dtypes.float32) for p in grads]
    total = norms[0]
    for n in norms[1:]: total = total.maximum(n)
  else:
    total = sum((p.grad.cast(dtypes.float32).abs() ** norm_type).sum() for p in grads) ** (1.0 / norm_type)
  scale = (max_norm / (total + 1e-6)).minimum(1.0)
  for p in grads: p.grad = p.grad * scale.cast(p.grad.dtype)
  return total

__all__ = ["Optimizer", "OptimizerGroup", "SGD", "LARS", "LAMB", "Adam", "AdamW", "Muon", "newton_schulz", "clip_grad_norm_"]
