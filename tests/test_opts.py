"""Optimisation actions SWAP, PADTO, THREAD and SPLIT (tinyplug/codegen/kernel.py): values against numpy on the PYTHON
interpreter and on CPU (and CL when present), the errors for invalid uses, loop order, the heuristic's use of them
for large matmuls (none with NOOPT) and the search's candidate list."""
import math
import numpy as np
import pytest
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.device import Device, Renderer
from tinyplug.schedule import create_schedule
from tinyplug.search.runner import candidate_actions
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(0)

def devices() -> list[str]:
  out = ["PYTHON", "CPU"]
  try:
    Device["CL"]
    out.append("CL")
  except Exception: pass
  return out

def run_kernel(device: str, item, opts: list[Opt]):
  """Compile schedule item `item` with exactly `opts` and run it on its buffers; returns (output values, program)."""
  dev = Device[device]
  spec = get_program(item.ast, dev.renderer, opts=opts)
  prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
  bufs = [b.ensure_allocated() for b in item.bufs]
  prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size,
      vals=tuple(v.arg[1] for v in spec.vars), wait=True)
  return bufs[0].numpy().copy(), spec

def run(device: str, t: Tensor, opts: list[Opt]):
  """Compile the kernel computing `t` with exactly `opts` and run it (after any kernel it needs first, run as the
  heuristic has it); returns (result, program)."""
  items, _ = create_schedule([t.uop])
  # inputs are realized already; on a machine with a small L2 a large matmul's B is packed by a kernel first
  for it in items[:-1]: run_kernel(device, it, None)
  out, spec = run_kernel(device, items[-1], opts)
  return out.reshape(t.shape), spec

def matmul(device: str, n: int, k: int, m: int):
  a, b = RNG.standard_normal((n, k)).astype(np.float32), RNG.standard_normal((k, m)).astype(np.float32)
  return Tensor(a, device=device).realize() @ Tensor(b, device=device).realize(), a @ b

def kernel(t: Tensor, device: str = "CPU") -> Kernel:
  items, _ = create_schedule([t.uop])
  return Kernel(items[-1].ast, Device[device].renderer)

# matmul 27x5 @ 5x7: loop axes 0 (27), 1 (7), reduce axis 2 (5; for PADTO) / 0 (for UNROLL)
MATMUL_OPTS = [
  [Opt(OptOps.SWAP, 0, 1)],
  [Opt(OptOps.PADTO, 0, 4)], [Opt(OptOps.PADTO, 1, 4)], [Opt(OptOps.PADTO, 2, 4)],
  [Opt(OptOps.PADTO, 2, 4), Opt(OptOps.UNROLL, 0, 4)],
  [Opt(OptOps.PADTO, 0, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.PADTO, 1, 8), Opt(OptOps.UPCAST, 1, 8)],
  [Opt(OptOps.THREAD, 0, 3)], [Opt(OptOps.THREAD, 1, 7), Opt(OptOps.SWAP, 0, 1)],
  [Opt(OptOps.SPLIT, 0, 3)], [Opt(OptOps.SPLIT, 0, 3), Opt(OptOps.SWAP, 0, 1), Opt(OptOps.THREAD, 0, 7)],
  [Opt(OptOps.UPCAST, 1, 7), Opt(OptOps.PADTO, 0, 8), Opt(OptOps.THREAD, 0, 4), Opt(OptOps.UNROLL, 0, 5)],
  [Opt(OptOps.PADTO, 0, 8), Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.SPLIT, 0, 2), Opt(OptOps.PADTO, 1, 8)],
]

@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("opts", MATMUL_OPTS, ids=str)
def test_matmul_values(device, opts):
  if device == "CL" and any(o.op is OptOps.THREAD for o in opts): pytest.skip("THREAD is for loop-running renderers")
  t, want = matmul(device, 27, 5, 7)
  res, spec = run(device, t, opts)
  np.testing.assert_allclose(res, want, rtol=1e-5, atol=1e-5)
  assert tuple(spec.applied_opts) == tuple(opts)

@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("opts", [[Opt(OptOps.PADTO, 1, 8)], [Opt(OptOps.PADTO, 1, 8), Opt(OptOps.UNROLL, 0, 8)],
                                  [Opt(OptOps.PADTO, 0, 4), Opt(OptOps.THREAD, 0, 2)]], ids=str)
