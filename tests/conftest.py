"""Shared fixtures. `device` runs a test once per device: those named in TINYPLUG_TEST_DEVICES (a comma list),
else every device in Device.available() except the emulated ones (`MOCK+...`: every kernel is compiled by clang, so
they are asked for by name; plugins/emulator/tests runs a slice of the op suite on them). Device.DEFAULT is set for
the test and restored afterwards."""
from __future__ import annotations
import pytest
from tinyplug.helpers import env_str

def devices_under_test() -> list[str]:
  listed = env_str("TINYPLUG_TEST_DEVICES")
  if listed: return [d.strip() for d in listed.split(",") if d.strip()]
  from tinyplug.device import Device
  return [d for d in Device.available() if not d.startswith("MOCK+")]

@pytest.fixture(params=devices_under_test())
def device(request):
  from tinyplug.device import Device
  with Device.use(request.param): yield request.param   # restores the previous choice, or 'not chosen yet'
