"""Tensor-indexed reads of whole rows (`x[idx]`, `nn.Embedding`, issue 20): values against numpy and torch at odd
widths and index dtypes, the heuristic's decision for gathered rows on other machines (one vector register of the
stored dtype per step), the rendered kernel (full-width loads, one select per vector), and the graph built once."""
from __future__ import annotations
import numpy as np
import pytest
import torch
from tinyplug import nn, schedule
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.passes.heuristic import _gathered_row_lanes, heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops import template
from tinyplug.tensor_ops.create import arange_uop
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(2011)

def gather_kernel(rows: int, width: int, n: int, idx_dtype: str = "int32", dtype: str = "float32") -> Kernel:
  schedule._templates.clear()   # no schedule made under another fake machine
  t, i = Tensor.empty(rows, width, dtype=dtype), Tensor.empty(n, dtype=idx_dtype)
  ast = [it.ast for it in create_schedule([t[i].uop])[0] if it.ast.op is Ops.SINK][-1]
  return Kernel(ast, Device["CPU"].renderer)

# ---- values ----

@pytest.mark.parametrize("rows,width,n", [(1000, 37, 300), (1000, 513, 300), (5000, 512, 4096), (300, 1, 50)], ids=str)
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_rows_match_numpy(rows, width, n, idx_dtype):
  table = RNG.standard_normal((rows, width)).astype(np.float32)
  idx = RNG.integers(-rows, rows, n).astype(idx_dtype)   # negative ones count from the end, as numpy and torch
  np.testing.assert_array_equal(Tensor(table)[Tensor(idx)].numpy(), table[idx])

@pytest.mark.parametrize("rows", [1, 2, 3, 4, 8])
def test_short_tables_keep_negative_zero(rows):
  # a table of two rows has a one-digit arange; its sum of products would turn -0.0 into +0.0
  table = np.where(RNG.random((rows, 5)) < 0.5, -0.0, 1.5).astype(np.float32)
  idx = RNG.integers(-rows, rows, 9).astype(np.int32)
  got = Tensor(table)[Tensor(idx)].numpy()
  np.testing.assert_array_equal(got, table[idx])
  np.testing.assert_array_equal(np.signbit(got), np.signbit(table[idx]))

def test_one_and_three_dim_tables_and_2d_indices():
  flat = RNG.standard_normal(1000).astype(np.float32)
  i1 = RNG.integers(-1000, 1000, 4099).astype(np.int32)
  np.testing.assert_array_equal(Tensor(flat)[Tensor(i1)].numpy(), flat[i1])
  cube = RNG.standard_normal((50, 7, 37)).astype(np.float32)
  i3 = RNG.integers(0, 50, (3, 129)).astype(np.int64)
  np.testing.assert_array_equal(Tensor(cube)[Tensor(i3)].numpy(), cube[i3])
  np.testing.assert_array_equal(Tensor(cube)[:, Tensor(i3[0] % 7)].numpy(), cube[:, i3[0] % 7])

def test_half_rows():
  table = RNG.standard_normal((700, 96)).astype(np.float16)
  idx = RNG.integers(-700, 700, 999).astype(np.int32)
  np.testing.assert_array_equal(Tensor(table)[Tensor(idx)].numpy(), table[idx])

def test_out_of_range_rows_are_zero_and_realized_ones_raise():
  table = RNG.standard_normal((20, 33)).astype(np.float32)
  lazy = Tensor(np.array([3, 19, 0, 5], np.int32)) * Tensor(np.array([1, 1000, 1, -1000], np.int32))   # not on host
  want = np.stack([table[3], np.zeros(33, np.float32), table[0], np.zeros(33, np.float32)])
  np.testing.assert_array_equal(Tensor(table)[lazy].numpy(), want)
  t = Tensor(table).realize()
  for _ in range(3):   # the graph comes from a template after the first calls; the check still runs every time
    with pytest.raises(IndexError, match="out of range"): t[Tensor(np.array([1, 20], np.int32)).realize()]

def test_gradient_is_a_scatter_add_like_torch():
  table = RNG.standard_normal((40, 37)).astype(np.float32)
  idx = np.array([3, 3, -1, 39, 0, 3, 17], np.int64)   # repeats add up
  g = RNG.standard_normal((7, 37)).astype(np.float32)
  pt = torch.tensor(table, requires_grad=True)
  (pt[torch.tensor(idx)] * torch.tensor(g)).sum().backward()
  for _ in range(3):   # the first calls build the graph, the third comes from the graph template
    t = Tensor(table, requires_grad=True)
    (t[Tensor(idx)] * Tensor(g)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), pt.grad.numpy(), rtol=1e-6, atol=1e-6)