@pytest.mark.parametrize("op", ["max", "exp_sum"])
def test_padded_reduce_keeps_identity(device, opts, op):
  # exp(0) = 1 and max with 0 would both be wrong if padded iterations were not masked to the reduce's identity
  if device == "CL" and any(o.op is OptOps.THREAD for o in opts): pytest.skip("THREAD is for loop-running renderers")
  x = -np.abs(RNG.standard_normal((6, 27)).astype(np.float32)) - 1
  xt = Tensor(x, device=device).realize()
  t, want = (xt.max(axis=1), x.max(axis=1)) if op == "max" else (xt.exp().sum(axis=1), np.exp(x).sum(axis=1))
  res, _ = run(device, t, opts)
  np.testing.assert_allclose(res, want, rtol=1e-5, atol=1e-6)

@pytest.mark.parametrize("device", devices())
def test_padded_elementwise_stores_nothing_extra(device):
  x = RNG.standard_normal(1000).astype(np.float32)
  t = (Tensor(x, device=device).realize() * 2 + 1)
  res, _ = run(device, t, [Opt(OptOps.PADTO, 0, 64), Opt(OptOps.UPCAST, 0, 4)])
  np.testing.assert_allclose(res, x * 2 + 1, rtol=1e-6)

def test_padded_output_is_not_written_past_its_end():
  # the output lives in a larger buffer's first 1000 elements; the padded iterations must not write the rest
  x = RNG.standard_normal(1000).astype(np.float32)
  t = Tensor(x, device="CPU").realize() + 1
  items, _ = create_schedule([t.uop])
  dev = Device["CPU"]
  spec = get_program(items[-1].ast, dev.renderer, opts=[Opt(OptOps.PADTO, 0, 64)])
  prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
  out = np.full(1024 + 64, 7.0, dtype=np.float32)
  src = items[-1].bufs[1].ensure_allocated()
  prg(out, src.handle, wait=True)
  np.testing.assert_allclose(out[:1000], x + 1, rtol=1e-6)
  assert (out[1000:] == 7.0).all()

def _gated_reads(k: Kernel) -> int:
  """Reads of global buffers through a gate in the kernel's AST."""
  stored = {u.src[0] for u in k.sink.toposort() if u.op is Ops.STORE}
  return sum(1 for u in k.sink.toposort() if u.op is Ops.INDEX and u.src[0].op is Ops.DEFINE_GLOBAL and len(u.src) > 2
             and u not in stored)

@pytest.mark.parametrize("device", devices())
def test_padded_output_axis_reads_inside_its_buffer_without_a_gate(device):
  # the first 1000 of 1008 floats: the padded iterations read the last 8, which are there; only the store is gated
  # (a padded panel of B in a 1000-wide matmul read its spare columns through a gate each reduction step)
  x = RNG.standard_normal(1008).astype(np.float32)
  t = Tensor(x, device=device).realize()[:1000] * 2
  k = kernel(t, device)
  k.apply_opt(Opt(OptOps.PADTO, 0, 16))
  assert _gated_reads(k) == 0
  res, _ = run(device, t, [Opt(OptOps.PADTO, 0, 16), Opt(OptOps.UPCAST, 0, 4 if device == "CL" else 16)])
  np.testing.assert_allclose(res, x[:1000] * 2, rtol=1e-6)

