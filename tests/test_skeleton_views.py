"""A small graph whose result is a 2-D tensor (a RESHAPE of its new buffer) realized again (issue 20, session 30,
skel14): its skeleton's direct runner, or the one-op runner, hands Tensor.realize the view over the new output, which
the tensor takes without a becomes map where nothing else could hold the node; a CONTIGUOUS asks realize_one_op
first. Values against numpy; every change of what the plan was made for still gives the right values."""
import gc
import numpy as np
import pytest
from tinyplug import Context
from tinyplug.tensor import Tensor
from tinyplug.device import OUTPUT_POOL
from tinyplug.engine import plan as P, realize as engine
from tinyplug.helpers import GlobalCounters
from tinyplug.uop import UOp, UOpMap
from tinyplug.uop.ops import Ops

CASES = {
  "add then mul": (lambda x: (x + 1.0) * 2.0, lambda a: (a + 1) * 2),
  "pad contiguous": (lambda x: x.pad((1, 1, 1, 1)).contiguous(), lambda a: np.pad(a, 1)),
  "transpose contiguous": (lambda x: x.T.contiguous(), lambda a: np.ascontiguousarray(a.T)),
  "exp chain": (lambda x: (x * 1.5 + 1.0).exp(), lambda a: np.exp(a * np.float32(1.5) + np.float32(1.0))),
  "one op": (lambda x: x + 1.0, lambda a: a + 1),
}

def _warm(f, x: Tensor) -> None:
  for _ in range(4): f(x).realize()

def _served(f, x: Tensor) -> bool:
  """False where plans do not apply (DEBUG, REALIZE_PLANS=0); else realize_one_op must answer this graph with a UOp
  (a runner's view), not a map."""
  if not engine.plans_apply(): return False
  assert isinstance(P.realize_one_op(f(x).uop), UOp)
  return True

@pytest.mark.parametrize("case", list(CASES))
def test_a_2d_result_is_taken_as_a_view_without_a_map(case, becomes_calls):
  f, want = CASES[case]
  rng = np.random.default_rng(11)
  xs = rng.random((4, 4), dtype=np.float32)
  x = Tensor(xs).realize()
  _warm(f, x)
  if not _served(f, x): pytest.skip("plans do not apply here")
  becomes_calls.clear()
  kernels = GlobalCounters.kernel_count
  for _ in range(20):
    got = f(x).realize()
    assert got.uop.op is Ops.RESHAPE and got.uop.src[0].op is Ops.BUFFER   # the tensor holds the view itself
    np.testing.assert_allclose(got.numpy(), want(xs), rtol=2e-6)
  assert becomes_calls == [] and GlobalCounters.kernel_count == kernels + 20

@pytest.mark.parametrize("case", list(CASES))
def test_other_buffers_shapes_and_dtypes_give_their_own_values(case):
  f, want = CASES[case]
  rng = np.random.default_rng(12)
  x = Tensor(rng.random((4, 4), dtype=np.float32)).realize()
  _warm(f, x)
  for shape, dtype in (((4, 4), np.float32), ((4, 4), np.float32), ((3, 5), np.float32), ((4, 4), np.float64),
                       ((2, 8), np.float32)):
    xs = rng.random(shape).astype(dtype)
    for _ in range(3):   # recorded, then from the plan
      got = f(Tensor(xs).realize()).realize().numpy()
      assert got.dtype == dtype and got.shape == want(xs).shape
      np.testing.assert_allclose(got, want(xs), rtol=2e-6 if dtype == np.float32 else 1e-12)

def test_a_view_of_a_buffer_as_input_is_not_taken_for_the_buffer():
  f, want = CASES["transpose contiguous"]
  xs = np.arange(16, dtype=np.float32).reshape(4, 4)
  x = Tensor(xs).realize()
  _warm(f, x)
  big = Tensor(np.arange(32, dtype=np.float32).reshape(4, 8)).realize()
  for _ in range(3):   # a strided view of another buffer: another graph
    sub = big[:, 2:6]
    np.testing.assert_array_equal(f(sub).realize().numpy(), np.ascontiguousarray(np.arange(32, dtype=np.float32).reshape(4, 8)[:, 2:6].T))
  np.testing.assert_array_equal(f(x).realize().numpy(), want(xs))

