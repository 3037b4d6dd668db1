"""The CPU heuristic reads the machine from the renderer (`Renderer.cache_bytes`, `Renderer.threads`) instead of
assuming one: the register tile follows the vector registers, the matmul cache block the caches and the thread count,
the scheduler's pack pass (passes/pack.py) copies a large matmul's B into column panels where B is at least twice the
L2, a long contiguous reduction reads
several outputs' streams at once, a transposing copy reads along its source's rows. Fake machines are fed through the
CPU renderer; values are checked against numpy."""
import numpy as np
import pytest
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import DEFAULT_CACHES, DEFAULT_TILE, STREAM_UNROLLS, block_rows, cache_sizes, cpu_tile, \
  heuristic_opts, strided_block_rows
from tinyplug.passes import pack
from tinyplug.passes.pack import pack_width, should_pack
from tinyplug import schedule
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor

RNG = np.random.default_rng(7)
KB, MB = 1 << 10, 1 << 20

@pytest.fixture
def machine(monkeypatch):
  """machine(caches, threads, vector_regs): the CPU renderer now describes that machine (vector registers: (bytes,
  count), AVX-512's 32 x 64 bytes unless given, so a decision asserted here does not depend on the host)."""
  r = Device["CPU"].renderer
  def set_to(caches: tuple[int, ...], threads: int, vector_regs: tuple[int, int] = (64, 32)):
    monkeypatch.setattr(r, "cache_bytes", caches)
    monkeypatch.setattr(type(r), "threads", threads)
    monkeypatch.setattr(r, "vector_bytes", vector_regs[0])
    monkeypatch.setattr(r, "vector_registers", vector_regs[1])
    return r
  return set_to

def matmul_kernel(m: int, k: int, n: int) -> Kernel:
  schedule._templates.clear()   # the pack pass decides by the machine: no schedule made for another fake one
  items, _ = create_schedule([(Tensor.empty(m, k, device="CPU") @ Tensor.empty(k, n, device="CPU")).uop])
  return Kernel(items[-1].ast, Device["CPU"].renderer)

def split_and_thread(opts) -> tuple[int | None, int | None]:
  split = next((o.arg for o in opts if o.op is OptOps.SPLIT), None)
  return split, next((o.arg for o in opts if o.op is OptOps.THREAD), None)

def test_block_rows_fit_the_last_level_cache_and_share_evenly():
  # a 2048 matmul's 8-row tiles: 256 of them, 64 KB of A each
  assert block_rows(256, 64 * KB, 32 * MB, 2) == 64        # 2 threads x 64 x 64 KB = 8 MB: a quarter of 32 MB
  assert block_rows(256, 64 * KB, 16 * MB, 2) == 32        # half the L3: half the block
  assert block_rows(256, 64 * KB, 105 * MB, 16) == 16      # 16 threads: 16 blocks, one per thread
  assert block_rows(128, 32 * KB, 32 * MB, 2) == 64        # 1024: one block per thread
  assert block_rows(128, 32 * KB, 105 * MB, 16) == 8       # 1024 on 16 threads: 16 blocks
  assert block_rows(96, 32 * KB, 32 * MB, 2) == 16         # 768: 32 would leave 3 blocks, 16 leaves 6
  assert block_rows(256, 64 * KB, 32 * MB, 1) == 64        # one thread: at least two blocks, at most 64 rows each
  assert block_rows(256, 8 * MB, 32 * MB, 2) == 2          # nothing fits: the smallest block
  assert block_rows(3, 1 * KB, 32 * MB, 2) is None         # nothing splits the axis

def test_strided_block_rows_fit_the_l2_with_the_panel_and_share_evenly():
  # B read down its rows: a 512 matmul's 8-row tiles, 64 of them, 16 KB of A each, a 64 KB panel
  assert strided_block_rows(64, 16 * KB, 64 * KB, 1 * MB, 2) == 16     # 32 would fit too: at most 16
  assert strided_block_rows(80, 20 * KB, 80 * KB, 1 * MB, 2) == 8      # 640: 16 would leave 5 blocks
  assert strided_block_rows(256, 64 * KB, 256 * KB, 1 * MB, 2) == 8    # 8 x 64 KB + 256 KB fits 1 MB, 16 would not
  assert strided_block_rows(256, 1 * MB, 256 * KB, 1 * MB, 2) == 2     # nothing fits: the smallest block
  assert strided_block_rows(3, 1 * KB, 1 * KB, 1 * MB, 2) is None

