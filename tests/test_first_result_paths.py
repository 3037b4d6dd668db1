"""A new small graph's first result (issue 20, session 21): a direct skeleton runner hands Tensor.realize the buffer its
target becomes, which the tensor takes without a becomes map only where nothing else could hold the node; a new
float32 constant's chain gets its skeleton as it is made, the numbers the walk would give it. Values against numpy."""
import numpy as np
import pytest
from tinyplug.tensor import Tensor
from tinyplug.engine import plan as P
from tinyplug.schedule import cache
from tinyplug.tensor_ops import graph
from tinyplug.uop import UOp, dtypes
from tinyplug.uop.ops import Ops

def _warm(x: Tensor) -> None:
  for k in (1.25, 2.25, 3.25, 4.25): ((x * k) + 1.0).exp().realize()   # baked, baked, parameter plan, shortcut

def _direct_shortcut_here(x: Tensor) -> bool:
  skel = P._skeleton_of(((x * 5.25) + 1.0).exp().uop, P._settings_token())
  return skel is not None and any(sc.direct is not None for sc in P._skeleton_plans.get(skel[1], ()))

def test_the_direct_runner_gives_the_buffer_and_realize_takes_it_without_a_map(becomes_calls):
  rng = np.random.default_rng(5)
  xs = rng.random(1024, dtype=np.float32)
  x = Tensor(xs).realize()
  _warm(x)
  if not _direct_shortcut_here(x): pytest.skip("plans do not apply here")
  becomes_calls.clear()
  hits = P.counters["skeleton_hits"]
  for k in [float(v) for v in rng.random(12) + 0.5]:
    got = ((x * k) + 1.0).exp().realize()
    assert got.uop.op is Ops.BUFFER   # the tensor holds the output buffer itself
    np.testing.assert_allclose(got.numpy(), np.exp(xs * np.float32(k) + np.float32(1.0)), rtol=2e-6)
  assert P.counters["skeleton_hits"] == hits + 12 and becomes_calls == []
  # the runner's answer is the buffer, not a map (realize_graph, the engine's way, still gets a map)
  out = P.realize_one_op(((x * 0.75) + 1.0).exp().uop)
  assert isinstance(out, UOp) and out.op is Ops.BUFFER

def test_a_live_intermediate_tensor_takes_the_becomes_map_and_stays_right(becomes_calls):
  rng = np.random.default_rng(6)
  xs = rng.random(1024, dtype=np.float32)
  x = Tensor(xs).realize()
  _warm(x)
  if not _direct_shortcut_here(x): pytest.skip("plans do not apply here")
  becomes_calls.clear()
  a = x * 1.75   # kept alive: made since the last realize, so the shortcut's buffer goes through the map
  c = (a + 1.0).exp().realize()
  assert len(becomes_calls) == 1 and c.uop.op is Ops.BUFFER and a.uop.op is not Ops.BUFFER
  np.testing.assert_allclose(c.numpy(), np.exp(xs * np.float32(1.75) + 1), rtol=2e-6)
  np.testing.assert_allclose(a.numpy(), xs * np.float32(1.75), rtol=1e-6)

def test_a_graph_over_the_realized_node_sees_its_buffer(becomes_calls):
  rng = np.random.default_rng(7)
  xs = rng.random(1024, dtype=np.float32)
  x = Tensor(xs).realize()
  _warm(x)
  if not _direct_shortcut_here(x): pytest.skip("plans do not apply here")
  c = ((x * 2.75) + 1.0).exp()
  d = c * 2.0   # made after c and holding c's node: not the fast case
  becomes_calls.clear()
  c.realize()
  assert len(becomes_calls) == 1 and c.uop.op is Ops.BUFFER
  assert d.uop.src[0] is c.uop   # d's graph now reads c's buffer
  want = np.exp(xs * np.float32(2.75) + 1)
  np.testing.assert_allclose(c.numpy(), want, rtol=2e-6)
  np.testing.assert_allclose(d.numpy(), want * 2, rtol=2e-6)

@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float64])
def test_other_float_dtypes_and_broadcasts_give_numpys_values(dtype):
  rng = np.random.default_rng(8)
  npdt = {dtypes.float16: np.float16, dtypes.float64: np.float64}[dtype]
  xs = rng.random((4, 256)).astype(npdt)
  x = Tensor(xs).realize()
  row = Tensor(rng.random(256).astype(npdt)).realize()
  for k in (1.5, 2.5, 3.5, 4.5, 5.5):
    got = ((x * k) + 1.0).exp().realize().numpy()
    np.testing.assert_allclose(got, np.exp(xs.astype(np.float64) * k + 1), rtol=1e-2 if dtype == dtypes.float16 else 1e-6)
    got = ((x * k) + row).exp().realize().numpy()   # a broadcast operand
    want = np.exp(xs.astype(np.float64) * k + row.numpy().astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-2 if dtype == dtypes.float16 else 1e-6)