def test_a_mutated_input_is_read_afresh():
  f, want = CASES["pad contiguous"]
  xs = np.arange(16, dtype=np.float32).reshape(4, 4)
  x = Tensor(xs).realize()
  _warm(f, x)
  for k in range(3):
    x.assign(Tensor(xs + k)).realize()
    np.testing.assert_array_equal(f(x).realize().numpy(), want(xs + k))

def test_a_live_intermediate_takes_the_map_and_stays_right(becomes_calls):
  f, want = CASES["pad contiguous"]
  xs = np.arange(16, dtype=np.float32).reshape(4, 4)
  x = Tensor(xs).realize()
  _warm(f, x)
  if not _served(f, x): pytest.skip("plans do not apply here")
  becomes_calls.clear()
  a = x.pad((1, 1, 1, 1))   # kept alive, made since the last realize: the view goes through the map
  c = a.contiguous().realize()
  assert len(becomes_calls) == 1 and c.uop.op is Ops.RESHAPE and a.uop.op is Ops.PAD
  np.testing.assert_array_equal(c.numpy(), want(xs))
  np.testing.assert_array_equal(a.numpy(), want(xs))

def test_a_graph_over_the_realized_node_sees_its_view(becomes_calls):
  f, want = CASES["add then mul"]
  xs = np.arange(16, dtype=np.float32).reshape(4, 4)
  x = Tensor(xs).realize()
  _warm(f, x)
  if not _served(f, x): pytest.skip("plans do not apply here")
  c = f(x)
  d = c.sum(1)   # made after c, over c's node
  becomes_calls.clear()
  c.realize()
  assert len(becomes_calls) == 1 and c.uop.op is Ops.RESHAPE
  np.testing.assert_array_equal(c.numpy(), want(xs))
  np.testing.assert_array_equal(d.numpy(), want(xs).sum(1))

def test_results_kept_alive_are_not_handed_out_again():
  f, want = CASES["exp chain"]
  rng = np.random.default_rng(13)
  xs = rng.random((4, 4), dtype=np.float32)
  x = Tensor(xs).realize()
  kept = [f(x).realize() for _ in range(8)]   # every result held: the output pool may reuse none of them
  kept[0].numpy()
  x2s = rng.random((4, 4), dtype=np.float32)
  kept.append(f(Tensor(x2s).realize()).realize())
  for t in kept[:-1]: np.testing.assert_allclose(t.numpy(), want(xs), rtol=2e-6)
  np.testing.assert_allclose(kept[-1].numpy(), want(x2s), rtol=2e-6)
  assert len({id(t.uop.src[0]) for t in kept}) == len(kept)

def test_a_contiguous_of_a_deviceless_constant_still_realizes():
  for _ in range(3):
    got = Tensor.full((4, 4), 2.5).contiguous().realize()
    np.testing.assert_array_equal(got.numpy(), np.full((4, 4), 2.5, np.float32))

def test_gradients_flow_through_a_realized_contiguous():
  xs = np.arange(16, dtype=np.float32).reshape(4, 4)
  for _ in range(3):
    x = Tensor(xs, requires_grad=True)
    y = (x.pad((1, 1, 1, 1)).contiguous() * 2.0).sum()
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((4, 4), 2.0, np.float32))

# ---------------- the view pooled with its buffer (device.output_maker(view=...)) ----------------

def _uniques_made(fn, n: int) -> int:
  """UNIQUE numbers taken by n calls of fn (each new BUFFER node takes one; each probe one more)."""
  start = UOp.unique().arg
  for _ in range(n): fn()
  return UOp.unique().arg - start - 1