def test_embedding_reads_rows_and_matches_torch_with_gradient():
  emb = nn.Embedding(1000, 37)
  idx = RNG.integers(0, 1000, (8, 33)).astype(np.int32)
  out = emb(Tensor(idx))
  # no reduction over the vocabulary left: each output element is one read
  assert not any(u.op is Ops.REDUCE for it in create_schedule([out.uop])[0] for u in it.ast.toposort())
  w = torch.tensor(emb.weight.numpy(), requires_grad=True)
  emb.weight.requires_grad = True
  g = RNG.standard_normal((8, 33, 37)).astype(np.float32)
  (emb(Tensor(idx)) * Tensor(g)).sum().backward()
  want = torch.nn.functional.embedding(torch.tensor(idx, dtype=torch.long), w)
  (want * torch.tensor(g)).sum().backward()
  np.testing.assert_allclose(out.numpy(), want.detach().numpy())
  np.testing.assert_allclose(emb.weight.grad.numpy(), w.grad.numpy(), rtol=1e-5, atol=1e-5)
  lazy = Tensor(np.array([2, 5], np.int32)) * Tensor(np.array([1, 1000], np.int32))   # past the table: zeros
  np.testing.assert_array_equal(emb(lazy).numpy()[1], np.zeros(37, np.float32))

# ---- decisions ----

@pytest.mark.parametrize("regs,lanes", [((64, 32), 16), ((32, 16), 8), ((16, 32), 4)], ids=["avx512", "avx2", "neon"])
@pytest.mark.parametrize("idx_dtype", ["int32", "int64"])
def test_gathered_rows_take_one_vector_register_per_step(vector_machine, regs, lanes, idx_dtype):
  vector_machine(*regs)
  k = gather_kernel(50000, 512, 4096, idx_dtype)
  assert _gathered_row_lanes(k) == lanes
  assert heuristic_opts(k) == [Opt(OptOps.UPCAST, 1, lanes)]

def test_half_rows_take_twice_the_lanes(vector_machine):
  vector_machine(64, 32)
  assert heuristic_opts(gather_kernel(5000, 512, 4096, dtype="float16")) == [Opt(OptOps.UPCAST, 1, 32)]

def test_rows_no_vector_divides_keep_the_divisor_rule(vector_machine):
  vector_machine(64, 32)
  assert heuristic_opts(gather_kernel(1000, 513, 300)) == [Opt(OptOps.UPCAST, 1, 9)]    # not padded to 528
  assert heuristic_opts(gather_kernel(1000, 37, 300)) == []
  assert heuristic_opts(gather_kernel(1000, 24, 300)) == [Opt(OptOps.UPCAST, 1, 8)]     # half a register divides

def test_plain_copies_are_not_gathers(vector_machine):
  vector_machine(64, 32)
  schedule._templates.clear()
  ast = [it.ast for it in create_schedule([(Tensor.empty(4096, 512) + 1).uop])[0] if it.ast.op is Ops.SINK][-1]
  assert _gathered_row_lanes(Kernel(ast, Device["CPU"].renderer)) is None

# ---- the kernel and the graph ----

def test_rendered_gather_reads_full_vectors_with_one_select(vector_machine):
  """On an AVX-512 machine the row is read and written as <16 x float>, the index's range check selects each loaded
  vector once (the one-hot's own `where` is gone: the gated load already gives 0), and the index is loaded once."""
  r = vector_machine(64, 32)
  k = gather_kernel(50000, 512, 4096)
  src = get_program(k.sink, r, opts=heuristic_opts(k)).src
  assert "load <16 x float>" in src and "store <16 x float>" in src
  assert sum(1 for line in src.splitlines() if "select" in line and "x float>" in line) == 1, src
  assert src.count("load i32") == 1

def test_repeated_lookups_reuse_their_graph():
  assert arange_uop(50000, "CPU") is arange_uop(50000, "CPU")
  t, i = Tensor(RNG.standard_normal((300, 8)).astype(np.float32)).realize(), Tensor(np.arange(5, dtype=np.int32))
  outs = [t[i] for _ in range(3)]
  assert any(key[0].__name__ == "_pick_by_tensors" for key, _ in template._templates.items())
  for o in outs: np.testing.assert_array_equal(o.numpy(), t.numpy()[:5])

# ---- the gradient: a one-hot match per row and index, added under a branch ----

