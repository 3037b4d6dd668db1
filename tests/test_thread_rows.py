"""The heuristic's thread_rows pass (tinyplug/passes/thread_rows.py): on a CPU with more threads than a kernel's
outermost loop has rows (a convolution's batch of 8 on 16 threads), that loop is merged with the one inside it, so
every thread gets a share; values stay those of torch/numpy, and the runtime shares the merged loop out."""
import numpy as np
import pytest
import torch
from tinyplug.backend import shareable_loop
from tinyplug.codegen import get_program
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.passes.thread_rows import share_rows, short_for
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp

RNG = np.random.default_rng(3)

def cpu(a: np.ndarray) -> Tensor: return Tensor(a, device="CPU").realize()

def shared_rows(t: Tensor) -> list[int]:
  """The trip count of each kernel's shared loop (0: none), lowered for the renderer as it stands."""
  items, _ = create_schedule([t.uop])
  rows = []
  for it in items:
    if it.ast.op is not Ops.SINK: continue
    loop = shareable_loop(get_program(it.ast, Device["CPU"].renderer).uops)
    rows.append(0 if loop is None else int(loop.src[0].arg))
  return rows

@pytest.mark.parametrize("threads", [1, 2, 3, 16])
def test_short_for(threads):
  assert not short_for(threads, threads) and not short_for(4 * threads, threads)
  if threads > 1: assert short_for(threads - 1, threads)
  if threads > 2: assert short_for(threads + 1, threads) and not short_for(4 * threads + 1, threads)

def test_conv_batch_of_8_gets_rows_for_16_threads():
  x, w = cpu(RNG.standard_normal((8, 16, 20, 20), dtype=np.float32)), cpu(RNG.standard_normal((32, 16, 3, 3), dtype=np.float32))
  with Context(CPU_THREADS=16, CACHELEVEL=0):
    rows16 = shared_rows(x.conv2d(w, stride=2, padding=1))
    out = x.conv2d(w, stride=2, padding=1).numpy()
  with Context(CPU_THREADS=2, CACHELEVEL=0): rows2 = shared_rows(x.conv2d(w, stride=2, padding=1))
  assert rows2[-1] == 8, rows2                   # the conv (last kernel) on two threads: its batch is enough
  assert all(r == 0 or r >= 16 for r in rows16), rows16   # sixteen: every kernel's shared loop has a row per thread
  ref = torch.nn.functional.conv2d(torch.from_numpy(x.numpy()), torch.from_numpy(w.numpy()), stride=2, padding=1)
  np.testing.assert_allclose(out, ref.numpy(), rtol=1e-4, atol=1e-4)

def test_batched_matmul_merges_batch_and_heads():
  q, k = cpu(RNG.standard_normal((2, 3, 64, 32), dtype=np.float32)), cpu(RNG.standard_normal((2, 3, 64, 32), dtype=np.float32))
  with Context(CPU_THREADS=16, CACHELEVEL=0):
    rows = shared_rows(q @ k.transpose(-2, -1))
    out = (q @ k.transpose(-2, -1)).numpy()
  assert rows and all(r == 0 or r >= 16 for r in rows), rows
  np.testing.assert_allclose(out, q.numpy() @ k.numpy().swapaxes(-2, -1), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("shape", [(3, 5, 7), (5, 2, 9), (7, 33)])
def test_odd_outer_loops_keep_their_values(shape):
  a = RNG.standard_normal(shape, dtype=np.float32)
  with Context(CPU_THREADS=16, CACHELEVEL=0):
    t = cpu(a)
    np.testing.assert_allclose(((t * 2 + 1).relu()).numpy(), np.maximum(a * 2 + 1, 0), rtol=1e-6)
    np.testing.assert_allclose(t.sum(-1).numpy(), a.sum(-1), rtol=1e-5, atol=1e-5)

def _three_loop_kernel(n_outer: int, n_inner: int, store_both: bool, row: int = 5) -> UOp:
  """out[i, j, c] = in[i, j, c] + 1 over loops (n_outer, n_inner, row); without store_both, a second output indexed by
  i alone."""
  out, inp = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(), (), 0), UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(), (), 1)
  i = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, n_outer),), (0, "loop"))
  j = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, n_inner),), (1, "loop"))
  c = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, row),), (2, "loop"))
  idx = (i * n_inner + j) * row + c
  val = UOp(Ops.LOAD, dtypes.float, (UOp(Ops.INDEX, dtypes.float.ptr(), (inp, idx)),)) + 1.0
  stores = [UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, dtypes.float.ptr(), (out, idx)), val))]
  if not store_both:
    second = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(), (), 2)
    stores.append(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, dtypes.float.ptr(), (second, i)), UOp.const(dtypes.float, 0.0))))
  return UOp(Ops.SINK, dtypes.void, tuple(stores))

