"""The gradients of row gathers (`x[idx]` on dim 0, `nn.Embedding`) as a real scatter-add (Ops.SCATTER_ADD) on
renderers that declare `row_scatter_add` (the CPU): bit for bit what the one-hot sum gives (ROW_SCATTER=0), values
against numpy's add.at and torch, the kernels it becomes (a zeroed table, then an ordered loop over the indices inside
the row loop that threads share out), and devices without the capability (PYTHON) keeping the one-hot sum."""
from __future__ import annotations
import numpy as np
import pytest
import torch
from tinyplug import nn
from tinyplug.backend import shareable_loop
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(2026)

def _grad(table: np.ndarray, idx: Tensor, g: np.ndarray, scatter: bool = True) -> Tensor:
  with Context(ROW_SCATTER=int(scatter)):
    t = Tensor(table, requires_grad=True)
    t[idx].backward(Tensor(g))
  return t.grad

def _add_at(rows: int, idx: np.ndarray, g: np.ndarray, dtype=np.float32) -> np.ndarray:
  """np.add.at in float32 (the one-hot sum's accumulator), indices outside [0, rows) dropped, cast at the end."""
  out = np.zeros((rows,) + g.shape[idx.ndim:], np.float32)
  keep = (idx >= 0) & (idx < rows)
  np.add.at(out, idx[keep], g.astype(np.float32)[keep])
  return out.astype(dtype)

@pytest.mark.parametrize("table_shape,idx_shape", [((5000, 512), (300,)), ((64, 19), (37,)), ((10, 3), (1000,)),
                                                   ((300, 48), (8, 33)), ((40,), (77,)), ((30, 3, 5), (4, 9))], ids=str)
@pytest.mark.parametrize("dtype,idx_dtype", [(np.float32, np.int32), (np.float32, np.int64), (np.float16, np.int32)],
                         ids=str)
def test_same_bits_as_the_one_hot_sum_and_numpy(table_shape, idx_shape, dtype, idx_dtype):
  rows = table_shape[0]
  table = RNG.standard_normal(table_shape).astype(dtype)
  idx = RNG.integers(-rows, rows, idx_shape).astype(idx_dtype)   # negatives wrap, repeats add up in order
  idx.flat[:5] = 2
  g = RNG.standard_normal(idx_shape + table_shape[1:]).astype(dtype)
  new, old = _grad(table, Tensor(idx), g), _grad(table, Tensor(idx), g, scatter=False)
  assert new.dtype == old.dtype
  np.testing.assert_array_equal(new.numpy(), old.numpy())
  np.testing.assert_array_equal(new.numpy(), _add_at(rows, np.where(idx < 0, idx + rows, idx), g, dtype))
  pt = torch.tensor(table, requires_grad=True)
  pt[torch.tensor(idx, dtype=torch.long)].backward(torch.tensor(g))
  tol = 5e-2 if dtype == np.float16 else 1e-5   # torch adds half rows in half precision
  np.testing.assert_allclose(new.numpy().astype(np.float32), pt.grad.numpy().astype(np.float32), rtol=tol, atol=tol)

@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_indices_out_of_range_add_nothing_as_before(idx_dtype):
  # an index computed in the graph is not checked on the host: one outside [-rows, rows) matched no row before
  table = RNG.standard_normal((50, 16)).astype(np.float32)
  raw = np.array([3, -1, 50, -51, 7, 3, 1000, -1000] + ([2**33 + 4] if idx_dtype == np.int64 else []), idx_dtype)
  g = RNG.standard_normal((raw.size, 16)).astype(np.float32)
  idx = Tensor(raw) + 0
  new, old = _grad(table, idx, g), _grad(table, Tensor(raw) + 0, g, scatter=False)
  np.testing.assert_array_equal(new.numpy(), old.numpy())
  np.testing.assert_array_equal(new.numpy(), _add_at(50, np.where((raw < 0) & (raw >= -50), raw + 50, raw), g))

def test_an_embedding_training_step_is_the_same_with_and_without_the_scatter():
  from tinyplug.nn.optim import Adam
  idx = RNG.integers(0, 1000, (8, 128)).astype(np.int64)
  idx[:, :3] = 9
  target = RNG.standard_normal((8, 128, 64)).astype(np.float32)
  weights = []
  for scatter in (1, 0):
    Tensor.manual_seed(3)
    with Context(ROW_SCATTER=scatter), Tensor.train():
      emb = nn.Embedding(1000, 64)
      opt = Adam([emb.weight], lr=0.01)
      for _ in range(2):
        opt.zero_grad()
        ((emb(Tensor(idx)) - Tensor(target)) ** 2).mean().backward()
        opt.step()
      weights.append(emb.weight.numpy())
  np.testing.assert_array_equal(weights[0], weights[1])

