"""Hooks for devices (runtimes)."""
from __future__ import annotations

from typing import Callable

from tinyplug.hookspecs.markers import hookspec
from tinyplug.hookspecs.specs import DeviceSpec


@hookspec
def tinyplug_register_devices(register: Callable[[DeviceSpec], None]) -> None:
  """Register the devices this plugin provides by calling `register(DeviceSpec(...))` once per device.

  When: once per process, while plugins load (first use of the plugin manager), for each active plugin.
  Receives: `register`, a callback that records the spec and the plugin that registered it.
  Returns: nothing; the return value is ignored.
  Several plugins: every plugin's specs are collected. Two plugins registering the same device name (or
  alias) is a conflict: the one first in plugin-id order keeps it, the other is reported by `list-plugins`.
  Must be cheap: give the device class as a "module:attr" string so its module is imported on first use,
  and a `probe` that checks for the driver without loading it.
  """