def test_padded_reads_stay_gated_where_they_could_leave_the_buffer_or_mix():
  x = RNG.standard_normal((6, 1000)).astype(np.float32)
  xt = Tensor(x).realize()
  k = kernel(xt * 2)                                # the last row's padded reads would leave the buffer
  k.apply_opt(Opt(OptOps.PADTO, 1, 16))
  assert _gated_reads(k) == 1
  k = kernel(xt.sum(axis=1))                        # a padded reduce axis: its values would be summed
  k.apply_opt(Opt(OptOps.PADTO, 1, 16))
  assert _gated_reads(k) == 1
  i = Tensor(RNG.integers(1, 9, 1008).astype(np.int32)).realize()
  k = kernel(Tensor(np.arange(1000, dtype=np.int32)).realize() // i[:1000])   # a division by a read value
  k.apply_opt(Opt(OptOps.PADTO, 0, 16))
  assert _gated_reads(k) == 2
  res, _ = run("CPU", xt.sum(axis=1), [Opt(OptOps.PADTO, 1, 16)])
  np.testing.assert_allclose(res, x.sum(axis=1), rtol=1e-4)

@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_thread_axis_is_split_by_the_runtime(threads, monkeypatch):
  from tinyplug_cpu_llvm import runtime
  t, want = matmul("CPU", 24, 9, 10)
  items, _ = create_schedule([t.uop])
  dev = Device["CPU"]
  spec = get_program(items[-1].ast, dev.renderer, opts=[Opt(OptOps.THREAD, 0, threads)] if threads > 1 else [])
  prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
  monkeypatch.setattr(runtime, "n_threads", lambda: 4)
  assert prg.threads() == (min(threads, 4) if threads > 1 else 1)   # small kernel: one thread without THREAD
  calls = []
  def run(fn, args, n, per=1):
    calls.append((n, per))
    for c in range(n): fn(*args, c, n)
  monkeypatch.setattr(dev.pool, "run", run)
  bufs = [b.ensure_allocated() for b in items[-1].bufs]
  prg(*[b.handle for b in bufs], wait=True)
  np.testing.assert_allclose(bufs[0].numpy().reshape(24, 10), want, rtol=1e-5, atol=1e-5)
  assert calls == ([(min(threads, 4), 1)] if threads > 1 else [])   # a THREAD axis: one share per thread

def test_thread_axis_is_the_outermost_loop():
  t, _ = matmul("CPU", 24, 9, 10)
  spec = get_program(create_schedule([t.uop])[0][-1].ast, Device["CPU"].renderer, opts=[Opt(OptOps.THREAD, 1, 5)])
  first = next(u for u in spec.uops if u.op is Ops.RANGE)
  assert first.arg[1] == "thread" and first.src[0].arg == 5
  assert spec.thread_split and spec.thread_parts == 5

def test_swap_and_split_change_loop_order():
  t, _ = matmul("CPU", 32, 8, 16)
  def order(opts):
    spec = get_program(create_schedule([t.uop])[0][-1].ast, Device["CPU"].renderer, opts=opts)
    return [u.src[0].arg for u in spec.uops if u.op is Ops.RANGE and u.arg[1] != "reduce"]
  assert order([]) == [32, 16]
  assert order([Opt(OptOps.SWAP, 0, 1)]) == [16, 32]
  assert order([Opt(OptOps.SPLIT, 0, 4)]) == [8, 16, 4]          # the inner part of a SPLIT is the innermost loop
  assert order([Opt(OptOps.SPLIT, 0, 4), Opt(OptOps.SWAP, 0, 1)]) == [16, 8, 4]

@pytest.mark.parametrize("opt, message", [
  (Opt(OptOps.SWAP, 0, 0), "with itself"),
  (Opt(OptOps.SWAP, 0, 5), "axis 5 does not exist"),
  (Opt(OptOps.PADTO, 1, 7), "already a multiple"),
  (Opt(OptOps.PADTO, 0, 64), "more than doubles"),
  (Opt(OptOps.PADTO, 0, 1), "need an int >= 2"),
  (Opt(OptOps.PADTO, 3, 4), "axis 3 does not exist"),
  (Opt(OptOps.THREAD, 0, 4), "does not split"),
  (Opt(OptOps.THREAD, 2, 3), "axis 2 does not exist"),
  (Opt(OptOps.SPLIT, 0, 27), "the whole axis"),
  (Opt(OptOps.SPLIT, 0, 4), "does not split"),
])
def test_invalid_uses_name_the_problem(opt, message):
  t, _ = matmul("CPU", 27, 5, 7)
  with pytest.raises(KernelOptError, match=message): kernel(t).apply_opt(opt)

def test_one_thread_axis_and_not_on_gpu_renderers():
  t, _ = matmul("CPU", 24, 9, 10)
  k = kernel(t)
  k.apply_opt(Opt(OptOps.THREAD, 0, 2))
  with pytest.raises(KernelOptError, match="already has a THREAD axis"): k.apply_opt(Opt(OptOps.THREAD, 0, 2))
  class GPU(Renderer):
    launch, has_local, has_shared, local_max = "grid", True, True, (256,)
  with pytest.raises(KernelOptError, match="THREAD is for loop-running"):
    Kernel(kernel(t).sink, GPU()).apply_opt(Opt(OptOps.THREAD, 0, 2))

def test_heuristic_blocks_and_threads_large_matmuls_only(monkeypatch, avx512_machine):
  monkeypatch.setattr(type(Device["CPU"].renderer), "threads", 2)
  big = heuristic_opts(kernel(Tensor.empty(1024, 512, device="CPU") @ Tensor.empty(512, 1024, device="CPU")))
  kinds = [o.op for o in big]
  assert OptOps.SPLIT in kinds and Opt(OptOps.THREAD, 0, 2) in big and Opt(OptOps.UPCAST, 1, 32) in big
  small = heuristic_opts(kernel(Tensor.empty(64, 64, device="CPU") @ Tensor.empty(64, 64, device="CPU")))
  assert not {OptOps.SPLIT, OptOps.THREAD, OptOps.SWAP, OptOps.PADTO} & {o.op for o in small}
  python = heuristic_opts(kernel(Tensor.empty(1024, 512, device="PYTHON") @ Tensor.empty(512, 1024, device="PYTHON"), "PYTHON"))
  assert OptOps.THREAD not in {o.op for o in python}

def test_heuristic_matmul_values_on_cpu():
  t, want = matmul("CPU", 512, 256, 512)
  k = kernel(t)
  opts = heuristic_opts(k)
  assert any(o.op is OptOps.SPLIT for o in opts)
  res, _ = run("CPU", t, opts)
  np.testing.assert_allclose(res, want, rtol=1e-4, atol=1e-3)

def test_noopt_applies_nothing():
  from tinyplug.helpers import Context
  t, want = matmul("CPU", 512, 256, 512)
  ast = create_schedule([t.uop])[0][-1].ast
  assert get_program(ast, Device["CPU"].renderer).applied_opts   # the heuristic pass set is on
  with Context(NOOPT=1): assert get_program(ast, Device["CPU"].renderer).applied_opts == ()

def test_search_candidates_include_the_new_actions():
  t, _ = matmul("CPU", 32, 27, 16)
  acts = candidate_actions(kernel(t))
  ops = {o.op for o in acts}
  assert {OptOps.SWAP, OptOps.PADTO, OptOps.SPLIT, OptOps.UPCAST, OptOps.UNROLL} <= ops
  assert Opt(OptOps.PADTO, 2, 4) in acts and Opt(OptOps.SWAP, 0, 1) in acts
  gpu_acts = candidate_actions(kernel(t, "PYTHON"))
  assert not {OptOps.THREAD, OptOps.SPLIT, OptOps.SWAP} & {o.op for o in gpu_acts}

def test_heuristic_pads_odd_matmul_sizes_and_stays_exact(avx512_machine):
  t, want = matmul("CPU", 1000, 300, 1000)
  opts = heuristic_opts(kernel(t))
  assert Opt(OptOps.PADTO, 1, 32) in opts and Opt(OptOps.UPCAST, 1, 32) in opts
  res, _ = run("CPU", t, opts)
  np.testing.assert_allclose(res, want, rtol=1e-4, atol=1e-3)
  t, want = matmul("PYTHON", 100, 20, 100)
  res, _ = run("PYTHON", t, [Opt(OptOps.PADTO, 1, 16), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.PADTO, 0, 8)])
  np.testing.assert_allclose(res, want, rtol=1e-4, atol=1e-4)

