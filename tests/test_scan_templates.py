"""argmax, argmin, cumsum and cumprod as graph templates (their graph built once per signature and rebuilt over each
call's inputs), and the heuristic's independent add chains for a scan's triangle along the row (SCAN_CHAINS). Values
against numpy and torch on every call, so a template that baked an input's values or a wrong tile would show."""
import math
import numpy as np
import pytest
import torch
from tinyplug import Tensor, dtypes, schedule
from tinyplug.codegen import estimate
from tinyplug.codegen.kernel import Kernel, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import SCAN_CHAINS, heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor_ops import template
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(20)

def _template_names() -> set:
  return {key[0].__name__ for key, _ in template._templates.items()}

@pytest.mark.parametrize("shape,axis", [((37, 300), 1), ((37, 300), 0), ((5, 3, 70), 2), ((1000,), 0)])
def test_scans_over_a_template_match_numpy_on_every_call(shape, axis):
  """The third call of a signature runs the template's rebuilt graph: new values each call, every result right."""
  template._templates.clear()
  for _ in range(4):
    a = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(Tensor(a).cumsum(axis).numpy(), np.cumsum(a.astype(np.float64), axis), rtol=1e-4,
                               atol=1e-3)
    b = RNG.uniform(0.9, 1.1, shape).astype(np.float32)
    np.testing.assert_allclose(Tensor(b).cumprod(axis).numpy(), torch.tensor(b).cumprod(axis).numpy(), rtol=1e-4)
  assert {"cumsum", "cumprod"} <= _template_names()

def test_argmax_over_a_template_matches_numpy_with_nan_and_ties():
  template._templates.clear()
  for i in range(4):
    a = RNG.integers(-3, 3, (64, 257)).astype(np.float32)   # ties: the first index wins
    a[i, 100 + i], a[i, 200] = np.nan, np.nan                # a NaN row: the first NaN (another one each call)
    a[10 + i, :] = -np.inf
    for axis in (0, 1, -1):
      np.testing.assert_array_equal(Tensor(a).argmax(axis).numpy(), torch.tensor(a).argmax(axis).numpy())
      np.testing.assert_array_equal(Tensor(a).argmin(axis).numpy(), torch.tensor(a).argmin(axis).numpy())
    np.testing.assert_array_equal(Tensor(a).argmax(1, keepdim=True).numpy(), np.argmax(a, 1)[:, None])
    np.testing.assert_array_equal(Tensor(a).argmax().numpy(), np.argmax(a))
  assert {"argmax", "argmin"} <= _template_names()

def test_argmax_template_keys_on_dtype():
  """An int tensor of the same shape gets its own graph (no NaN test), and the right answer."""
  for _ in range(3):
    f = RNG.standard_normal((8, 33)).astype(np.float32)
    i = RNG.integers(-5, 5, (8, 33)).astype(np.int32)
    np.testing.assert_array_equal(Tensor(f).argmax(1).numpy(), np.argmax(f, 1))
    np.testing.assert_array_equal(Tensor(i).argmax(1).numpy(), np.argmax(i, 1))
    assert Tensor(i).argmax(1).dtype == dtypes.int32

def test_cumsum_template_keeps_gradients():
  for _ in range(3):
    a = RNG.standard_normal((6, 100)).astype(np.float32)
    x, t = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    (x.cumsum(1) * Tensor(a)).sum().backward()
    (t.cumsum(1) * torch.tensor(a)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("shape,axis", [((6, 1000), 1), ((1000, 5), 0), ((3, 70, 9), 1), ((4, 40), -1), ((2, 4097), 1),
                                        ((1,), 0)])
def test_cumsum_gradient_against_torch(shape, axis):
  """The declared gradient (the gradient's scan run backwards) through one cumsum and through two in a row."""
  a, w = RNG.standard_normal(shape).astype(np.float32), RNG.standard_normal(shape).astype(np.float32)
  x, t = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  (x.cumsum(axis).cumsum(axis) * Tensor(w) + x.cumsum(axis)).sum().backward()
  (t.cumsum(axis).cumsum(axis) * torch.tensor(w) + t.cumsum(axis)).sum().backward()
  scale = max(1.0, float(np.abs(t.grad.numpy()).max(initial=0)))
  np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=2e-5 * scale)

