"""TinyJit's CPU graph (graph.py): runs of one-thread kernels replayed by one native call, reading their arguments
from slots the replay rewrites for the launches whose buffers or values changed. A slot left stale computes on an old
buffer or value, so each test checks every call's values against numpy, and that the graph really ran."""
from __future__ import annotations
import ctypes
import numpy as np
import pytest
from tinyplug import Context, Tensor, TinyJit, Variable
from tinyplug.device import Device
from tinyplug_cpu_llvm.graph import CPUGraph, batch_ir, runs_on_one_thread

def graphs_of(jitted: TinyJit) -> list:
  plan = jitted.captured._plan or []
  return [step.graph for step in plan if getattr(step, "graph", None) is not None]

def data(i: int, shape=(16, 8)) -> np.ndarray:
  return np.random.default_rng(i).standard_normal(shape).astype(np.float32)

def small_chain(a: Tensor, b: Tensor) -> Tensor:
  c = (a * 2 + b).contiguous()
  d = (c.relu() - a).contiguous()
  return (d @ b.T).sum(axis=1).realize()

def small_chain_np(a, b):
  c = a * 2 + b
  return ((np.maximum(c, 0) - a) @ b.T).sum(axis=1)

def test_jit_replays_small_kernels_as_one_native_call_with_new_inputs():
  f = TinyJit(small_chain)
  for i in range(6):
    a, b = data(i), data(50 + i)
    np.testing.assert_allclose(f(Tensor(a), Tensor(b)).numpy(), small_chain_np(a, b), rtol=1e-4, atol=1e-4)
  (graph,) = graphs_of(f)
  assert isinstance(graph, CPUGraph) and any(not isinstance(s, int) for s in graph.steps)

def test_the_same_values_with_and_without_the_graph():
  a, b = data(1), data(2)
  out = []
  for on in (1, 0):
    with Context(JIT_GRAPH=on):
      f = TinyJit(small_chain)
      for _ in range(3): r = f(Tensor(a), Tensor(b)).numpy()
      out.append(r)
      assert bool(graphs_of(f)) == bool(on)
  np.testing.assert_array_equal(out[0], out[1])

def test_bound_variables_reach_the_kernels_in_the_graph():
  x = np.arange(40, dtype=np.float32)
  @TinyJit
  def f(t: Tensor, n: Variable) -> Tensor:
    y = (t[:n] * 3).contiguous()
    return (y + 1).sum().realize()
  for k in (5, 9, 17, 9, 30, 5):
    n = Variable("n", 1, 40).bind(k)
    assert f(Tensor(x), n).item() == pytest.approx(float((x[:k] * 3 + 1).sum()))
  assert graphs_of(f)

def test_a_parallel_kernel_between_small_ones_keeps_its_own_call():
  big = np.random.default_rng(3).standard_normal((1024, 1024)).astype(np.float32)
  @TinyJit
  def f(a: Tensor, s: Tensor) -> Tensor:
    t = (s * 2 + 1).contiguous()
    u = (t - s).contiguous()
    m = (a * u.sum()).contiguous()   # 1M elements: may split over the cores
    return ((m.sum(axis=1)[:4] + t[:4]) * u[:4]).realize()
  for i in range(4):
    s = data(10 + i, (4,))
    got = f(Tensor(big), Tensor(s)).numpy()
    t = s * 2 + 1
    u = t - s
    np.testing.assert_allclose(got, ((big * u.sum()).sum(axis=1)[:4] + t) * u, rtol=1e-3)
  (graph,) = graphs_of(f)
  assert any(isinstance(s, int) for s in graph.steps) and any(not isinstance(s, int) for s in graph.steps)
  assert not runs_on_one_thread(graph.launches[next(s for s in graph.steps if isinstance(s, int))].prg)

def test_freed_intermediates_are_rewritten_into_the_slots():
  f = TinyJit(small_chain)
  a, b = data(4), data(5)
  for _ in range(3): f(Tensor(a), Tensor(b))
  f.captured.free_intermediates()
  for i in range(3):
    a, b = data(20 + i), data(30 + i)
    np.testing.assert_allclose(f(Tensor(a), Tensor(b)).numpy(), small_chain_np(a, b), rtol=1e-4, atol=1e-4)

def test_batch_ir_passes_each_argument_from_its_slot():
  # a kernel of (ptr, i32, i64, core, n) that stores its arguments: the batch function must hand over slot k to
  # argument k (an i32 from the low half of its slot), then core 0 of 1, calling the function its table names
  out = (ctypes.c_int64 * 4)()
  kind = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32)
  def record(p, i, j, core, n):
    arr = ctypes.cast(p, ctypes.POINTER(ctypes.c_int64))
    arr[0], arr[1], arr[2], arr[3] = i, j, core, n
  fn = kind(record)
  dev = Device["CPU"]
  batch = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(dev.load_ir(batch_ir("tp_graph", [(("ptr", "i32", "i64"), 1)])))
  argv = (ctypes.c_int64 * 4)(0, ctypes.addressof(out), -7 & 0xFFFFFFFF | (5 << 32), 1 << 40)
  fns = (ctypes.c_void_p * 1)(ctypes.cast(fn, ctypes.c_void_p).value)
  batch(ctypes.addressof(argv), ctypes.addressof(fns))
  assert list(out) == [-7, 1 << 40, 0, 1]

def test_run_functions_come_from_the_object_cache(tmp_path, monkeypatch):
  """A run's function holds no kernel address (they come from a table), so it is compiled once and kept with the
  kernels' objects, on disk too: a new process's first replay loads it instead of compiling it, and computes the same."""
  from tinyplug_cpu_llvm.compiler import LLVMCompiler
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  dev = Device["CPU"]
  runs, compiled = [], []
  real_cached, real_compile = LLVMCompiler.compile_cached, LLVMCompiler.compile
  def cached(self, src, quick=False):
    if src.startswith("define void @tp_graph"): runs.append(src)
    return real_cached(self, src, quick)
  monkeypatch.setattr(LLVMCompiler, "compile_cached", cached)
  monkeypatch.setattr(LLVMCompiler, "compile", lambda self, src, quick=False: (compiled.append(src), real_compile(self, src, quick))[1])
  def replays() -> None:
    f = TinyJit(small_chain)
    for i in range(3): got = f(Tensor(data(i)), Tensor(data(60 + i))).numpy()
    assert graphs_of(f)
    np.testing.assert_allclose(got, small_chain_np(data(2), data(62)), rtol=1e-4, atol=1e-4)
  dev.compiler._memory.clear()
  replays()
  assert runs and set(runs) <= set(compiled)   # each run function compiled once, through the object cache
  runs.clear(); compiled.clear()
  dev.compiler._memory.clear()   # as a new process: only the disk has them
  replays()
  assert runs and not compiled
