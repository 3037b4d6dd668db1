"""Hooks for kernel search strategies (what `BEAM=<n>` runs)."""
from __future__ import annotations

from typing import Callable

from tinyplug.hookspecs.markers import hookspec
from tinyplug.hookspecs.specs import SearchSpec


@hookspec
def tinyplug_register_search(register: Callable[[SearchSpec], None]) -> None:
  """Register search strategies by calling `register(SearchSpec(name=..., factory=...))`.

  When: once per process, while plugins load.
  Receives: `register`, a callback recording the spec and the plugin that registered it.
  Returns: nothing.
  Several plugins: all strategies are collected; `SEARCH=<name>` selects one (default "beam"). The same
  name from two plugins is a conflict (first plugin id wins). The strategy's name and version are part
  of the search-cache key.
  """
