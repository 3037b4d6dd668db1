"""A realize plan's small outputs handed out again (issue 20, session 28; device.output_maker): a plan keeps its last
OUTPUT_POOL outputs and gives the oldest out again once nothing else refers to it, so a repeated small op makes no
BUFFER / UNIQUE node, Buffer or memory per call. Values against numpy on every call; an output anyone still holds (a
tensor, a graph over it, its Buffer, its memory, a weak reference) is never handed out again."""
import gc
import numpy as np
import pytest
from tinyplug import Context, Tensor
from tinyplug.device import OUTPUT_POOL, OUTPUT_POOL_BYTES, buffer_of, handle_of
from tinyplug.engine import plan
from tinyplug.uop import UOp, UOpMap

RNG = np.random.default_rng(28)

def _uniques_made(fn, n: int) -> int:
  """UNIQUE numbers taken by n calls of fn (each new BUFFER node takes one; each probe one more)."""
  start = UOp.unique().arg
  for _ in range(n): fn()
  return UOp.unique().arg - start - 1

def test_a_repeated_row_sum_makes_no_output_nodes_and_is_right_every_call():
  xs = [RNG.standard_normal((128, 10)).astype(np.float32) for _ in range(3)]
  ts = [Tensor(x).realize() for x in xs]
  for t in ts * 2: t.sum(1).realize()   # (the first calls record the plan, the next fill its pool)
  hits = plan.counters["hits"]
  got = []
  assert _uniques_made(lambda: got.append(ts[len(got) % 3].sum(1).realize().numpy()), 60) == 0
  assert plan.counters["hits"] - hits == 60
  for i, g in enumerate(got): np.testing.assert_allclose(g, xs[i % 3].sum(1), rtol=1e-5, atol=1e-5)

def test_a_tiny_op_loop_reuses_the_output_before_last():
  t = Tensor(np.zeros(8, np.float32)).realize()
  for _ in range(5): t = (t + 1.0).realize()
  nodes = set()
  def step():
    nonlocal t
    t = (t + 1.0).realize()
    nodes.add(id(t.uop))
  assert _uniques_made(step, 100) == 0
  assert len(nodes) == OUTPUT_POOL   # the input of each call is the last output: the one before it is handed out
  np.testing.assert_array_equal(t.numpy(), np.full(8, 105.0, np.float32))

def test_held_outputs_are_never_handed_out_again():
  x = RNG.standard_normal((64, 1000)).astype(np.float32)
  t = Tensor(x).realize()
  for _ in range(3): t.argmax(1).realize()
  kept = [t.argmax(1).realize() for _ in range(6)]   # tensors held
  lazy = (t.max(1).realize() * 2.0)                  # a graph over an output
  for _ in range(4): t.max(1).realize()
  assert len({id(k.uop) for k in kept}) == 6
  for k in kept: np.testing.assert_array_equal(k.numpy(), x.argmax(1))
  np.testing.assert_allclose(lazy.numpy(), x.max(1) * 2.0, rtol=1e-6)

@pytest.mark.parametrize("hold", ["buffer", "handle", "side table", "unique"])
def test_an_output_reachable_another_way_is_not_handed_out_again(hold):
  x = RNG.standard_normal((128, 10)).astype(np.float32)
  t = Tensor(x).realize()
  for _ in range(3): t.sum(1).realize()
  gc.disable()
  try:
    out = t.sum(1).realize()
    node, unique_number = out.uop, out.uop.src[0].arg
    held = {"buffer": lambda: buffer_of(node), "handle": lambda: handle_of(node), "side table": lambda: _side_table(node),
            "unique": lambda: node.src[0]}[hold]()
    before = np.array(out.numpy())
    del out, node
    again = [t.sum(1).realize() for _ in range(2 * OUTPUT_POOL)]
    assert unique_number not in [a.uop.src[0].arg for a in again]
    if hold == "buffer": np.testing.assert_array_equal(held.numpy(), before)   # its memory not written over either
  finally: gc.enable()
  for a in again: np.testing.assert_allclose(a.numpy(), x.sum(1), rtol=1e-5, atol=1e-5)

def _side_table(node: UOp) -> UOpMap:
  m: UOpMap[str] = UOpMap()   # (a layer's facts about the node: a weak reference with a callback)
  m[node] = "its last use"
  return m

def test_a_node_handed_out_again_has_no_facts_from_before():
  x = RNG.standard_normal((128, 10)).astype(np.float32)
  t = Tensor(x).realize()
  for _ in range(3): t.sum(1).realize()
  out = t.sum(1).realize()
  node = out.uop
  node._cached("a fact of the last use", lambda: "stale")
  number = node.src[0].arg
  del out, node
  again = [t.sum(1).realize() for _ in range(OUTPUT_POOL)]
  reused = [a for a in again if a.uop.src[0].arg == number]
  assert len(reused) == 1 and "a fact of the last use" not in reused[0].uop._cache
  assert reused[0].uop.shape == (128,) and reused[0].uop.device == t.device
  np.testing.assert_allclose(reused[0].numpy(), x.sum(1), rtol=1e-5, atol=1e-5)

def test_no_pool_with_lru_off_or_for_a_big_output():
  x = RNG.standard_normal((128, 10)).astype(np.float32)
  t = Tensor(x).realize()
  with Context(LRU=0):
    for _ in range(3): t.sum(1).realize()
    assert _uniques_made(lambda: t.sum(1).realize(), 20) == 20
  n = OUTPUT_POOL_BYTES // 4 + 1   # one float more than a pooled output
  big = Tensor(np.ones((n, 2), np.float32)).realize()
  for _ in range(3): big.sum(1).realize()
  assert _uniques_made(lambda: big.sum(1).realize(), 5) == 5
  np.testing.assert_array_equal(big.sum(1).realize().numpy(), np.full(n, 2.0, np.float32))

def test_gradients_and_views_over_pooled_outputs_stay_right():
  x_np = RNG.standard_normal((16, 10)).astype(np.float32)
  x = Tensor(x_np).realize()
  grads, views = [], []
  for i in range(8):
    w = Tensor(np.full((16, 10), float(i + 1), np.float32), requires_grad=True)
    rows = (w * w * x).sum(1)
    rows.sum().backward()
    grads.append(w.grad.realize())         # held: each iteration's gradient stays its own
    views.append(rows.realize().reshape(4, 4))   # a view over the output, held: its node may not be handed out
  for i, (g, v) in enumerate(zip(grads, views)):
    np.testing.assert_allclose(g.numpy(), 2 * (i + 1) * x_np, rtol=1e-5)
    np.testing.assert_allclose(v.numpy(), ((i + 1) ** 2 * x_np).sum(1).reshape(4, 4), rtol=1e-5, atol=1e-4)
  s = [x.sum(1).realize() for _ in range(4)]
  again = [x.sum(1).realize().reshape(2, 8) for _ in range(4)]   # views of outputs nobody else holds
  for a in again: np.testing.assert_allclose(a.numpy(), x_np.sum(1).reshape(2, 8), rtol=1e-5, atol=1e-5)
  assert len({id(t.uop) for t in s}) == 4
