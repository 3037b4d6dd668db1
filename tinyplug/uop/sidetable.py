"""UOpMap and NodeField: facts a layer keeps about UOps that are not facts of the IR (a node's device buffer, a
recorder's node id).

A UOp's own cache holds what follows from the node itself (its shape, toposort, bounds) under names (str). State that
belongs to a layer lives in that layer's UOpMap instead (an entry goes away with its node, and the map keeps no node
alive), or, for state read on every op and never listed, in a NodeField: the value rides along in the node's cache
under the field's own key (never a str, so never an IR fact's name) and dies with the node, with no weak reference
and no callback to make and run per node (the Buffer behind each realized output: one per tiny op)."""
from __future__ import annotations
import weakref
from typing import Any, Generic, Iterator, TypeVar

V = TypeVar("V")
_MISSING = object()

class _KeyRef(weakref.ref):
  __slots__ = ("key",)

class UOpMap(Generic[V]):
  """A weak-keyed map from UOps (compared by identity, as hash-consing makes equal nodes the same object) to values.

  Lookups are one dict access by `id(node)`: a node's weak reference removes its entry when the node dies, before its
  id can be reused."""
  __slots__ = ("_entries", "_gone", "__weakref__")

  def __init__(self) -> None:
    self._entries: dict[int, tuple[weakref.ref, V]] = {}
    owner = weakref.ref(self)
    def gone(ref: _KeyRef) -> None:   # one callback per map (the key rides on the reference): no closure per entry
      if (m := owner()) is not None: m._entries.pop(ref.key, None)
    self._gone = gone

  def get(self, node: Any, default: Any = None) -> V | Any:
    e = self._entries.get(id(node))
    return default if e is None else e[1]

  def __getitem__(self, node: Any) -> V:
    if (e := self._entries.get(id(node))) is None: raise KeyError(node)
    return e[1]

  def __setitem__(self, node: Any, value: V) -> None:
    key = id(node)
    e = self._entries.get(key)
    if e is None:
      ref = _KeyRef(node, self._gone)
      ref.key = key
    else: ref = e[0]
    self._entries[key] = (ref, value)

  def adder(self) -> Any:
    """fn(node, value): self[node] = value for a node just made (it has no entry yet), without the lookup or the
    method call (a realize plan's output buffers, one per tiny op)."""
    entries, gone = self._entries, self._gone
    def add(node: Any, value: V) -> None:
      ref = _KeyRef(node, gone)
      ref.key = key = id(node)
      entries[key] = (ref, value)
    return add

  def setdefault(self, node: Any, value: V) -> V:
    if (e := self._entries.get(id(node))) is not None: return e[1]
    self[node] = value
    return value

  def pop(self, node: Any, default: Any = _MISSING) -> V | Any:
    e = self._entries.pop(id(node), None)
    if e is None:
      if default is _MISSING: raise KeyError(node)
      return default
    return e[1]

  def __contains__(self, node: Any) -> bool: return id(node) in self._entries
  def __len__(self) -> int: return len(self._entries)
  def clear(self) -> None: self._entries.clear()

  def items(self) -> Iterator[tuple[Any, V]]:
    for ref, value in list(self._entries.values()):
      if (node := ref()) is not None: yield node, value

class NodeField(Generic[V]):
  """A layer's value kept with each node it is set on, gone when the node is (the node's cache dies with it). Unlike
  a UOpMap it cannot list or count its entries; setting one costs a dict store, dropping one nothing."""
  __slots__ = ("key",)

  def __init__(self, name: str) -> None:
    self.key = ("node field", name)   # (a tuple: IR facts are named by str)

  def get(self, node: Any, default: Any = None) -> V | Any:
    c = node._cache
    return default if c is None else c.get(self.key, default)

  def __getitem__(self, node: Any) -> V:
    if (c := node._cache) is None or (v := c.get(self.key, _MISSING)) is _MISSING: raise KeyError(node)
    return v

  def __setitem__(self, node: Any, value: V) -> None: node._remember(self.key, value)

  def adder(self) -> Any:
    """fn(node, value): self[node] = value, without the method call's lookups (a realize plan's outputs)."""
    key = self.key
    def add(node: Any, value: V) -> None:
      if (c := node._cache) is None: node._remember(key, value)
      else: c[key] = value
    return add

  def __contains__(self, node: Any) -> bool: return (c := node._cache) is not None and self.key in c

  def pop(self, node: Any, default: Any = _MISSING) -> V | Any:
    if (c := node._cache) is None or (v := c.pop(self.key, _MISSING)) is _MISSING:
      if default is _MISSING: raise KeyError(node)
      return default
    return v
