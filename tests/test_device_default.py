"""Device.DEFAULT: setting it is honoured by new tensors; Device.use() sets it for a block and restores it."""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug import Tensor
from tinyplug.device import Device
from tinyplug.engine.realize import buffer_of
from tinyplug.helpers import getenv

def automatic_choice() -> str:
  return Device.canonicalize(getenv("DEV", "")) if getenv("DEV", "") else Device.available()[0]

@pytest.fixture
def restore_default():
  with Device.use(None): yield   # whatever a test sets, the previous choice comes back

def test_setting_default_is_honoured(restore_default):
  for name in Device.available():
    Device.DEFAULT = name.lower()          # names are canonicalized
    assert Device.DEFAULT == name
    t = Tensor([1.0, 2.0]) * 3 + Tensor.ones(2)
    assert t.device == name
    np.testing.assert_array_equal(t.realize().numpy(), [4.0, 7.0])
    assert buffer_of(t.uop).device == name    # the data lives there, not only the label

def test_none_goes_back_to_the_automatic_choice(restore_default):
  Device.DEFAULT = "PYTHON"
  Device.DEFAULT = None
  assert Device.DEFAULT == automatic_choice()

def test_unknown_device_is_refused_and_the_default_kept(restore_default):
  Device.DEFAULT = "PYTHON"
  with pytest.raises(ValueError, match=r"no active plugin provides device 'pythn' \(did you mean 'PYTHON'\?\)"):
    Device.DEFAULT = "pythn"
  assert Device.DEFAULT == "PYTHON"

def test_use_restores_the_previous_choice(restore_default):
  Device.DEFAULT = None
  with Device.use("PYTHON") as name:
    assert name == "PYTHON" == Device.DEFAULT and Tensor([1]).device == "PYTHON"
    with Device.use(None): assert Device.DEFAULT == automatic_choice()
    assert Device.DEFAULT == "PYTHON"
  assert Device.DEFAULT == automatic_choice()
  with pytest.raises(RuntimeError, match="boom"):
    with Device.use("PYTHON"): raise RuntimeError("boom")
  assert Device.DEFAULT == automatic_choice()

def test_the_automatic_choice_probes_no_device_after_the_first_that_works():
  """Choosing the default probed every device: on this machine that opened OpenCL (PoCL), about a second of a first
  training step, for a device the program never used."""
  import json, os, subprocess, sys
  code = ("from tinyplug.device import Device; from tinyplug.plugins import get_plugin_manager; import json; "
          "d = Device.DEFAULT; m = get_plugin_manager(); print(json.dumps([d, sorted(m._probe_cache), "
          "m.devices_by_priority()]))")
  env = {k: v for k, v in os.environ.items() if k not in ("DEV", "TINY_PLUGINS")}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
  default, probed, by_priority = json.loads(out.stdout.strip().splitlines()[-1])
  # probed in priority order up to the first that works (on a GPU-less machine CUDA, above the CPU, is probed and
  # found unavailable first): none after it
  assert default in probed and probed == sorted(by_priority[:by_priority.index(default) + 1])
  assert len(by_priority) > len(probed)
