"""Reductions along axes other than the innermost on CPUs: a reduction down the columns (the kept axis innermost and
contiguous) reads whole vectors of a row per step of the reduction, the row whole where it fits the vector registers
(`_column_opts`); a reduction over an outer and the innermost axes (batchnorm's statistics) reduces the innermost
first, in memory order (split_reduce's `_inner_first`). Decisions for fake machines fed through the CPU renderer;
values against numpy and torch for odd sizes and several dtypes."""
import numpy as np
import pytest
import torch
from tinyplug import dtypes, schedule
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes import split_reduce
from tinyplug.passes.heuristic import _column_reduce, heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor

RNG = np.random.default_rng(20)

def _kernels(t: Tensor) -> list[Kernel]:
  schedule._templates.clear()
  items, _ = create_schedule([t.uop])
  return [Kernel(it.ast, Device["CPU"].renderer) for it in items]

@pytest.mark.parametrize("nbytes,regs,want", [
  (64, 32, [Opt(OptOps.UPCAST, 0, 128), Opt(OptOps.UNROLL, 0, 2)]),   # AVX-512: 8 of 16 accumulators, two rows
  (32, 16, [Opt(OptOps.UPCAST, 0, 32), Opt(OptOps.UNROLL, 0, 2)]),    # AVX2: 4 of 8
  (16, 32, [Opt(OptOps.UPCAST, 0, 32), Opt(OptOps.UNROLL, 0, 2)])])   # NEON: 8 of 16, 4 lanes each
def test_a_wide_column_sum_reads_several_vectors_of_two_rows(vector_machine, nbytes, regs, want):
  vector_machine(nbytes, regs)
  k = _kernels(Tensor.empty(256, 4096, device="CPU").sum(0))[-1]   # too few rows for split_reduce: one kernel
  assert _column_reduce(k)
  assert heuristic_opts(k) == want

def test_a_row_that_fits_the_registers_is_read_whole(vector_machine):
  vector_machine(64, 32)
  k = _kernels(Tensor.empty(16, 4096, 256, device="CPU").sum(1))[-1]   # 16 vectors: the middle axis is one stream
  assert heuristic_opts(k) == [Opt(OptOps.UPCAST, 1, 256)]
  # AVX2 and NEON: a 1 KB row is read whole too, past the registers (its spilled accumulators stay in L1), not
  # split into chunks of rows nor read a few vectors at a time (two streams at a stride)
  for nbytes, regs in ((32, 16), (16, 32)):
    vector_machine(nbytes, regs)
    ks = _kernels(Tensor.empty(16, 4096, 256, device="CPU").sum(1))
    assert len(ks) == 1 and heuristic_opts(ks[0]) == [Opt(OptOps.UPCAST, 1, 256)]
  # a 2 KB row is no longer read whole on AVX2: split into chunks of rows
  vector_machine(32, 16)
  assert len(_kernels(Tensor.empty(16, 4096, 512, device="CPU").sum(1))) == 2

def test_what_is_not_a_column_reduction(vector_machine):
  vector_machine(64, 32)
  assert not _column_reduce(_kernels(Tensor.empty(512, 256, device="CPU").sum(1))[-1])   # along the rows
  a, b = Tensor.empty(128, 64, device="CPU"), Tensor.empty(128, 32, device="CPU")
  assert not _column_reduce(_kernels(a.T @ b)[-1])   # a weight gradient: one input does not depend on the row
  assert not _column_reduce(_kernels(a @ Tensor.empty(64, 32, device="CPU"))[-1])
  # an odd row (5 floats) is no whole number of vectors: the older rules take it
  k = _kernels(Tensor.empty(4097, 5, device="CPU").sum(0))[-1]
  assert _column_reduce(k) and not any(o.op is OptOps.UPCAST and o.arg % 16 == 0 for o in heuristic_opts(k))