@pytest.mark.parametrize("shape,axis", [((4, 10), 1), ((64, 1024), 1), ((300, 7), 0), ((3, 70, 4), 1), ((1,), 0)])
@pytest.mark.parametrize("zeros", [0.0, 0.05, 0.4])
def test_cumprod_gradient_against_float64_torch(shape, axis, zeros):
  """The declared gradient before, at and after a row's first zero (rows with none, one, several, all zeros)."""
  a = RNG.uniform(0.5, 1.5, shape) * np.sign(RNG.standard_normal(shape))
  a[RNG.random(shape) < zeros] = 0
  if len(shape) == 2: a[0], a[-1, -1] = 0, 0   # a row of zeros; a zero last
  a, w = a.astype(np.float32), RNG.standard_normal(shape).astype(np.float32)
  x, t = Tensor(a, requires_grad=True), torch.tensor(a.astype(np.float64), requires_grad=True)
  (x.cumprod(axis) * Tensor(w)).sum().backward()
  (t.cumprod(axis) * torch.tensor(w.astype(np.float64))).sum().backward()
  want = t.grad.numpy()
  np.testing.assert_allclose(x.grad.numpy(), want, rtol=2e-3, atol=2e-3 * max(1.0, float(np.abs(want).max())) * 1e-3)

def test_cumprod_gradient_where_the_product_underflows():
  """A product that underflows to 0 reads as past a zero (its gradient comes from out != 0): the gradients torch's
  float32 gives, including a zero after the underflow and a zero after a product of tiny values that still holds."""
  a = np.array([[1e-20, 1e-20, 1e-20, 5, 2, 0.5], [1e-20, 1e-20, 1e-20, 0, 2, 3], [1e-19, 1e-19, 0, 2, 0, 3],
                [3, 1e-30, 2, 0, 4, 0]], np.float32)
  w = RNG.standard_normal(a.shape).astype(np.float32)
  x, t = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  (x.cumprod(1) * Tensor(w)).sum().backward()
  (t.cumprod(1) * torch.tensor(w)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-30)

@pytest.fixture
def fresh_templates(monkeypatch):
  """Fresh graph-template caches: no scan built for another machine (its block) is reused."""
  from tinyplug.caches import BoundedCache
  for name in ("_templates", "_seen"):
    monkeypatch.setattr(template, name, BoundedCache(getattr(template, name).name, getattr(template, name).maxsize))

def test_cumprod_gradient_scans(avx512_machine, fresh_templates):
  """A long cumprod's gradient runs two blocked scans (the gradient's sum backwards, the product with the first zero
  taken as 1), three kernels each, and one last kernel: no scan of zero counts (it was three more kernels)."""
  x = Tensor.empty(8, 1024, device="CPU", requires_grad=True)
  (x.cumprod(1) * x).sum().backward()
  schedule._templates.clear()
  items = [it for it in create_schedule([x.grad.uop])[0] if it.ast.op is Ops.SINK]
  reducing = [it.ast for it in items if any(u.op is Ops.REDUCE for u in it.ast.toposort())]
  assert len(reducing) == 3 * 3 + 1   # the forward's scan, the two of the gradient, the last kernel

def _most_work_of_a_gradient_kernel(op: str) -> int:
  """The ALU work (codegen.estimate) of the busiest kernel in the gradient of (x.op(1) * x).sum(), x 64x1024."""
  x = Tensor.empty(64, 1024, device="CPU", requires_grad=True)
  ((x.cummax(1)[0] if op == "cummax" else getattr(x, op)(1)) * x).sum().backward()
  schedule._templates.clear()
  return max(estimate(it.ast)["ops"] for it in create_schedule([x.grad.uop])[0] if it.ast.op is Ops.SINK)

def test_cumprod_gradient_is_linear():
  """At most 64 operations per element in any kernel of a long cumprod's gradient (the products' gradients through
  the blocked scan's ops were an n^3 kernel over the blocks: 173 per element here, 16 ms at 256x1024)."""
  assert _most_work_of_a_gradient_kernel("cumprod") <= 64 * 1024 * 64

def test_cumsum_gradient_is_the_blocked_scan(avx512_machine, fresh_templates):
  """A long cumsum's gradient runs in the forward's blocked kernels: every reduction has blocks, none an output axis
  as long as the row (through the ops that built the scan it was a triangle over the merged row, 4x slower)."""
  x = Tensor.empty(8, 1024, device="CPU", requires_grad=True)
  (x.cumsum(1) * x).sum().backward()
  schedule._templates.clear()
  items = [it for it in create_schedule([x.grad.uop])[0] if it.ast.op is Ops.SINK]
  reducing = [it.ast for it in items if any(u.op is Ops.REDUCE for u in it.ast.toposort())]
  assert len(reducing) == 6
  for ast in reducing: assert max(r.src[0].arg for r in ast.toposort() if r.op is Ops.RANGE) < 1024

def _kernels(t: Tensor) -> list:
  schedule._templates.clear()
  return [it.ast for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]