def test_embedding_indices_outside_the_table_add_nothing():
  Tensor.manual_seed(1)
  emb = nn.Embedding(20, 8)
  raw = np.array([[1, -1, 20, 5], [5, 19, -20, 0]], np.int32)
  emb(Tensor(raw) + 0).sum().backward()
  ref = _add_at(20, raw, np.ones((2, 4, 8), np.float32))
  np.testing.assert_array_equal(emb.weight.grad.numpy(), ref)

# ---- the path taken ----

def _grad_items(rows: int, width: int, n: int, dtype: str = "float32") -> list:
  t = Tensor.empty(rows, width, dtype=dtype, requires_grad=True)
  (t[Tensor.empty(n, dtype="int32")] * Tensor.empty(n, width, dtype=dtype)).sum().backward()
  return [it for it in create_schedule([t.grad.uop])[0] if it.ast.op is Ops.SINK]

def test_the_cpu_gradient_is_a_zeroed_table_and_one_ordered_loop():
  assert Device["CPU"].renderer.row_scatter_add
  zero, scatter, *rest = _grad_items(5000, 512, 300)
  assert not rest
  assert {u.op for u in zero.ast.toposort()} >= {Ops.STORE} and Ops.LOAD not in {u.op for u in zero.ast.toposort()}
  kinds = sorted(u.arg[1] for u in scatter.ast.toposort() if u.op is Ops.RANGE)
  assert kinds == ["loop", "ordered"]               # O(indices x width): no loop over the table's rows
  k = Kernel(scatter.ast, Device["CPU"].renderer)
  opts = heuristic_opts(k)
  prog = get_program(k.sink, Device["CPU"].renderer, opts=opts)
  # the index loop is never upcast or shared out: the row loop is outermost, and the one threads split
  first = shareable_loop(prog.uops)
  assert first is not None and first.arg[1] == "loop"
  ordered = [u for u in prog.uops if u.op is Ops.RANGE and u.arg[1] == "ordered"]
  assert len(ordered) == 1 and ordered[0].src[0].arg == 300

def test_a_half_table_accumulates_in_float32():
  zero, scatter, cast = _grad_items(100, 32, 50, "float16")
  store = next(u for u in scatter.ast.toposort() if u.op is Ops.STORE)
  assert store.src[1].dtype.scalar().name == "float"

def test_without_the_switch_the_gradient_is_the_one_hot_sum():
  with Context(ROW_SCATTER=0): items = _grad_items(5000, 512, 300)
  kinds = [u.arg[1] for it in items for u in it.ast.toposort() if u.op is Ops.RANGE]
  assert "ordered" not in kinds and "reduce" in kinds

def test_each_device_takes_the_path_its_renderer_declares(device):
  """PYTHON and the GPU renderers keep the one-hot sum (an ordered loop would run on one thread per column)."""
  table = RNG.standard_normal((40, 6)).astype(np.float32)
  idx = np.array([3, 3, -2, 0, 39, 3], np.int32)
  g = RNG.standard_normal((6, 6)).astype(np.float32)
  t = Tensor(table, requires_grad=True)
  t[Tensor(idx)].backward(Tensor(g))
  scatters = any(u.op is Ops.SCATTER_ADD for u in t.grad.uop.toposort())
  assert scatters == bool(Device[device].renderer.row_scatter_add)
  np.testing.assert_array_equal(t.grad.numpy(), _add_at(40, np.where(idx < 0, idx + 40, idx), g))

def test_a_one_column_table_is_never_shared_out():
  # no row loop: the ordered loop is outermost, and threads must not split it (repeated indices would race)
  zero, scatter = _grad_items(1000, 1, 5000)[:2]
  k = Kernel(scatter.ast, Device["CPU"].renderer)
  prog = get_program(k.sink, Device["CPU"].renderer, opts=heuristic_opts(k))
  assert [u.arg[1] for u in prog.uops if u.op is Ops.RANGE] == ["ordered"] and shareable_loop(prog.uops) is None
  idx = RNG.integers(0, 30, 200000).astype(np.int32)   # big enough to be shared out if it could be
  g = RNG.standard_normal(200000).astype(np.float32)
  np.testing.assert_array_equal(_grad(np.zeros(30, np.float32), Tensor(idx), g).numpy(), _add_at(30, idx, g))

# ---- scatter(reduce='add') and scatter_reduce('sum') along dim 0 of a 2-D tensor ----

