"""The CPU heuristic reads the machine from the renderer (`Renderer.cache_bytes`, `Renderer.threads`) instead of
assuming one: the matmul cache block follows the L2 and the thread count, the scheduler's pack pass (passes/pack.py)
copies a large matmul's B into column panels only where B outgrows the L2, and a long contiguous reduction reads
several outputs' streams at once, a transposing copy reads along its source's rows. Fake machines are fed through the
CPU renderer; values are checked against numpy."""
import numpy as np
import pytest
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import DEFAULT_CACHES, STREAMS, block_rows, cache_sizes, heuristic_opts
from tinyplug.passes import pack
from tinyplug.passes.pack import PACK_WIDTH, should_pack
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor

RNG = np.random.default_rng(7)
KB, MB = 1 << 10, 1 << 20

@pytest.fixture
def machine(monkeypatch):
  """machine(caches, threads): the CPU renderer now describes that machine."""
  r = Device["CPU"].renderer
  def set_to(caches: tuple[int, ...], threads: int):
    monkeypatch.setattr(r, "cache_bytes", caches)
    monkeypatch.setattr(type(r), "threads", threads)
    return r
  return set_to

def matmul_kernel(m: int, k: int, n: int) -> Kernel:
  items, _ = create_schedule([(Tensor.empty(m, k, device="CPU") @ Tensor.empty(k, n, device="CPU")).uop])
  return Kernel(items[-1].ast, Device["CPU"].renderer)

def split_and_thread(opts) -> tuple[int | None, int | None]:
  split = next((o.arg for o in opts if o.op is OptOps.SPLIT), None)
  return split, next((o.arg for o in opts if o.op is OptOps.THREAD), None)

def test_block_rows_fits_the_l2_and_shares_evenly():
  # a 2048 matmul's 8-row tiles: 256 of them, 64 KB of A each, a 256 KB panel of B
  assert block_rows(256, 64 * KB, 256 * KB, 1 * MB, 2) == 8       # 8 x 64 KB + 256 KB fits 1 MB, 16 would not
  assert block_rows(256, 64 * KB, 256 * KB, 2 * MB, 16) == 16      # a 2 MB L2 takes 16 rows: 16 blocks, 1 per thread
  assert block_rows(128, 32 * KB, 128 * KB, 4 * MB, 2) == 16       # at most 16 rows of tiles
  assert block_rows(128, 32 * KB, 128 * KB, 1 * MB, 16) == 8       # 1024: 16 fits, 8 gives 16 blocks for 16 threads
  assert block_rows(256, 1 * MB, 256 * KB, 1 * MB, 2) == 2         # nothing fits: the smallest block
  assert block_rows(3, 1 * KB, 1 * KB, 1 * MB, 2) is None          # nothing splits the axis

def test_cache_sizes_default_where_the_renderer_does_not_say(machine):
  assert cache_sizes(None) == DEFAULT_CACHES
  assert cache_sizes(machine((48 * KB, 2 * MB, 105 * MB), 16)) == (48 * KB, 2 * MB, 105 * MB)
  assert cache_sizes(machine((), 1)) == DEFAULT_CACHES

def test_matmul_block_and_threads_follow_the_machine(machine):
  machine((32 * KB, 1 * MB, 32 * MB), 2)
  assert split_and_thread(heuristic_opts(matmul_kernel(2048, 2048, 2048))) == (8, 2)
  machine((48 * KB, 2 * MB, 105 * MB), 16)
  assert split_and_thread(heuristic_opts(matmul_kernel(2048, 2048, 2048))) == (16, 16)
  assert split_and_thread(heuristic_opts(matmul_kernel(1024, 1024, 1024))) == (8, 16)
  machine((32 * KB, 256 * KB, 8 * MB), 4)   # a small L2: a smaller block (4 rows of 8 x 1024 floats + the panel)
  assert split_and_thread(heuristic_opts(matmul_kernel(1024, 1024, 1024)))[0] == 4
  machine((32 * KB, 1 * MB, 32 * MB), 1)   # one thread: no THREAD axis
  assert split_and_thread(heuristic_opts(matmul_kernel(2048, 2048, 2048)))[1] is None

