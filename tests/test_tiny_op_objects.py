"""Fewer Python objects per realized output (issue 20, session 19): the Buffer behind a BUFFER uop rides in the node
(NodeField) and dies with it, the CPU backend's unpacked launchers, `x + c` built without alu2's checks, float
constants keyed by their value. Values against numpy; buffers are freed by reference counts alone (no collector)."""
import gc, weakref
import numpy as np
import pytest
from tinyplug.tensor import Tensor
from tinyplug.device import OUTPUT_POOL, buffer_of, has_buffer, handle_of
from tinyplug.helpers import GlobalCounters
from tinyplug.tensor_ops import graph
from tinyplug.uop import NodeField, UOp, UOpMap, dtypes
from tinyplug.uop.ops import Ops, float_const_node

def test_a_node_field_value_dies_with_its_node_without_the_collector():
  class Box: pass
  f: NodeField[Box] = NodeField("test box")
  node = UOp.new_buffer("CPU", 3, dtypes.float32)
  box = Box()
  f[node] = box
  assert f.get(node) is box and f[node] is box and node in f
  other = UOp.new_buffer("CPU", 3, dtypes.float32)
  assert f.get(other, "none") == "none" and other not in f
  with pytest.raises(KeyError): f[other]
  gone = weakref.ref(box)
  del box
  gc.disable()
  try:
    del node
    assert gone() is None   # freed with the node, by its count alone
  finally: gc.enable()
  f[other] = 1
  assert f.pop(other) == 1 and other not in f and f.pop(other, None) is None
  assert other.shape == (3,)   # IR facts in the same cache are left as they are

def test_two_fields_and_a_uop_map_keep_their_values_apart():
  a, b = NodeField("a"), NodeField("b")
  m: UOpMap[str] = UOpMap()
  node = UOp.new_buffer("CPU", 2, dtypes.int32)
  a[node], b[node], m[node] = "a", "b", "m"
  assert (a.get(node), b.get(node), m.get(node)) == ("a", "b", "m")

def test_tiny_op_outputs_free_their_memory_and_buffers_without_the_collector():
  t = Tensor(np.zeros(1, np.float32)).realize()
  for _ in range(5): t = (t + 1.0).realize()
  gc.collect()   # (earlier tests' cyclic garbage freed now, not by a collection after mem_used is read)
  gc.disable()
  try:
    mem = GlobalCounters.mem_used
    olds = []
    for i in range(200):
      prev = t
      t = (t + 1.0).realize()
      assert t.uop.op is Ops.BUFFER and has_buffer(t.uop)
      olds.append(weakref.ref(buffer_of(prev.uop)))
      del prev
      # an output's Buffer goes with its node once the plan lets it go (its last OUTPUT_POOL outputs are kept for
      # the next calls, but never one a weak reference points at)
      if len(olds) > OUTPUT_POOL: assert olds[-OUTPUT_POOL - 1]() is None
    assert GlobalCounters.mem_used == mem   # the plan's outputs alive, as before the loop
  finally: gc.enable()
  np.testing.assert_array_equal(t.numpy(), np.array([205.0], np.float32))

def test_a_buffer_kept_by_a_graph_stays_and_is_read_right():
  x = Tensor(np.arange(4, dtype=np.float32)).realize()
  kept = x + 0.0
  ys = [(x * float(k)).realize() for k in range(1, 6)]
  del x
  gc.collect()
  np.testing.assert_allclose(kept.numpy(), np.arange(4, dtype=np.float32))
  for k, y in enumerate(ys, 1): np.testing.assert_allclose(y.numpy(), np.arange(4, dtype=np.float32) * k)

@pytest.mark.parametrize("n", [1, 2, 3])
def test_unpacked_launchers_compute_the_kernels_values(n):
  rng = np.random.default_rng(n)
  arrays = [rng.random(64, dtype=np.float32) for _ in range(n)]
  ts = [Tensor(a).realize() for a in arrays]
  for step in range(3):   # the first realize records the plan, the later ones launch from it
    if n == 1: got, want = (ts[0] * 2.0).realize(), arrays[0] * 2
    elif n == 2: got, want = (ts[0] + ts[1]).realize(), arrays[0] + arrays[1]
    else: got, want = (ts[0] * ts[1] + ts[2]).realize(), arrays[0] * arrays[1] + arrays[2]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)

def test_a_launcher_given_the_wrong_arguments_says_so():
  from tinyplug.engine import plan as P
  from tinyplug.schedule import cache as C
  x = Tensor(np.ones(8, np.float32)).realize()
  for _ in range(3): (x + 1.0).realize()
  u = (x + 1.0).uop
  hit = P._one_op_plans.get((C.shallow_key(u), P._settings_token()))
  if hit is None: pytest.skip("plans do not apply under these settings")
  launch, h = hit[1].steps[0][0], handle_of(x.uop)
  with pytest.raises(ValueError, match="takes 2 buffers and 0 values, got 1 and 0"): launch([h], ())
  with pytest.raises(ValueError, match="got 2 and 1"): launch([h, h], (3,))
  out = Tensor(np.zeros(8, np.float32)).realize()
  launch([handle_of(out.uop), h], ())
  np.testing.assert_array_equal(out.numpy(), np.full(8, 2.0, np.float32))

