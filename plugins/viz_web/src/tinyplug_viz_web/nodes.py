"""The node table of a loaded trace: node id -> Node, decoded lazily.

A version-2 file stores nodes in `nodes` records (a batch of consecutive ids per event). The reader keeps each batch
as its raw JSON line and decodes it the first time one of its nodes is asked for, so opening a trace of hundreds of
thousands of nodes costs a scan of the file, not a Python object per node; a step's graph decodes only its batches."""
from __future__ import annotations
import bisect, json
from typing import Iterator, NamedTuple

class Node(NamedTuple):
  """One UOp of the trace (a tuple: equal nodes are equal keys)."""
  op: str
  dtype: str
  src: tuple[int, ...]
  arg: str

class LostNode(KeyError):
  def __str__(self) -> str: return f"node {self.args[0]} is not in the trace (a damaged or cut-off trace lost it)"

class NodeTable:
  def __init__(self) -> None:
    self.starts: list[int] = []        # first id of each batch, ascending
    self.ends: list[int] = []          # one past the last id of each batch
    self.raw: list[bytes | None] = []  # the batch's JSON line until decoded
    self.decoded: list[list[Node | None] | None] = []
    self.extra: dict[int, Node] = {}   # version-1 nodes, and nodes the viewer adds (a schedule's KERNEL marks)
    self.top = -1
    self.gaps = False                  # some ids were lost (a batch is missing): decoded nodes check their sources

  # ---- building (the reader) ----
  def add_batch(self, first: int, count: int, raw: bytes) -> None:
    if count <= 0: return
    if self.starts and first < self.ends[-1]: raise ValueError(f"node batch at {first} overlaps an earlier one")
    if first != (self.ends[-1] if self.starts else 0): self.gaps = True
    self.starts.append(first); self.ends.append(first + count); self.raw.append(raw); self.decoded.append(None)
    self.top = max(self.top, first + count - 1)

  def __setitem__(self, i: int, node: Node) -> None:
    self.extra[i] = node
    self.top = max(self.top, i)

  # ---- reading ----
  def has_id(self, i: int) -> bool:
    """Whether the trace holds an id (cheap: no decoding; a node may still turn out to be damaged)."""
    if not self.gaps and not self.extra: return 0 <= i <= self.top   # ids 0..top, all there
    if i in self.extra: return True
    b = bisect.bisect_right(self.starts, i) - 1
    return b >= 0 and i < self.ends[b]

  def _decode(self, b: int) -> list[Node | None]:
    nodes = self.decoded[b]
    if nodes is not None: return nodes
    if self.gaps:   # sources must be checked against earlier batches: decode those first, in order (no recursion)
      for e in range(b):
        if self.decoded[e] is None: self._decode(e)
    first, raw = self.starts[b], self.raw[b]
    nodes: list[Node | None] = []
    try: items = json.loads(raw)["n"] if raw is not None else []
    except (ValueError, KeyError, TypeError): items = []
    for k in range(self.ends[b] - first):
      n = first + k
      try:
        a = items[k]
        src = tuple([n - d for d in a[2]])
        if self.gaps or any(s >= n for s in src):   # a source in a lost batch (or a malformed delta): this node is lost too
          if any(s >= n or (nodes[s - first] is None if s >= first else not self._ok(s)) for s in src): raise LostNode(n)
        nodes.append(Node(str(a[0]), str(a[1]), src, str(a[3]) if len(a) > 3 else ""))
      except (LostNode, IndexError, TypeError, KeyError): nodes.append(None)
    self.decoded[b], self.raw[b] = nodes, None
    return nodes

  def _ok(self, i: int) -> bool:
    try: self[i]
    except KeyError: return False
    return True

  def __getitem__(self, i: int) -> Node:
    if (node := self.extra.get(i)) is not None: return node
    b = bisect.bisect_right(self.starts, i) - 1
    if b < 0 or i >= self.ends[b]: raise LostNode(i)
    node = self._decode(b)[i - self.starts[b]]
    if node is None: raise LostNode(i)
    return node

  def get(self, i: int, default: Node | None = None) -> Node | None:
    try: return self[i]
    except KeyError: return default

  def __contains__(self, i: object) -> bool: return isinstance(i, int) and self._ok(i)

  def __len__(self) -> int: return sum(e - s for s, e in zip(self.starts, self.ends)) + len(self.extra)

  def __bool__(self) -> bool: return self.top >= 0

  def max_id(self) -> int: return self.top

  def items(self) -> Iterator[tuple[int, Node]]:
    for b, first in enumerate(self.starts):
      for k, node in enumerate(self._decode(b)):
        if node is not None: yield first + k, node
    yield from sorted(self.extra.items())

  def __iter__(self) -> Iterator[int]:
    for i, _ in self.items(): yield i
