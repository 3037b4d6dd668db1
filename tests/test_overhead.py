"""The per-op path (build, schedule from a template, run, point tensors at buffers) keeps its results right when
the fast paths are taken: repeated scalar constants, realized tensors, loops of tiny ops."""
import numpy as np
from tinyplug import Tensor
from tinyplug.uop import dtypes
from tinyplug.tensor_ops import graph

def test_tiny_op_loop_matches_numpy(device):
  t = Tensor(np.zeros(1, np.float32)).realize()
  for _ in range(50): t = (t + 1.5).realize()
  assert t.item() == 75.0

def test_repeated_constants_are_shared_but_distinct_by_type_and_sign():
  assert graph.const(1.0, dtypes.float, "CPU", (3,)) is graph.const(1.0, dtypes.float, "CPU", (3,))
  assert graph.const(0.0, dtypes.float, "CPU", ()) is not graph.const(-0.0, dtypes.float, "CPU", ())
  assert graph.const(1, dtypes.int, "CPU", ()) is graph.const(1, dtypes.int, "CPU", ())
  assert graph.const(True, dtypes.bool, "CPU", (2,)).shape == (2,)

def test_scalar_operands_keep_promotion_rules(device):
  i = Tensor(np.array([1, 2, 3], np.int32))
  assert (i + 1).dtype == dtypes.int32 and (i + 1.5).dtype == dtypes.default_float
  np.testing.assert_allclose((i + 1.5).numpy(), [2.5, 3.5, 4.5])
  np.testing.assert_allclose((2.0 - Tensor([1.0, 4.0])).numpy(), [1.0, -2.0])
  assert (Tensor([1.0, 2.0]) * 0.0).reciprocal().numpy().tolist() == [np.inf, np.inf]
  assert (Tensor([1.0, 2.0]) * -0.0).reciprocal().numpy().tolist() == [-np.inf, -np.inf]

def test_gradients_through_scalar_ops(device):
  x = Tensor([2.0, 3.0], requires_grad=True)
  ((x * 3.0 + 1.0) * x).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [13.0, 19.0])

def test_other_tensors_keep_their_graphs_after_a_realize(device):
  a = Tensor([1.0, 2.0]).realize()
  b = a + 1.0
  c = b * 2.0      # holds b's graph; b's realize must not change c's value
  b.realize()
  np.testing.assert_allclose(c.numpy(), [4.0, 6.0])
  np.testing.assert_allclose(b.numpy(), [2.0, 3.0])

def test_realize_pauses_the_cycle_collector_and_gives_it_back():
  """The cyclic GC is off while a realize schedules and runs (tens of thousands of small objects would set off
  collections), back on after it, and a user's own gc.disable() is left as it was."""
  import gc
  import numpy as np
  from tinyplug import Tensor
  import tinyplug.engine.realize as engine_realize
  seen = []
  real = engine_realize.create_schedule
  def spy(uops, *rest):
    seen.append(gc.isenabled())
    return real(uops, *rest)
  engine_realize.create_schedule = spy
  was = gc.isenabled()
  try:
    gc.enable()
    out = (Tensor(np.arange(6, dtype=np.float32)) * 2).realize()
    assert seen and not any(seen) and gc.isenabled()
    gc.disable()
    np.testing.assert_array_equal((out + 1).numpy(), np.arange(6, dtype=np.float32) * 2 + 1)
    assert not gc.isenabled()   # stays off: the user turned it off
  finally:
    engine_realize.create_schedule = real
    if was: gc.enable()
    else: gc.disable()