def test_var_and_argmax_down_the_columns_are_all_column_kernels(vector_machine):
  vector_machine(64, 32)
  x = Tensor.empty(1024, 512, device="CPU")
  for t in (x.var(0), x.argmax(0)):
    reductions = [k for k in _kernels(t) if k.reduce_axes]
    assert reductions and all(_column_reduce(k) for k in reductions)
    # 1024 rows are chunked (16 rows, then 64 partials): every kernel reads vectors of a row (argmax's int64
    # accumulators: half the lanes of a register)
    least = 32 if t.dtype == dtypes.float32 else 16
    assert all(any(o.op is OptOps.UPCAST and o.arg >= least for o in heuristic_opts(k)) for k in reductions)

def test_batchnorm_statistics_reduce_the_innermost_axes_first():
  shape = (16, 6, 64, 64)   # 65536 elements per channel: split_reduce takes it
  ks = [k for k in _kernels(Tensor.empty(*shape, device="CPU").sum((0, 2, 3))) if k.reduce_axes]
  # partials [N, C] over H*W in memory order, then the batch axis of those
  assert [([r.src[0].arg for r in k.loop_axes], [r.src[0].arg for r in k.reduce_axes]) for k in ks] == \
    [([16, 6], [64, 64]), ([6], [16])]
  a = RNG.standard_normal(shape).astype(np.float32)
  t = Tensor(a, device="CPU")
  np.testing.assert_allclose(t.mean((0, 2, 3)).numpy(), a.mean((0, 2, 3)), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(t.var((0, 2, 3), correction=0).numpy(), a.var((0, 2, 3)), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(t.max((0, 3)).numpy(), a.max((0, 3)))

SHAPES = [((7, 13), 0), ((7, 13), 1), ((4097, 5), 0), ((3, 1000, 7), 1), ((3, 1000, 7), 0), ((5, 64, 48), 1),
          ((300, 16), 0), ((33, 256), 0), ((2, 520, 272), 1), ((128, 10), 1), ((513, 96), 0)]

@pytest.mark.parametrize("shape,axis", SHAPES)
def test_float_reductions_match_numpy_and_torch(shape, axis):
  schedule._templates.clear()
  a = RNG.standard_normal(shape).astype(np.float32)
  t, tt = Tensor(a, device="CPU"), torch.from_numpy(a)
  np.testing.assert_allclose(t.sum(axis).numpy(), a.sum(axis), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(t.mean(axis).numpy(), tt.mean(axis).numpy(), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(t.max(axis).numpy(), a.max(axis))
  np.testing.assert_allclose(t.min(axis).numpy(), a.min(axis))
  np.testing.assert_array_equal(t.argmax(axis).numpy(), a.argmax(axis))
  np.testing.assert_allclose(t.var(axis).numpy(), tt.var(axis).numpy(), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(t.std(axis).numpy(), tt.std(axis).numpy(), rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(t.logsumexp(axis).numpy(), tt.logsumexp(axis).numpy(), rtol=1e-5, atol=1e-5)
  if shape[axis] <= 1000:
    np.testing.assert_allclose(t.cumsum(axis).numpy(), a.cumsum(axis), rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.uint8, np.int64])
@pytest.mark.parametrize("shape,axis", [((7, 13), 0), ((4097, 5), 0), ((3, 1000, 7), 1), ((300, 64), 0),
                                        ((9, 320, 128), 1)])
def test_other_dtypes_down_the_columns(dtype, shape, axis):
  schedule._templates.clear()
  a = (RNG.standard_normal(shape) * 20).astype(dtype) if dtype != np.uint8 else RNG.integers(0, 255, shape, np.uint8)
  t, tt = Tensor(a, device="CPU"), torch.from_numpy(a)
  if dtype == np.float16:
    np.testing.assert_allclose(t.sum(axis).numpy().astype(np.float32), a.astype(np.float32).sum(axis),
                               rtol=2e-3, atol=0.5)
  else: np.testing.assert_array_equal(t.sum(axis).numpy(), tt.sum(axis).numpy())
  np.testing.assert_array_equal(t.max(axis).numpy(), a.max(axis))
  np.testing.assert_array_equal(t.argmax(axis).numpy(), a.argmax(axis))

@pytest.mark.parametrize("shape,axis", [((3, 1000, 7), 1), ((65, 3), 0), ((4097, 2), 0), ((2, 130), 1), ((6, 64), 1)])
def test_blocked_scans_match_torch(shape, axis):
  # longer than SCAN_DIRECT: blocks of about sqrt(n), padded with the identity
  schedule._templates.clear()
  a = RNG.standard_normal(shape).astype(np.float32)
  np.testing.assert_allclose(Tensor(a, device="CPU").cumsum(axis).numpy(), torch.from_numpy(a).cumsum(axis).numpy(),
                             rtol=1e-4, atol=2e-3)
  ai = RNG.integers(-50, 50, shape).astype(np.int32)
  np.testing.assert_array_equal(Tensor(ai, device="CPU").cumsum(axis).numpy(), ai.cumsum(axis))
  p = RNG.uniform(0.97, 1.03, shape).astype(np.float32)
  np.testing.assert_allclose(Tensor(p, device="CPU").cumprod(axis).numpy(), torch.from_numpy(p).cumprod(axis).numpy(),
                             rtol=1e-4)
  t, tt = Tensor(a, device="CPU", requires_grad=True), torch.from_numpy(a).requires_grad_()
  w = RNG.standard_normal(shape).astype(np.float32)
  (t.cumsum(axis) * Tensor(w, device="CPU")).sum().backward()
  (tt.cumsum(axis) * torch.from_numpy(w)).sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-4, atol=1e-3)

def test_long_columns_wider_than_the_registers_are_summed_in_chunks_of_rows(vector_machine):
  vector_machine(64, 32)   # a row of 1 KB fits the tile: 512 floats do not
  shapes = lambda t: [([r.src[0].arg for r in k.loop_axes], [r.src[0].arg for r in k.reduce_axes]) for k in _kernels(t)]
  # (a sum goes through split_reduce's blocks of rows: test_split_reduce_row_blocks.py; a max is chunked)
  assert shapes(Tensor.empty(2048, 512, device="CPU").max(0)) == [([128, 512], [16]), ([512], [128])]
  # a chunk of 16 rows is read as streams already: a small tile (two vectors, unrolled by 4) compiles in less
  chunk = _kernels(Tensor.empty(2048, 512, device="CPU").max(0))[0]
  assert heuristic_opts(chunk) == [Opt(OptOps.UPCAST, 1, 32), Opt(OptOps.UNROLL, 0, 4)]
  assert shapes(Tensor.empty(2048, 256, device="CPU").max(0)) == [([256], [2048])]    # the row fits: one kernel
  assert shapes(Tensor.empty(1008, 512, device="CPU").max(0)) == [([512], [1008])]    # too few rows
  assert shapes(Tensor.empty(512, 2048, device="CPU").T.max(0)) == [([512], [2048])]  # a transposed view: its rows
  a = RNG.standard_normal((2048, 520)).astype(np.float32)
  t = Tensor(a, device="CPU")
  np.testing.assert_allclose(t.sum(0).numpy(), a.sum(0), rtol=1e-4, atol=1e-3)
  np.testing.assert_array_equal(t.max(0).numpy(), a.max(0))
  np.testing.assert_array_equal(t.argmax(0).numpy(), a.argmax(0))
  np.testing.assert_allclose(t.var(0).numpy(), a.var(0, ddof=1), rtol=1e-4, atol=1e-5)

def test_a_broadcast_column_sum_is_not_chunked():
  # (a @ b).sum()'s gradients reduce a broadcast of 1024^3 elements over 1024^2 of data: chunking it by 16 rows
  # would write 64M partials (268 MB) and read them back at a stride of 4 MB
  schedule._templates.clear()
  a_np, b_np = RNG.standard_normal((1024, 1024)).astype(np.float32), RNG.standard_normal((1024, 1024)).astype(np.float32)
  a, b = Tensor(a_np, requires_grad=True), Tensor(b_np, requires_grad=True)
  (a @ b).sum().backward()
  for g in (a.grad, b.grad):
    items, _ = create_schedule([g.uop])
    assert all(buf.size <= 1024 * 1024 for it in items for buf in it.buf_uops), [it.buf_uops for it in items]
  np.testing.assert_allclose(a.grad.numpy(), np.broadcast_to(b_np.sum(1), (1024, 1024)), rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(b.grad.numpy(), np.broadcast_to(a_np.sum(0)[:, None], (1024, 1024)), rtol=1e-4, atol=1e-3)
  # a real column sum of that size still is (in blocks of rows) and so is a column max (in chunks of 16 rows)
  assert any(r.arg[1] == "ordered" for k in _kernels(Tensor.empty(4096, 4096, device="CPU").sum(0)) for r in k.ranges)
  assert len([k for k in _kernels(Tensor.empty(4096, 4096, device="CPU").max(0)) if k.reduce_axes]) == 2

@pytest.mark.parametrize("make", [lambda v, w: v @ w, lambda v, w: v.reshape(1, -1) @ w, lambda v, w: w.T.mul(v).sum(1)],
                         ids=["v@W", "(1,K)@W", "W.T*v summed"])
def test_a_vector_times_a_matrix_reads_the_matrix_down_its_columns_in_blocks(make):
  # the view reduces its last axis, but in W's memory that axis is the column: summed in blocks of W's rows like
  # sum(0) (split_reduce's `_row_blocks`), not walked down 1024 rows per register tile
  schedule._templates.clear()
  v_np, w_np = RNG.standard_normal(1024).astype(np.float32), RNG.standard_normal((1024, 2048)).astype(np.float32)
  out = make(Tensor(v_np).realize(), Tensor(w_np).realize())
  ks = _kernels(out)
  blocks = [k for k in ks if any(r.arg[1] == "ordered" for r in k.ranges)]
  assert len(blocks) == 1 and [r.src[0].arg for r in blocks[0].loop_axes] == [split_reduce.ROW_BLOCKS, 2048]
  assert [[r.src[0].arg for r in k.reduce_axes] for k in ks if k.reduce_axes] == [[split_reduce.ROW_BLOCKS]]
  np.testing.assert_allclose(out.numpy().reshape(-1), v_np @ w_np, rtol=1e-4, atol=1e-3)

def test_strides_of_views():
  from tinyplug.passes.views import reshaped_strides as _reshaped_strides
  assert _reshaped_strides((4, 6), (6, 1), (2, 2, 3, 2)) == (12, 6, 2, 1)
  assert _reshaped_strides((1, 4096, 4096), (0, 1, 4096), (4096, 4096)) == (1, 4096)
  assert _reshaped_strides((4, 6), (1, 4), (24,)) is None      # a transposed view merged: needs a copy
  assert _reshaped_strides((2, 3), (0, 1), (6,)) is None       # a broadcast merged with a real axis

@pytest.mark.parametrize("shape,want", [
  ((8, 128, 1000), [Opt(OptOps.UPCAST, 0, 40), Opt(OptOps.UNROLL, 1, 2)]),   # 8-lane vectors, 5 of them
  ((256, 100), [Opt(OptOps.UPCAST, 0, 20), Opt(OptOps.UNROLL, 0, 2)]),       # 4-lane vectors
  ((512, 10), [Opt(OptOps.UPCAST, 0, 10)])])                                 # a short row whole
def test_a_row_no_whole_vector_divides_reads_narrower_vectors(vector_machine, shape, want):
  # a layer's bias gradient summed over its batch: 1000, 100 or 10 outputs (each output had been a scalar walk down
  # its column, 11x slower at 1000); values match numpy on the CPU machine
  vector_machine(64, 32)
  t = Tensor.empty(*shape, device="CPU").sum(tuple(range(len(shape) - 1)))
  k = _kernels(t)[-1]
  assert _column_reduce(k) and heuristic_opts(k) == want

@pytest.mark.parametrize("shape", [(8, 128, 1000), (256, 100), (512, 10), (96, 36), (7, 3, 200)])
def test_odd_width_column_sums_match_numpy(shape):
  a = RNG.standard_normal(shape).astype(np.float32)
  axes = tuple(range(len(shape) - 1))
  np.testing.assert_allclose(Tensor(a, device="CPU").sum(axes).numpy(), a.sum(axes), rtol=1e-4, atol=1e-4)