def _grad_kernel(rows: int, width: int, idx_shape: tuple[int, ...]) -> Kernel:
  """The one-hot gradient kernel (ROW_SCATTER=0: the CPU's own is a scatter-add, tests/test_scatter_rows.py)."""
  schedule._templates.clear()
  t = Tensor.empty(rows, width, requires_grad=True)
  with Context(ROW_SCATTER=0):
    (t[Tensor.empty(*idx_shape, dtype="int32")] * Tensor.empty(*idx_shape, width)).sum().backward()
  ast = [it.ast for it in create_schedule([t.grad.uop])[0] if it.ast.op is Ops.SINK][-1]
  return Kernel(ast, Device["CPU"].renderer)

@pytest.mark.parametrize("width,want", [(512, 256), (128, 128), (37, 37), (1000, 250)])
def test_the_gradient_upcasts_its_row_and_tests_each_match_once(vector_machine, width, want):
  # the match test does not depend on the columns: as many of them as the kernel allows share each test, and no
  # other output row is upcast (it would test again)
  vector_machine(64, 32)
  assert heuristic_opts(_grad_kernel(5000, width, (300,))) == [Opt(OptOps.UPCAST, 1, want)]
  assert heuristic_opts(_grad_kernel(1000, width, (8, 33))) == [Opt(OptOps.UPCAST, 1, want)]

def test_the_gradient_adds_under_a_branch(vector_machine):
  from tinyplug.codegen.linearize import sparse_gate
  r = vector_machine(64, 32)
  k = _grad_kernel(5000, 512, (300,))
  red = next(u for u in k.sink.toposort() if u.op is Ops.REDUCE)
  assert sparse_gate(red) is not None
  src = get_program(k.sink, r, opts=heuristic_opts(k)).src
  # compares of the loaded index and branches on them, the row's vectors added inside: no select left
  assert "icmp eq i32" in src and "label %if" in src, src
  assert not any("select" in line and "x float>" in line for line in src.splitlines()), src

# ---- the CPU scans 16 indices per branch (linearize's scan_matches, the renderer's match_scan_lanes) ----

def _branches(k: Kernel, r) -> list[UOp]:
  """The IFs of the kernel's linear program, in order."""
  return [u for u in get_program(k.sink, r, opts=heuristic_opts(k)).uops if u.op is Ops.IF]

@pytest.mark.parametrize("idx_shape,lanes,tail", [((300,), 16, True), ((288,), 16, False), ((20,), 8, True),
                                                 ((8, 33), 16, True), ((5,), 0, False)], ids=str)
def test_the_gradient_scans_groups_of_indices(vector_machine, idx_shape, lanes, tail):
  # a group's matches OR-ed into one branch; inside it, and for the indices left over, one branch per index
  r = vector_machine(64, 32)
  ifs = _branches(_grad_kernel(5000, 512, idx_shape), r)
  assert len(ifs) == (1 if not lanes else 3 if tail else 2)
  if lanes:   # one vector load of the indices, one compare of `lanes` lanes
    (eq,) = [u for u in ifs[0].src[0].toposort() if u.op is Ops.CMPEQ]
    assert eq.dtype.count == lanes and eq.src[0].op is Ops.LOAD and eq.src[0].dtype.count == lanes

def test_the_scan_is_the_renderers_choice(vector_machine, monkeypatch):
  r = vector_machine(64, 32)
  monkeypatch.setattr(r, "match_scan_lanes", 0)   # as GPU renderers declare: a branch per index
  assert len(_branches(_grad_kernel(5000, 512, (300,)), r)) == 1
  monkeypatch.setattr(r, "match_scan_lanes", 8)
  ifs = _branches(_grad_kernel(5000, 512, (300,)), r)
  assert len(ifs) == 3 and [u.dtype.count for u in ifs[0].src[0].toposort() if u.op is Ops.CMPEQ] == [8]

def _add_at(rows: int, idx: np.ndarray, g: np.ndarray) -> np.ndarray:
  out = np.zeros((rows,) + g.shape[idx.ndim:], g.dtype)
  np.add.at(out, idx, g)   # in index order, as the kernel adds: the same float32 sums, bit for bit
  return out

@pytest.mark.parametrize("rows,width,idx_shape", [(5000, 512, (300,)), (1000, 128, (8, 33)), (64, 7, (37,)),
                                                  (10, 3, (1000,)), (300, 16, (20,)), (9, 5, (4, 5, 6))], ids=str)