def _loop_sizes(k: Kernel) -> list[int]: return [r.src[0].arg for r in k.loop_axes]

def test_a_scan_triangle_along_the_row_runs_independent_chains(avx512_machine, fresh_templates):
  """cumsum(1)'s block kernel (rows, blocks, outputs of a block; reduce over the block) and the totals' scan (rows,
  blocks; reduce over the blocks): the row of outputs a vector, the next axis out upcast by a SCAN_CHAINS value, the
  reduction not unrolled."""
  renderer = Device["CPU"].renderer
  asts = _kernels(Tensor.empty(1024, 1024, device="CPU").cumsum(1))
  by_shape = {tuple(_loop_sizes(Kernel(a, renderer))): a for a in asts}
  for loops in ((1024, 64, 16), (1024, 64)):
    opts = heuristic_opts(Kernel(by_shape[loops], renderer))
    inner = len(loops) - 1
    assert any(o.op is OptOps.UPCAST and o.axis == inner for o in opts), opts
    assert any(o.op is OptOps.UPCAST and o.axis == inner - 1 and o.arg in SCAN_CHAINS for o in opts), opts
    assert not any(o.op is OptOps.UNROLL for o in opts), opts

@pytest.mark.parametrize("regs,lanes,kernels", [((64, 32), 128, ((1024, 64, 16), (1024, 64))),
                                                ((32, 16), 64, ((1024, 128, 8), (1024, 16, 8)))],
                         ids=["avx512", "avx2"])
def test_scan_chains_keep_half_the_vector_registers(vector_machine, fresh_templates, regs, lanes, kernels):
  """The chains' accumulators fit half the vector registers: 128 lanes on AVX-512 (of 512 floats), 64 on AVX2 (of
  its 128: 8 chains of a 16-lane row had taken every register); AVX2's blocks are 8 long (one register), so its 128
  totals are scanned in blocks too; cumsum / cummax / cumprod gradients match torch."""
  renderer = vector_machine(*regs)
  asts = _kernels(Tensor.empty(1024, 1024, device="CPU").cumsum(1))
  by_shape = {tuple(_loop_sizes(Kernel(a, renderer))): a for a in asts}
  for loops in kernels:
    opts = heuristic_opts(Kernel(by_shape[loops], renderer))
    assert math.prod(o.arg for o in opts if o.op is OptOps.UPCAST) == lanes, opts
    assert any(o.op is OptOps.UPCAST and o.axis == len(loops) - 2 for o in opts), opts
  a = RNG.uniform(0.5, 1.5, (64, 1024)).astype(np.float32)
  schedule._templates.clear()
  for name in ("cumsum", "cummax", "cumprod"):
    x, tx = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    y = getattr(x, name)(1)
    ty = getattr(torch, name)(tx, 1)
    y, ty = (y[0], ty.values) if name == "cummax" else (y, ty)
    (y * x).sum().backward()
    (ty * tx).sum().backward()
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-3, err_msg=name)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-3, atol=1e-3, err_msg=name)
  schedule._templates.clear()

@pytest.mark.parametrize("shape", [(1024, 1024), (300, 64), (4, 4096), (24, 1000), (9, 129)])
def test_scans_along_the_row_with_chains_match_numpy(shape):
  a = RNG.standard_normal(shape).astype(np.float32)
  np.testing.assert_allclose(Tensor(a).cumsum(1).numpy(), np.cumsum(a.astype(np.float64), 1), rtol=1e-4, atol=2e-3)
  b = RNG.uniform(0.99, 1.01, shape).astype(np.float32)
  np.testing.assert_allclose(Tensor(b).cumprod(1).numpy(), np.cumprod(b.astype(np.float64), 1), rtol=1e-3)
  c = RNG.integers(-3, 4, shape).astype(np.int32)
  np.testing.assert_array_equal(Tensor(c).cumsum(1).numpy(), np.cumsum(c, 1))