def _loops(sink: UOp) -> list[int]:
  return [r.src[0].arg for r in sorted((u for u in sink.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])]

def test_share_rows_merges_only_loops_every_store_depends_on():
  assert _loops(share_rows(_three_loop_kernel(8, 12, True), 16)) == [96, 5]
  assert _loops(share_rows(_three_loop_kernel(2, 3, True), 16)) == [6, 5]     # never the innermost loop, the row
  assert _loops(share_rows(_three_loop_kernel(8, 12, True), 2)) == [8, 12, 5]     # enough rows already
  assert _loops(share_rows(_three_loop_kernel(8, 12, False), 16)) == [8, 12, 5]   # a store outside the inner loop

def test_merged_loops_run_every_element_once():
  """The merged kernel, rendered and compiled for the CPU, run share by share as 16 threads would (core_id 0-15 of
  n_cores 16): each output written once with its value."""
  from tinyplug.backend import ProgramSpec
  from tinyplug.codegen.linearize import linearize
  dev = Device["CPU"]
  n = 8 * 12 * 5
  uops = linearize(share_rows(_three_loop_kernel(8, 12, True), 16))
  assert shareable_loop(uops).src[0].arg == 96
  src = dev.renderer.render("merged", uops)
  prg = dev.make_program(ProgramSpec("merged", tuple(uops), src), dev.compiler.compile_cached(src))
  a, out = np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
  for core in range(16): prg.fn(out.ctypes.data, a.ctypes.data, core, 16)
  np.testing.assert_array_equal(out, a + 1)
  out[:] = 0
  for core in range(16): prg.fn(out.ctypes.data, a.ctypes.data, core, 16) if core % 2 else None
  assert 0 < np.count_nonzero(out) < n   # the shares split the merged loop: half the cores wrote part of it

def _two_loop_kernel(n_outer: int, n_inner: int, reduce: int = 0, tile: int = 1) -> UOp:
  """out[i, j] over loops (n_outer, n_inner): with `reduce`, the sum of in[i, j, r] over a reduction loop inside;
  without, `tile` stores per step, out[i, j, t] = in[i, j, t] + 1 (a step moves the stores by `tile` elements)."""
  out, inp = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(), (), 0), UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(), (), 1)
  i = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, n_outer),), (0, "loop"))
  j = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, n_inner),), (1, "loop"))
  row = i * n_inner + j
  if reduce:
    r = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, reduce),), (2, "reduce"))
    val = UOp(Ops.LOAD, dtypes.float, (UOp(Ops.INDEX, dtypes.float.ptr(), (inp, row * reduce + r)),))
    total = UOp(Ops.REDUCE, dtypes.float, (val, r), Ops.ADD)
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, dtypes.float.ptr(), (out, row)), total)),))
  stores = []
  for t in range(tile):
    idx = row * tile + t
    val = UOp(Ops.LOAD, dtypes.float, (UOp(Ops.INDEX, dtypes.float.ptr(), (inp, idx)),)) + 1.0
    stores.append(UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, dtypes.float.ptr(), (out, idx)), val)))
  return UOp(Ops.SINK, dtypes.void, tuple(stores))

def test_innermost_loop_merges_where_each_step_is_a_tile():
  """Two output loops: the inner one merges too where each of its steps runs a reduction (a matmul's tile of dot
  products) or writes a tile (stores that move by more than one element a step), never where it is a row."""
  assert _loops(share_rows(_two_loop_kernel(8, 4, reduce=64), 16)) == [32, 64]
  assert _loops(share_rows(_two_loop_kernel(8, 12, tile=4), 16)) == [96]
  assert _loops(share_rows(_two_loop_kernel(8, 64, tile=1), 16)) == [8, 64]   # a row: left to LLVM's vectoriser
  assert _loops(share_rows(_two_loop_kernel(8, 64, reduce=4), 16)) == [8, 64, 4]   # a short reduction: a row too
  assert _loops(share_rows(_two_loop_kernel(8, 4, reduce=64), 2)) == [8, 4, 64]   # two threads: 8 rows are enough