def test_scanned_gradients_equal_numpy_add_at(rows, width, idx_shape):
  table = RNG.standard_normal((rows, width)).astype(np.float32)
  idx = RNG.integers(-rows, rows, idx_shape).astype(np.int32)   # negative ones wrap, repeats add up
  g = RNG.standard_normal(idx_shape + (width,)).astype(np.float32)
  t = Tensor(table, requires_grad=True)
  (t[Tensor(idx)] * Tensor(g)).sum().backward()
  np.testing.assert_array_equal(t.grad.numpy(), _add_at(rows, np.where(idx < 0, idx + rows, idx), g))

@pytest.mark.parametrize("idx_dtype", [np.int64, np.int16, np.uint8])
def test_scanned_gradients_of_other_index_dtypes(idx_dtype):
  table = RNG.standard_normal((120, 24)).astype(np.float32)
  idx = RNG.integers(0 if idx_dtype == np.uint8 else -120, 120, (8, 77)).astype(idx_dtype)
  g = RNG.standard_normal((8, 77, 24)).astype(np.float32)
  t = Tensor(table, requires_grad=True)
  (t[Tensor(idx)] * Tensor(g)).sum().backward()
  wide = idx.astype(np.int64)
  np.testing.assert_array_equal(t.grad.numpy(), _add_at(120, np.where(wide < 0, wide + 120, wide), g))

def test_scanned_gradient_of_one_row_picked_every_time_and_of_groups_with_two_matches():
  table = RNG.standard_normal((100, 33)).astype(np.float32)
  g = RNG.standard_normal((64, 33)).astype(np.float32)
  picks = (np.full(64, 7), np.repeat(np.arange(32), 2), np.arange(63, -1, -1))   # one row; two matches a group; reversed
  for idx in (p.astype(np.int32) for p in picks):
    t = Tensor(table, requires_grad=True)
    (t[Tensor(idx)] * Tensor(g)).sum().backward()
    pt = torch.tensor(table, requires_grad=True)
    (pt[torch.tensor(idx, dtype=torch.long)] * torch.tensor(g)).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), _add_at(100, idx, g))
    np.testing.assert_allclose(t.grad.numpy(), pt.grad.numpy(), rtol=1e-6, atol=1e-6)

def test_scanned_gradient_of_a_half_table():
  table = RNG.standard_normal((500, 40)).astype(np.float16)
  idx = RNG.integers(0, 500, 777).astype(np.int32)
  g = RNG.standard_normal((777, 40)).astype(np.float16)
  t = Tensor(table, requires_grad=True)
  (t[Tensor(idx)] * Tensor(g)).sum().backward()
  assert t.grad.dtype == t.dtype
  pt = torch.tensor(table, requires_grad=True)
  (pt[torch.tensor(idx, dtype=torch.long)] * torch.tensor(g)).sum().backward()
  np.testing.assert_allclose(t.grad.numpy().astype(np.float32), pt.grad.numpy().astype(np.float32),
                             rtol=2e-3, atol=2e-3)

def test_an_embedding_training_step_matches_torch():
  from tinyplug.nn.optim import SGD
  emb = nn.Embedding(2000, 48)
  w0 = emb.weight.numpy().copy()
  idx = RNG.integers(0, 2000, (16, 40)).astype(np.int32)
  idx[:, :4] = 5   # a row picked many times
  target = RNG.standard_normal((16, 40, 48)).astype(np.float32)
  opt = SGD([emb.weight], lr=0.1)
  with Tensor.train():
    opt.zero_grad()
    ((emb(Tensor(idx)) - Tensor(target)) ** 2).mean().backward()
    opt.step()
  ref = torch.nn.Embedding(2000, 48)
  ref.weight.data = torch.tensor(w0)
  topt = torch.optim.SGD(ref.parameters(), lr=0.1)
  ((ref(torch.tensor(idx, dtype=torch.long)) - torch.tensor(target)) ** 2).mean().backward()
  topt.step()
  np.testing.assert_allclose(emb.weight.numpy(), ref.weight.detach().numpy(), rtol=1e-5, atol=1e-6)
  assert not np.array_equal(emb.weight.numpy()[5], w0[5])

def test_other_masks_keep_their_select():
  from tinyplug.codegen.linearize import sparse_gate
  x, idx = Tensor.empty(64, 256), Tensor.empty(64, 256, dtype="int32")
  # a float compare, and an equality of loaded values with a constant (dense, unpredictable): no branch
  for t in ((x > 0).where(x, 0).sum(1), (idx == 3).where(x, 0).sum(0)):
    ast = [it.ast for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK][-1]
    reds = [u for u in ast.toposort() if u.op is Ops.REDUCE]
    assert reds and all(sparse_gate(r) is None for r in reds)
