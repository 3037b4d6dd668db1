"""split_reduce's blocks of rows (`_row_blocks`): a long sum down the columns of a matrix on a CPU with a row
scatter-add (`v @ W`, `W.sum(0)`) is a SCATTER_ADD of ROW_BLOCKS blocks of rows (`scatter.block_index`), each added
ROW_GROUP rows at a time (in pairs) into a row of sums of its own, then the blocks' rows summed. The block kernel loops over the
blocks (which threads share), then over the block's rows in order, then along the row. Values against numpy."""
import numpy as np
import pytest
from tinyplug import dtypes, schedule
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel
from tinyplug.device import Device
from tinyplug.passes import split_reduce
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.schedule.scatter import block_index
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops, UOp

RNG = np.random.default_rng(15)

def _kernels(t: Tensor) -> list[Kernel]:
  schedule._templates.clear()
  items, _ = create_schedule([t.uop])
  return [Kernel(it.ast, Device["CPU"].renderer) for it in items]

def _blocked(ks: list[Kernel]) -> list[Kernel]:
  return [k for k in ks if any(r.arg[1] == "ordered" for r in k.ranges)]

@pytest.mark.parametrize("rows,cols", [(1024, 2048), (2048, 520), (4096, 4096)])
def test_a_long_column_sum_is_added_up_in_blocks_of_rows(rows, cols):
  a = RNG.standard_normal((rows, cols)).astype(np.float32)
  v = RNG.standard_normal(rows).astype(np.float32)
  t, tv = Tensor(a).realize(), Tensor(v).realize()
  for out, want in ((t.sum(0), a.sum(0)), (tv @ t, v @ a), (t.mean(0), a.mean(0)), ((t * 2 + 1).sum(0), (a * 2 + 1).sum(0))):
    ks = _kernels(out)
    blocks = _blocked(ks)
    # the blocks added in (no kernel zeroing their rows first: the first step stores), the blocks' rows summed
    assert len(ks) == 2 and len(blocks) == 1, [k.full_shape for k in ks]
    assert [r.src[0].arg for r in blocks[0].loop_axes] == [split_reduce.ROW_BLOCKS, cols]
    assert [r.src[0].arg for r in blocks[0].ranges if r.arg[1] == "ordered"] == \
      [rows // split_reduce.ROW_BLOCKS // split_reduce.ROW_GROUP]
    assert [[r.src[0].arg for r in k.reduce_axes] for k in ks if k.reduce_axes] == [[split_reduce.ROW_BLOCKS]]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-3)

def test_an_int_column_sum_in_blocks_is_exact():
  a = RNG.integers(-1000, 1000, (2048, 640)).astype(np.int32)
  out = Tensor(a).sum(0)
  assert len(_blocked(_kernels(out))) == 1
  np.testing.assert_array_equal(out.numpy(), a.sum(0))

def test_the_blocks_are_shared_out_and_the_row_is_vectorised():
  ks = _kernels(Tensor.empty(4096, 4096, device="CPU").sum(0))
  k = _blocked(ks)[0]
  opts = heuristic_opts(k)
  spec = get_program(k.sink, Device["CPU"].renderer, opts=opts)
  assert spec.thread_split   # threads share the blocks: the outermost loop
  lanes = Device["CPU"].renderer.vector_bytes // 4
  assert any(o.axis == 1 and o.arg % lanes == 0 for o in opts), opts   # the row along memory, whole vectors

@pytest.mark.parametrize("make", [lambda t: t.max(0), lambda t: t[:1040].sum(0), lambda t: t.sum(1),
                                  lambda t: t.reshape(8, 256, 1024).sum(1),
                                  lambda t: (t - t.mean(1).reshape(-1, 1)).sum(0)],
                         ids=["max", "rows not whole blocks", "along the rows", "an outer kept axis",
                              "a reduction in the source"])
def test_what_is_not_summed_in_blocks(make):
  a = RNG.standard_normal((2048, 1024)).astype(np.float32)
  out = make(Tensor(a).realize())
  assert not _blocked(_kernels(out))
  np.testing.assert_allclose(out.numpy(), make(a), rtol=1e-4, atol=1e-3)

def test_a_renderer_without_the_row_scatter_keeps_the_chunks(monkeypatch):
  monkeypatch.setattr(Device["CPU"].renderer, "row_scatter_add", False)
  ks = _kernels(Tensor.empty(4096, 4096, device="CPU").sum(0))
  assert not _blocked(ks) and [[r.src[0].arg for r in k.reduce_axes] for k in ks] == [[16], [256]]