def test_cache_sizes_default_where_the_renderer_does_not_say(machine):
  assert cache_sizes(None) == DEFAULT_CACHES
  assert cache_sizes(machine((48 * KB, 2 * MB, 105 * MB), 16)) == (48 * KB, 2 * MB, 105 * MB)
  assert cache_sizes(machine((), 1)) == DEFAULT_CACHES

def test_matmul_block_and_threads_follow_the_machine(machine):
  machine((32 * KB, 1 * MB, 32 * MB), 2)
  # the THREAD axis (the blocks) in up to 4 parts per thread where the blocks divide: 2048 has 4 blocks of 64 tile rows
  assert split_and_thread(heuristic_opts(matmul_kernel(2048, 2048, 2048))) == (64, 4)   # B packed: by the L3
  assert split_and_thread(heuristic_opts(matmul_kernel(512, 512, 512))) == (16, 4)      # B strided: by the L2
  assert split_and_thread(heuristic_opts(matmul_kernel(1000, 1000, 1000))) == (64, 2)   # padded panels: by the L3
  assert split_and_thread(heuristic_opts(matmul_kernel(1024, 1024, 1024))) == (64, 2)   # 2 blocks: one per thread
  machine((48 * KB, 2 * MB, 105 * MB), 16)
  assert split_and_thread(heuristic_opts(matmul_kernel(2048, 2048, 2048))) == (16, 16)
  assert split_and_thread(heuristic_opts(matmul_kernel(1024, 1024, 1024))) == (8, 16)
  machine((32 * KB, 256 * KB, 4 * MB), 4)   # a small L3: a smaller block (4 threads x 8 rows of 8 x 1024 floats = 1 MB)
  assert split_and_thread(heuristic_opts(matmul_kernel(1024, 1024, 1024)))[0] == 8
  machine((32 * KB, 1 * MB), 2)   # no L3 declared: the L2 is the last level (2 x 4 x 32 KB = 256 KB of it)
  assert split_and_thread(heuristic_opts(matmul_kernel(1024, 1024, 1024)))[0] == 4
  machine((32 * KB, 1 * MB, 32 * MB), 1)   # one thread: no THREAD axis
  assert split_and_thread(heuristic_opts(matmul_kernel(2048, 2048, 2048)))[1] is None

def test_cpu_tile_follows_the_vector_registers(machine):
  caches = (32 * KB, 1 * MB, 32 * MB)
  assert cpu_tile(machine(caches, 2, (64, 32))) == (32, 8)    # AVX-512: 16 accumulators of 32 registers
  assert cpu_tile(machine(caches, 2, (32, 16))) == (16, 4)    # AVX2: 8 of 16 (16 x 8 would need 19 registers)
  assert cpu_tile(machine(caches, 2, (16, 32))) == (8, 8)     # NEON
  assert cpu_tile(machine(caches, 2, (16, 16))) == (8, 4)     # SSE
  assert cpu_tile(machine(caches, 2, (0, 0))) == DEFAULT_TILE  # a renderer that does not say
  assert cpu_tile(None) == DEFAULT_TILE

