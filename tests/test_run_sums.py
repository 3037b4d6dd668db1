"""Sums over runs of equal keys (tensor_ops/run_sums.py), cummax / cummin's gradient: values against a float64 loop
and torch (ties, NaN, infinities, both axes, rows long enough for two levels of blocks), and the blocks' triangles
rendered as vector accumulators."""
from __future__ import annotations
import numpy as np
import pytest
import torch
from tinyplug import Tensor, dtypes, schedule
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel
from tinyplug.device import Device
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor_ops import template
from tinyplug.tensor_ops.run_sums import run_prefix_sum, run_suffix_sum
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(18)

def _runs_reference(v: np.ndarray, keys: np.ndarray, ax: int, suffix: bool) -> np.ndarray:
  """Each element's run sum up to it (from it, `suffix`), one element at a time in float64."""
  v, keys = np.moveaxis(v.astype(np.float64), ax, -1), np.moveaxis(keys, ax, -1)
  out = np.zeros_like(v)
  order = range(v.shape[-1] - 1, -1, -1) if suffix else range(v.shape[-1])
  for idx in np.ndindex(v.shape[:-1]):
    acc, prev = 0.0, None
    for i in order:
      acc = v[idx + (i,)] + (acc if keys[idx + (i,)] == prev else 0.0)
      out[idx + (i,)], prev = acc, keys[idx + (i,)]
  return np.moveaxis(out, -1, ax)

def _sorted_keys(shape: tuple, ax: int, distinct: int) -> np.ndarray:
  return np.sort(RNG.integers(0, distinct, shape), axis=ax).astype(np.int32)

# 64: one triangle; 65, 1000: blocks, padded; 1024: blocks; 5000: the blocks' own sums blocked again (313 blocks)
@pytest.mark.parametrize("shape,ax", [((3, 64), 1), ((4, 65), 1), ((5, 1000), 1), ((2, 1024), 1), ((2, 5000), 1),
                                      ((1030, 3), 0), ((2, 300, 3), 1), ((70,), 0)])
@pytest.mark.parametrize("distinct", [1, 4, 40, 100000])   # one run per row, long runs across blocks, short, ~none
def test_run_sums_match_a_loop(shape, ax, distinct):
  v = RNG.standard_normal(shape).astype(np.float32)
  keys = _sorted_keys(shape, ax, distinct)
  for fn, suffix in ((run_prefix_sum, False), (run_suffix_sum, True)):
    got = fn(Tensor(v), Tensor(keys), ax).numpy()
    np.testing.assert_allclose(got, _runs_reference(v, keys, ax, suffix), rtol=1e-5, atol=1e-4, err_msg=fn.__name__)

def test_run_sums_keep_zeroes_the_rest():
  v, keys = RNG.standard_normal((3, 700)).astype(np.float32), _sorted_keys((3, 700), 1, 30)
  keep = RNG.random((3, 700)) < 0.5
  want = np.where(keep, _runs_reference(v, keys, 1, True), 0)
  got = run_suffix_sum(Tensor(v), Tensor(keys), 1, keep=Tensor(keep)).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)

def test_a_long_run_is_summed_from_its_own_elements():
  """A short run after a long one of large values keeps its own digits (a difference of running totals gave the
  large totals' rounding: 1e8 + 1 - 1e8 is 0 in float32)."""
  v = np.full((1, 2048), 1e8, np.float32)
  v[0, 2000:] = 1.0
  keys = np.zeros((1, 2048), np.int32)
  keys[0, 2000:] = 1
  got = run_suffix_sum(Tensor(v), Tensor(keys), 1).numpy()
  np.testing.assert_array_equal(got[0, 2000:], np.arange(48, 0, -1, dtype=np.float32))