# ---- running extrema: a blocked max (min) scan and a max scan of the places it was reached ----
@pytest.mark.parametrize("shape,axis", [((300, 200), 1), ((300, 200), 0), ((3, 70, 9), 1), ((5, 64), 1), ((1000,), 0),
                                        ((2, 4097), -1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_cummax_cummin_against_torch(shape, axis, dtype):
  a = np.round(RNG.standard_normal(shape) * 3).astype(dtype)   # ties: torch reports the last index reaching it
  for name in ("cummax", "cummin"):
    v, i = getattr(Tensor(a), name)(axis)
    tv = getattr(torch, name)(torch.tensor(a), axis)
    np.testing.assert_array_equal(v.numpy(), tv.values.numpy(), err_msg=name)
    np.testing.assert_array_equal(i.numpy(), tv.indices.numpy(), err_msg=name)
    assert i.dtype == dtypes.int32

def test_cummax_cummin_with_nan_and_inf_against_torch():
  """A NaN takes over the running extreme and each later NaN its index (the triangle gave -1 after a NaN)."""
  a = RNG.standard_normal((6, 150)).astype(np.float32)
  a[0, 3], a[0, 90] = np.nan, np.nan
  a[1, 149] = np.nan
  a[2, :] = -np.inf
  a[3, 70] = np.inf
  a[4, 0] = np.nan
  for axis in (0, 1):
    for name in ("cummax", "cummin"):
      v, i = getattr(Tensor(a), name)(axis)
      tv = getattr(torch, name)(torch.tensor(a), axis)
      np.testing.assert_array_equal(v.numpy(), tv.values.numpy(), err_msg=f"{name} {axis}")
      np.testing.assert_array_equal(i.numpy(), tv.indices.numpy(), err_msg=f"{name} {axis}")

def test_cummax_is_blocked():
  """A long running max is the blocked scan's kernels, no n x n triangle (a reduction as long as the axis)."""
  v, i = Tensor.empty(64, 1024, device="CPU").cummax(1)
  schedule._templates.clear()
  items = create_schedule([v.uop, i.uop])[0]
  longest = max(r.src[0].arg for it in items if it.ast.op is Ops.SINK
                for r in it.ast.toposort() if r.op is Ops.RANGE)
  assert longest < 1024

def test_cummax_gradient_and_logcumsumexp_against_torch():
  a = RNG.standard_normal((4, 90)).astype(np.float32)
  x, t = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  x.cummax(1)[0].sum().backward()
  t.cummax(1)[0].sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy())
  b = RNG.uniform(-50, 50, (3, 200)).astype(np.float32)
  np.testing.assert_allclose(Tensor(b).logcumsumexp(1).numpy(), torch.logcumsumexp(torch.tensor(b), 1).numpy(),
                             rtol=1e-5)

def test_cummax_gradient_is_linear_on_the_cpu():
  """The gradient is run sums in blocks: at most 64 operations per element in any kernel (a one-hot sum over the
  outputs is n per element)."""
  assert _most_work_of_a_gradient_kernel("cummax") <= 64 * 1024 * 64

# ---- logcumsumexp in blocks ----
@pytest.mark.parametrize("shape,axis", [((64, 1000), 1), ((1000, 8), 0), ((3, 65), 1), ((2, 4097), -1), ((5, 40), 1)])
def test_logcumsumexp_against_torch(shape, axis):
  a = RNG.uniform(-50, 50, shape).astype(np.float32)
  np.testing.assert_allclose(Tensor(a).logcumsumexp(axis).numpy(), torch.logcumsumexp(torch.tensor(a), axis).numpy(),
                             rtol=1e-5, atol=1e-5)

def test_logcumsumexp_special_values_against_torch():
  """A value far above the ones before it (no underflow of the early prefixes), whole blocks of -inf, +inf, NaN."""
  a = np.zeros((5, 132), np.float32)
  a[0, :2], a[0, 2:102], a[0, 102:] = (0, 100), -np.inf, 5
  a[1, :] = -np.inf
  a[2, 0] = np.inf
  a[3, 1] = np.nan
  a[4, :2] = (-1000, 1000)
  r, t = Tensor(a).logcumsumexp(1).numpy(), torch.logcumsumexp(torch.tensor(a), 1).numpy()
  np.testing.assert_array_equal(np.isnan(r), np.isnan(t))
  np.testing.assert_allclose(r[~np.isnan(t)], t[~np.isnan(t)], rtol=1e-6)

@pytest.mark.parametrize("spread", [5, 50])
def test_logcumsumexp_gradient_against_torch(spread):
  a = RNG.uniform(-spread, spread, (4, 300)).astype(np.float32)
  w = RNG.standard_normal((4, 300)).astype(np.float32)
  x, t = Tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
  (x.logcumsumexp(1) * Tensor(w)).sum().backward()
  (torch.logcumsumexp(t, 1) * torch.tensor(w)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-3, atol=1e-3)

def test_logcumsumexp_is_blocked():
  out = Tensor.empty(64, 1024, device="CPU").logcumsumexp(1)
  schedule._templates.clear()
  items = create_schedule([out.uop])[0]
  ranges = [r.src[0].arg for it in items if it.ast.op is Ops.SINK for r in it.ast.toposort() if r.op is Ops.RANGE]
  assert max(ranges) < 1024