@pytest.mark.parametrize("regs", [(64, 32), (32, 16)], ids=["avx512", "avx2"])
def test_matmul_tile_and_panels_follow_the_vector_registers(machine, regs):
  r = machine((32 * KB, 1 * MB, 32 * MB), 2, regs)
  width, rows = cpu_tile(r)
  assert pack_width(r) == width
  opts = heuristic_opts(matmul_kernel(1024, 1024, 1024))
  assert opts[:2] == [Opt(OptOps.UPCAST, 1, width), Opt(OptOps.UPCAST, 0, rows)], opts
  a, an = _realized(1024, 512)
  b, bn = _realized(512, 1024)
  t = a @ b
  schedule._templates.clear()   # a schedule made for the other fake machine would be reused for the same graph
  items, _ = create_schedule([t.uop])
  assert len(items) == 2   # the panels of B, `width` columns each, then the matmul
  assert [x.src[0].arg for x in Kernel(items[0].ast, r).loop_axes] == [1024 // width, 512, width]
  np.testing.assert_allclose(t.numpy(), an @ bn, rtol=1e-4, atol=1e-3)

# odd sizes: padded tiles (1000, 1023, 1025 are no multiple of the tile), B not packed (no whole panels), a skinny one
ODD = [(1000, 1000, 1000), (1023, 1023, 1023), (1025, 1025, 1025), (1024, 1023, 1025), (3, 1024, 5), (1024, 1024, 96)]

@pytest.mark.parametrize("m,k,n", ODD)
def test_odd_matmul_values(m, k, n):
  a, an = _realized(m, k)
  b, bn = _realized(k, n)
  np.testing.assert_allclose((a @ b).numpy(), an @ bn, rtol=1e-4, atol=2e-3)

def _host_has_avx2() -> bool:
  from tinyplug_cpu_llvm.compiler import host_target
  return "+avx2" in host_target()[1].split(",")

@pytest.mark.skipif(not _host_has_avx2(), reason="the host cannot run AVX2 code")
@pytest.mark.parametrize("m,k,n", [(1024, 1024, 1024), (1000, 1000, 1000), (1025, 1023, 1024), (3, 1024, 5)])
def test_avx2_target_matmul_values(m, k, n):
  # a target of 16 vector registers of 32 bytes: a 16 x 4 tile and 16-column panels, compiled for AVX2
  dev = "CPU:LLVM:x86-64,+avx2,+fma"
  assert cpu_tile(Device[dev].renderer) == (16, 4)
  an, bn = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((k, n)).astype(np.float32)
  t = Tensor(an, device=dev) @ Tensor(bn, device=dev)
  np.testing.assert_allclose(t.numpy(), an @ bn, rtol=1e-4, atol=2e-3)

def test_should_pack_follows_the_l2(machine):
  r = machine((32 * KB, 1 * MB, 32 * MB), 2)
  assert should_pack(2048, 2048, 2048, 4, r) and should_pack(512, 2080, 2048, 4, r)   # (m, n, k)
  assert should_pack(1536, 1536, 1536, 4, r) and should_pack(1024, 1024, 1024, 4, r)  # B of 9 MB and 4 MB
  assert should_pack(768, 768, 768, 4, r)                     # 2.25 MB: at least twice the L2
  assert not should_pack(640, 640, 640, 4, r)                 # 1.6 MB: its strided panels mostly stay in the L2
  assert not should_pack(512, 512, 512, 4, r)                 # 1 MB
  assert should_pack(512, 512, 512, 8, r)                     # ... 2 MB in float64
  w = pack_width(r)
  assert should_pack(2048, 2 * w, 8192, 4, r)                 # two panels
  assert not should_pack(2048, w, 16384, 4, r)               # one panel: B is laid out as its panel already
  assert not should_pack(128, 2048, 2048, 4, r)              # too few rows of A to pay for the copy
  assert not should_pack(2048, 2048, 128, 4, r)              # a short reduction: no cache blocking either
  assert should_pack(2048, 2040, 2048, 4, r)                 # the last panel padded
  assert should_pack(2048, 8 * w + 1, 2048, 4, r) and not should_pack(2048, 8 * w - 1, 2048, 4, r)   # ... from 8 panels
  assert not should_pack(2048, 3 * w + 8, 2048, 4, r)        # fewer: no whole panels
  # a B of 2 MB: packed where it is at least twice the L2 only
  assert should_pack(2048, 2048, 256, 4, machine((32 * KB, 256 * KB, 8 * MB), 2))
  assert not should_pack(2048, 2048, 256, 4, machine((48 * KB, 2 * MB, 8 * MB), 2))
  assert not should_pack(2048, 2048, 2048, 4, machine((), 2))   # a renderer that does not know its caches
  assert not should_pack(2048, 2048, 2048, 4, Device["PYTHON"].renderer)

def _realized(*shape) -> tuple[Tensor, np.ndarray]:
  a = RNG.standard_normal(shape).astype(np.float32)
  return Tensor(a, device="CPU").realize(), a

@pytest.mark.parametrize("case", ["plain", "transposed", "batched", "expression"])
def test_packed_matmul_values(machine, monkeypatch, case):
  machine((32 * KB, 32 * KB, 1 * MB), 2)   # a tiny L2, so a small matmul packs
  n = 3 * pack_width(Device["CPU"].renderer)
  m, k = 256 + 8 * "plain transposed batched expression".split().index(case), 256
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

def test_no_pack_for_a_short_matmul(machine):
  machine((32 * KB, 1 * MB, 32 * MB), 2)
  a, an = _realized(300, 128)
  b, bn = _realized(128, 96)
  t = a @ b
  assert len(create_schedule([t.uop])[0]) == 1
  np.testing.assert_allclose(t.numpy(), an @ bn, rtol=1e-4, atol=1e-3)

def test_long_contiguous_reduction_reads_one_stream_per_output(machine):
  machine((32 * KB, 1 * MB, 32 * MB), 2)
  x, xn = _realized(1 << 20)
  y, yn = _realized(1024, 1024)
  for t, want in ((x.sum(), xn.astype(np.float64).sum()), (y.sum(), yn.astype(np.float64).sum()),
                  (y.sum(1), yn.astype(np.float64).sum(1))):
    items, _ = create_schedule([t.uop])
    opts = get_program(items[0].ast, Device["CPU"].renderer).applied_opts
    # no outputs side by side: each is one stream, read 16 lanes a step into a vector accumulator
    assert opts == (Opt(OptOps.UNROLL, 0, STREAM_UNROLLS[0]),), opts
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-2)
  col = y.sum(0)   # strided along the reduction: not streams
  items, _ = create_schedule([col.uop])
  assert Opt(OptOps.UNROLL, 0, STREAM_UNROLLS[0]) not in get_program(items[0].ast, Device["CPU"].renderer).applied_opts
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

