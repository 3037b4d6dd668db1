"""Which live tensors hold a node in their graph: weak links from each node of a lazy tensor's graph up to the nodes
and tensors made over it.

realize() must point every live tensor whose graph contains a realized node at the new buffer. Looking at every live
tensor on every realize makes each realize slower the more tensors a program keeps (a list of input batches); these
links answer from the realized nodes upwards instead, visiting only the graphs that contain them.

A node's entry is a weak reference to it (dropped with the node) listing weak references to its users: the nodes
made over it (their own entries) and the tensors holding it. A node is linked once, with every node below it except
buffers and source-less leaves, which are never realized nodes; so an entry exists for each node of a linked graph.
"""
from __future__ import annotations
import weakref
from typing import Any, Iterable
from tinyplug.uop.ops import Ops, UOp

class _NodeRef(weakref.ref):
  __slots__ = ("key", "users", "limit")

# id(node) -> its entry (ids are not reused while the entry lives: it is removed when the node is freed)
_linked: dict[int, _NodeRef] = {}

# what the tests read: node entries made, and entries and tensors looked at while finding a realized node's holders
counters = {"linked": 0, "visited": 0}

def _unlink(ref: _NodeRef, linked: dict = _linked) -> None:
  if linked.get(ref.key) is ref: del linked[ref.key]

def _entry(node: UOp) -> _NodeRef:
  ref = _NodeRef(node, _unlink)
  ref.key, ref.users, ref.limit = id(node), [], 16
  _linked[ref.key] = ref
  counters["linked"] += 1
  return ref

def _add_user(entry: _NodeRef, user: weakref.ref) -> None:
  users = entry.users
  users.append(user)
  if len(users) > entry.limit:   # a long-lived node gets users that die (each step's graph): drop them now and then
    node = entry()
    users[:] = [r for r in users if (o := r()) is not None and (type(r) is _NodeRef or o._uop is node)]
    entry.limit = 2 * len(users) + 16

def link(tensor_ref: weakref.ref, node: UOp) -> None:
  """Record that the tensor behind `tensor_ref` holds `node` (a graph with something to compute), linking the nodes
  of its graph not linked yet."""
  if (entry := _linked.get(id(node))) is None:
    entry = _entry(node)
    stack = [(node, entry)]
    while stack:
      n, n_entry = stack.pop()
      for s in n.src:
        if not s.src or s.op is Ops.BUFFER: continue
        if (s_entry := _linked.get(id(s))) is None:
          s_entry = _entry(s)
          stack.append((s, s_entry))
        _add_user(s_entry, n_entry)
  _add_user(entry, tensor_ref)

def is_held(node: UOp) -> bool:
  """Whether a linked live tensor holds `node` itself."""
  if (entry := _linked.get(id(node))) is None: return False
  for r in entry.users:
    if type(r) is not _NodeRef and (t := r()) is not None and t._uop is node: return True
  return False

def holders(nodes: Iterable[UOp]) -> list[tuple[Any, UOp]]:
  """(tensor, the node it holds) for each linked live tensor whose graph contains one of `nodes`."""
  stack = []
  for n in nodes:
    if (e := _linked.get(id(n))) is not None: stack.append(e)
  if not stack: return []   # (the usual realize: no graph is over the realized nodes)
  found, seen = [], set()
  while stack:
    entry = stack.pop()
    if (node := entry()) is None or entry.key in seen: continue
    seen.add(entry.key)
    counters["visited"] += 1
    for r in entry.users:
      if type(r) is _NodeRef: stack.append(r)
      elif (t := r()) is not None and t._uop is node:
        counters["visited"] += 1
        found.append((t, node))
  return found