@pytest.mark.parametrize("blocks,per_block,width", [(4, 3, 5), (2, 8, 1), (16, 32, 64)])
def test_a_scatter_add_into_blocks_sums_each_block_in_order(blocks, per_block, width):
  src = RNG.standard_normal((blocks * per_block, width)).astype(np.float32)
  idx = block_index(blocks, per_block, "CPU")
  out = Tensor.from_uop(UOp(Ops.SCATTER_ADD, dtypes.float32, (Tensor(src).uop, idx), blocks))
  if width > 1: assert len(_blocked(_kernels(out))) == 1
  want = src.reshape(blocks, per_block, width).sum(1)
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
  # the same index values from a buffer: the general scatter-add, the same sums
  plain = Tensor(np.arange(blocks * per_block, dtype=np.int32) // per_block)
  again = Tensor.from_uop(UOp(Ops.SCATTER_ADD, dtypes.float32, (Tensor(src).uop, plain.uop), blocks))
  np.testing.assert_allclose(again.numpy(), want, rtol=1e-5, atol=1e-5)

def test_the_row_of_sums_is_read_again_at_every_step_with_no_loop_left_around_it():
  # the block axis and the row upcast whole (a search may pick that): the row's address no longer changes inside
  # the ordered loop, but each step must still add to what the step before stored
  from tinyplug.codegen.kernel import Opt, OptOps
  blocks, per_block, width = 2, 8, 4
  src = RNG.standard_normal((blocks * per_block, width)).astype(np.float32)
  out = Tensor.from_uop(UOp(Ops.SCATTER_ADD, dtypes.float32, (Tensor(src).realize().uop, block_index(blocks, per_block,
                                                                                                     "CPU")), blocks))
  schedule._templates.clear()
  items, _ = create_schedule([out.uop])
  dev = Device["CPU"]
  for it in items:
    ordered = any(u.op is Ops.RANGE and u.arg[1] == "ordered" for u in it.ast.toposort())
    opts = [Opt(OptOps.UPCAST, 1, width), Opt(OptOps.UPCAST, 0, blocks)] if ordered else []
    spec = get_program(it.ast, dev.renderer, opts=opts)
    prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
    prg(*[b.ensure_allocated().handle for b in it.bufs], global_size=spec.global_size, local_size=spec.local_size,
        vals=(), wait=True)
  got = items[-1].bufs[0].numpy().view(np.float32).reshape(blocks, width)
  np.testing.assert_allclose(got, src.reshape(blocks, per_block, width).sum(1), rtol=1e-5, atol=1e-5)

def _add_depth(u: UOp, memo: dict) -> int:
  if u not in memo: memo[u] = (u.op is Ops.ADD) + max((_add_depth(s, memo) for s in u.src), default=0)
  return memo[u]

def test_a_blocks_rows_are_added_in_pairs():
  # v @ W's products fused into a chain of ROW_GROUP FMAs, each waiting on the one before, read W ~15% slower per
  # thread than a tree of depth log2(ROW_GROUP)
  from tinyplug.uop.rewrite import graph_rewrite
  x = UOp.new_buffer("CPU", 4096 * 4096, dtypes.float32).reshape((4096, 4096))
  r = UOp(Ops.REDUCE_AXIS, dtypes.float32, (x,), (Ops.ADD, (0,)))
  out = graph_rewrite(r, split_reduce.make_pass())
  scatter = next(u for u in out.toposort() if u.op is Ops.SCATTER_ADD)
  assert _add_depth(scatter.src[0], {}) == (split_reduce.ROW_GROUP - 1).bit_length()

def test_a_blocks_first_step_stores_over_whatever_the_memory_held():
  # the row of sums is not zeroed by a kernel first: the first step must store, whatever a reused block held (NaN here)
  a = RNG.standard_normal((2048, 1024)).astype(np.float32)
  v = RNG.standard_normal(2048).astype(np.float32)
  t, tv = Tensor(a).realize(), Tensor(v).realize()
  Tensor(np.full((2048, 1024), np.nan, np.float32)).sum(0).realize()   # its rows of sums, NaN, go back for reuse
  for _ in range(2):   # and again over this one's own sums
    np.testing.assert_allclose(t.sum(0).numpy(), a.sum(0), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose((tv @ t).numpy(), v @ a, rtol=1e-4, atol=1e-3)

def test_a_scatter_add_over_a_block_index_is_one_kernel_and_a_general_one_zeroes_first():
  src = Tensor(RNG.standard_normal((64, 32)).astype(np.float32)).realize()
  blocked = Tensor.from_uop(UOp(Ops.SCATTER_ADD, dtypes.float32, (src.uop, block_index(4, 16, "CPU")), 4))
  plain = Tensor.from_uop(UOp(Ops.SCATTER_ADD, dtypes.float32,
                              (src.uop, Tensor(np.arange(64, dtype=np.int32) // 16).realize().uop), 4))
  assert len(_kernels(blocked)) == 1 and len(_kernels(plain)) == 2
