"""The `device` fixture of the op suite: each test runs once per device under test, with Device.DEFAULT set to it."""
from __future__ import annotations
import pytest
from tinyplug.helpers import env_str

def devices_under_test() -> list[str]:
  """TINYPLUG_TEST_DEVICES (a comma list), else every device whose probe passes except emulated ones (`MOCK+...`,
  slow: every kernel is a clang compile; name them to test them)."""
  listed = env_str("TINYPLUG_TEST_DEVICES")
  if listed: return [d.strip() for d in listed.split(",") if d.strip()]
  from tinyplug.device import Device
  return [d for d in Device.available() if not d.startswith("MOCK+")]

@pytest.fixture(params=devices_under_test())
def device(request):
  from tinyplug.device import Device
  with Device.use(request.param): yield request.param   # restores the previous choice, or 'not chosen yet'
