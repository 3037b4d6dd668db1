"""TinyJit's graph replay hook (`Compiled.make_graph`, backend.py): a device that offers it gets each run of kernels
between copies once, replays it as one unit with the changed launches updated, and anything failing falls back to
per-kernel replay. The device here is PYTHON with a recording graph that keeps its own copy of every launch's handles
and values and refreshes only the launches the JIT says changed: a missed update computes on stale buffers and the
values (checked against numpy) come out wrong."""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug import Context, Tensor, TinyJit, Variable
from tinyplug.backend import LaunchGraph
from tinyplug.device import Device
from tinyplug.helpers import GlobalCounters

class RecordingGraph(LaunchGraph):
  def __init__(self, launches, fail_on_call: int | None = None):
    self.launches = list(launches)
    self.held = [(list(l.handles), tuple(l.vals)) for l in self.launches]   # what a built graph holds
    self.calls: list[list[int]] = []
    self.fail_on_call = fail_on_call
  def __call__(self, changed, wait=False):
    self.calls.append(list(changed))
    if self.fail_on_call is not None and len(self.calls) >= self.fail_on_call: raise RuntimeError("graph launch broke")
    for i in changed: self.held[i] = (list(self.launches[i].handles), tuple(self.launches[i].vals))
    for launch, (handles, vals) in zip(self.launches, self.held):
      launch.prg(*handles, global_size=launch.global_size, local_size=launch.local_size, vals=vals, wait=False)
    return 0.25 if wait else None

@pytest.fixture
def graphs(monkeypatch):
  """PYTHON as the default device, offering graph replay; the list of graphs it built."""
  dev = Device["PYTHON"]
  built: list[RecordingGraph] = []
  def make_graph(launches):
    built.append(RecordingGraph(launches))
    return built[-1]
  monkeypatch.setattr(dev, "make_graph", make_graph, raising=False)
  with Device.use("PYTHON"): yield built

def data(i: int, shape=(3, 4)) -> np.ndarray:
  return np.random.default_rng(i).standard_normal(shape).astype(np.float32)

def three_kernels(a: Tensor, b: Tensor) -> Tensor:
  c = (a * 2 + b).contiguous()
  d = (c.exp2() - a).contiguous()
  return (d * c).sum(axis=1).realize()

def want(a, b):
  c = a * 2 + b
  return ((np.exp2(c) - a) * c).sum(axis=1)

def check_calls(f, n: int, first_b: int) -> None:
  """Call the jitted `f` n times with new inputs; each result must match numpy's."""
  for i in range(n):
    a, b = data(i), data(first_b + i)
    np.testing.assert_allclose(f(Tensor(a), Tensor(b)).numpy(), want(a, b), rtol=1e-5, atol=1e-5)

def test_jit_replays_through_the_device_graph_with_new_inputs(graphs):
  f = TinyJit(three_kernels)
  check_calls(f, 6, 100)
  assert len(graphs) == 1, "one graph, built at the first replay"
  g = graphs[0]
  assert len(g.launches) == len(f.captured) >= 3 and len(g.calls) == 4   # calls 3..6
  # the launches reading an argument are the ones updated, every time; the others are not touched
  readers = sorted({li for li, _, _ in f.captured.input_slots})
  assert all(call == readers for call in g.calls) and len(readers) < len(g.launches)

def test_kernel_count_and_debug_2_line_for_a_graph(graphs, capsys):
  f = TinyJit(three_kernels)
  for i in range(3): f(Tensor(data(i)), Tensor(data(9)))
  a, b = Tensor(data(5)).realize(), Tensor(data(6)).realize()
  before = GlobalCounters.kernel_count
  with Context(DEBUG=2): f(a, b)
  n = len(f.captured)
  assert GlobalCounters.kernel_count - before == n
  lines = [l for l in capsys.readouterr().out.splitlines() if f"graph {n} kernels" in l]
  assert len(lines) == 1 and "250000.00us" in lines[0], lines   # the graph's own time (wait=True)

@pytest.mark.parametrize("off", [{"JIT_GRAPH": 0}, {"JIT": 2}])
def test_jit_graph_0_replays_kernel_by_kernel(graphs, off):
  f = TinyJit(three_kernels)
  with Context(**off):
    for i in range(4):
      a, b = data(i), data(7)
      np.testing.assert_allclose(f(Tensor(a), Tensor(b)).numpy(), want(a, b), rtol=1e-5, atol=1e-5)
  assert graphs == []