def test_beam_starts_from_the_heuristic():
  from tinyplug.search.strategies import BeamSearch
  t, _ = matmul("CPU", 1024, 512, 1024)
  k = kernel(t)
  hand = heuristic_opts(k)
  timed = []
  def timer(opts):   # the heuristic's actions are the fastest; everything else is slower
    timed.append(list(opts))
    return 1.0 if list(opts) == hand else 2.0
  assert BeamSearch().search(k, timer, 2, lambda s: None) == hand
  assert timed[0] == hand and [] in timed

def test_heuristic_tile_shrinks_with_the_work_of_small_matmuls(avx512_machine):
  # a small matmul's code size (and compile time) grows with the register tile; its run time barely changes
  def lanes(m, k, n):
    opts = heuristic_opts(kernel(Tensor.empty(m, k, device="CPU") @ Tensor.empty(k, n, device="CPU")))
    return math.prod(o.arg for o in opts if o.op in (OptOps.UPCAST, OptOps.UNROLL)), opts
  small, opts = lanes(128, 32, 64)                   # 262k multiply-adds: an MLP layer's step
  assert small <= 64 and any(o.op is OptOps.UPCAST for o in opts)
  assert lanes(128, 256, 128)[0] == 64               # 4M: a middle budget
  assert lanes(512, 256, 512)[0] >= 256              # 64M: the full 32x8 tile
  t, want = matmul("CPU", 128, 32, 64)
  res, _ = run("CPU", t, opts)
  np.testing.assert_allclose(res, want, rtol=1e-4, atol=1e-3)