def test_new_constants_compute_and_are_keyed_by_value():
  rng = np.random.default_rng(7)
  xs = rng.random(1024, dtype=np.float32)
  small = Tensor(xs).realize()
  for k in [float(rng.random()) + 1.0 for _ in range(25)] + [0.0, -0.0, 1e-30, -2.5, float("inf")]:
    got = ((small * k) + 1.0).exp().realize().numpy()
    with np.errstate(over="ignore", invalid="ignore"):
      want = np.exp(xs * np.float32(k) + np.float32(1.0))
    np.testing.assert_allclose(got, want, rtol=2e-6)
  dev = graph.device_uop("CPU")
  for v in (0.5, 1e-300, -3.25, float("inf")):
    assert float_const_node(dtypes.float32, dev, v) is UOp(Ops.CONST, dtypes.float32, (dev,), v)
  zero, negzero = float_const_node(dtypes.float32, dev, 0.0), float_const_node(dtypes.float32, dev, -0.0)
  assert zero is not negzero and zero is UOp(Ops.CONST, dtypes.float32, (dev,), 0.0)
  assert float_const_node(dtypes.float32, dev, float("nan")) is UOp(Ops.CONST, dtypes.float32, (dev,), float("nan"))
  # a float arg never meets an int's: 1.0 and 1 are different nodes
  assert UOp(Ops.CONST, dtypes.float32, (dev,), 1.0) is not UOp(Ops.CONST, dtypes.float32, (dev,), 1)

def test_x_plus_a_constant_builds_the_node_alu2_builds():
  x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).realize()
  for op, y in ((Ops.ADD, (x + 2.0)), (Ops.MUL, (x * 3.0)), (Ops.CMPLT, (x < 2.5))):
    u = y.uop
    c = graph.const(2.0 if op is Ops.ADD else 3.0 if op is Ops.MUL else 2.5, dtypes.float32, "CPU", (2, 3))
    assert u is graph.alu2(op, x.uop, c) and u.shape == (2, 3) and u.device == "CPU"
  rev = x.add(2.0, reverse=True).uop   # reversed: the constant first
  assert rev.src[1] is x.uop and rev is graph.alu2(Ops.ADD, graph.const(2.0, dtypes.float32, "CPU", (2, 3)), x.uop)
  np.testing.assert_array_equal((2.0 - x).numpy(), 2 - np.arange(6, dtype=np.float32).reshape(2, 3))
  np.testing.assert_array_equal((x < 2.5).numpy(), np.arange(6).reshape(2, 3) < 2.5)
  np.testing.assert_allclose(x.exp().numpy(), np.exp(np.arange(6, dtype=np.float32).reshape(2, 3)), rtol=1e-6)
  assert x.exp().uop is Tensor(x.uop).exp().uop   # the same nodes however it is reached

def test_a_new_constants_graph_runs_from_the_direct_shortcut_with_the_right_values():
  from tinyplug.engine import plan as P
  rng = np.random.default_rng(11)
  xs, ys = rng.random(256, dtype=np.float32), rng.random(256, dtype=np.float32)
  x, y = Tensor(xs).realize(), Tensor(ys).realize()
  for k in (1.5, 2.5, 3.5): ((x * k) + 1.0).exp().realize()
  u = ((x * 4.5) + 1.0).exp().uop
  skel = P._skeleton_of(u, P._settings_token())
  if skel is None or (shortcuts := P._skeleton_plans.get(skel[1])) is None: pytest.skip("plans do not apply here")
  assert any(sc.direct is not None for sc in shortcuts)
  hits = P.counters["skeleton_hits"]
  for k in [float(v) for v in rng.random(10) + 0.5]:
    got = ((x * k) + 1.0).exp().realize()
    np.testing.assert_allclose(got.numpy(), np.exp(xs * np.float32(k) + np.float32(1.0)), rtol=2e-6)
  assert P.counters["skeleton_hits"] >= hits + 10
  # a constant the kernel holds as it is (the 1.0) changed, another buffer: not the shortcut's plan, still right
  np.testing.assert_allclose(((x * 2.0) + 3.0).exp().realize().numpy(), np.exp(xs * 2 + 3), rtol=2e-6)
  np.testing.assert_allclose(((y * 2.0) + 1.0).exp().realize().numpy(), np.exp(ys * 2 + 1), rtol=2e-6)
  # two buffers, no value: a graph plan's direct shortcut over new buffers
  for _ in range(4):
    z = rng.random(256, dtype=np.float32)
    np.testing.assert_allclose(((Tensor(z).realize() * y) + 0.5).sqrt().realize().numpy(), np.sqrt(z * ys + 0.5),
                               rtol=2e-6)