def test_should_pack_follows_the_l2(machine):
  r = machine((32 * KB, 1 * MB, 32 * MB), 2)
  assert should_pack(2048, 2048, 2048, 4, r) and should_pack(512, 2080, 2048, 4, r)   # (m, n, k)
  assert not should_pack(1536, 1536, 1536, 4, r)             # rows 6 KB apart: packing measured slower
  assert not should_pack(1024, 1024, 1024, 4, r)             # rows a page apart: no faster packed
  assert should_pack(1024, 1024, 1024, 8, r)                 # float64: rows 8 KB apart
  assert not should_pack(128, 2048, 2048, 4, r)              # too few rows of A to pay for the copy
  assert not should_pack(2048, 2040, 2048, 4, r)             # no whole panels
  # a B of 2 MB: packed where it outgrows the L2 only
  assert should_pack(2048, 2048, 256, 4, machine((32 * KB, 256 * KB, 8 * MB), 2))
  assert not should_pack(2048, 2048, 256, 4, machine((48 * KB, 4 * MB, 8 * MB), 2))
  assert not should_pack(2048, 2048, 2048, 4, machine((), 2))   # a renderer that does not know its caches
  assert not should_pack(2048, 2048, 2048, 4, Device["PYTHON"].renderer)

def _realized(*shape) -> tuple[Tensor, np.ndarray]:
  a = RNG.standard_normal(shape).astype(np.float32)
  return Tensor(a, device="CPU").realize(), a

@pytest.mark.parametrize("case", ["plain", "transposed", "batched", "expression"])
def test_packed_matmul_values(machine, monkeypatch, case):
  machine((32 * KB, 64 * KB, 1 * MB), 2)   # a tiny L2 (and short rows allowed), so a small matmul packs
  monkeypatch.setattr(pack, "PACK_MIN_ROW_BYTES", 256)
  m, k, n = 256 + 8 * "plain transposed batched expression".split().index(case), 256, 3 * PACK_WIDTH
  a, an = _realized(m, k)
  if case == "plain":
    b, bn = _realized(k, n); t, want = a @ b, an @ bn
  elif case == "transposed":
    b, bn = _realized(n, k); t, want = a @ b.T, an @ bn.T
  elif case == "batched":
    a, an = _realized(2, m, k); b, bn = _realized(2, k, n); t, want = a @ b, an @ bn
  else:
    b, bn = _realized(k, n); t, want = a @ (b * 2 + 1), an @ (bn * 2 + 1)
  items, _ = create_schedule([t.uop])
  assert len(items) == 2, items   # the panels of B, then the matmul
  np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-3)

def test_no_pack_where_b_fits_the_l2(machine, monkeypatch):
  machine((32 * KB, 1 * MB, 32 * MB), 2)
  monkeypatch.setattr(pack, "PACK_MIN_ROW_BYTES", 256)
  a, an = _realized(300, 256)
  b, bn = _realized(256, 96)
  t = a @ b
  assert len(create_schedule([t.uop])[0]) == 1
  np.testing.assert_allclose(t.numpy(), an @ bn, rtol=1e-4, atol=1e-3)

def test_long_contiguous_reduction_reads_several_streams(machine):
  machine((32 * KB, 1 * MB, 32 * MB), 2)
  x, xn = _realized(1 << 20)
  y, yn = _realized(1024, 1024)
  for t, want in ((x.sum(), xn.astype(np.float64).sum()), (y.sum(), yn.astype(np.float64).sum()),
                  (y.sum(1), yn.astype(np.float64).sum(1))):
    items, _ = create_schedule([t.uop])
    opts = get_program(items[0].ast, Device["CPU"].renderer).applied_opts
    assert Opt(OptOps.UPCAST, 0, STREAMS) in opts, opts
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-2)
  col = y.sum(0)   # strided along the reduction: no streams
  items, _ = create_schedule([col.uop])
  assert Opt(OptOps.UPCAST, 0, STREAMS) not in get_program(items[0].ast, Device["CPU"].renderer).applied_opts
  np.testing.assert_allclose(col.numpy(), yn.sum(0), rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("case", ["transpose", "add_transposed", "nchw_to_nhwc"])
def test_transposing_copy_upcasts_the_axis_its_reads_run_along(case):
  x, xn = _realized(192, 256)
  if case == "transpose": t, want = x.T.contiguous(), xn.T
  elif case == "add_transposed":
    y, yn = _realized(256, 192); t, want = y + x.T, yn + xn.T
  else:
    z, zn = _realized(4, 8, 16, 32); t, want = z.permute(0, 2, 3, 1).contiguous(), zn.transpose(0, 2, 3, 1)
  items, _ = create_schedule([t.uop])
  opts = get_program(items[-1].ast, Device["CPU"].renderer).applied_opts
  # the first action upcasts an axis other than the innermost by 16: the one the transposed reads walk along
  assert opts[0].op is OptOps.UPCAST and opts[0].arg == 16 and opts[0].axis != len(want.shape) - 1, opts
  np.testing.assert_array_equal(t.numpy(), want)