# ---- cummax / cummin's gradient ----
def _special(shape: tuple, kind: str) -> np.ndarray:
  a = RNG.standard_normal(shape).astype(np.float32)
  if kind == "ties": a = np.round(a * 2)
  if kind == "zeros": a[RNG.random(shape) < 0.3] = 0.0
  if kind == "negative": a = -np.abs(a) - 1
  if kind == "inf": a[RNG.random(shape) < 0.05], a[RNG.random(shape) < 0.05] = np.inf, -np.inf
  if kind == "nan": a[RNG.random(shape) < 0.02] = np.nan
  if kind == "sorted": a = np.sort(np.round(a), axis=-1)   # runs as long as the row
  return a

@pytest.mark.parametrize("shape,axis", [((64, 1024), 1), ((1024, 48), 0), ((3, 2000), 1), ((5, 70, 3), 1),
                                        ((9, 16), 1), ((70,), 0), ((300, 7), 0)])
@pytest.mark.parametrize("kind", ["ties", "zeros", "negative", "inf", "nan", "sorted"])
def test_cummax_cummin_gradients_against_torch(shape, axis, kind):
  """Every output's gradient wholly to the index torch reports (the last tie; a NaN's own index)."""
  a, w = _special(shape, kind), RNG.standard_normal(shape).astype(np.float32)
  for name in ("cummax", "cummin"):
    x, t = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    (getattr(x, name)(axis)[0] * Tensor(w)).sum().backward()
    (getattr(torch, name)(t, axis)[0] * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-4, err_msg=name)

def test_cummax_gradient_in_float16_against_torch():
  a = np.round(RNG.standard_normal((8, 300)) * 3).astype(np.float16)
  x, t = Tensor(a, requires_grad=True), torch.tensor(a.astype(np.float32), requires_grad=True)
  (x.cummax(1)[0] * x).sum().backward()
  (torch.cummax(t, 1)[0] * t).sum().backward()
  assert x.grad.dtype == dtypes.float16
  np.testing.assert_allclose(x.grad.numpy().astype(np.float32), t.grad.numpy(), rtol=2e-3, atol=2e-2)

def test_cummax_gradient_has_no_scatter():
  x = Tensor.empty(64, 1024, device="CPU", requires_grad=True)
  (x.cummax(1)[0] * x).sum().backward()
  assert not any(u.op is Ops.SCATTER_ADD for u in x.grad.uop.toposort())

def test_run_sum_triangles_accumulate_in_vectors(vector_machine):
  """Both levels' triangles (a block's 16 outputs, a row's 64 block sums) keep vector accumulators: a lane folded
  apart (the last output's `k < 16` is always true) or a key read every 16th element made each lane a scalar, 2.5-4x
  the time."""
  r = vector_machine(64, 32)
  v, keys = Tensor.empty(1024, 1024, device="CPU"), Tensor.empty(1024, 1024, device="CPU", dtype=dtypes.int32)
  schedule._templates.clear()
  asts = [it.ast for it in create_schedule([run_suffix_sum(v, keys, 1).uop])[0] if it.ast.op is Ops.SINK]
  triangles = [a for a in asts if tuple(Kernel(a, r).full_shape) in ((1024, 64, 16, 16), (1024, 64, 64))]
  assert len(triangles) == 2
  for ast in triangles:
    k = Kernel(ast, r)
    src = get_program(k.sink, r, opts=heuristic_opts(k)).src
    assert "fadd" in src and "alloca [1 x float]" not in src, src[:3000]

def test_cummax_templates_give_each_call_its_own_values():
  """The running extreme and its index are graph templates (built on a signature's second call, rebuilt over each
  later call's inputs; the gradient is the backward's template): new values every call, each against torch."""
  template._templates.clear()
  for _ in range(4):
    a, w = np.round(RNG.standard_normal((16, 300)) * 2).astype(np.float32), RNG.standard_normal((16, 300)).astype(np.float32)
    x, t = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    v, i = x.cummax(1)
    tv, ti = torch.cummax(t, 1)
    (v * Tensor(w)).sum().backward()
    (tv * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(v.numpy(), tv.detach().numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-5)
  names = {key[0].__name__ for key, _ in template._templates.items()}
  assert {"_running_extreme", "_reached_index"} <= names
