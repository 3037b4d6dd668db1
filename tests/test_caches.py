"""The core's memo tables are bounded caches, and tinyplug.reset() empties them all; results stay right after it."""
import numpy as np
import tinyplug
from tinyplug import Tensor
from tinyplug.caches import BoundedCache, cache_sizes
from tinyplug.helpers import env_flag, temp_environ
import pytest

def test_bounded_cache_drops_the_oldest_when_full():
  c = BoundedCache("test.small", 16)
  for i in range(40): c.put(i, str(i))
  assert len(c) <= 16 and c[39] == "39" and 0 not in c and cache_sizes()["test.small"] == len(c)

def test_reset_empties_every_cache_and_work_goes_on(device):
  x = np.arange(64, dtype=np.float32)
  assert ((Tensor(x) + 1) * 2).tolist() == ((x + 1) * 2).tolist()
  sizes = cache_sizes()
  assert sizes["engine.runners"] > 0 and sizes["tensor.constants"] > 0
  tinyplug.reset()
  assert all(n == 0 for n in cache_sizes().values())
  assert ((Tensor(x) + 1) * 2).tolist() == ((x + 1) * 2).tolist()   # compiles again
  assert cache_sizes()["engine.runners"] > 0

def test_one_boolean_parser():
  with temp_environ(TP_FLAG="Yes"): assert env_flag("TP_FLAG") is True
  with temp_environ(TP_FLAG="off"): assert env_flag("TP_FLAG", True) is False
  with temp_environ(TP_FLAG=None): assert env_flag("TP_FLAG", True) is True
  with temp_environ(TP_FLAG="maybe"), pytest.raises(ValueError, match="TP_FLAG='maybe' is not a boolean"): env_flag("TP_FLAG")