def test_a_repeated_2d_graph_makes_no_output_nodes_and_hands_out_the_view_before_last():
  f, want = CASES["add then mul"]
  xs = np.arange(16, dtype=np.float32).reshape(4, 4)
  x = Tensor(xs).realize()
  _warm(f, x)
  if not _served(f, x): pytest.skip("plans do not apply here")
  views, got = set(), []
  def step():
    y = f(x).realize()
    views.add(y.uop.seq)   # (each node made takes a new number: an id may be reused once a node is freed)
    got.append(y.numpy())
  assert _uniques_made(step, 40) == 0
  assert len(views) == OUTPUT_POOL
  for g in got: np.testing.assert_array_equal(g, want(xs))

@pytest.mark.parametrize("hold", ["tensor", "view node", "buffer node", "graph over it", "side table"])
def test_a_view_reachable_another_way_is_not_handed_out_again(hold):
  f, want = CASES["transpose contiguous"]
  xs = np.arange(16, dtype=np.float32).reshape(4, 4)
  x = Tensor(xs).realize()
  _warm(f, x)
  if not _served(f, x): pytest.skip("plans do not apply here")
  gc.disable()
  try:
    out = f(x).realize()
    view, number, seq = out.uop, out.uop.src[0].src[0].arg, out.uop.seq
    held = {"tensor": lambda: out, "view node": lambda: view, "buffer node": lambda: view.src[0],
            "graph over it": lambda: out * 3.0, "side table": lambda: _side_table(view)}[hold]()
    if hold == "graph over it": held.numpy()   # (its graph linked: a weak reference to the view)
    del out, view
    again = [f(x).realize() for _ in range(2 * OUTPUT_POOL)]
    assert seq not in [a.uop.seq for a in again]   # the view is not handed out again
    # nor its buffer (a side table's weak reference alone keeps the view, not the buffer, from being handed out: where
    # nothing pools the view, the view dies and its buffer may be)
    if hold != "side table": assert number not in [a.uop.src[0].src[0].arg for a in again]
  finally: gc.enable()
  for a in again: np.testing.assert_array_equal(a.numpy(), want(xs))
  if hold == "graph over it": np.testing.assert_array_equal(held.numpy(), want(xs) * 3)

def _side_table(node: UOp) -> UOpMap:
  m: UOpMap[str] = UOpMap()   # (a layer's facts about the node: a weak reference with a callback)
  m[node] = "its last use"
  return m

def test_a_view_handed_out_again_has_no_facts_from_before():
  f, want = CASES["pad contiguous"]
  xs = np.arange(16, dtype=np.float32).reshape(4, 4)
  x = Tensor(xs).realize()
  _warm(f, x)
  if not _served(f, x): pytest.skip("plans do not apply here")
  out = f(x).realize()
  view = out.uop
  view._cached("a fact of the last use", lambda: "stale")
  number = view.src[0].src[0].arg
  del out, view
  again = [f(x).realize() for _ in range(OUTPUT_POOL)]
  reused = [a for a in again if a.uop.src[0].src[0].arg == number]
  assert len(reused) == 1 and (reused[0].uop._cache is None or "a fact of the last use" not in reused[0].uop._cache)
  assert reused[0].uop.shape == (6, 6)
  np.testing.assert_array_equal(reused[0].numpy(), want(xs))

def test_no_view_pool_with_lru_off():
  f, want = CASES["add then mul"]
  xs = np.arange(16, dtype=np.float32).reshape(4, 4)
  x = Tensor(xs).realize()
  with Context(LRU=0):
    _warm(f, x)
    if not _served(f, x): pytest.skip("plans do not apply here")
    assert _uniques_made(lambda: f(x).realize(), 10) == 10
    np.testing.assert_array_equal(f(x).realize().numpy(), want(xs))

def test_a_gradient_folded_to_a_constant_after_a_like_graph_realizes():
  # cummax's, then cummin's gradient of a 0-d tensor: the second finds the first's plan by its skeleton, and its target
  # is a constant that plan holds (not a leaf), which no direct runner may take (a KeyError here before)
  for fn in (lambda x: x.cummax(0)[0], lambda x: x.cummin(0)[0]):
    x = Tensor(np.array(0.25, np.float32))
    assert fn(x).numpy() == np.float32(0.25)
    (g,) = fn(x).sum().gradient(x)
    Tensor.realize(g)
    assert g.numpy() == np.float32(1.0)
