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

def wmma_chain(copies: list[UOp]) -> UOp | None:
  """A fully unrolled sum of element e of WMMAs from a zero C (a tensor-core reduction with no loop left): the WMMAs
  accumulate one into the next (each one's D is the next one's C), instead of ADDs of their results. Every element's
  sum builds the same chain (UOps are hash-consed), so each WMMA runs once. None where the copies are not so."""
  if len(copies) < 2 or not all(c.op is Ops.GEP and c.src[0].op is Ops.WMMA for c in copies): return None
  (e,), n_c = copies[0].arg, copies[0].src[0].dtype.count
  if any(c.arg != (e,) or any(x.op is not Ops.CONST or x.arg != 0 for x in c.src[0].src[-n_c:]) for c in copies): return None
  acc = list(copies[0].src[0].src[-n_c:])
  for c in copies:
    w = c.src[0]
    d = UOp(Ops.WMMA, w.dtype, (*w.src[:-n_c], *acc), w.arg)
    acc = [UOp(Ops.GEP, w.dtype.scalar(), (d,), (i,)) for i in range(n_c)]
  return acc[e]

def expand_unrolls(sink: UOp) -> UOp:
  memo: dict[UOp, UOp] = {}
  for u in sink.toposort():
    src = tuple(memo.get(s, s) for s in u.src)
    new = u if all(a is b for a, b in zip(src, u.src)) else UOp(u.op, u.dtype, src, u.arg)
    if new.op is Ops.REDUCE and any(r.arg[1] == "unroll" for r in new.src[1:]):
      unrolled = [r for r in new.src[1:] if r.arg[1] == "unroll"]
      rest = tuple(r for r in new.src[1:] if r.arg[1] != "unroll")
      copies = lane_copies(new.src[0], unrolled)
      body = None
      if new.arg is Ops.ADD and all(r.src[0].op is Ops.CONST and r.src[0].arg == 1 for r in rest):   # no loop left
        if (body := wmma_chain(lane_copies(new.src[0], unrolled + list(rest)))) is not None: rest = ()
      if body is None: body = balanced_tree(new.arg, copies)
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
