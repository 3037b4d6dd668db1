"""Hooks for listeners on the core event bus (visualizer, profilers, loggers).

Events are not delivered through pluggy: a plugin registers a listener once, and the core calls the
callback directly through `tinyplug.events`, which checks `enabled(kind)` before building any payload,
so tracing costs nothing when nobody listens.
"""
from __future__ import annotations

from typing import Callable

from tinyplug.hookspecs.markers import hookspec
from tinyplug.hookspecs.specs import LISTENER_KINDS, ListenerSpec

__all__ = ["LISTENER_KINDS", "tinyplug_register_listeners"]


@hookspec
def tinyplug_register_listeners(register: Callable[[ListenerSpec], None]) -> None:
  """Register event listeners by calling `register(ListenerSpec(kind=..., factory=...))`.

  When: once per process, while plugins load. Right after a plugin's registration succeeds, each of its
  listener factories is called once and the callback it returns is subscribed to `tinyplug.events` for
  that kind (one of LISTENER_KINDS: "rewrite", "scope", "profile", "kernel", "schedule", "search", "log").
  Receives: `register`, a callback recording the spec and the plugin that registered it.
  Returns: nothing.
  Several plugins: all listeners are subscribed, in plugin-id order; each receives every event of its kind.
  A factory that raises fails its plugin (the plugin's other registrations are rolled back).
  """
