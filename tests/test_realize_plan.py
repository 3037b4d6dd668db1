"""Realize plans (engine/plan.py): a graph template's output over plain buffers is deferred, and realizing it again on
same-shaped inputs replays the recorded kernels. Every test checks values against numpy/torch and reads the plan
counters to know which path ran: anything that changes a realize's meaning must take another plan or the usual path."""
from __future__ import annotations
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyplug import Context, Tensor, TinyJit
from tinyplug import events
from tinyplug.engine import plan
from tinyplug.helpers import GlobalCounters
from tinyplug.tensor_ops import graph
from plugin_fixtures import plugin_site  # noqa: F401  (a fixture)

RNG = np.random.default_rng(7)

def data(*shape: int) -> np.ndarray: return RNG.standard_normal(shape).astype(np.float32)
def buf(x: np.ndarray, device: str = "CPU") -> Tensor: return Tensor(x, device=device).realize()

class Count:
  """The plan counters' change since the block began."""
  def __enter__(self) -> Count:
    self.start = dict(plan.counters)
    return self
  def __exit__(self, *exc) -> None: pass
  def __getitem__(self, k: str) -> int: return plan.counters[k] - self.start[k]

def close(got: Tensor, want: np.ndarray) -> None: np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)

def test_repeated_matmul_replays_the_plan_with_new_inputs(device):
  outs = []
  with Count() as n:
    for i in range(6):   # call 1 runs the method, call 2 builds the template (and records the plan), then replays
      a, b = data(9, 10), data(10, 11)
      c = buf(a, device) @ buf(b, device)
      assert (c._defer is not None) == (i >= 1)
      close(c.realize(), a @ b)
      assert graph.is_plain_buffer(c.uop) and c.shape == (9, 11)
      outs.append(c.numpy())
  assert (n["recorded"], n["hits"], n["fallbacks"]) == (1, 4, 0)
  assert not np.allclose(outs[-1], outs[-2])   # the new inputs, not a stale buffer

@pytest.mark.parametrize("case", ["sum", "sum_axis", "conv2d", "softmax", "log_softmax", "mean", "relu", "linear"])
def test_template_methods_replay_right(case):
  def run():
    if case == "conv2d":
      x, w = data(2, 3, 9, 8), data(5, 3, 3, 3)
      return buf(x).conv2d(buf(w), padding=1), F.conv2d(torch.tensor(x), torch.tensor(w), padding=1).numpy()
    x = data(13, 17)
    if case == "linear":
      w, b = data(17, 6), data(6)
      return buf(x).linear(buf(w), buf(b)), x @ w + b
    t = buf(x)
    if case == "sum": return t.sum(), x.sum()
    if case == "sum_axis": return t.sum(axis=1), x.sum(axis=1)
    if case == "softmax": return t.softmax(-1), torch.tensor(x).softmax(-1).numpy()
    if case == "log_softmax": return t.log_softmax(-1), torch.tensor(x).log_softmax(-1).numpy()
    if case == "mean": return t.mean(), x.mean()
    return t.relu(), np.maximum(x, 0)
  with Count() as n:
    for _ in range(5):
      got, want = run()
      close(got.realize(), want)
  assert n["recorded"] == 1 and n["hits"] == 3 and n["refused"] == 0

def test_kernel_counters_as_the_usual_path():
  a, b = buf(data(6, 7)), buf(data(7, 5))
  for plans in (0, 1):
    with Context(REALIZE_PLANS=plans):
      for _ in range(3): (a @ b).realize()
      before = GlobalCounters.kernel_count
      with Count() as n: (a @ b).realize()
      assert GlobalCounters.kernel_count - before == 1 and n["hits"] == plans

def test_results_equal_with_plans_off():
  x, w = data(4, 3, 10, 10), data(6, 3, 3, 3)
  got = {}
  for plans in (0, 1):
    with Context(REALIZE_PLANS=plans):
      tx, tw = buf(x), buf(w)
      for _ in range(3): r = [tx.conv2d(tw, stride=2).realize(), tx.sum(axis=(2, 3)).realize(), tx.softmax(-1).realize()]
      got[plans] = [t.numpy() for t in r]
  for off, on in zip(got[0], got[1]): np.testing.assert_array_equal(off, on)   # the very same kernels