@pytest.mark.parametrize("rows,cols,vectors,tile", [
  (1024, 1024, (32, 16), (16, 8)),   # AVX2: both sides' rows 4 KB apart, 8 MB moved: a whole vector per output row
  (2048, 512, (32, 16), (8, 8)),     # output rows 8 KB apart, the input's 2 KB: 8 of them
  (768, 1024, (32, 16), (16, 4)),    # output rows 3 KB apart: the 16x4 tile stays
  (2048, 2048, (32, 16), (16, 4)),   # 32 MB moved: more than half the L3
  (1024, 1024, (64, 32), (16, 4))])  # AVX-512: unchanged
def test_transposing_copy_tile_by_alias_and_size(machine, rows, cols, vectors, tile):
  machine((32 * KB, 512 * KB, 32 * MB), 2, vectors)
  schedule._templates.clear()
  t = Tensor.empty(rows, cols, device="CPU").T.contiguous()
  items, _ = create_schedule([t.uop])
  opts = list(get_program(items[-1].ast, Device["CPU"].renderer).applied_opts)
  assert opts == [Opt(OptOps.UPCAST, 0, tile[0]), Opt(OptOps.UPCAST, 1, tile[1])], opts

def test_transposing_copy_by_whole_row_vectors_values(machine):
  machine((32 * KB, 512 * KB, 32 * MB), 2, (32, 16))
  x, xn = _realized(1024, 1024)
  y, yn = _realized(512, 1024)
  z, zn = _realized(1024, 1048)   # rows off 4 KB, shrunk to 1024 columns: the 8x8 tile
  for t, want in ((x.T.contiguous(), xn.T), ((y * 2).T.contiguous(), yn.T * 2),
                  (z[:, :1024].T.contiguous(), zn[:, :1024].T)):
    np.testing.assert_array_equal(t.numpy(), want)