def test_an_unrealized_input_is_computed_in_the_same_graph():
  rng = np.random.default_rng(9)
  xs = rng.random(1024, dtype=np.float32)
  x = Tensor(xs).realize()
  for k in (1.5, 2.5, 3.5, 4.5, 5.5, 6.5):
    y = x + 0.5   # never realized: part of each new graph
    np.testing.assert_allclose(((y * k) + 1.0).exp().realize().numpy(), np.exp((xs + 0.5) * np.float32(k) + 1), rtol=2e-6)
    assert y.uop.op is Ops.ADD

def test_a_new_float32_constant_chain_has_the_skeleton_the_walk_would_give():
  for shape in ((1024,), (3, 5), (1,)):
    made = graph.const(12345.678, dtypes.float32, "CPU", shape)   # a value no test makes
    assert made._cache.get("skeleton") is not None   # given as it was made
    chain = [made] + ([made.src[0]] if made.op is Ops.EXPAND else [])
    const = chain[-1].src[0]
    assert const.op is Ops.CONST and const._cache["skeleton"] == (const._cache["skeleton"][0], (), True)
    # the same chain of another value built with the plain constructors: its skeleton worked out by the walk
    by_hand = UOp(Ops.CONST, dtypes.float32, (const.src[0],), 87654.321).reshape((1,) * len(shape))
    if made.op is Ops.EXPAND: by_hand = UOp(Ops.EXPAND, dtypes.float32, (by_hand,), shape)
    assert by_hand._cache is None or "skeleton" not in by_hand._cache
    walked = cache.skeleton(by_hand)
    assert walked is not None and walked[0] == cache.skeleton(made)[0]
    assert walked[1] == (by_hand.base,) and cache.skeleton(made)[1] == (const,)

def test_other_constants_are_left_to_the_walk():
  for value, dtype in ((2.5, dtypes.float64), (3, dtypes.int32), (1.5, dtypes.float16)):
    made = graph.const(value, dtype, "CPU", (7,))
    assert made._cache.get("skeleton") is None   # not a leaf the skeleton leaves out: worked out when asked
    assert cache.skeleton(made) is not None

def test_a_parameter_plans_shortcut_keeps_its_keys_hash():
  rng = np.random.default_rng(10)
  x = Tensor(rng.random(512, dtype=np.float32)).realize()
  _warm(x)
  skel = P._skeleton_of(((x * 5.25) + 1.0).exp().uop, P._settings_token())
  if skel is None or not (shortcuts := [sc for sc in P._skeleton_plans.get(skel[1], ()) if sc.param]):
    pytest.skip("plans do not apply here")
  assert all(type(sc.key) is cache.KeptKey and sc.cache.get(sc.key) is sc.entry for sc in shortcuts)

@pytest.fixture
def shallow_calls(monkeypatch):
  """How many times realize_one_op built a shallow key."""
  calls = []
  real = P._schedule_cache.shallow_key
  monkeypatch.setattr(P._schedule_cache, "shallow_key", lambda x: (calls.append(x), real(x))[1])
  return calls

def test_the_tiny_op_finds_its_plan_by_the_flat_key(shallow_calls):
  t = Tensor(np.zeros(3, np.float32)).realize()
  for _ in range(3): t = (t + 1.0).realize()
  if not P._flat_one_op_plans: pytest.skip("plans do not apply here")
  shallow_calls.clear()
  hits = P.counters["graph_hits"]
  for _ in range(50): t = (t + 1.0).realize()
  assert shallow_calls == [] and P.counters["graph_hits"] == hits + 50   # no shallow key built: the flat key found it
  np.testing.assert_array_equal(t.numpy(), np.full(3, 53.0, np.float32))
  t = (t * 0.5).realize()   # another op, another constant: its own entry, values right
  np.testing.assert_array_equal(t.numpy(), np.full(3, 26.5, np.float32))

@pytest.mark.parametrize("case", ["reversed", "int", "broadcast", "unrealized", "view", "two buffers"])
def test_other_one_op_graphs_take_the_shallow_key_and_give_numpys_values(case, shallow_calls):
  xs = np.arange(6, dtype=np.float32)
  x = Tensor(xs).realize()
  for _ in range(5):   # recorded the usual way, then asked again
    if case == "reversed": got, want = (2.0 - x), 2.0 - xs   # the constant first
    elif case == "int":
      xi = Tensor(np.arange(6, dtype=np.int32)).realize()
      got, want = xi + 3, np.arange(6, dtype=np.int32) + 3   # an int constant into an int buffer: flat, its own dtypes
    elif case == "broadcast":
      row = Tensor(np.float32([10.0])).realize()
      got, want = x + row, xs + 10   # a broadcast buffer: no constant
    elif case == "unrealized": got, want = (x * 2.0) + 1.0, xs * 2 + 1   # the operand computes something
    elif case == "view": got, want = x.reshape(2, 3) + 1.0, (xs + 1).reshape(2, 3)   # a reshaped buffer
    else: got, want = x + x, xs + xs
    shallow_calls.clear()
    np.testing.assert_array_equal(got.realize().numpy(), want)
  flat = case == "int"
  assert (shallow_calls == []) == flat, case
