"""A row kernel's output pass reads back what its reduce pass computed (fuse_rows' linear-program pass).

softmax's rows, and the cross-entropy gradient's, take three passes over a row in one kernel: its max, the sum of
`exp(x - max)`, then the output `exp(x - max) / sum` (with more math round it). The output pass computes the same
`exp(x - max)` at each element again, ~20 instructions of the exp for nothing. Here the reduce pass also stores that
value into the output row, at the element the output pass will write, and the output pass loads it instead of
computing it again: one store and one load per element (the row is in L1 between the passes) in place of the exp.
The values are the very ones computed before: bit for bit the same output.

Only where it is safe without further analysis: a device that runs loops (each row's passes run one after another on
one thread), one store into a kernel buffer in the whole program and no load of that buffer, the value a scalar of the
buffer's own dtype, the reduce loop over the same number of elements as the output loop and closed before it opens."""
from __future__ import annotations
from typing import Any
from tinyplug.backend import shareable_loop
from tinyplug.uop.ops import GroupOp, Ops, UOp

# the least number of nodes the output pass must compute again for the reuse to pay (a store and a load cost ~2)
MIN_SAVED = 8

def reuse_reduce_values(uops: list[UOp], ctx: Any = None) -> list[UOp]:
  """The linear program with the output loop's largest value that its reduce loop computed already stored there and
  loaded back (see the module's docstring); the program unchanged where that does not apply."""
  if ctx is not None and not ctx.renderer.runs_loops: return uops
  stores = [u for u in uops if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
  if len(stores) != 1: return uops
  store = stores[0]
  index, value = store.src
  out = index.src[0]
  if len(index.src) != 2 or value.dtype != out.dtype.base or value.dtype.count != 1: return uops
  if any(u.op is Ops.INDEX and u.src[0] is out and u is not index for u in uops): return uops   # read elsewhere
  if any(u.op is Ops.LOAD and u.src[0] is index for u in uops): return uops
  where = {u: i for i, u in enumerate(uops)}
  ends = {u.src[0]: i for i, u in enumerate(uops) if u.op is Ops.END}
  at = where[store]
  # the output loop: the innermost range open at the store
  open_ranges = [r for r in uops[:at] if r.op is Ops.RANGE and ends.get(r, -1) > at]
  if not open_ranges: return uops
  loop = max(open_ranges, key=where.__getitem__)
  start = where[loop]
  if loop not in index.toposort(): return uops
  # a reduce loop over as many elements, closed before the output loop opens, inside the same enclosing loops
  enclosing = [r for r in open_ranges if r is not loop]
  # each row on one thread: threads share out an enclosing loop (a shared output loop would have every thread store
  # the whole row in its reduce pass, over another's finished elements)
  if not enclosing or (shared := shareable_loop(uops)) is None or shared not in enclosing: return uops
  outer_start = max((where[r] for r in enclosing), default=-1)
  for red in uops[outer_start + 1:start]:
    if red.op is not Ops.RANGE or red.src[0] is not loop.src[0] or ends.get(red, len(uops)) > start: continue
    found = _shared_value(uops, where, loop, red, start, at, ends[red])
    if found is not None: return _rewrite(uops, where, store, loop, red, ends[red], *found)
  return uops

# (both walk a node's toposort, sources first: no recursion, however deep the kernel's math)
def _depends_on(u: UOp, r: UOp, memo: dict[UOp, bool]) -> bool:
  for n in u.toposort():
    if n not in memo: memo[n] = n is r or any([memo[s] for s in n.src])
  return memo[u]

def _over(u: UOp, old: UOp, new: UOp, memo: dict[UOp, UOp]) -> UOp:
  """u with range `old` replaced by `new` (a node that does not exist yet is made)."""
  for n in u.toposort():
    if n in memo: continue
    if n is old:
      memo[n] = new
      continue
    src = tuple([memo[s] for s in n.src])
    memo[n] = n if all(a is b for a, b in zip(src, n.src)) else n.replace(src=src)
  return memo[u]

_PURE = frozenset({*GroupOp.ALU, Ops.CONST, Ops.CAST, Ops.BITCAST, Ops.INDEX, Ops.LOAD})

def _shared_value(uops: list[UOp], where: dict[UOp, int], loop: UOp, red: UOp, start: int, at: int,
                  red_end: int) -> tuple[UOp, UOp, int] | None:
  """(the output loop's value, the reduce loop's same value, how many nodes it saves) of the largest one, or None."""
  in_red = set(uops[where[red] + 1:red_end])
  body = uops[start + 1:at]
  dep: dict[UOp, bool] = {}
  over: dict[UOp, UOp] = {}
  best = None
  for u in reversed(body):
    if u.op not in GroupOp.ALU or u.dtype != uops[at].src[1].dtype or not _depends_on(u, loop, dep): continue
    if best is not None and u in best[0].toposort(): continue   # inside the one found: smaller
    twin = _over(u, loop, red, over)
    if twin not in in_red: continue
    saved = sum(1 for n in u.toposort() if n.op in _PURE and where.get(n, -1) > start and _depends_on(n, loop, dep))
    if saved >= MIN_SAVED and (best is None or saved > best[2]): best = (u, twin, saved)
  return best

def _rewrite(uops: list[UOp], where: dict[UOp, int], store: UOp, loop: UOp, red: UOp, red_end: int, value: UOp,
             twin: UOp, saved: int) -> list[UOp]:
  index = store.src[0]
  if where[index] > where[value]: return uops   # the load would come before its address
  # in the reduce loop: the value stored where the output loop will write (new index math made before it)
  red_index = _over(index, loop, red, {})
  # index math of the program's own that comes after the reduce loop (an output view's offset) is not there yet
  if any(where[n] >= red_end for n in red_index.toposort() if n in where): return uops
  made = [n for n in red_index.toposort() if n not in where]
  keep = UOp(Ops.STORE, store.dtype, (red_index, twin))
  new = uops[:red_end] + made + [keep] + uops[red_end:]
  # in the output loop: the value loaded back; everything using it remade over the load
  load = UOp(Ops.LOAD, value.dtype, (index,))
  swap: dict[UOp, UOp] = {value: load}
  out: list[UOp] = []
  for u in new:
    if u is value:
      out.append(load)
      continue
    if any(s in swap for s in u.src):
      swap[u] = u.replace(src=tuple(swap.get(s, s) for s in u.src))
      out.append(swap[u])
    else: out.append(u)
  # nodes nothing uses any more (the value's own math) are dropped
  used: set[UOp] = set()
  kept: list[UOp] = []
  for u in reversed(out):
    if u.op in _PURE and u not in used: continue
    used.update(u.src)
    kept.append(u)
  return kept[::-1]

def make_pass(): return reuse_reduce_values