@pytest.mark.parametrize("case", ["panels", "contiguous"])
def test_copy_of_short_runs_reads_several_runs_at_once(case):
  x, xn = _realized(256, 512)
  if case == "panels":   # the pack pass's copy: B[k, n] -> P[n // 32, k, n % 32]
    t, want = x.reshape(256, 16, 32).permute(1, 0, 2).contiguous(), xn.reshape(256, 16, 32).transpose(1, 0, 2)
  else: t, want = (x * 2).contiguous(), xn * 2
  items, _ = create_schedule([t.uop])
  opts = list(get_program(items[-1].ast, Device["CPU"].renderer).applied_opts)
  if case == "panels": assert opts == [Opt(OptOps.UPCAST, 2, 32), Opt(OptOps.UPCAST, 0, 4)], opts
  else: assert Opt(OptOps.UPCAST, 0, 4) not in opts, opts   # the runs continue in the output too: a plain copy
  np.testing.assert_array_equal(t.numpy(), want)

def conv_kernel(side: int, channels: int = 64) -> Kernel:
  """The 3x3 convolution's kernel (the one with a reduction) of a b8 conv2d, padding 1."""
  schedule._templates.clear()
  x, w = Tensor.empty(8, channels, side, side, device="CPU"), Tensor.empty(channels, channels, 3, 3, device="CPU")
  items, _ = create_schedule([x.conv2d(w, padding=1).uop])
  return next(Kernel(it.ast, Device["CPU"].renderer) for it in items if len(Kernel(it.ast, Device["CPU"].renderer).reduce_axes))

def test_thread_axis_in_parts_per_thread(machine):
  """A large kernel's THREAD axis has up to THREAD_PARTS contiguous parts per thread where the axis divides (the b8
  56x56 conv's batch: 8 parts for 2 threads, one image each), so a thread that loses its core leaves the parts it has not
  started to the others; one thread: no THREAD axis; 16 threads: the batch of 8 is too short, another axis takes it."""
  from tinyplug.passes.heuristic import THREAD_PARTS
  assert THREAD_PARTS[-1] == 1   # where no more parts divide the axis, one part per thread as before
  caches = (32 * KB, 1 * MB, 32 * MB)
  machine(caches, 2)
  opts = heuristic_opts(conv_kernel(56))
  assert Opt(OptOps.THREAD, 0, 8) in opts, opts
  machine(caches, 1)
  assert not any(o.op is OptOps.THREAD for o in heuristic_opts(conv_kernel(56)))
  machine(caches, 16)
  thread = [o for o in heuristic_opts(conv_kernel(56)) if o.op is OptOps.THREAD]
  assert thread and thread[0].axis != 0 and thread[0].arg % 16 == 0, thread

def test_conv_in_thread_parts_matches_torch(machine):
  """The 56x56 conv's forward and both gradients with the batch in 8 THREAD parts on 2 threads, against torch: the
  runtime runs them as shares (one to four per thread by the kernels' last runs)."""
  import torch
  from tinyplug.helpers import Context
  machine((32 * KB, 1 * MB, 32 * MB), 2)
  xn, wn = RNG.standard_normal((8, 64, 56, 56), dtype=np.float32), RNG.standard_normal((64, 64, 3, 3), dtype=np.float32)
  with Context(CPU_THREADS=2, CACHELEVEL=0):
    for _ in range(2):   # the second run from the kernels' recorded times: several shares per thread
      x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
      y = x.conv2d(w, padding=1)
      y.square().sum().backward()
      out, gx, gw = y.numpy(), x.grad.numpy(), w.grad.numpy()
  xt, wt = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
  yt = torch.nn.functional.conv2d(xt, wt, padding=1)
  yt.square().sum().backward()
  np.testing.assert_allclose(out, yt.detach().numpy(), rtol=1e-3, atol=1e-3)
  np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-3, atol=1e-2)
  np.testing.assert_allclose(gw, wt.grad.numpy(), rtol=1e-3, atol=5e-1)
