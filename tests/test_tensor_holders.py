"""realize() points every live tensor whose graph holds a realized node at its buffer, found from the realized nodes
upwards (tinyplug/tensor_ops/users.py) rather than by looking at every live tensor."""
import gc
import numpy as np
from tinyplug import Tensor
from tinyplug.tensor_ops import users
from tinyplug.uop.ops import Ops

def _buffers(t: Tensor) -> set:
  return {u for u in t.uop.toposort() if u.op is Ops.BUFFER}

def test_assign_runs_once_for_lazy_tensors_built_on_it():
  # a lazy tensor holding an ASSIGN deep in its graph that kept the ASSIGN after it ran would write the buffer again
  x = Tensor(np.zeros(4, np.float32)).realize()
  x.assign(x + 1)
  y = x * 2
  z = (y + 1).exp2().log2()   # deeper: the ASSIGN two tensors and several nodes down
  unrelated = [Tensor(np.full(4, i, np.float32)) + i for i in range(50)]
  x.realize()
  np.testing.assert_allclose(z.numpy(), np.full(4, 3.0), rtol=1e-6)
  np.testing.assert_allclose(y.numpy(), np.full(4, 2.0))
  np.testing.assert_allclose(x.numpy(), np.full(4, 1.0))
  np.testing.assert_allclose(unrelated[7].numpy(), np.full(4, 14.0))

def test_every_holder_points_at_the_buffer():
  a = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
  b = a * 3
  views = [b.T, b.reshape(6)[1:4], b.sum(axis=1), (b + a).max()]
  b.realize()
  (buf,) = _buffers(b)
  for v in views: assert buf in _buffers(v)   # each graph now reads b's buffer instead of computing b again
  ref = np.arange(6, dtype=np.float32).reshape(2, 3) * 3
  np.testing.assert_allclose(views[0].numpy(), ref.T)
  np.testing.assert_allclose(views[1].numpy(), ref.reshape(6)[1:4])
  np.testing.assert_allclose(views[2].numpy(), ref.sum(axis=1))
  np.testing.assert_allclose(views[3].numpy(), (ref + ref / 3).max())

def test_a_tensor_made_over_an_inner_node_later_is_found():
  # c's graph was linked through the inner node before any tensor held it; realizing a tensor made at that node
  # later must still reach c
  a = Tensor(np.ones(3, np.float32))
  c = (a + 2) * 5
  inner = Tensor.from_uop(c.uop.src[0] if c.uop.src[0].op is Ops.ADD else c.uop.src[1])
  assert inner.uop.op is Ops.ADD
  c.numpy()   # a realize: c's graph gets linked
  inner.realize()
  (buf,) = _buffers(inner)
  assert buf in _buffers(c)
  np.testing.assert_allclose(c.numpy(), np.full(3, 15.0))

def test_a_tensor_given_another_graph_is_found_through_its_new_graph():
  a = Tensor(np.ones(3, np.float32))
  t = Tensor(np.zeros(3, np.float32))
  t.numpy()
  b = a + 1
  t.uop = (b * 4).uop   # t now holds a graph over b
  b.realize()
  (buf,) = _buffers(b)
  assert buf in _buffers(t)
  np.testing.assert_allclose(t.numpy(), np.full(3, 8.0))

def test_realize_does_not_visit_unrelated_tensors():
  def visits(n_unrelated: int) -> int:
    keep = [Tensor(np.full(8, i, np.float32)) * 2 for i in range(n_unrelated)]
    x = Tensor(np.ones(8, np.float32)) + 1
    y = x * 3
    Tensor(np.zeros(1, np.float32)).realize()   # links the tensors made so far (once)
    before = users.counters["visited"]
    x.realize()
    seen = users.counters["visited"] - before
    np.testing.assert_allclose(y.numpy(), np.full(8, 6.0))
    assert len(keep) == n_unrelated
    return seen
  assert visits(0) == visits(500) > 0

def test_links_do_not_keep_graphs_alive():
  gc.collect()
  base = len(users._linked)
  ts = [(Tensor(np.full(4, i, np.float32)) + 1) * 2 for i in range(100)]
  ts[0].realize()
  assert len(users._linked) >= base + 100
  del ts
  gc.collect()
  assert len(users._linked) <= base + 5

def test_a_long_lived_node_drops_dead_users():
  a = Tensor(np.ones(4, np.float32)) + 1   # lazy, kept: every graph below is built over its node
  for i in range(300):
    (a * i).realize()
  entry = users._linked[id(a.uop)]
  assert len(entry.users) < 64
  np.testing.assert_allclose(a.numpy(), np.full(4, 2.0))
