"""The core's memo tables are bounded caches, and tinyplug.reset() empties them all; results stay right after it."""
import numpy as np
import tinyplug
from tinyplug import Tensor
from tinyplug.caches import BoundedCache, cache_sizes
from tinyplug.helpers import Context, env_flag, temp_environ
import pytest

def test_bounded_cache_drops_the_oldest_when_full():
  c = BoundedCache("test.small", 16)
  for i in range(40): c.put(i, str(i))
  assert len(c) <= 16 and c[39] == "39" and 0 not in c and cache_sizes()["test.small"] == len(c)

def test_reset_empties_every_cache_and_work_goes_on(device):
  x = np.arange(64, dtype=np.float32)
  assert ((Tensor(x) + 1) * 2).tolist() == ((x + 1) * 2).tolist()
  sizes = cache_sizes()
  # (a constant used once waits in tensor.new_constants; a second use keeps it in tensor.constants)
  assert sizes["engine.runners"] > 0 and sizes["tensor.constants"] + sizes["tensor.new_constants"] > 0
  tinyplug.reset()
  assert all(n == 0 for n in cache_sizes().values())
  assert ((Tensor(x) + 1) * 2).tolist() == ((x + 1) * 2).tolist()   # compiles again
  assert cache_sizes()["engine.runners"] > 0

def test_one_boolean_parser():
  with temp_environ(TP_FLAG="Yes"): assert env_flag("TP_FLAG") is True
  with temp_environ(TP_FLAG="off"): assert env_flag("TP_FLAG", True) is False
  with temp_environ(TP_FLAG=None): assert env_flag("TP_FLAG", True) is True
  with temp_environ(TP_FLAG="maybe"), pytest.raises(ValueError, match="TP_FLAG='maybe' is not a boolean"): env_flag("TP_FLAG")

def test_get_lru_keeps_the_recently_used_and_on_evict_frees_the_rest():
  dropped = []
  c = BoundedCache("test.lru", 3, on_evict=dropped.append)
  for k in "abc": c.put(k, k.upper())
  assert c.get_lru("a") == "A" and c.get_lru("zz", 7) == 7   # a becomes the most recently used
  c.put("d", "D")                                             # full: the least recently used (b) goes
  assert list(c) == ["c", "a", "d"] and dropped == ["B"]
  c.put("c", "C2")                                            # replacing frees the old value, evicts nothing else
  assert list(c) == ["a", "d", "c"] and dropped == ["B", "C"]
  c.clear()                                                   # tinyplug.reset(): what the entries held is freed too
  assert len(c) == 0 and sorted(dropped) == ["A", "B", "C", "C2", "D"]

def test_a_kernel_per_step_stays_bounded_and_reset_clears_the_compiled_objects(monkeypatch):
  """A Python scalar that changes every step made a kernel each time and kept it forever (10,000 steps: 33 -> 355 MB).
  Every in-memory kernel cache is bounded; an evicted kernel is compiled again when it comes back."""
  from tinyplug.device import Device
  from tinyplug.engine import realize as R
  limit = 8
  compiler = Device["CPU"].compiler
  monkeypatch.setattr(R._runners, "maxsize", limit)
  monkeypatch.setattr(compiler._memory, "maxsize", limit)
  x = Tensor(np.arange(16, dtype=np.float32), device="CPU").contiguous().realize()
  with Context(SCALAR_ARGS=0):   # one kernel per distinct constant, as before scalars became arguments
    for i in range(3 * limit):
      k = 1.0 + i / 1024
      np.testing.assert_allclose((x * k).numpy(), np.arange(16, dtype=np.float32) * np.float32(k))
      assert len(R._runners) <= limit and len(compiler._memory) <= limit
    np.testing.assert_allclose((x * 1.0).numpy(), np.arange(16))
  # (this device's own cache: another CPU device opened earlier in the process, `CPU:LLVM:x86-64`, has one of the
  # same name, and cache_sizes() reports one of them)
  assert len(compiler._memory) > 0
  tinyplug.reset()
  assert len(compiler._memory) == 0 and cache_sizes()["engine.runners"] == 0
  np.testing.assert_allclose((x * 3.0).numpy(), np.arange(16) * 3)