@pytest.mark.parametrize("how", ["raise", "none"])
def test_a_device_that_cannot_build_a_graph_replays_one_by_one(monkeypatch, capsys, how):
  def make_graph(launches):
    if how == "raise": raise RuntimeError("no graphs on this device today")
    return None
  monkeypatch.setattr(Device["PYTHON"], "make_graph", make_graph, raising=False)
  with Device.use("PYTHON"), Context(DEBUG=1):
    check_calls(TinyJit(three_kernels), 4, 3)
  out = capsys.readouterr().out
  assert out.count("no graphs on this device today") == (1 if how == "raise" else 0), out
  if how == "raise": assert "replaying them one by one" in out

def test_a_graph_that_fails_at_replay_falls_back_for_good(monkeypatch, capsys):
  built = []
  def make_graph(launches):
    built.append(RecordingGraph(launches, fail_on_call=2))
    return built[-1]
  monkeypatch.setattr(Device["PYTHON"], "make_graph", make_graph, raising=False)
  with Device.use("PYTHON"), Context(DEBUG=1):
    check_calls(TinyJit(three_kernels), 6, 30)
  assert len(built) == 1 and len(built[0].calls) == 2   # ran once, failed once, never asked again
  assert capsys.readouterr().out.count("graph launch broke") == 1

def test_copies_split_the_graphs(graphs):
  if "CPU" not in Device.available(): pytest.skip("needs a second device to copy from")
  def f(a: Tensor, b: Tensor) -> Tensor:
    x = (a + 1).contiguous()
    y = (x * b).contiguous()
    z = (y.to("CPU") * 1).to("PYTHON")   # two copies between devices in the middle of the kernels
    return ((z + x).contiguous() - y).realize()
  jf = TinyJit(f)
  for i in range(4):
    a, b = data(i), data(40 + i)
    np.testing.assert_allclose(jf(Tensor(a), Tensor(b)).numpy(), a + 1, rtol=1e-5, atol=1e-5)
  copies = [i for i, l in enumerate(jf.captured.launches) if l.is_copy]
  assert copies, "the capture holds the copies"
  for g in graphs:   # a graph holds only kernels of its own device, never a copy
    assert all(l.prg is not None and l.bufs[0].device == "PYTHON" for l in g.launches)
  assert len(graphs) >= 1

def test_freed_intermediates_are_reallocated_and_updated(graphs):
  f = TinyJit(three_kernels)
  for i in range(3): f(Tensor(data(i)), Tensor(data(i + 1)))
  f.captured.free_intermediates()
  for i in range(3, 5):
    a, b = data(i), data(i + 1)
    np.testing.assert_allclose(f(Tensor(a), Tensor(b)).numpy(), want(a, b), rtol=1e-5, atol=1e-5)
  g = graphs[0]
  assert g.calls[-2] == list(range(len(g.launches)))   # every launch got its new buffers once

def test_bound_variables_reach_the_graph(graphs):
  x = data(1, (3, 10))
  jf = TinyJit(lambda a: ((a + 1).contiguous() * 2).realize())
  for n in range(1, 7):
    out = jf(Tensor(x)[:, :Variable("i", 1, 10).bind(n)])
    np.testing.assert_allclose(out[:3, :n].numpy(), (x[:, :n] + 1) * 2, rtol=1e-6)
  assert len(graphs) == 1 and len(graphs[0].launches) == 2 and len(graphs[0].calls) == 4
  assert all(call == [0, 1] for call in graphs[0].calls)   # both kernels take the variable

def test_graphs_learn_what_changed_while_they_were_off(graphs):
  f = TinyJit(three_kernels)
  for i in range(3): f(Tensor(data(i)), Tensor(data(i + 1)))
  f.captured.free_intermediates()
  with Context(JIT_GRAPH=0): f(Tensor(data(3)), Tensor(data(4)))   # reallocates the intermediates, no graph
  a, b = data(5), data(6)
  np.testing.assert_allclose(f(Tensor(a), Tensor(b)).numpy(), want(a, b), rtol=1e-5, atol=1e-5)
  assert graphs[0].calls[-1] == list(range(len(graphs[0].launches)))