def test_other_shapes_and_dtypes_take_other_plans():
  with Count() as n:
    for _ in range(3):
      for shape in ((8, 9), (8, 10)):
        for dtype in (np.float32, np.int32):
          x = (data(*shape) * 10).astype(dtype)
          t = Tensor(x).realize()
          # float sums of random signs cancel: the tolerance is on the size of what was summed
          assert t.sum().realize().item() == pytest.approx(x.sum(), rel=1e-5, abs=1e-6 * float(np.abs(x).sum()))
  assert n["recorded"] == 4 and n["hits"] == 4   # each signature: run, recorded, replayed

def test_strided_and_aliased_inputs_take_the_usual_path():
  a, b = data(11, 11), data(11, 11)
  ta, tb = buf(a), buf(b)
  for _ in range(3): (ta @ tb).realize()
  with Count() as n:
    for _ in range(3):
      c = ta.T @ tb                     # a permuted view: other index math than the template's placeholder
      assert c._defer is None
      close(c.realize(), a.T @ b)
      d = ta @ ta                       # the same buffer twice
      assert d._defer is None
      close(d.realize(), a @ a)
      e = ta[1:].sum()                  # a shrunk view
      close(e.realize(), a[1:].sum())
  assert n["hits"] == 0

def test_assign_and_setitem_are_seen():
  a, b = data(6, 6), data(6, 6)
  ta, tb = buf(a), buf(b)
  for _ in range(3): close((ta @ tb).realize(), a @ b)
  with Count() as n:
    new = data(6, 6)
    ta.assign(buf(new)).realize()      # the same buffer, new contents
    close((ta @ tb).realize(), new @ b)
    ta[0] = 3.0                        # written through a view at once
    new[0] = 3.0
    close((ta @ tb).realize(), new @ b)
    newer = data(6, 6)
    ta.assign(buf(newer))              # not realized: the input is an ASSIGN, not a buffer
    c = ta @ tb
    assert c._defer is None
    close(c.realize(), newer @ b)
    close((ta @ tb).realize(), newer @ b)
  assert n["hits"] == 3

