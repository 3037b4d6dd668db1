"""graph.const finds a constant it was given again as the same objects (value, dtype, device, shape) without building
its cache key (session 30, build14); equal-looking values that differ (-0.0, 1 and True, another dtype) stay apart."""
import gc, math, weakref
import numpy as np
import pytest
import tinyplug
from tinyplug import Tensor, dtypes
from tinyplug.caches import BoundedCache
from tinyplug.tensor_ops import graph

class _CountingCache(BoundedCache):
  __slots__ = ("gets",)
  def get(self, key, default=None):
    self.gets += 1
    return dict.get(self, key, default)

@pytest.fixture
def counted(monkeypatch):
  cache = _CountingCache("test.constants", 4096, on_evict=graph._forget_found)
  cache.gets = 0
  monkeypatch.setattr(graph, "_consts", cache)
  graph._by_value.clear()
  yield cache
  graph._by_value.clear()

def test_a_constant_asked_for_again_skips_the_key(counted):
  x = Tensor(np.zeros((3, 4), np.float32)).realize()
  u, one = x.uop, 1.5
  first = [graph.const(one, u.dtype, u.device, u.shape) for _ in range(3)]   # made, then kept on its second use
  gets = counted.gets
  again = [graph.const(one, u.dtype, u.device, u.shape) for _ in range(5)]
  assert counted.gets == gets and all(c is first[-1] for c in again)
  # `x + 1.5` in a loop: the same node each time
  assert len({id((x + one).uop.src[1]) for _ in range(4)}) == 1

@pytest.mark.parametrize("a,b", [(0.0, -0.0), (1, True), (1, 1.0), (float("nan"), float("nan")), (2.0, 2.5)])
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32])
def test_equal_looking_values_stay_apart(a, b, dtype, counted):
  # each value's constant, found by identity after the other's was: the node its key alone gives
  for _ in range(3): graph.const(a, dtype, "CPU", (2,))
  for _ in range(3): cb = graph.const(b, dtype, "CPU", (2,))
  for _ in range(3): ca = graph.const(a, dtype, "CPU", (2,))
  graph._by_value.clear()
  assert graph.const(a, dtype, "CPU", (2,)) is ca and graph.const(b, dtype, "CPU", (2,)) is cb
  if type(a) is float and a == 0.0 and dtype == dtypes.float32:
    assert math.copysign(1, ca.src[0].src[0].arg) != math.copysign(1, cb.src[0].src[0].arg)

def test_other_dtype_device_or_shape_is_another_constant(counted):
  v, shape = 3.0, (2, 2)
  for _ in range(3): c = graph.const(v, dtypes.float32, "CPU", shape)
  assert graph.const(v, dtypes.float16, "CPU", shape).dtype == dtypes.float16
  assert graph.const(v, dtypes.float32, "CPU", (2, 3)).shape == (2, 3)
  assert graph.const(v, dtypes.float32, "PYTHON", shape).device == "PYTHON"
  assert graph.const(v, dtypes.float32, "CPU", shape) is c

def test_a_reset_forgets_the_constants():
  v = 7.25
  for _ in range(3): c = graph.const(v, dtypes.float32, "CPU", (5,))
  ref = weakref.ref(c)
  del c
  tinyplug.reset()
  gc.collect()
  assert ref() is None and not graph._by_value

def test_values_through_the_kept_constants():
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  t = Tensor(x).realize()
  for _ in range(3):
    np.testing.assert_allclose((t * 1.5 + 1.0).exp().numpy(), np.exp(x * 1.5 + 1.0), rtol=1e-6)
    np.testing.assert_array_equal((t + 1.0).numpy(), x + 1.0)
    np.testing.assert_array_equal((Tensor(x.astype(np.int32)) + 1).numpy(), x.astype(np.int32) + 1)
