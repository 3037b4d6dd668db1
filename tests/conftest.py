"""Shared fixtures: `device` (tinyplug.testing's) runs a test once per device, those named in TINYPLUG_TEST_DEVICES
(a comma list), else every device in Device.available() except the emulated ones (`MOCK+...`: every kernel is
compiled by clang, so they are asked for by name; plugins/emulator/tests runs a slice of the op suite on them).
Device.DEFAULT is set for the test and restored afterwards."""
from tinyplug.testing.conftest import device, devices_under_test  # noqa: F401
