"""One bounded cache for the core's memo tables (compiled programs, schedules, graph templates, constants, kernel
names) and for plugins' (compiled objects, device programs), and one reset for all of them: `tinyplug.reset()`."""
from __future__ import annotations
import itertools
from typing import Any, Callable

from tinyplug.helpers import KERNEL_CACHE_SIZE  # noqa: F401  (the size of every kernel cache, core and plugins)

_ALL: list[BoundedCache] = []
_MISSING = object()

class BoundedCache(dict):
  """A dict of at most `maxsize` entries: `put` drops the oldest eighth when it is full. Plain reads do not reorder;
  `get_lru` counts as a use (the entry becomes the newest), so caches read through it forget the least recently used
  first. `on_evict(value)` frees what a dropped entry holds (also on `clear`). Every instance is registered, so
  `reset_caches()` (and `tinyplug.reset()`) empties it."""
  __slots__ = ("name", "maxsize", "on_evict")
  def __init__(self, name: str, maxsize: int, on_evict: Callable[[Any], None] | None = None):
    super().__init__()
    self.name, self.maxsize, self.on_evict = name, int(maxsize), on_evict
    _ALL.append(self)
  def put(self, key: Any, value: Any) -> Any:
    """Store `value` under `key` (evicting the oldest entries when full) and return it."""
    # (one lookup of the key before the store: a new constant's key is hashed on each)
    if (old := dict.pop(self, key, _MISSING)) is _MISSING:
      if len(self) >= self.maxsize:
        n = max(1, self.maxsize // 8, len(self) - self.maxsize + 1)
        for gone in list(itertools.islice(iter(self), n)): self._drop(gone)
    elif old is not value and self.on_evict is not None: self.on_evict(old)   # (a replaced entry becomes the newest)
    self[key] = value
    return value
  def get_lru(self, key: Any, default: Any = None) -> Any:
    """`get`, and the entry becomes the most recently used (the last one `put` evicts)."""
    if (value := dict.pop(self, key, _MISSING)) is _MISSING: return default
    self[key] = value
    return value
  def _drop(self, key: Any) -> None:
    value = dict.pop(self, key)
    if self.on_evict is not None: self.on_evict(value)
  def clear(self) -> None:
    if self.on_evict is None: return dict.clear(self)
    for key in list(self): self._drop(key)
  def __repr__(self) -> str: return f"<BoundedCache {self.name}: {len(self)}/{self.maxsize}>"
  __hash__ = object.__hash__   # registered by identity

def reset_caches() -> None:
  """Empty every BoundedCache (the core's and those plugins made)."""
  for c in _ALL: c.clear()

def cache_sizes() -> dict[str, int]:
  """Entries per cache, by name (for DEBUG output and tests)."""
  return {c.name: len(c) for c in _ALL}