def test_a_deferred_output_kept_across_an_assign_reads_the_buffer_as_a_graph_would():
  a, b = data(5, 5), data(5, 5)
  results = {}
  for plans in (0, 1):
    with Context(REALIZE_PLANS=plans):
      ta, tb = buf(a), buf(b)
      for _ in range(3): (ta @ tb).realize()
      d = ta @ tb                     # deferred (plans on) or a graph over ta's buffer (off)
      new = data(5, 5)
      ta.assign(buf(new)).realize()
      results[plans] = (d.numpy(), new)
  np.testing.assert_allclose(results[0][0], results[0][1] @ b, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(results[1][0], results[1][1] @ b, rtol=1e-5, atol=1e-5)

def test_lazy_input_then_realized():
  a, b = data(7, 8), data(8, 3)
  ta, tb = buf(a), buf(b)
  for _ in range(3): (ta @ tb).realize()
  with Count() as n:
    c = ta + 1
    d = c @ tb
    assert d._defer is None            # a lazy input: its graph is built at once
    close(d.realize(), (a + 1) @ b)
    c.realize()
    d = c @ tb
    assert d._defer is not None
    close(d.realize(), (a + 1) @ b)
  assert n["hits"] == 1

def test_a_live_graph_holding_the_same_nodes_is_pointed_at_the_result():
  a, b = data(4, 9), data(9, 2)
  ta, tb = buf(a), buf(b)
  for _ in range(3): (ta @ tb).realize()
  lazy = ta @ tb
  lazy.uop                             # built: a live graph with the very nodes the next realize computes
  with Count() as n:
    c = (ta @ tb).realize()
  assert n["fallbacks"] == 1 and n["hits"] == 0
  assert lazy.uop is c.uop             # as without plans: the graph now holds the result's buffer
  ta.assign(buf(data(4, 9))).realize()
  close(lazy, a @ b)                   # the value from before the assign

def test_a_live_node_no_tensor_holds_keeps_the_plan_among_unrelated_lazy_tensors():
  a, b = data(4, 7), data(7, 3)
  ta, tb = buf(a), buf(b)
  for _ in range(3): (ta @ tb).realize()
  built = ta @ tb
  kept = built.uop                     # the graph's nodes stay alive, but no tensor holds them
  del built
  xs = [data(4, 7) for _ in range(20)]
  unrelated = [Tensor(x, device="CPU") * 2 + ta for x in xs]   # lazy graphs over the same input, made after it
  with Count() as n:
    close((ta @ tb).realize(), a @ b)
  assert n["hits"] == 1 and n["fallbacks"] == 0
  close(unrelated[3], xs[3] * 2 + a)
  assert kept.op is not None

def test_settings_that_change_code_take_another_plan(capsys):
  a, b = data(12, 5), data(5, 12)
  ta, tb = buf(a), buf(b)
  for _ in range(3): (ta @ tb).realize()
  with Count() as n:
    with Context(NOOPT=1):
      for _ in range(3): close((ta @ tb).realize(), a @ b)
    close((ta @ tb).realize(), a @ b)
  assert n["recorded"] == 1 and n["hits"] == 3   # NOOPT's plan once and replayed twice; then the first plan again
  noopt = [e[1] for e in plan._plans.values() if e[1] is not None]
  assert len({id(p.steps[0][0]) for p in noopt}) >= 2   # two programs for the one template
  with Count() as n:
    with Context(DEBUG=1):
      close((ta @ tb).realize(), a @ b)
  assert n["fallbacks"] == 1 and "realize: 1 kernels" in capsys.readouterr().out

def test_a_changed_plugin_set_takes_another_plan(plugin_site):
  a, b = data(16, 16), data(16, 16)
  ta, tb = buf(a), buf(b)
  for _ in range(3): (ta @ tb).realize()
  with Count() as n:
    close((ta @ tb).realize(), a @ b)
    plugin_site.monkeypatch.setenv("TINY_PLUGINS", "-heuristic")
    plugin_site.refresh()
    for _ in range(3): close((ta @ tb).realize(), a @ b)
  assert n["recorded"] == 1 and n["hits"] == 3

def test_listeners_see_every_schedule_and_rewrite():
  a, b = data(3, 14), data(14, 3)
  ta, tb = buf(a), buf(b)
  for _ in range(3): (ta @ tb).realize()
  seen: list = []
  events.subscribe("schedule", seen.append, owner="test")
  try:
    with Count() as n:
      for _ in range(3):
        c = ta @ tb
        assert c._defer is None
        close(c.realize(), a @ b)
  finally: events.unsubscribe("schedule", seen.append)
  assert len(seen) == 3 and n["hits"] == 0
  with Count() as n: close((ta @ tb).realize(), a @ b)
  assert n["hits"] == 1   # (the events kept hold graph nodes, but no tensor does: nothing to point at the result)

def test_tinyjit_captures_the_kernels():
  @TinyJit
  def f(x: Tensor, y: Tensor) -> Tensor: return (x @ y).realize()
  for _ in range(5):
    a, b = data(6, 4), data(4, 6)
    close(f(buf(a), buf(b)), a @ b)
  assert f.captured

def test_schedules_not_run_go_first():
  a, b = data(10, 3), data(3, 10)
  ta, tb = buf(a), buf(b)
  for _ in range(3): (ta @ tb).realize()
  z = ta + 5
  z.schedule()                          # not run yet: it must run before anything else
  with Count() as n: close((ta @ tb).realize(), a @ b)
  assert n["fallbacks"] == 1
  close(z, a + 5)

def test_deferred_output_used_further_and_differentiated():
  a, b = data(5, 6), data(6, 4)
  for _ in range(3):
    ta, tb = Tensor(a, requires_grad=True).realize(), Tensor(b, requires_grad=True).realize()
    c = ta @ tb
    assert c.shape == (5, 4) and c.dtype == ta.dtype
    loss = (c * c).sum()
    loss.backward()
    close(loss, ((a @ b) ** 2).sum())
    close(ta.grad, 2 * (a @ b) @ b.T)
    close(tb.grad, a.T @ (2 * (a @ b)))

def test_two_deferred_outputs_of_one_graph_agree_with_plans_off():
  got = {}
  a, b, new = data(8, 3), data(3, 8), data(8, 3)
  for plans in (0, 1):
    with Context(REALIZE_PLANS=plans):
      ta, tb = buf(a), buf(b)
      for _ in range(3): (ta @ tb).realize()
      c1, c2 = ta @ tb, ta @ tb
      with Count() as n: c2.realize()      # c1 holds the same graph: without plans it now reads c2's buffer
      if plans: assert n["hits"] == 1 and n["fallbacks"] == 0 and c1._defer is None   # c1 takes c2's buffer
      ta.assign(buf(new)).realize()
      got[plans] = c1.numpy()
      np.testing.assert_allclose(got[plans], a @ b, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(got[0], got[1])

def test_unrelated_lazy_graphs_do_not_stop_the_plan():
  import gc
  a, b = data(6, 5), data(5, 6)
  ta, tb = buf(a), buf(b)
  for _ in range(3): (ta @ tb).realize()
  gc.collect()   # the recorded realize's graph (a node caches its toposort, itself included: a cycle)
  others = [buf(data(3, 3)) + i for i in range(20)]   # lazy graphs made after the inputs, over other buffers
  with Count() as n:
    for _ in range(3): close((ta @ tb).realize(), a @ b)
  assert n["hits"] == 3
  assert all(not graph.is_realized(o.uop) for o in others)

# ---- graph plans: any graph whose schedule is a cached template (elementwise chains, `t = (t + 1).realize()`) ----

def test_graph_plan_runs_an_elementwise_loop():
  t = buf(np.zeros(37, np.float32))
  with Count() as n:
    for _ in range(6): t = (t + 1.0).realize()
  close(t, np.full(37, 6.0, np.float32))
  assert n["graph_hits"] >= 3

def test_graph_plan_chain_with_new_inputs_and_a_lazy_consumer():
  with Count() as n:
    for _ in range(5):
      a, b, c = data(40), data(40), data(40)
      ta, tb, tc = buf(a), buf(b), buf(c)
      y = ((ta * tb) + tc).relu()
      z = y * 2.0                         # a lazy graph holding y's node: pointed at y's buffer after the realize
      close(y.realize(), np.maximum(a * b + c, 0))
      assert graph.is_realized(y.uop) and not graph.is_realized(z.uop)
      close(z, 2 * np.maximum(a * b + c, 0))
  assert n["graph_hits"] >= 3

def test_graph_plan_assign_loop_and_aliases():
  a = data(5, 5)
  t, s = buf(a), buf(a.copy())
  with Count() as n:
    for _ in range(4):
      t.assign(t * 2.0 + 1.0).realize()   # the kernel writes the input's own buffer
      close(s + s, 2 * a)                  # one buffer twice
      close(s.T + s, a.T + a)              # a permuted view of it
  want = a.copy()
  for _ in range(4): want = want * 2 + 1
  close(t, want)
  assert n["graph_hits"] >= 3

def test_graph_plan_refuses_variables():
  from tinyplug import Variable
  xs = [data(23) for _ in range(3)]
  ts = [buf(x) for x in xs]
  with Count() as n:
    for i, (x, t) in enumerate(zip(xs, ts)):
      v = Variable("i", 1, 10).bind(i + 1)
      close((t * v).realize(), x * (i + 1))   # a bound variable
  assert n["graph_hits"] == 0

def test_graph_plan_replays_copies_from_the_host():
  # a tensor just made from data is a copy of a host buffer: a plan copies the new data each time (a label tensor in
  # every training step), alone or feeding a kernel, for each shape and dtype on its own
  a = buf(data(5, 7))
  with Count() as n:
    for i in range(6):
      x, y = data(23), RNG.integers(0, 7, 5).astype(np.int32)
      close(Tensor(x).realize(), x)
      np.testing.assert_array_equal(Tensor(y).realize().numpy(), y)
      np.testing.assert_array_equal(Tensor(y.astype(np.int16)).realize().numpy(), y)
      close((Tensor(x[:7]) * a).sum(0).realize(), (x[:7] * a.numpy()).sum(0))
  assert n["graph_hits"] >= 4 * 4 and n["graph_refused"] == 0

def test_graph_plan_off_under_listeners_debug_and_plans_off(capsys):
  t = buf(np.zeros(9, np.float32))
  for _ in range(3): t = (t + 1.0).realize()
  seen: list = []
  events.subscribe("schedule", seen.append, owner="test")
  try:
    with Count() as n:
      for _ in range(2): t = (t + 1.0).realize()
  finally: events.unsubscribe("schedule", seen.append)
  assert n["graph_hits"] == 0 and len(seen) == 2
  with Count() as n:
    with Context(DEBUG=1): t = (t + 1.0).realize()
    with Context(REALIZE_PLANS=0): t = (t + 1.0).realize()
  assert n["graph_hits"] == 0 and "realize: 1 kernels" in capsys.readouterr().out
  close(t, np.full(9, 7.0, np.float32))

# ---- parameter plans: a graph seen before with other float constants (schedule/scalars.py's kernel arguments) ----

def test_param_plan_new_constants_each_time():
  a = data(300)
  x = buf(a)
  with Count() as n:
    for i in range(8):
      k = 1.0 + 0.37 * i
      close(((x * k) + 1.0).exp().realize(), np.exp(a * np.float32(k) + 1))
  assert n["param_recorded"] == 1 and n["param_hits"] >= 5

def test_param_plan_baked_constant_changes_and_lazy_consumer():
  a, b = data(64), data(64)
  x, y = buf(a), buf(b)
  for k in (1.5, 2.5, 3.5): ((x * k) + y * 0.5).realize()   # the first constant becomes a parameter, 0.5 stays baked
  with Count() as n:
    for k in (4.5, 5.5):
      r = (x * k) + y * 0.5
      z = r - 1.0                         # a lazy graph holding r's node: pointed at r's buffer after the realize
      close(r.realize(), a * k + b * 0.5)
      assert graph.is_realized(r.uop) and not graph.is_realized(z.uop)
      close(z, a * k + b * 0.5 - 1)
    close(((x * 6.5) + y * 0.25).realize(), a * 6.5 + b * 0.25)   # the baked one changed: not this plan
  assert n["param_hits"] == 2

def test_param_plan_shapes_dtypes_devices_and_assign_do_not_collide():
  a = data(4, 6)
  with Count() as n:
    for i in range(5):
      k = 2.0 + i
      close((buf(a) * k).realize(), a * k)
      close((buf(a.T.copy()) * k).realize(), a.T * k)                 # another shape
      close((buf(a[:, :3].copy()) * k).realize(), a[:, :3] * k)
      h = Tensor(a.astype(np.float16)).realize()
      np.testing.assert_allclose((h * k).realize().numpy(), (a.astype(np.float16) * np.float16(k)), rtol=1e-3)
      t = buf(a.copy())
      t.assign(t * k + 1.0).realize()                                  # the kernel writes its input's buffer
      close(t, a * k + 1)
      close((buf(a) * k + buf(a)).realize(), a * k + a)
  assert n["param_hits"] >= 4

def test_param_plan_special_values_and_settings():
  a = np.abs(data(16)) + 0.5
  x = buf(a)
  for k in (1.0, 2.0, 3.0): (x * k).realize()
  with Count() as n:
    for k in (float("inf"), -0.0, 1e-45, 3.4028235e38, 1e39):   # 1e39 rounds to inf in float32
      with np.errstate(over="ignore"):
        np.testing.assert_array_equal((x * k).realize().numpy(), a * np.float32(k))
  assert n["param_hits"] == 5
  with Count() as n:
    with Context(REALIZE_PLANS=0): close((x * 7.0).realize(), a * 7)
    with Context(SCALAR_ARGS=0): close((x * 8.0).realize(), a * 8)
  assert n["param_hits"] == 0
  nan = (x * float("nan")).realize().numpy()
  assert np.isnan(nan).all()

def test_param_plan_follows_a_second_constant_made_a_parameter():
  a, b = data(32), data(32)
  x, y = buf(a), buf(b)
  seq = [(1.0, 2.0), (1.0, 3.0), (1.0, 4.0), (1.0, 5.0), (5.0, 5.0), (6.0, 5.0), (7.0, 6.0), (8.0, 7.0)]
  with Count() as n:
    for p, q in seq: close(((x * p) + (y * q)).realize(), a * p + b * q)
  # (1, 2) baked; (1, 3) makes q a parameter; then plans with p baked; (5, 5) makes p one too; then plans again
  assert n["param_recorded"] == 2 and n["param_hits"] >= 4

def test_intermediates_share_memory_where_their_lives_do_not_overlap():
  """`plan._shared`: an intermediate output takes the memory of an earlier one of the same device and byte size whose
  last kernel ran before its first kernel; a kept output (the result), one of another size or device, or one whose
  candidates are still read by its own kernel keeps its own."""
  from tinyplug.uop.dtype import dtypes
  f32, i32, f16 = ("CPU", 8, dtypes.float32), ("CPU", 8, dtypes.int32), ("CPU", 8, dtypes.float16)
  outs = [f32, f32, i32, f32, f16, ("PYTHON", 8, dtypes.float32), f32, f32]
  step = lambda *refs: (None, tuple(refs), None, 0, 0)
  # out k is reference -k-1 (the first the one written); reference 0 is an input
  steps = [step(-1, 0), step(-2, -1), step(-3, -2), step(-4, -3, -2), step(-5, -4), step(-6, -4), step(-7, -4),
           step(-8, -7)]
  shared, made = plan._shared(steps, outs, kept={6})
  # out 2 (int32, as many bytes) takes out 0's memory (last read by step 1); out 3's kernel reads both memories;
  # out 4 (half the bytes), out 5 (another device) and the kept out 6 keep theirs; out 7 takes out 0's again
  assert [s[1] for s in shared] == [(-1, 0), (-2, -1), (-1, -2), (-4, -1, -2), (-5, -4), (-6, -4), (-7, -4), (-1, -7)]
  assert [m is None for m in made] == [False, False, True, False, False, False, False, True]
  assert plan._shared(steps[:2], outs[:2], kept={1}) == (steps[:2], outs[:2])   # nothing to share

def test_a_long_chain_replays_over_shared_memory_right():
  """A 1024-long sort's template plan (about 15 kernels, 11 of them over the int64 keys) runs over a few buffers, not
  one per kernel, and its replays on other inputs stay exact (values and the stable indices, against torch). (A graph
  plan shares nothing: its realized nodes may be held, and each becomes its own buffer.)"""
  with Count() as n:
    for _ in range(4):
      x = data(32, 1024)
      x[:, ::5] = x[:, 1:2]   # ties: the stable order decides
      t = buf(x)
      v, i = t.sort(-1)[0].realize().numpy(), t.sort(-1)[1].realize().numpy()   # each alone: a deferred template
      tv, ti = torch.from_numpy(x).sort(dim=-1, stable=True)
      np.testing.assert_array_equal(v, tv.numpy())
      np.testing.assert_array_equal(i, ti.numpy())
  assert n["hits"] >= 4
  long = [p for _, p in plan._plans.values() if p is not None and p.kernels >= 10]
  assert len(long) >= 2 and all(sum(m is not None for m in p.outs) < p.kernels - 4 for p in long)

def _count_rebuilds(monkeypatch) -> list:
  """Calls of the graph templates' rebuild (a deferred output's graph built, or an output built at once)."""
  from tinyplug.tensor_ops import template
  calls, real = [], template._rebuild
  def counted(*args, **kwargs):
    calls.append(args[0])
    return real(*args, **kwargs)
  monkeypatch.setattr(template, "_rebuild", counted)
  monkeypatch.setattr(template, "rebuild", counted)
  return calls

def _sort_data(rows: int, n: int) -> np.ndarray:
  x = data(rows, n)
  x[:, ::3] = x[:, 1:2]   # ties: the stable order decides
  x[::4, 2] = np.nan      # NaN sorts last (first when descending)
  return x

@pytest.mark.parametrize("rows", [4, 64])   # the sorted axis last, and first (rows as vector lanes)
def test_two_template_outputs_realized_together_run_their_plans(monkeypatch, rows):
  """`v.realize(i)` of sort's two outputs (two templates over one buffer) runs each output's plan in the steady
  state: no graph rebuilt, values and stable indices as torch's."""
  t = buf(_sort_data(rows, 96))
  for _ in range(3):
    v, i = t.sort(-1, descending=True)
    v.realize(i)
  calls = _count_rebuilds(monkeypatch)
  for _ in range(2):
    x = _sort_data(rows, 96)
    t = buf(x)
    with Count() as n:
      v, i = t.sort(-1, descending=True)
      v.realize(i)
    assert calls == [] and n["hits"] == 2 and n["fallbacks"] == 0
    assert graph.is_plain_buffer(v.uop) and graph.is_plain_buffer(i.uop)
    tv, ti = torch.from_numpy(x).sort(dim=-1, descending=True, stable=True)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())

def test_topk_outputs_read_by_numpy_run_their_plans(monkeypatch):
  """`v.numpy(); i.numpy()` of topk's outputs reads each from its plan (the tensors keep their deferred graphs, as
  numpy() keeps a graph): no graph rebuilt in the steady state, the values as torch's."""
  t = buf(_sort_data(8, 256))
  for _ in range(3):
    v, i = t.topk(5)
    v.numpy(), i.numpy()
  calls = _count_rebuilds(monkeypatch)
  x = np.nan_to_num(_sort_data(8, 256), nan=0.0)
  t = buf(x)
  with Count() as n:
    v, i = t.topk(5)
    got_v, got_i = v.numpy(), i.numpy()
  assert calls == [] and n["hits"] == 2
  tv, ti = torch.from_numpy(x).topk(5)
  np.testing.assert_array_equal(got_v, tv.numpy())
  np.testing.assert_array_equal(np.take_along_axis(x, got_i.astype(np.int64), -1), tv.numpy())
  np.testing.assert_array_equal(got_v, v.realize().numpy())   # (and then realized: the same values)

def test_numpy_of_a_deferred_output_keeps_its_gradient():
  """numpy() leaves a tensor's graph as it is (tinygrad's rule), a deferred template output's too: read from its plan,
  it still passes gradients to its inputs."""
  a, b = data(5, 6), data(6, 4)
  for _ in range(3): (Tensor(a, requires_grad=True).realize() @ buf(b)).realize()
  ta, tb = Tensor(a, requires_grad=True).realize(), buf(b)
  c = ta @ tb
  with Count() as n: np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-5, atol=1e-5)
  assert n["hits"] == 1
  c.sum().backward()
  np.testing.assert_allclose(ta.grad.numpy(), np.ones((5, 4), np.float32) @ b.T, rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("rows", [4, 64])   # the sorted axis last, and first (both graphs hold the transposed copy)
def test_a_deferred_sibling_reads_what_it_would_read_the_usual_way(rows):
  """`v.realize()` with sort's indices `i` (and another `v` of the same graph) still deferred over the same buffer: v
  runs its plan, the other v takes its buffer (the usual way points its graph at it), and i, whose graph does not hold
  v's output (the transposed copy both make is held by no tensor, so the usual way computes it again), stays deferred.
  The buffer written after v's realize: the values against REALIZE_PLANS=0."""
  got = {}
  x, new = _sort_data(rows, 96), _sort_data(rows, 96)
  for plans in (0, 1):
    with Context(REALIZE_PLANS=plans):
      t = buf(x)
      for _ in range(3):
        v, i = t.sort(-1)
        v.realize(), i.realize()
      v, i = t.sort(-1)
      w = t.sort(-1)[0]
      with Count() as n: v.realize()
      if plans:
        assert n["fallbacks"] == 0 and w._defer is None and w.uop is v.uop   # the same graph: its buffer
        assert n["hits"] == 1 and i._defer is not None   # i's graph does not hold v's output: left deferred
      t.assign(buf(new)).realize()
      got[plans] = v.numpy(), i.numpy(), w.numpy()
  for a, b in zip(got[0], got[1]): np.testing.assert_array_equal(a, b)
  tv, ti = torch.from_numpy(x).sort(dim=-1, stable=True)
  np.testing.assert_array_equal(got[1][0], tv.numpy())
  np.testing.assert_array_equal(got[1][1], torch.from_numpy(new).sort(dim=-1, stable=True)[1].numpy())

@pytest.mark.parametrize("first", ["values", "indices"])
def test_a_deferred_sibling_of_one_graph_takes_the_usual_way(first):
  """A bool sort's values are gathered by its indices inside the values' template: the values' graph holds the indices'
  output, so realizing either (the other still deferred) goes the usual way, which points the other at the buffer it
  made; written afterwards, the input changes what it changes with plans off."""
  got = {}
  x, new = RNG.random((6, 40)) > 0.5, RNG.random((6, 40)) > 0.5
  for plans in (0, 1):
    with Context(REALIZE_PLANS=plans):
      t = buf(x)
      for _ in range(3): t.sort(-1)[0].realize(), t.sort(-1)[1].realize()   # (each alone: both plans recorded)
      v, i = t.sort(-1)
      with Count() as n: (v if first == "values" else i).realize()
      if plans: assert n["fallbacks"] == 1 and n["hits"] == 0
      t.assign(buf(new)).realize()
      got[plans] = v.numpy(), i.numpy()
  for a, b in zip(got[0], got[1]): np.testing.assert_array_equal(a, b)
  tv, ti = torch.from_numpy(x).sort(dim=-1, stable=True)
  np.testing.assert_array_equal(got[1][0 if first == "values" else 1], (tv if first == "values" else ti).numpy())

@pytest.mark.parametrize("case", ["sum1", "sum_keepdim", "lse", "argmax", "two_inputs"])
def test_one_kernel_template_plans_run_without_the_generic_replay(monkeypatch, case):
  # a template plan of one kernel writing its one output from the inputs (a reduction over rows) replays through its
  # own runner: the generic _run (reference lambdas, lists) is not called, and values, shapes and counters stay right
  x, w = data(16, 10), data(10, 6)
  xt, wt = buf(x), buf(w)
  op, want = {"sum1": (lambda: xt.sum(1), x.sum(1)), "sum_keepdim": (lambda: xt.sum(1, keepdim=True), x.sum(1, keepdims=True)),
              "lse": (lambda: xt.logsumexp(1), np.log(np.exp(x).sum(1))),
              "argmax": (lambda: xt.argmax(1), x.argmax(1)),
              "two_inputs": (lambda: xt @ wt, x @ w)}[case]
  for _ in range(3): op().realize()   # the method, the template and its recorded plan
  generic = []
  real_run = plan._run
  monkeypatch.setattr(plan, "_run", lambda *a, **k: generic.append(1) or real_run(*a, **k))
  kernels = GlobalCounters.kernel_count
  with Count() as n:
    for _ in range(4):
      got = op().realize()
      close(got, want)
      assert got.shape == want.shape
  assert n["hits"] == 4 and n["fallbacks"] == 0
  assert GlobalCounters.kernel_count - kernels == 4
  assert not generic

def test_one_buffer_view_input_defers_without_looking_at_its_base(monkeypatch):
  # a template's one input whose signature sits on its node is a buffer (or a reshape of one): the deferral needs no
  # _buffer_views; a permuted view (no signature kept) still takes the look and the usual way, with the same values
  from tinyplug.tensor_ops import template
  x = data(8, 6)
  xt, xr = buf(x), buf(x.reshape(48)).reshape(8, 6)
  for _ in range(3): xt.sum(1).realize(), xr.max(1).realize(), xt.T.sum(1).realize()
  looked = []
  real = template._buffer_views
  monkeypatch.setattr(template, "_buffer_views", lambda inputs: looked.append(1) or real(inputs))
  with Count() as n:
    close(xt.sum(1).realize(), x.sum(1))
    close(xr.max(1).realize(), x.max(1))
  assert n["hits"] == 2 and not looked
  close(xt.T.sum(1).realize(), x.T.sum(1))
  assert looked