def _scatters(a: np.ndarray, idx: np.ndarray, src: np.ndarray, scatter: bool) -> list[np.ndarray]:
  with Context(ROW_SCATTER=int(scatter)):
    outs = [Tensor(a).scatter(0, Tensor(idx), Tensor(src), reduce="add"),
            Tensor(a).scatter_reduce(0, Tensor(idx), Tensor(src), "sum"),
            Tensor(a).scatter_reduce(0, Tensor(idx), Tensor(src), "sum", include_self=False)]
    assert any(u.op is Ops.SCATTER_ADD for u in outs[0].uop.toposort()) == scatter
    return [o.numpy() for o in outs]

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int8], ids=str)
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64], ids=str)
def test_scatter_add_along_dim_0_is_the_one_hot_sum_bit_for_bit(dtype, idx_dtype):
  a = (RNG.standard_normal((13, 7)) * 10).astype(dtype)
  a[0, 0] = -0.0 if dtype in (np.float32, np.float16) else a[0, 0]   # no index hits row 0: -0.0 must stay
  idx = RNG.integers(1, 13, (40, 5)).astype(idx_dtype)
  src = (RNG.standard_normal((42, 7)) * 10).astype(dtype)
  new, old = _scatters(a, idx, src, True), _scatters(a, idx, src, False)
  for n, o in zip(new, old): np.testing.assert_array_equal(n, o)
  if dtype == np.float32:
    ref = torch.tensor(a).scatter_add(0, torch.tensor(idx, dtype=torch.long), torch.tensor(src)).numpy()
    np.testing.assert_allclose(new[0], ref, rtol=1e-5, atol=1e-5)
    assert np.signbit(new[0][0, 0])

def test_scatter_reduce_sum_gradients_match_torch():
  a, src = RNG.standard_normal((13, 7)).astype(np.float32), RNG.standard_normal((40, 5)).astype(np.float32)
  idx, w = RNG.integers(0, 13, (40, 5)), RNG.standard_normal((13, 7)).astype(np.float32)
  ta, ts = Tensor(a, requires_grad=True), Tensor(src, requires_grad=True)
  out = ta.scatter_reduce(0, Tensor(idx.astype(np.int32)), ts, "sum")
  assert any(u.op is Ops.SCATTER_ADD for u in out.uop.toposort())
  (out * Tensor(w)).sum().backward()
  pa, ps = torch.tensor(a, requires_grad=True), torch.tensor(src, requires_grad=True)
  ref = pa.scatter_reduce(0, torch.tensor(idx), ps, "sum")
  (ref * torch.tensor(w)).sum().backward()
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(ta.grad.numpy(), pa.grad.numpy())
  np.testing.assert_array_equal(ts.grad.numpy(), ps.grad.numpy())

def test_a_jitted_embedding_step_is_the_same_with_and_without_the_scatter():
  from tinyplug.engine.jit import TinyJit
  from tinyplug.nn.optim import SGD
  weights = []
  for scatter in (1, 0):
    rng = np.random.default_rng(5)
    with Context(ROW_SCATTER=scatter):
      Tensor.manual_seed(0)
      emb = nn.Embedding(500, 32)
      opt = SGD([emb.weight], lr=0.5)
      @TinyJit
      def step(i: Tensor) -> Tensor:
        with Tensor.train():
          opt.zero_grad()
          loss = (emb(i) ** 2).mean()
          loss.backward()
          opt.step()
          return loss.realize()
      for _ in range(4):
        idx = rng.integers(0, 500, (4, 50)).astype(np.int32)
        idx[:, :5] = 7
        step(Tensor(idx))
      weights.append(emb.weight.numpy())
  np.testing.assert_array_equal(weights[0], weights[1])

def test_repeated_lookups_keep_the_scatter_gradient():
  # the second call builds the pick's graph template, later ones replay it: the custom gradient comes along
  table = RNG.standard_normal((60, 8)).astype(np.float32)
  t = Tensor(table, requires_grad=True).realize()
  for _ in range(4):
    idx = RNG.integers(-60, 60, 25).astype(np.int32)
    g = RNG.standard_normal((25, 8)).astype(np.float32)
    t.grad = None
    out = t[Tensor(idx)]
    assert out.uop.op is Ops.CUSTOM_GRAD
    out.backward(Tensor(g))
    assert any(u.op is Ops.SCATTER_ADD for u in t.grad.uop.toposort())
    np.testing.assert_array_equal(t.grad.numpy(), _add_at(60, np.where(idx < 0, idx + 60, idx), g))

@pytest.mark.parametrize("idx_dtype", [np.int8, np.uint8, np.int16], ids=str)
def test_narrow_index_dtypes_into_a_larger_table(idx_dtype):
  # 300 rows do not fit an 8-bit index: the range check must not wrap the row count into the index's dtype
  table = RNG.standard_normal((300, 6)).astype(np.float32)
  lo = 0 if idx_dtype == np.uint8 else -100
  raw = RNG.integers(lo, 120, 90).astype(idx_dtype)
  g = RNG.standard_normal((90, 6)).astype(np.float32)
  new, old = _grad(table, Tensor(raw) + 0, g), _grad(table, Tensor(raw) + 0, g, scatter=False)
  np.testing.assert_array_equal(new.numpy(), old.numpy())
  if idx_dtype == np.int16:
    np.testing.assert_array_equal(new.numpy(), _add_at(300, np.where(raw < 0, raw + 300, raw), g))
