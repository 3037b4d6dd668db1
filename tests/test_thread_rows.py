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
