"""One bounded cache for the core's memo tables (compiled programs, schedules, graph templates, constants, kernel
names), and one reset for all of them: `tinyplug.reset()`."""
from __future__ import annotations
import itertools
from typing import Any

_ALL: list[BoundedCache] = []

class BoundedCache(dict):
  """A dict of at most `maxsize` entries: `put` drops the oldest eighth when it is full. Reads are plain dict reads.
  Every instance is registered, so `reset_caches()` (and `tinyplug.reset()`) empties it."""
  __slots__ = ("name", "maxsize")
  def __init__(self, name: str, maxsize: int):
    super().__init__()
    self.name, self.maxsize = name, int(maxsize)
    _ALL.append(self)
  def put(self, key: Any, value: Any) -> Any:
    """Store `value` under `key` (evicting the oldest entries when full) and return it."""
    if len(self) >= self.maxsize:
      for old in list(itertools.islice(iter(self), max(1, self.maxsize // 8))): del self[old]
    self[key] = value
    return value
  def __repr__(self) -> str: return f"<BoundedCache {self.name}: {len(self)}/{self.maxsize}>"
  __hash__ = object.__hash__   # registered by identity

def reset_caches() -> None:
  """Empty every BoundedCache (the core's and those plugins made)."""
  for c in _ALL: c.clear()

def cache_sizes() -> dict[str, int]:
  """Entries per cache, by name (for DEBUG output and tests)."""
  return {c.name: len(c) for c in _ALL}