def _compiled(name: str, sink: UOp):
  from tinyplug.backend import ProgramSpec
  from tinyplug.codegen.linearize import linearize
  dev = Device["CPU"]
  uops = linearize(sink)
  src = dev.renderer.render(name, uops)
  return uops, dev.make_program(ProgramSpec(name, tuple(uops), src), dev.compiler.compile_cached(src))

def test_merged_tile_loops_run_share_by_share_as_16_threads():
  """The merged reduction and tile kernels, run share by share as 16 threads would: every share has rows (the
  unmerged 8-row loop left half of them empty) and the outputs are numpy's."""
  a = RNG.standard_normal(8 * 4 * 64, dtype=np.float32)
  uops, prg = _compiled("merged_reduce", share_rows(_two_loop_kernel(8, 4, reduce=64), 16))
  assert shareable_loop(uops).src[0].arg == 32
  out = np.zeros(32, np.float32)
  for core in range(16):
    before = out.copy()
    prg.fn(out.ctypes.data, a.ctypes.data, core, 16)
    assert np.count_nonzero(out != before) == 2, core   # two rows (dot products) per share
  np.testing.assert_allclose(out, a.reshape(32, 64).sum(1), rtol=1e-5, atol=1e-5)
  b = RNG.standard_normal(8 * 12 * 4, dtype=np.float32)
  uops, prg = _compiled("merged_tile", share_rows(_two_loop_kernel(8, 12, tile=4), 16))
  out = np.zeros(b.size, np.float32)
  for core in range(16): prg.fn(out.ctypes.data, b.ctypes.data, core, 16)
  np.testing.assert_array_equal(out, b + 1)

class _SharesInTurn:
  """CPU kernels run as `threads` threads would split them, one share after another on this thread; records each
  kernel's name, the threads the runtime picks and its shared loop's rows."""
  def __init__(self, threads: int): self.threads, self.seen = threads, []
  def __enter__(self):
    from tinyplug_cpu_llvm import runtime as rt
    self.rt, self.call, self.launcher = rt, rt.CPUProgram.__call__, rt.CPUProgram.launcher
    def in_turn(prg, *bufs, global_size=None, local_size=None, vals=(), wait=False):
      args = [rt._address(b) for b in bufs] + [int(v) for v in vals]
      self.seen.append((prg.name, prg.threads(), prg.shared_rows() if prg.splittable else 0))
      for core in range(self.threads): prg.fn(*args, core, self.threads)
      return 0.0
    rt.CPUProgram.__call__ = in_turn
    rt.CPUProgram.launcher = lambda prg, global_size=None, local_size=None: None
    self.ctx = Context(CPU_THREADS=self.threads, CACHELEVEL=0)
    self.ctx.__enter__()
    return self
  def __exit__(self, *exc):
    self.ctx.__exit__(*exc)
    self.rt.CPUProgram.__call__, self.rt.CPUProgram.launcher = self.call, self.launcher

def test_skinny_linear_fwd_bwd_on_16_threads():
  """x @ w with a short batch (64 rows by 4608 -> 128): the forward and both gradients, compiled for 16 threads, run
  share by share: each matmul kernel runs on all 16 and has a row for every thread (its 64 rows were 8 tiles of 8,
  and its tiles' work left it 13 threads), values against torch."""
  x_np, w_np = RNG.standard_normal((64, 4608), dtype=np.float32), RNG.standard_normal((4608, 128), dtype=np.float32) / 64
  with _SharesInTurn(16) as run:
    x, w = Tensor(x_np, requires_grad=True), Tensor(w_np, requires_grad=True)
    loss = (x @ w).relu().square().sum()
    loss.backward()
    got = [loss.numpy(), x.grad.numpy(), w.grad.numpy()]
  xt, wt = torch.from_numpy(x_np).requires_grad_(), torch.from_numpy(w_np).requires_grad_()
  ref = (xt @ wt).relu().square().sum()
  ref.backward()
  for g, r in zip(got, [ref.detach(), xt.grad, wt.grad]): np.testing.assert_allclose(g, r.numpy(), rtol=2e-3, atol=2e-3)
  matmuls = [s for s in run.seen if s[0].startswith("r_") and s[0].count("_") == 3]
  assert {n.split("n")[0] for n, _, _ in matmuls} == {"r_64_128_4608", "r_64_4608_128", "r_4608_128_64"}, run.seen
  assert all(threads == 16 and rows >= 16 for _, threads, rows in matmuls), run.seen
