"""Hooks for renderers (UOp program -> source code for a device)."""
from __future__ import annotations

from typing import Callable

from tinyplug.hookspecs.markers import hookspec
from tinyplug.hookspecs.specs import RendererSpec


@hookspec
def tinyplug_register_renderers(register: Callable[[RendererSpec], None]) -> None:
  """Register renderers by calling `register(RendererSpec(device=..., name=..., factory=...))`.

  When: once per process, while plugins load, after devices are registered.
  Receives: `register`, a callback recording the spec and the plugin that registered it.
  Returns: nothing.
  Several plugins: all renderers are collected; a plugin may add a renderer to another plugin's device.
  The same (device, name) pair from two plugins is a conflict (first plugin id wins). A device's default
  renderer is its highest-priority one; `DEV=<device>:<renderer>` picks another.
  """
