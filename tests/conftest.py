"""Shared fixtures: `device` (tinyplug.testing's) runs a test once per device, those named in TINYPLUG_TEST_DEVICES
(a comma list), else every device in Device.available() except the emulated ones (`MOCK+...`: every kernel is
compiled by clang, so they are asked for by name; plugins/emulator/tests runs a slice of the op suite on them).
Device.DEFAULT is set for the test and restored afterwards."""
import pytest

from tinyplug.testing.conftest import device, devices_under_test  # noqa: F401


@pytest.fixture
def vector_machine(monkeypatch):
  """vector_machine(vector_bytes, vector_registers): the CPU renderer now has those vector registers and a Zen-like
  cache (32 KB, 1 MB, 32 MB), for the heuristic's decisions on machines other than this one."""
  from tinyplug.device import Device
  r = Device["CPU"].renderer
  def set_to(nbytes: int, count: int):
    monkeypatch.setattr(r, "cache_bytes", (32 << 10, 1 << 20, 32 << 20))
    monkeypatch.setattr(r, "vector_bytes", nbytes)
    monkeypatch.setattr(r, "vector_registers", count)
    return r
  return set_to


@pytest.fixture
def becomes_calls(monkeypatch):
  """The maps Tensor.realize hands to _apply_becomes_map (a realize served without one adds nothing)."""
  import tinyplug.tensor as tensor_mod
  calls = []
  real = tensor_mod._apply_becomes_map
  monkeypatch.setattr(tensor_mod, "_apply_becomes_map", lambda b: (calls.append(b), real(b))[1])
  return calls


@pytest.fixture
def avx512_machine(vector_machine):
  """The CPU renderer describes an AVX-512 machine (32 vector registers of 64 bytes), whatever the host, for tests that
  assert AVX-512's decisions (an AVX2 host's 16 x 4 tile unrolls and upcasts by other widths); no schedule the pack
  pass made for the host's machine is reused."""
  from tinyplug import schedule
  schedule._templates.clear()
  yield vector_machine(64, 32)
  schedule._templates.clear()
