"""Schedule templates (tinyplug/schedule/cache.py): a graph of a structure seen before reuses its schedule, and the
results are the same as scheduling from scratch."""
import gc, weakref
import numpy as np
import pytest
from tinyplug import Tensor, TinyJit, events
from tinyplug.engine.realize import buffer_of
from tinyplug.uop import Ops
import tinyplug.schedule as sched

@pytest.fixture
def schedules(monkeypatch):
  """Counts how many times the real scheduler runs (no schedule read from disk: an earlier test's would serve)."""
  from tinyplug.schedule import template_cache
  monkeypatch.setattr(template_cache, "load", lambda key: None)
  calls = []
  real = sched._schedule_breaking_cycles
  def counting(targets):
    calls.append(targets)
    return real(targets)
  monkeypatch.setattr(sched, "_schedule_breaking_cycles", counting)
  return calls

def arr(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def test_repeated_structure_schedules_once(device, schedules):
  t = Tensor(np.zeros(3, np.float32)).realize()
  t = (t + 1.5).realize()
  n = len(schedules)
  for _ in range(5): t = (t + 1.5).realize()
  assert len(schedules) == n
  np.testing.assert_allclose(t.numpy(), np.full(3, 9.0))

def test_other_constants_are_other_graphs(device, schedules):
  x = Tensor(arr(4)).realize()
  a = (x * 2.0).numpy()
  n = len(schedules)
  b = (x * 3.0).numpy()
  assert len(schedules) > n
  np.testing.assert_allclose(a, x.numpy() * 2.0)
  np.testing.assert_allclose(b, x.numpy() * 3.0)

def test_negative_zero_is_not_zero(device):
  x = Tensor(np.ones(2, np.float32)).realize()
  assert (x * 0.0).reciprocal().numpy().tolist() == [np.inf, np.inf]
  assert (x * -0.0).reciprocal().numpy().tolist() == [-np.inf, -np.inf]

def test_same_buffer_twice_is_another_structure(device):
  a, b = Tensor(arr(5, seed=1)).realize(), Tensor(arr(5, seed=2)).realize()
  np.testing.assert_allclose((a * b).numpy(), a.numpy() * b.numpy())
  np.testing.assert_allclose((a * a).numpy(), a.numpy() ** 2)
  np.testing.assert_allclose((b * a).numpy(), a.numpy() * b.numpy())

def test_views_reductions_and_several_outputs(device, schedules):
  def step(x: Tensor) -> tuple[Tensor, Tensor]:
    v = x.permute(1, 0)[1:, :].pad(((0, 1), (1, 0)))
    return (v - v.max(1, keepdim=True)).exp(), v.sum(0)
  for seed in range(3):
    xn = arr(4, 3, seed=seed)
    e, s = step(Tensor(xn))
    e.realize(s)
    v = np.pad(xn.T[1:, :], ((0, 1), (1, 0)))
    np.testing.assert_allclose(e.numpy(), np.exp(v - v.max(1, keepdims=True)), rtol=1e-6)
    np.testing.assert_allclose(s.numpy(), v.sum(0), rtol=1e-6)
    if seed == 0: n = len(schedules)
  assert len(schedules) == n   # the second and third inputs: the same graph structure over other buffers

def test_assign_in_a_loop(device, schedules):
  w = Tensor(np.zeros((2, 3), np.float32)).realize()
  g = Tensor(np.ones((2, 3), np.float32)).realize()
  for i in range(4):
    w.assign(w - g * 0.5).realize()
    if i == 0: n = len(schedules)
  assert len(schedules) == n
  np.testing.assert_allclose(w.numpy(), np.full((2, 3), -2.0))

def test_assign_to_a_view_keeps_the_rest(device, schedules):
  # Tensor.assign on a slice is not supported yet: build the ASSIGN onto a SHRINK view directly
  from tinyplug.engine.realize import realize
  from tinyplug.uop import UOp
  for k in range(3):
    base = Tensor(np.arange(6, dtype=np.float32)).realize()
    val = Tensor(np.full(2, 10.0 + k, np.float32)).realize()
    view = UOp(Ops.SHRINK, base.dtype, (base.uop,), ((2, 4),))
    realize([UOp(Ops.ASSIGN, base.dtype, (view, val.uop))])
    np.testing.assert_allclose(base.numpy(), [0, 1, 10 + k, 10 + k, 4, 5])
    if k == 0: n = len(schedules)
  assert len(schedules) == n

def test_copies_between_devices():
  from tinyplug.device import Device
  if "CPU" not in Device.available(): pytest.skip("needs CPU and PYTHON")
  for k in range(3):
    x = Tensor(arr(4, seed=k), device="PYTHON")
    y = (x.to("CPU") + 1).to("PYTHON")
    np.testing.assert_allclose(y.numpy(), arr(4, seed=k) + 1, rtol=1e-6)

def test_templates_keep_no_buffers_alive(device):
  from tinyplug.helpers import Context
  with Context(LRU=0):   # (no realize plan keeps its last outputs for reuse either: device.OUTPUT_POOL)
    x = Tensor(arr(16)).realize()
    (x + 2.0).realize()
    y = (x + 2.0).realize()            # the second one comes from the template
    ref = weakref.ref(buffer_of(y.uop))
    del y
    gc.collect()
    assert ref() is None

def test_a_listener_sees_every_schedule(device):
  x = Tensor(arr(3)).realize()
  (x * 4.0 + 1.0).realize()          # the template exists before the listener subscribes
  seen, rewrites = [], []
  events.subscribe("schedule", seen.append, owner="test")
  events.subscribe("rewrite", rewrites.append, owner="test")
  try:
    out = (x * 4.0 + 1.0).realize()
    (x * 5.0 + 1.0).realize()        # a new graph: its rewrites are shown
  finally:
    events.unsubscribe("schedule", seen.append)
    events.unsubscribe("rewrite", rewrites.append)
  assert len(seen) == 2 and all(it.ast.op is Ops.SINK for e in seen for it in e["items"])
  assert seen[0]["sink"].src[0].op is Ops.ADD and "schedule" in seen[0]["scope"]
  assert rewrites
  np.testing.assert_allclose(out.numpy(), x.numpy() * 4.0 + 1.0, rtol=1e-6)

def test_jit_captures_a_cached_schedule(device):
  @TinyJit
  def f(a: Tensor) -> Tensor: return (a * 2.0 + 1.0).sum(0)
  (Tensor(arr(3, 2)) * 2.0 + 1.0).sum(0).realize()   # the same structure, scheduled before the jit sees it
  for seed in range(4):
    xn = arr(3, 2, seed=seed)
    np.testing.assert_allclose(f(Tensor(xn)).numpy(), (xn * 2 + 1).sum(0), rtol=1e-5)

def test_kernelize_is_not_templated(device):
  x = Tensor(arr(4)).realize()
  for _ in range(2):
    y = (x + 1.0).kernelize()
    assert any(u.op is Ops.KERNEL for u in y.uop.toposort())
    z = (y * 2.0).realize()
    np.testing.assert_allclose(z.numpy(), (x.numpy() + 1) * 2, rtol=1e-6)

def test_near_identical_graphs_never_share_a_schedule(device):
  """Graphs that differ in one detail (op, operand order, which buffer, constant value or type, shape, view, dtype)
  each get their own schedule; run twice over fresh buffers, the second time from the templates."""
  x0, y0 = arr(6, seed=3), arr(6, seed=4)
  cases = [
    (lambda x, y: x + y, lambda x, y: x + y), (lambda x, y: x * y, lambda x, y: x * y),
    (lambda x, y: x - y, lambda x, y: x - y), (lambda x, y: y - x, lambda x, y: y - x),
    (lambda x, y: x - x * y, lambda x, y: x - x * y), (lambda x, y: y - x * y, lambda x, y: y - x * y),
    (lambda x, y: x + 1, lambda x, y: x + 1), (lambda x, y: x + 1.0, lambda x, y: x + 1.0),
    (lambda x, y: x + 2.0, lambda x, y: x + 2.0), (lambda x, y: x + True, lambda x, y: x + 1.0),
    (lambda x, y: x[1:] + y[:-1], lambda x, y: x[1:] + y[:-1]),
    (lambda x, y: x[:-1] + y[1:], lambda x, y: x[:-1] + y[1:]),
    (lambda x, y: x.flip(0) * y, lambda x, y: x[::-1] * y),
    (lambda x, y: x.reshape(2, 3).sum(0), lambda x, y: x.reshape(2, 3).sum(0)),
    (lambda x, y: x.reshape(2, 3).sum(1), lambda x, y: x.reshape(2, 3).sum(1)),
    (lambda x, y: x.reshape(2, 3).max(1), lambda x, y: x.reshape(2, 3).max(1)),
    (lambda x, y: (x > y).where(x, y), lambda x, y: np.where(x > y, x, y)),
    (lambda x, y: (x < y).where(x, y), lambda x, y: np.where(x < y, x, y)),
    (lambda x, y: x.cast("int32") + 0, lambda x, y: x.astype(np.int32)),
  ]
  for rnd in range(2):
    for i, (ours, ref) in enumerate(cases):
      x, y = Tensor(x0 + rnd).realize(), Tensor(y0 - rnd).realize()   # fresh buffers each time
      np.testing.assert_allclose(ours(x, y).numpy(), ref(x0 + rnd, y0 - rnd), rtol=1e-6, atol=1e-6,
                                 err_msg=f"case {i}, round {rnd}")

def test_structure_walk_follows_toposort_order():
  """structure() walks the graph itself (one pass), or for one op over buffers and constants finds it by a shallow
  key; either way its node order is UOp.toposort's, which templates rely on, and equal structures get equal keys."""
  from tinyplug.schedule.cache import structure
  from tinyplug.uop.dtype import dtypes
  from tinyplug.uop.ops import UOp
  def graphs(a, b, c):
    return [a + 1.0, a * 2.0, 2.0 - a, a + a, a + c, a + a.reshape(16).reshape(4, 4), a * c,
            a.reshape(16) + c.reshape(16), (a * a + b).sum(0), ((a + b) * (a - b)).relu().exp(),
            a[1:3].pad(((1, 1), (0, 0))) + 2, a @ a.T, a.contiguous(), (a > 0).where(a, 0.0), (a > 0).where(c, a)]
  keys = None
  for seed in range(3):   # fresh buffers each round: the second and third find the first's shallow keys
    a, c = Tensor(arr(4, 4, seed=5 + seed)).realize(), Tensor(arr(4, 4, seed=9 + seed)).realize()
    b = Tensor(arr(4, seed=6))
    got = []
    for t in graphs(a, b, c):
      sink = UOp(Ops.SINK, dtypes.void, (t.uop,))
      key, nodes = structure(sink)
      assert nodes == list(sink.toposort()) and len(key) == len(nodes)
      got.append(key)
    assert len(set(got)) == len(got)   # other graphs, other keys
    if keys is not None: assert got == keys
    keys = got
  assert structure(UOp(Ops.SINK, dtypes.void, (UOp(Ops.KERNEL, dtypes.void, (), None),))) is None

def test_a_kept_key_is_the_plain_tuple_with_its_hash_kept():
  import pickle
  from tinyplug.schedule.cache import KeptKey, kept_key
  plain = ((1, 2, ("f", (1.5).hex()), ()), (3, 4, "CPU", (0,)))
  kept = kept_key(plain)
  assert type(kept) is KeptKey and kept_key(kept) is kept
  assert kept == plain and hash(kept) == hash(plain) and {plain: 1}[kept] == 1 and {kept: 2}[plain] == 2
  back = pickle.loads(pickle.dumps(kept))   # (another process hashes strings otherwise: a plain tuple there)
  assert type(back) is tuple and back == plain
