"""Expand: upcast and unroll axes become straight-line code, one copy of the work per element of the axis.

An unroll axis of a REDUCE folds its copies together inside the reduction (fewer loop trips, independent loads);
an upcast output axis gives each copy its own STORE (and its own accumulators), sharing every load that does
not depend on it. The renderer's compiler (LLVM's SLP vectorizer, say) then turns neighbouring copies into vectors."""
from __future__ import annotations
import itertools
from tinyplug.uop.ops import Ops, UOp

def _lanes(ranges: list[UOp]):
  for values in itertools.product(*(range(r.src[0].arg) for r in ranges)):
    yield {r: UOp.const(r.dtype, v) for r, v in zip(ranges, values)}

def lane_copies(root: UOp, ranges: list[UOp]) -> list[UOp]:
  """`root` once per lane of `ranges`, each range replaced by its value: only the nodes that depend on a range are
  rebuilt, in one walk per lane (cost: lanes x the dependent part, not lanes x a pattern rewrite of the graph)."""
  rs = set(ranges)
  dependent: dict[UOp, None] = {}
  for u in root.toposort():
    if u not in rs and any(s in rs or s in dependent for s in u.src): dependent[u] = None
  copies = []
  for lane in _lanes(ranges):
    memo: dict[UOp, UOp] = dict(lane)
    for u in dependent: memo[u] = UOp(u.op, u.dtype, tuple([memo.get(s, s) for s in u.src]), u.arg)
    copies.append(memo.get(root, root))
  return copies

def balanced_tree(op: Ops, vals: list[UOp]) -> UOp:
  # a balanced tree keeps dependency chains short
  while len(vals) > 1:
    vals = [UOp(op, vals[i].dtype, (vals[i], vals[i + 1])) if i + 1 < len(vals) else vals[i] for i in range(0, len(vals), 2)]
  return vals[0]

def expand_unrolls(sink: UOp) -> UOp:
  memo: dict[UOp, UOp] = {}
  for u in sink.toposort():
    src = tuple(memo.get(s, s) for s in u.src)
    new = u if all(a is b for a, b in zip(src, u.src)) else UOp(u.op, u.dtype, src, u.arg)
    if new.op is Ops.REDUCE and any(r.arg[1] == "unroll" for r in new.src[1:]):
      unrolled = [r for r in new.src[1:] if r.arg[1] == "unroll"]
      rest = tuple(r for r in new.src[1:] if r.arg[1] != "unroll")
      body = balanced_tree(new.arg, lane_copies(new.src[0], unrolled))
      new = UOp(Ops.REDUCE, new.dtype, (body, *rest), new.arg) if rest else body
    if new is not u: memo[u] = new
  return memo.get(sink, sink)

def expand_upcasts(sink: UOp) -> UOp:
  upcast = sorted({u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] == "upcast"}, key=lambda r: r.arg)
  if not upcast: return sink
  stores = []
  for s in sink.src:
    below = s.toposort()
    mine = [r for r in upcast if r in below]
    stores.extend(lane_copies(s, mine)) if mine else stores.append(s)
  return UOp(Ops.SINK, sink.dtype, tuple(stores), sink.arg)

def expand(sink: UOp) -> UOp:
  return expand_upcasts(expand_unrolls(sink))
