"""Lifecycle hooks."""
from __future__ import annotations

from tinyplug.hookspecs.markers import hookspec


@hookspec
def tinyplug_unconfigure() -> None:
  """Called once at interpreter exit (atexit) for every active plugin that implements it.

  When: at process exit, if plugins were loaded in this process; after all user code ran.
  Receives: nothing. Returns: nothing.
  Several plugins: called for each active plugin in plugin-id order; an exception in one is reported
  on stderr and does not stop the others. Use it to flush traces, close devices or serve results.
  """
