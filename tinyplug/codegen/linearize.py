"""Linearize: a kernel graph with RANGEs and REDUCEs becomes a list of UOps in execution order.

A REDUCE turns into an accumulator (DEFINE_REG): set to the identity, updated inside its loops, read after them.
`AFTER(memory, deps...)` is the memory itself, placed after its deps (tc_staging: shared memory read after the BARRIER
that follows its stores): it orders, and the linear program holds no AFTER.
Before a loop opens, everything that does not depend on it is emitted, so loop-invariant work stays outside."""
from __future__ import annotations
import math
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp

def reduce_identity(op: Ops, dtype) -> float | int | bool:
  if op is Ops.ADD: return 0
  if op is Ops.MUL: return 1
  if op is Ops.MAX: return dtypes.min(dtype) if not dtypes.is_float(dtype) else -math.inf
  raise ValueError(f"no identity for a {op} reduction")

class _Linearizer:
  def __init__(self, sink: UOp, scan_lanes: int = 0):
    self.sink, self.scan_lanes = sink, scan_lanes
    self.order = list(sink.toposort())
    self.rdeps: dict[UOp, frozenset[UOp]] = {}
    # a read of a buffer that the kernel adds into inside an ordered loop (a scatter-add's table) is part of each of
    # that loop's steps, even where its address does not change with them (a block of rows added into one row)
    ordered = frozenset(u for u in self.order if u.op is Ops.RANGE and u.arg[1] == "ordered")
    written = {_address_buffer(u.src[0]) for u in self.order if u.op is Ops.STORE} if ordered else set()
    for u in self.order:
      deps = frozenset().union(*(self.rdeps[s] for s in u.src)) if u.src else frozenset()
      if ordered and u.op is Ops.LOAD and _address_buffer(u.src[0]) in written: deps = deps | ordered
      if u.op is Ops.RANGE: deps = deps | {u}
      elif u.op is Ops.REDUCE: deps = deps - set(u.src[1:])
      self.rdeps[u] = deps
    # bit masks, one pass over the graph, so that the questions below cost O(1) per REDUCE, not a walk each:
    # below[u]: the REDUCEs under u (u included); red_loops[u]: the loops of those REDUCEs
    self.reduces = [u for u in self.order if u.op is Ops.REDUCE]
    self.reduce_bit = {u: 1 << i for i, u in enumerate(self.reduces)}
    loop_bit = {u: 1 << i for i, u in enumerate(x for x in self.order if x.op is Ops.RANGE)}
    self.below: dict[UOp, int] = {}
    self.red_loops: dict[UOp, int] = {}
    for u in self.order:
      below = red_loops = 0
      for s in u.src: below, red_loops = below | self.below[s], red_loops | self.red_loops[s]
      if u.op is Ops.REDUCE:
        below |= self.reduce_bit[u]
        for r in u.src[1:]: red_loops |= loop_bit[r]
      self.below[u], self.red_loops[u] = below, red_loops
    self.loop_bits = lambda loops: sum(loop_bit[r] for r in set(loops))
    self.out: list[UOp] = []
    self.done: dict[UOp, UOp] = {}
    self.open: list[UOp] = []
    self.inside: dict[UOp, list[UOp]] = {}   # loop -> the nodes emitted in it that depend on it
    self.n_regs = 0

  def emit(self, u: UOp) -> UOp:
    self.out.append(u)
    return u

  def need(self, u: UOp) -> UOp:
    if (hit := self.done.get(u)) is not None: return hit
    if u not in self.rdeps:  # a node made during linearizing (accumulator access)
      self.rdeps[u] = frozenset().union(*(self.rdeps[s] for s in u.src)) if u.src else frozenset()
    if not self.rdeps[u] <= set(self.open):
      missing = sorted(r.arg for r in self.rdeps[u] - set(self.open))
      raise RuntimeError(f"linearize: {u.op} needs loops {missing} that are not open")
    if u.op is Ops.REDUCE: ret = self.reduce(u)
    elif u.op is Ops.AFTER:   # its first source, with the others emitted too before anything that uses it
      ret = self.need(u.src[0])
      for s in u.src[1:]: self.need(s)
    elif u.op is Ops.RANGE: raise RuntimeError(f"linearize: loop {u.arg} is used but was never opened")
    else:
      src = tuple(self.need(s) for s in u.src)
      ret = self.emit(u if all(a is b for a, b in zip(src, u.src)) else UOp(u.op, u.dtype, src, u.arg))
    self.done[u] = ret
    for r in self.rdeps[u]: self.inside.setdefault(r, []).append(u)
    return ret

  def hoist(self, root: UOp) -> None:
    """Emit every node under `root` that the loops open now are enough for."""
    opened = set(self.open)
    for u in root.toposort():
      if u not in self.done and u.op not in (Ops.RANGE, Ops.SINK) and self.rdeps[u] <= opened: self.need(u)

  def hoist_reduces(self, root: UOp) -> None:
    """Emit the reductions that the loops open now are enough for, before an inner loop opens: a row kernel
    (softmax) reduces each row once, not once per output element of the row."""
    opened = set(self.open)
    pending = [u for u in (self.reduces if root is self.sink else root.toposort()) if u.op is Ops.REDUCE
               and u not in self.done]
    # a loop variable shared with a reduction that must wait stays for later: both run in one loop then
    waiting = self.loop_bits(r for u in pending if not self.rdeps[u] <= opened for r in u.src[1:])
    for u in pending:
      if u in self.done or not self.rdeps[u] <= opened: continue
      if not self.red_loops[u] & waiting: self.need(u)

  def open_loop(self, r: UOp) -> None:
    self.need(r.src[0])
    self.done[r] = self.emit(r)
    self.open.append(r)

  def close_loop(self, r: UOp) -> None:
    assert self.open[-1] is r, "loops must close innermost first"
    self.emit(UOp(Ops.END, dtypes.void, (r,)))
    self.open.pop()
    # what was computed inside is out of scope now: two reductions over the same loops that run in separate nests
    # (one hoisted out of an outer loop) must each compute their loop bodies' values again
    for u in self.inside.pop(r, ()): self.done.pop(u, None)

  def reduce(self, red: UOp) -> UOp:
    """Emit `red` together with every other REDUCE over the same loops that can run now: one loop, many accumulators."""
    ranges = sorted(red.src[1:], key=lambda r: r.arg)
    opened = set(self.open)
    group = [x for x in self.reduces if x not in self.done and set(x.src[1:]) == set(ranges)
             and self.rdeps[x] <= opened]
    if red not in group: group.append(red)
    # a reduce that needs another one of the group must wait for the next loop
    in_group = sum(self.reduce_bit.get(x, 0) for x in group)
    group = [x for x in group if not self.below.get(x.src[0], 0) & in_group] or [red]
    slots = []
    for x in group:
      acc = self.emit(UOp(Ops.DEFINE_REG, x.dtype.ptr(1), arg=self.n_regs))
      self.rdeps[acc], self.done[acc] = frozenset(), acc
      self.n_regs += 1
      slot = self.need(UOp(Ops.INDEX, x.dtype.ptr(1), (acc, self.need(UOp.const(dtypes.index, 0)))))
      self.emit(UOp(Ops.STORE, dtypes.void, (slot, self.need(UOp.const(x.dtype, reduce_identity(x.arg, x.dtype))))))
      slots.append(slot)
    for x in group: self.hoist(x.src[0])
    if self.scan_lanes and self.scan_matches(group, slots, ranges): return self.finish_reduce(group, slots, red)
    for r in ranges: self.open_loop(r)
    effects: list[UOp] = []
    chains = _wmma_chains(group, effects)
    in_chains = {x for _, targets in chains for x in targets}
    slot_of = dict(zip(group, slots))
    # what the WMMAs carry (tc_staging's fill of the next K step): its global loads first, in flight while the
    # tensor cores run, its stores after them
    for u in (x for e in effects for x in e.toposort()):
      if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL: self.need(u)
    self.accumulate_in_wmmas([(ws, [slot_of[x] for x in targets]) for ws, targets in chains])
    rest = [(x, slot) for x, slot in zip(group, slots) if x not in in_chains]
    gated: dict[UOp, list[tuple[UOp, UOp, UOp]]] = {}
    plain = []
    for x, slot in rest:
      if (g := sparse_gate(x)) is not None: gated.setdefault(g[0], []).append((x, slot, g[1]))
      else: plain.append((x, slot))
    for (x, slot), v in zip(plain, [self.need(x.src[0]) for x, _ in plain]): self.accumulate(x, slot, v)
    for cond, updates in gated.items():
      # a one-hot match (`x[idx]`'s gradient: idx[i] == row) adds its row only where it holds: one scalar compare
      # per step instead of a select and an add per element (rows x indices x width of work, not rows x indices)
      self.gated_updates(updates, cond)
    for e in effects: self.need(e)
    for r in reversed(ranges): self.close_loop(r)
    return self.finish_reduce(group, slots, red)

  def finish_reduce(self, group: list[UOp], slots: list[UOp], red: UOp) -> UOp:
    for x, slot in zip(group, slots):
      self.done[x] = self.emit(UOp(Ops.LOAD, x.dtype, (slot,), arg=("acc", slot.src[0].arg, "out")))
    return self.done[red]

  def new_range(self, size: int, dtype) -> UOp:
    r = UOp(Ops.RANGE, dtype, (UOp.const(dtype, size),),
            (max((u.arg[0] for u in self.rdeps if u.op is Ops.RANGE), default=0) + 1, "reduce"))
    self.rdeps[r] = frozenset({r})
    return r

  def track(self, root: UOp) -> UOp:
    """root, with the loops each node under it needs known (nodes made while linearizing)."""
    for u in root.toposort():
      if u not in self.rdeps:
        self.rdeps[u] = frozenset().union(*(self.rdeps[s] for s in u.src)) if u.src else frozenset()
    return root

  def gated_updates(self, updates: list[tuple[UOp, UOp, UOp]], cond: UOp) -> None:
    self.emit(branch := UOp(Ops.IF, dtypes.void, (self.need(self.track(cond)),)))
    before = set(self.done)
    for x, slot, v in updates: self.accumulate(x, slot, self.need(self.track(v)))
    self.emit(UOp(Ops.ENDIF, dtypes.void, (branch,)))
    for u in set(self.done) - before: del self.done[u]   # computed under the branch: not there after it

  def scan_matches(self, group: list[UOp], slots: list[UOp], ranges: list[UOp]) -> bool:
    """A reduction made only of one-hot matches (`x[idx]`'s gradient: for each output row, add g[i] where
    idx[i] == row) tests `scan_lanes` indices at a time (the renderer's `match_scan_lanes`): one branch on the OR of
    their matches (one vector load and compare where the index is read in order), and only a group with a match runs
    its indices one by one, in order (the sum is the same, bit for bit). Most groups hold no match (a row of a table
    is rarely picked): a vector compare per group instead of a compare and a branch per index. False (nothing
    emitted) where it does not apply."""
    r = ranges[-1]   # the innermost loop is scanned (an Embedding's ids of shape (batch, seq): the seq loop)
    if r.src[0].op is not Ops.CONST or not isinstance(r.src[0].arg, int): return False
    gates = [sparse_gate(x) for x in group]
    if any(g is None for g in gates) or len({g[0] for g in gates}) != 1: return False
    cond, n = gates[0][0], r.src[0].arg
    # the most lanes, halved down to 4, that leave at least two groups
    lanes = next((q for q in (self.scan_lanes >> s for s in range(8)) if 4 <= q and n >= 2 * q), None)
    if lanes is None or r not in cond.toposort(): return False
    for o in ranges[:-1]: self.open_loop(o)
    for x in group: self.hoist(x.src[0])   # what the outer loops alone give: before the scan's loops, seen by the tail
    outer, inner = self.new_range(n // lanes, r.dtype), self.new_range(lanes, r.dtype)   # the loop's own int type
    self.open_loop(outer)
    base = outer * UOp.const(r.dtype, lanes)
    if (tests := _vector_matches(cond, r, base, lanes)) is None:
      tests = [cond.substitute({r: base + UOp.const(r.dtype, lane)}) for lane in range(lanes)]
    while len(tests) > 1: tests = [a | b for a, b in zip(tests[0::2], tests[1::2])] + tests[len(tests) & ~1:]
    self.emit(anyhit := UOp(Ops.IF, dtypes.void, (self.need(self.track(tests[0])),)))
    before = set(self.done)
    self.open_loop(inner)
    self.gated_updates([(x, slot, g[1].substitute({r: base + inner})) for x, slot, g in zip(group, slots, gates)],
                       cond.substitute({r: base + inner}))
    self.close_loop(inner)
    self.emit(UOp(Ops.ENDIF, dtypes.void, (anyhit,)))
    for u in set(self.done) - before: del self.done[u]
    self.close_loop(outer)
    if n % lanes:   # the last indices one by one
      tail = self.new_range(n % lanes, r.dtype)
      self.open_loop(tail)
      at = {r: tail + UOp.const(r.dtype, n - n % lanes)}
      self.gated_updates([(x, slot, g[1].substitute(at)) for x, slot, g in zip(group, slots, gates)],
                         cond.substitute(at))
      self.close_loop(tail)
    for o in reversed(ranges[:-1]): self.close_loop(o)
    return True

  def accumulate(self, x: UOp, slot: UOp, v: UOp) -> None:
    current = self.emit(UOp(Ops.LOAD, x.dtype, (slot,), arg=("acc", slot.src[0].arg, "in")))
    self.emit(updated := UOp(x.arg, x.dtype, (current, v)))
    self.emit(UOp(Ops.STORE, dtypes.void, (slot, updated)))

  def accumulate_in_wmmas(self, chains: list[tuple[list[UOp], list[UOp]]]) -> None:
    """Per chain (its WMMAs, the accumulator slots of D's elements): the accumulators are the first WMMA's C, each
    WMMA's D the next one's C, the last D is stored back: the tensor core accumulates, instead of an ADD per element
    after a WMMA from zero. The chains' WMMAs are emitted round by round (every chain's first, then every chain's
    second, ...), so a WMMA never waits on the one just issued (a dependent mma.sync stalls for its whole latency)."""
    accs = [[self.emit(UOp(Ops.LOAD, slot.dtype.base, (slot,), arg=("acc", slot.src[0].arg, "in"))) for slot in slots]
            for _, slots in chains]
    for i in range(max((len(ws) for ws, _ in chains), default=0)):
      for c, (wmmas, _) in enumerate(chains):
        if i >= len(wmmas): continue
        w, acc = wmmas[i], accs[c]
        operands = tuple(self.need(s) for s in w.src[:len(w.src) - len(acc)])
        d = self.emit(UOp(Ops.WMMA, w.dtype, (*operands, *acc), w.arg))
        accs[c] = [self.emit(UOp(Ops.GEP, w.dtype.scalar(), (d,), (e,))) for e in range(len(acc))]
    for (_, slots), acc in zip(chains, accs):
      for slot, v in zip(slots, acc): self.emit(UOp(Ops.STORE, dtypes.void, (slot, v)))

  def sibling_loops(self, loops: list[UOp]) -> bool:
    """Whether two of the sink's stores need output loops that neither's set holds the other's (a loop cut in pieces
    runs them one after another): nesting every loop would repeat each piece once per step of the others."""
    sets = [self.rdeps[s] & set(loops) for s in self.sink.src]
    return any(not (a <= b or b <= a) for i, a in enumerate(sets) for b in sets[i + 1:])

  def run_in_turn(self, loops: list[UOp]) -> list[UOp]:
    """The sink's stores in order, each inside only the output loops it needs: the loops open now that it does not
    need close (innermost first), and those it needs open. As a loop opens, what the stores run inside it share is
    emitted there, not inside the first store's inner loops: a value emitted inside one piece's loop would not be
    there for the next piece (the stores of one piece come one after another: a loop opens once)."""
    stores = list(self.sink.src)
    needs = [sorted(self.rdeps[s] & set(loops), key=lambda r: r.arg) for s in stores]
    self.hoist(self.sink)
    opened: set[UOp] = set()
    for i, s in enumerate(stores):
      while self.open and self.open != needs[i][:len(self.open)]: self.close_loop(self.open[-1])
      for r in needs[i][len(self.open):]:
        if r in opened: raise RuntimeError(f"linearize: loop {r.arg} is needed again after it closed (stores out of "
                                           "order)")
        opened.add(r)
        self.open_loop(r)
        for t, need in zip(stores[i:], needs[i:]):
          if need[:len(self.open)] != self.open: break
          self.hoist(t)
      self.need(s)
    for r in reversed(list(self.open)): self.close_loop(r)
    return self.out

  def run(self) -> list[UOp]:
    loops = sorted((u for u in self.order if u.op is Ops.RANGE and u.arg[1] != "reduce"), key=lambda r: r.arg)
    if self.sibling_loops(loops): return self.run_in_turn(loops)
    self.hoist(self.sink)
    for r in loops:
      self.open_loop(r)
      self.hoist_reduces(self.sink)
    for s in self.sink.src: self.need(s)
    for r in reversed(loops): self.close_loop(r)
    return self.out

def _address_buffer(addr: UOp) -> UOp | None:
  """The DEFINE_GLOBAL an address (INDEX, or a cast of one) points into; None for other memory."""
  while addr.op is not Ops.DEFINE_GLOBAL and addr.src: addr = addr.src[0]
  return addr if addr.op is Ops.DEFINE_GLOBAL else None

def _scalar_bool(c: UOp) -> UOp | None:
  """c as one bool: c itself, or the element a vector of c repeats."""
  if c.dtype.count == 1: return c
  if c.op is Ops.VECTORIZE and all(s is c.src[0] for s in c.src) and c.src[0].dtype.count == 1: return c.src[0]
  return None

def sparse_gate(red: UOp) -> tuple[UOp, UOp] | None:
  """(cond, value) for a sum of `cond ? value : 0` whose cond is one bool for all its lanes and matches a value read
  from memory against an output position (a one-hot match, as x[idx]'s gradient builds: idx[i] == row): the
  accumulator is updated only where it holds, once per output row at most per index. None otherwise (other masks
  keep their select: a branch per step that could not be predicted costs more)."""
  if red.arg is not Ops.ADD or (w := red.src[0]).op is not Ops.WHERE: return None
  zero = w.src[2]
  if not ((zero.op is Ops.CONST and zero.arg == 0) or (zero.op is Ops.VECTORIZE and all(
      z.op is Ops.CONST and z.arg == 0 for z in zero.src))): return None
  if (cond := _scalar_bool(w.src[0])) is None: return None
  return (cond, w.src[1]) if any(_one_hot_match(u) for u in cond.toposort() if u.op is Ops.CMPEQ) else None

def _vector_matches(cond: UOp, r: UOp, base: UOp, lanes: int) -> list[UOp] | None:
  """The lanes of `cond` at r = base .. base+lanes-1 from one vector load and one vector compare, where cond is
  `idx[off + r] == pos` (pos not depending on r); None otherwise. The scalar form's 16 loads and compares, once LLVM's
  SLP vectorizer joins them, compare in 64 bits (the loop counter was widened): twice the vectors."""
  if cond.op is not Ops.CMPEQ: return None
  ld, pos = cond.src if cond.src[0].op is Ops.LOAD else cond.src[::-1]
  if ld.op is not Ops.LOAD or len(ld.src) != 1 or (ix := ld.src[0]).op is not Ops.INDEX or len(ix.src) != 2: return None
  off = ix.src[1]
  rest = None if off is r else off.src[0] if off.op is Ops.ADD and off.src[1] is r else \
    off.src[1] if off.op is Ops.ADD and off.src[0] is r else off   # off = rest + r, rest free of r
  if r in pos.toposort() or (rest is not None and r in rest.toposort()): return None
  vix = UOp(Ops.INDEX, ix.dtype.vec(lanes), (ix.src[0], off.substitute({r: base})))
  eq = UOp(Ops.CMPEQ, dtypes.bool.vec(lanes), (UOp(Ops.LOAD, ld.dtype.vec(lanes), (vix,)),
                                               UOp(Ops.VECTORIZE, pos.dtype.vec(lanes), (pos,) * lanes)))
  return [UOp(Ops.GEP, dtypes.bool, (eq,), (lane,)) for lane in range(lanes)]

def _one_hot_match(eq: UOp) -> bool:
  """eq compares a value read from memory with an output position (a loop's index, no memory read on that side)."""
  def reads(u: UOp) -> bool: return any(x.op is Ops.LOAD for x in u.toposort())
  def position(u: UOp) -> bool:
    return not reads(u) and any(x.op is Ops.RANGE and isinstance(x.arg, tuple) and x.arg[-1] != "reduce"
                                for x in u.toposort())
  a, b = eq.src
  return (reads(a) and position(b)) or (reads(b) and position(a))

def _wmma_terms(u: UOp, effects: list[UOp]) -> list[UOp] | None:
  """The terms of a sum of WMMA elements (GEPs of WMMAs, added in any tree), or None when another term is in it. An
  element may come as `AFTER(element, effects...)`: the effects are added to `effects`."""
  terms, stack = [], [u]
  while stack:
    x = stack.pop()
    if x.op is Ops.ADD: stack += [x.src[1], x.src[0]]
    elif x.op is Ops.AFTER:
      effects.extend(e for e in x.src[1:] if e not in effects)
      stack.append(x.src[0])
    elif x.op is Ops.GEP and x.src[0].op is Ops.WMMA: terms.append(x)
    else: return None
  return terms

def _wmma_chains(group: list[UOp], effects: list[UOp]) -> list[tuple[list[UOp], tuple[UOp, ...]]]:
  """ADD reductions of a group whose values are sums of elements of WMMAs from a zero C (what the TC action makes), as
  (the WMMAs, the reduction of each element of D): every element of each WMMA feeds exactly one of them, and the
  WMMAs that feed the same reductions run one after another on one accumulator. [] where the values are not so.
  The effects the elements carry (`AFTER`) are added to `effects`."""
  feeds: dict[UOp, list] = {}
  for x in group:
    if x.arg is not Ops.ADD: continue
    terms = _wmma_terms(x.src[0], effects)
    if terms is None or any(t.dtype != x.dtype for t in terms): continue
    for t in terms:
      w, (e,) = t.src[0], t.arg
      slots = feeds.setdefault(w, [None] * w.dtype.count)
      if slots[e] is not None or any(c.op is not Ops.CONST or c.arg != 0 for c in w.src[-w.dtype.count:]): return []
      slots[e] = x
  chains: dict[tuple, list[UOp]] = {}
  for w, targets in feeds.items():
    if None in targets: return []
    chains.setdefault(tuple(targets), []).append(w)
  owner: dict[UOp, tuple] = {}
  for targets in chains:
    for x in targets:
      if owner.setdefault(x, targets) is not targets: return []   # one reduction fed by two groups of WMMAs
  return [(ws, targets) for targets, ws in chains.items()]

def linearize(sink: UOp, scan_lanes: int = 0) -> list[UOp]:
  """The kernel as a list of UOps in execution order (the form renderers and the interpreter consume); `scan_lanes`:
  the renderer's `match_scan_lanes` (one-hot match sums tested that many indices at once; 0 one by one)."""
  return _Linearizer(sink, scan_lanes).run()
