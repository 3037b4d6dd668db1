"""The `vectorize` pass set: groups of upcast/unroll lanes become vector UOps, within the widths the renderer declares.

Its pass runs in the "devectorize" stage. Off (`TINY_PLUGINS=-vectorize`), every renderer gets scalar lanes, which
is what a renderer declaring no vector widths always gets: correct, and left to the device compiler to vectorize.

The expander leaves one scalar copy of the work per lane. This pass works bottom-up from the stores, like an SLP
vectorizer on the graph:
- STOREs to one buffer at consecutive addresses (`base + c`, `base + c + 1`, ...) become one vector STORE of a
  width the renderer declares for the value's dtype (`Renderer.vector_widths`), their values one vector value;
- where those would be built from gathers, or (a reduction's) are narrower than another grouping, STOREs at one
  constant stride (a tile's output channels) are grouped instead when their values then vectorize without gathers;
  where those groups start at consecutive addresses (a tile's row positions) their lanes are stored the other way
  round, each run of consecutive addresses one vector put together from one lane of each group (a transpose in
  registers), else one scatter where the renderer declares `scatter_stores`, else each lane stored on its own;
- a vector of lanes is built from its lanes: equal lanes broadcast, constants become a (V)CONST, LOADs at consecutive
  addresses one vector LOAD, same ALU/CAST/BITCAST/REDUCE on every lane one vector op of vectorized sources
  (a vector REDUCE is a vector accumulator);
- an op whose dtypes the renderer cannot hold in vectors (bool comparisons in OpenCL, say) is computed per lane on
  GEPs of its vectorized sources; lanes that are not alike (gathers, per-lane gates, differing ops) stay scalar and
  are put together with VECTORIZE (a REDUCE's lanes stay per lane where its value needs gathers, bool lanes that
  compare loaded values one by one included: each lane's row then gets the vector accumulator below), unless each
  gathered element then takes an exp2, log2 or sin;
- a scalar REDUCE whose value an unroll split into a balanced tree of the reduce op (the expander's lanes) gets a
  vector accumulator over the tree's leaves and folds its lanes after the loop (a sum of 16M floats accumulates
  in `<8 x float>`), when those leaves vectorize without gathers.
Renderers that declare no vector widths get the program unchanged. A renderer with `vector_alu = False` (a SIMT GPU,
where every thread is scalar) gets vector LOADs and STOREs only: math, casts and reductions stay per lane, on GEPs of
the loaded vectors, and their lanes are put together with VECTORIZE for a vector store."""
from __future__ import annotations
from collections import Counter
from typing import Mapping
from tinyplug.uop.dtype import DType, PtrDType, dtypes
from tinyplug.uop.ops import Ops, GroupOp, UOp
from tinyplug.codegen.expander import balanced_tree

_LANEWISE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST}
_REDUCE_OPS = (Ops.ADD, Ops.MUL, Ops.MAX)

def vector_widths(renderer) -> Mapping[DType, tuple[int, ...]]:
  """The renderer's vector widths per scalar dtype (largest first); none declared means scalars only."""
  return renderer.vector_widths or {}

_VECTOR_MEMORY = (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL)

def _memory(buf: UOp) -> Ops:
  """The kind of memory an INDEX addresses (through an AFTER: shared memory read after a barrier)."""
  return buf.src[0].op if buf.op is Ops.AFTER else buf.op

def split_offset(idx: UOp) -> tuple[frozenset, int]:
  """An index as (the multiset of its non-constant terms, its constant part): equal keys differ by a constant."""
  terms: Counter = Counter()
  const, stack = 0, [idx]
  while stack:
    x = stack.pop()
    if x.op is Ops.ADD: stack.extend(x.src)
    elif x.op is Ops.CONST: const += int(x.arg)
    else: terms[x] += 1
  return frozenset(terms.items()), const

def affine_offset(idx: UOp) -> tuple[frozenset, int]:
  """An index as (its non-constant terms with their constant factors, its constant part), constant factors
  distributed over sums and differences: ((r*16 + 3)*144) is r with factor 2304, plus 432."""
  terms: Counter = Counter()
  const, stack = 0, [(idx, 1)]
  while stack:
    x, f = stack.pop()
    if x.op is Ops.ADD: stack.extend((s, f) for s in x.src)
    elif x.op is Ops.SUB: stack.extend(((x.src[0], f), (x.src[1], -f)))   # a countdown's lanes: 1023 - (8r + 1)
    elif x.op is Ops.NEG: stack.append((x.src[0], -f))
    elif x.op is Ops.CONST: const += int(x.arg) * f
    elif x.op is Ops.MUL and x.src[1].op is Ops.CONST: stack.append((x.src[0], f * int(x.src[1].arg)))
    elif x.op is Ops.MUL and x.src[0].op is Ops.CONST: stack.append((x.src[1], f * int(x.src[0].arg)))
    else: terms[x] += f
  return frozenset((t, f) for t, f in terms.items() if f), const

def has_gather(v: UOp) -> bool:
  """Does building `v` fall back to scalar lanes anywhere (a VECTORIZE of lanes that are not all one value)? Gates
  put together lane by lane do not count: a few scalar compares, mostly of one value (a padded row's middle)."""
  return any(u.op is Ops.VECTORIZE and u.dtype.scalar() != dtypes.bool and len(set(u.src)) > 1 for u in v.toposort())

def has_data_gather(v: UOp) -> bool:
  """`has_gather`, or gates put together lane by lane that compare loaded values (each lane a scalar load and compare:
  a select of a row's keys by a mask, not a padded row's index bounds)."""
  return has_gather(v) or any(u.op is Ops.VECTORIZE and len(set(u.src)) > 1 and
                              any(x.op is Ops.LOAD for s in u.src for x in s.toposort()) for u in v.toposort())

LANEWISE_DECOMPOSED = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})

# vector nodes the pass may build per node of the kernel it is given: a sorting network's lanes exchange with other
# lanes at every level, so each level asks for permutations of the vectors below it; where some lanes simplified
# apart (a padded row) those stopped sharing and the count grew exponentially (one 16-long row: 4.6 MB of LLVM IR)
BUDGET_PER_NODE = 4

class _OverBudget(Exception):
  """The vectors outgrew the budget: the lanes in question stay scalar, put together with VECTORIZE."""

class Vectorizer:
  def __init__(self, renderer, budget: int | None = None):
    self.budget = budget
    self.widths = vector_widths(renderer)
    self.native = renderer.native_ops
    self.vector_alu = renderer.vector_alu
    self.scatter = renderer.scatter_stores
    self.lane_shuffles = renderer.lane_shuffles
    self.memo: dict[tuple[UOp, ...], UOp] = {}
    self.lane_memo: dict[tuple[tuple[UOp, ...], int], UOp] = {}

  def fits(self, dt: DType, n: int) -> bool:
    return dt.count == 1 and not isinstance(dt, PtrDType) and n in self.widths.get(dt, ())

  def native_op(self, op: Ops) -> bool:
    """May lanes of `op` become one vector op? A transcendental the renderer lacks may: the core's polynomial for it
    (codegen/decompositions.py, after this stage) is lane-wise math, so a vector of it decomposes into vector ops."""
    return self.vector_alu and (self.native is None or op in self.native or op in (Ops.CAST, Ops.BITCAST) or
                                op in LANEWISE_DECOMPOSED)

  # ---- a vector whose lane k is lanes[k] ----
  def vec(self, lanes: tuple[UOp, ...]) -> UOp:
    if (hit := self.memo.get(lanes)) is None:
      if self.budget is not None and len(self.memo) + len(self.lane_memo) > self.budget: raise _OverBudget
      hit = self._build(lanes)
      # gates whose lanes simplified differently (a row's edges) are cheaper as a few scalar compares put together
      # than as vector compares of gathered indices
      if hit.dtype.scalar() == dtypes.bool and hit.op is not Ops.VECTORIZE and has_gather(hit): hit = self.gather(lanes)
      self.memo[lanes] = hit
    return hit

  def _build(self, lanes: tuple[UOp, ...]) -> UOp:
    first, n = lanes[0], len(lanes)
    vdt = first.dtype.vec(n)
    if all(x is first for x in lanes):
      return UOp.const(vdt, first.arg) if first.op is Ops.CONST else UOp(Ops.VECTORIZE, vdt, lanes)
    if all(x.op is Ops.CONST for x in lanes): return UOp(Ops.VCONST, vdt, arg=tuple(x.arg for x in lanes))
    if not _alike(lanes):
      if (stepped := self._stepped(lanes)) is not None: return stepped
      if (bounds := _bound_compares(lanes)) is not None: return self.vec(bounds)
      return self.vec(lifted) if (lifted := _lift_where(lanes)) is not None else self.gather(lanes)
    built = self._build_alike(lanes)
    # integer lanes alike at the top may still differ below (one lane's index arithmetic folded another way)
    if dtypes.is_int(first.dtype) and first.op in _LANEWISE and has_gather(built):
      return stepped if (stepped := self._stepped(lanes)) is not None else built
    return built

  def _build_alike(self, lanes: tuple[UOp, ...]) -> UOp:
    first, n = lanes[0], len(lanes)
    vdt = first.dtype.vec(n)
    if first.op is Ops.LOAD: return self.load(lanes)
    if first.op is Ops.REDUCE: return self.reduce(lanes)
    if first.op in _LANEWISE:
      srcs = [tuple(x.src[i] for x in lanes) for i in range(len(first.src))]
      if self.native_op(first.op) and all(self.fits(s[0].dtype, n) for s in srcs):
        return UOp(first.op, vdt, tuple(self.vec(s) for s in srcs), first.arg)
      return UOp(Ops.VECTORIZE, vdt, tuple(self.lane(lanes, k) for k in range(n)))
    return self.gather(lanes)

  def _stepped(self, lanes: tuple[UOp, ...]) -> UOp | None:
    """Integer lanes that are one value plus a constant per lane, written differently (the simplifier folds lane 0's
    `(8r + 0) * -1 + n` to `r * -8 + n`: argmax's countdown) as that value broadcast plus the constants."""
    first, n = lanes[0], len(lanes)
    if not dtypes.is_int(first.dtype) or not self.native_op(Ops.ADD) or not self.fits(first.dtype, n): return None
    terms, base = affine_offset(first)
    if not terms: return None
    steps = []
    for x in lanes:
      key, const = affine_offset(x)
      if key != terms: return None
      steps.append(const - base)
    vdt = first.dtype.vec(n)
    return UOp(Ops.ADD, vdt, (UOp(Ops.VECTORIZE, vdt, (first,) * n), UOp(Ops.VCONST, vdt, arg=tuple(steps))))

  def gather(self, lanes: tuple[UOp, ...]) -> UOp:
    return UOp(Ops.VECTORIZE, lanes[0].dtype.vec(len(lanes)), lanes)

  def lane(self, lanes: tuple[UOp, ...], k: int) -> UOp:
    """Lane k of a group, computed from the vectorized sources where they vectorize (GEP), else from its own lanes."""
    key = (lanes, k)
    if (hit := self.lane_memo.get(key)) is not None: return hit
    first = lanes[0]
    if self.fits(first.dtype, len(lanes)) and (first.op not in _LANEWISE or self._vector_op_ok(lanes)):
      out = gep(self.vec(lanes), k)
    elif first.op in _LANEWISE and _alike(lanes):
      out = UOp(first.op, first.dtype, tuple(self.lane(tuple(x.src[i] for x in lanes), k) for i in range(len(first.src))),
                first.arg)
    else: out = lanes[k]
    self.lane_memo[key] = out
    return out

  def _vector_op_ok(self, lanes: tuple[UOp, ...]) -> bool:
    first = lanes[0]
    return self.native_op(first.op) and all(self.fits(s.dtype, len(lanes)) for s in first.src) and _alike(lanes)

  # ---- memory ----
  def contiguous(self, indexes: tuple[UOp, ...], lane_gates: bool = False) -> bool:
    """INDEXes of one buffer at consecutive addresses in lane order, under one gate (or none); with `lane_gates`,
    under any gates."""
    first = indexes[0]
    if any(i.op is not Ops.INDEX or i.src[0] is not first.src[0] or (i.src[2:] != first.src[2:] and not lane_gates)
           for i in indexes): return False
    key, start = split_offset(first.src[1])
    for k, i in enumerate(indexes[1:], 1):
      if split_offset(i.src[1]) != (key, start + k): return False
    return True

  def load(self, lanes: tuple[UOp, ...]) -> UOp:
    index, n = lanes[0].src[0], len(lanes)
    indexes = tuple(x.src[0] for x in lanes)
    if self.lane_shuffles and n > 1 and _descending(indexes):
      # lanes at descending addresses (a flipped axis): one load the right way round, its lanes reversed
      low = lanes[-1]
      v = UOp(Ops.LOAD, low.dtype.vec(n), (UOp(Ops.INDEX, low.src[0].dtype.vec(n), low.src[0].src),
                                           *self._alternatives(lanes[::-1])), low.arg)
      return UOp(Ops.GEP, v.dtype, (v,), tuple(range(n - 1, -1, -1)))
    if not self.contiguous(indexes):
      # gates that differ per lane (a padded row's edges) make a masked vector load where the renderer holds bools in
      # vectors; the gates themselves vectorize like any other value
      if not self.fits(dtypes.bool, n) or not self.contiguous(indexes, lane_gates=True): return self.gather(lanes)
      true = UOp.const(dtypes.bool, True)
      gate = self.vec(tuple(i.src[2] if len(i.src) > 2 else true for i in indexes))
      vindex = UOp(Ops.INDEX, index.dtype.vec(n), (index.src[0], index.src[1], gate))
    else: vindex = UOp(Ops.INDEX, index.dtype.vec(n), index.src)
    return UOp(Ops.LOAD, lanes[0].dtype.vec(n), (vindex, *self._alternatives(lanes)), lanes[0].arg)

  def _alternatives(self, lanes: tuple[UOp, ...]) -> tuple[UOp, ...]:
    """The vector a gated load of these lanes gives where its gate is off (0 for a lane without one); () if none has."""
    if not any(len(x.src) > 1 for x in lanes): return ()
    return (self.vec(tuple(x.src[1] if len(x.src) > 1 else UOp.const(x.dtype, 0) for x in lanes)),)

  def reduce(self, lanes: tuple[UOp, ...]) -> UOp:
    first = lanes[0]
    if not self.vector_alu or any(x.src[1:] != first.src[1:] for x in lanes): return self.gather(lanes)
    body = self.vec(tuple(x.src[0] for x in lanes))
    # a vector accumulator fed by gathers is worse than per-lane accumulators (which may vectorize their unrolls), and
    # so is one whose lanes compare loaded values one by one (topk's selection over rows: 8 rows' masks), unless each
    # gathered element then takes math that decomposes into many lane-wise ops (logsumexp's exp over short rows)
    if has_data_gather(body) and not any(u.op in LANEWISE_DECOMPOSED for u in body.toposort()): return self.gather(lanes)
    return UOp(Ops.REDUCE, first.dtype.vec(len(lanes)), (body, *first.src[1:]), first.arg)

  # ---- the pass ----
  def stores(self, sink: UOp) -> UOp:
    """Scalar STOREs at consecutive addresses become vector STOREs: the kernel's own (the SINK's sources) and those a
    BARRIER waits for or an AFTER carries (a tensor core's operands staged into shared memory)."""
    src = self.store_list(sink.src)
    if src is not sink.src: sink = UOp(Ops.SINK, sink.dtype, src, sink.arg)
    subs = {}
    for u in sink.toposort():
      if u.op not in (Ops.BARRIER, Ops.AFTER): continue
      keep = 1 if u.op is Ops.AFTER else 0   # an AFTER's first source is its value
      old = u.src[keep:]
      if (new := self.store_list(old)) is not old: subs[u] = UOp(u.op, u.dtype, u.src[:keep] + new, u.arg)
    return sink.substitute(subs, name="vector stores") if subs else sink

  def store_list(self, stores: tuple[UOp, ...]) -> tuple[UOp, ...]:
    # stores that differ by a constant after distributing constant factors ((r*16 + 3)*144: r*2304 + 432) may group at
    # a stride; within those, stores whose index terms are the same group at consecutive addresses
    families: dict[tuple, dict[tuple, list[tuple[int, UOp]]]] = {}
    for s in stores:
      if s.op is not Ops.STORE or s.src[0].op is not Ops.INDEX or s.src[1].dtype.count != 1: continue
      index = s.src[0]
      key, off = split_offset(index.src[1])
      family = (index.src[0], index.src[2:], affine_offset(index.src[1])[0], s.src[1].dtype)
      families.setdefault(family, {}).setdefault(key, []).append((off, s))
    replace: dict[UOp, UOp | None] = {}
    for (_, _, _, dt), groups in families.items():
      chunks = []
      for members in groups.values():
        members.sort(key=lambda m: m[0])
        chunks += [chunk for run in _runs(members) for chunk in self._chunks(run, dt) if len(chunk) >= 2]
      try: values = [self.vec(tuple(s.src[1] for s in chunk)) for chunk in chunks]
      except _OverBudget: values = [self.gather(tuple(s.src[1] for s in chunk)) for chunk in chunks]
      # another grouping where these would be gathers, or where a reduction's short rows (13 = 8+4+1 lanes) would
      # make narrower vectors than its channels (16): a reduction stores once per long loop, so lane stores are cheap
      # (reductions only: an elementwise transpose keeps its contiguous stores, the heuristic tiles it for them)
      widest = max((len(c) for c in chunks), default=1)
      reduction = all(any(u.op is Ops.REDUCE for u in st.src[1].toposort()) for m in groups.values() for _, st in m)
      narrow = widest < max(self.widths.get(dt, (1,)))
      if self.vector_alu and reduction and (not chunks or narrow or any(has_gather(v) for v in values)):
        every = sorted(((affine_offset(st.src[0].src[1])[1], st) for m in groups.values() for _, st in m), key=lambda m: m[0])
        try: strided = self.strided(every, dt, widest + 1 if narrow and not any(has_gather(v) for v in values)
                                    else max(widest, 2))
        except _OverBudget: strided = None
        if strided is not None and (rows := self.transposed(strided, dt)) is not None:
          for chunk, row in rows:
            index = chunk[0].src[0]
            if len(chunk) > 1: index = UOp(Ops.INDEX, index.dtype.vec(len(chunk)), index.src)
            replace[chunk[0]] = UOp(Ops.STORE, chunk[0].dtype, (index, row), chunk[0].arg)
            replace.update((st, None) for st in chunk[1:])
          continue
        if strided is not None:
          for chunk, value in strided:
            first = chunk[0].src[0]
            if self.scatter and len(first.src) == 2:   # one scatter of the vector (ungated stores only)
              # lane k's address is the first lane's plus a constant: one broadcast and add, not an index per lane
              base, c0 = first.src[1], affine_offset(first.src[1])[1]
              vdt = base.dtype.vec(len(chunk))
              deltas = tuple(affine_offset(st.src[0].src[1])[1] - c0 for st in chunk)
              lanes = UOp(Ops.ADD, vdt, (UOp(Ops.VECTORIZE, vdt, (base,) * len(chunk)), UOp(Ops.VCONST, vdt, arg=deltas)))
              replace[chunk[0]] = UOp(Ops.STORE, chunk[0].dtype, (UOp(Ops.INDEX, first.dtype, (first.src[0], lanes)), value),
                                      chunk[0].arg)
              replace.update((st, None) for st in chunk[1:])
            else: replace.update((st, UOp(Ops.STORE, st.dtype, (st.src[0], gep(value, k)), st.arg)) for k, st in enumerate(chunk))
          continue
      for chunk, value in zip(chunks, values):
        index = chunk[0].src[0]
        vindex = UOp(Ops.INDEX, index.dtype.vec(len(chunk)), index.src)
        replace[chunk[0]] = UOp(Ops.STORE, chunk[0].dtype, (vindex, value), chunk[0].arg)
        for s in chunk[1:]: replace[s] = None
    if not replace: return stores
    return tuple(x for x in (replace.get(s, s) for s in stores) if x is not None)

  def strided(self, members: list[tuple[int, UOp]], dt: DType, least: int) -> list[tuple[list[UOp], UOp]] | None:
    """Stores whose consecutive runs would compute their values from gathers (a convolution's row read every other
    element) grouped instead at one constant stride (the output channels of a tile, a plane apart), if that makes
    every group's value vector math without gathers in vectors of `least` lanes or more: [(stores, vector value)],
    each lane stored on its own."""
    at = {off: st for off, st in members}
    for d in sorted({off - members[0][0] for off, _ in members if off - members[0][0] > 1}):
      for w in (w for w in self.widths.get(dt, ()) if w >= least) if dt.count == 1 else ():
        used: set[int] = set()
        groups = []
        for off, _ in members:
          if off in used: continue
          if any((o := off + k * d) not in at or o in used for k in range(w)): break
          used.update(off + k * d for k in range(w))
          groups.append([at[off + k * d] for k in range(w)])
        else:
          values = [self.vec(tuple(st.src[1] for st in g)) for g in groups]
          if not any(has_gather(v) for v in values): return list(zip(groups, values))
    return None

  def transposed(self, strided: list[tuple[list[UOp], UOp]], dt: DType) -> list[tuple[list[UOp], UOp]] | None:
    """Strided groups whose first stores are at consecutive addresses (a conv tile's positions, each a vector of
    output channels a plane apart) stored the other way round: lane k of consecutive groups is a run of consecutive
    addresses, stored as vectors put together from those lanes (a transpose in registers) instead of a scalar store
    per lane. [(stores, value)]; None unless every group is in such a run of two or more."""
    if not self.fits(dt, 2): return None
    first = sorted(((affine_offset(chunk[0].src[0].src[1])[1], i) for i, (chunk, _) in enumerate(strided)))
    out: list[tuple[list[UOp], UOp]] = []
    for run in _runs([(off, strided[i]) for off, i in first]):
      if len(run) < 2 or any(len(c) != len(run[0][0]) for c, _ in run): return None
      for k in range(len(run[0][0])):
        stores = [c[k] for c, _ in run]
        if not self.contiguous(tuple(st.src[0] for st in stores)): return None
        at = 0
        for part in self._chunks(stores, dt):
          lanes = tuple(gep(v, k) for _, v in run[at:at + len(part)])
          out.append((part, lanes[0] if len(part) == 1 else UOp(Ops.VECTORIZE, dt.vec(len(part)), lanes)))
          at += len(part)
    return out

  def _chunks(self, run: list[UOp], dt: DType) -> list[list[UOp]]:
    widths = self.widths.get(dt, ()) if dt.count == 1 else ()
    out, i = [], 0
    while i < len(run):
      w = next((w for w in sorted(widths, reverse=True) if w <= len(run) - i), 1)
      out.append(run[i:i + w])
      i += w
    return out

  def scalar_loads(self, sink: UOp) -> UOp:
    """Scalar LOADs left over at consecutive addresses (a row of A in a matmul's unrolled k loop, a tensor core's
    fragment in shared memory) become one vector LOAD and GEPs of it."""
    groups: dict[tuple, list[tuple[int, UOp]]] = {}
    nodes = sink.toposort()
    # a value only ever broadcast (one input element times a vector of weights) is best a scalar load: x86 folds it
    # into the multiply-add as a broadcast operand, where a vector load's lanes would each need a shuffle
    users: dict[UOp, set] = {}
    for u in nodes:
      for s in u.src: users.setdefault(s, set()).add(u)
    broadcast = {u for u, us in users.items() if all(c.op is Ops.VECTORIZE and all(s is u for s in c.src) for c in us)}
    for u in nodes:
      if u.op is Ops.LOAD and u.dtype.count == 1 and u.src[0].op is Ops.INDEX and u not in broadcast and \
         _memory(u.src[0].src[0]) in _VECTOR_MEMORY:
        index = u.src[0]
        key, off = split_offset(index.src[1])
        groups.setdefault((index.src[0], index.src[2:], key, u.dtype, u.src[1:]), []).append((off, u))
    subs: dict[UOp, UOp] = {}
    for (*_, dt, _alt), members in groups.items():
      members = sorted(set(members), key=lambda m: m[0])
      for run in _runs(members):
        for chunk in self._chunks(run, dt):
          if len(chunk) < 2: continue
          v = self.load(tuple(chunk))
          subs.update((x, gep(v, k)) for k, x in enumerate(chunk))
    return sink.substitute(subs, name="vector loads") if subs else sink

  def unrolled_reduces(self, sink: UOp) -> UOp:
    """Scalar REDUCEs over an unroll tree get a vector accumulator (see the module docstring)."""
    memo: dict[UOp, UOp] = {}
    for u in sink.toposort():
      src = tuple(memo.get(s, s) for s in u.src)
      new = u if all(a is b for a, b in zip(src, u.src)) else UOp(u.op, u.dtype, src, u.arg)
      if new.op is Ops.REDUCE and new.dtype.count == 1 and new.arg in _REDUCE_OPS:
        if (acc := self._vector_accumulator(new)) is not None: new = acc
      if new is not u: memo[u] = new
    return memo.get(sink, sink)

  def _vector_accumulator(self, red: UOp) -> UOp | None:
    best, level = None, [red.src[0]]
    while all(x.op is red.arg and x.dtype == red.dtype for x in level):
      level = [s for x in level for s in x.src]
      if self.fits(red.dtype, len(level)) and not has_gather(body := self.vec(tuple(level))): best = (level, body)
    if best is None: return None
    leaves, body = best
    acc = UOp(Ops.REDUCE, body.dtype, (body, *red.src[1:]), red.arg)
    return balanced_tree(red.arg, [gep(acc, k) for k in range(len(leaves))])

def gep(v: UOp, k: int) -> UOp:
  """Lane k of vector v, without a GEP where the lane is at hand (a VECTORIZE's source, a constant)."""
  if v.op is Ops.VECTORIZE: return v.src[k]
  if v.op is Ops.CONST: return UOp.const(v.dtype.scalar(), v.arg)
  if v.op is Ops.VCONST: return UOp.const(v.dtype.scalar(), v.arg[k])
  return UOp(Ops.GEP, v.dtype.scalar(), (v,), (k,))

def _descending(indexes: tuple[UOp, ...]) -> bool:
  """INDEXes of one buffer under one gate (or none) at addresses one apart, going down in lane order."""
  first = indexes[0]
  if any(i.op is not Ops.INDEX or i.src[0] is not first.src[0] or i.src[2:] != first.src[2:] for i in indexes):
    return False
  key, start = affine_offset(first.src[1])
  return bool(key) and all(affine_offset(i.src[1]) == (key, start - k) for k, i in enumerate(indexes[1:], 1))

def _alike(lanes: tuple[UOp, ...]) -> bool:
  first = lanes[0]
  return all(x.op is first.op and x.arg == first.arg and x.dtype == first.dtype and len(x.src) == len(first.src)
             for x in lanes)

def _lift_where(lanes: tuple[UOp, ...]) -> tuple[UOp, ...] | None:
  """Lanes where some are `where(gate, x, other)` and the rest plain values like x (a padded row: the simplifier
  dropped the always-true gate of its middle lanes) as where-lanes throughout, the plain ones under a True gate."""
  wheres = [x for x in lanes if x.op is Ops.WHERE]
  if not wheres or len(wheres) == len(lanes): return None
  plain = [x for x in lanes if x.op is not Ops.WHERE]
  if not _alike(tuple(plain + [w.src[1] for w in wheres])): return None
  true, other = UOp.const(dtypes.bool, True), wheres[0].src[2]
  return tuple(x if x.op is Ops.WHERE else UOp(Ops.WHERE, x.dtype, (true, x, other)) for x in lanes)

def _bound_compares(lanes: tuple[UOp, ...]) -> tuple[UOp, ...] | None:
  """Lanes `x < c` of one integer x, some folded to a constant because x's range decides them (a scan's mask `j < i + 1`
  is True throughout its last lane), all as compares of x: True is `x < vmax + 1`, False `x < vmin`."""
  cmps = [x for x in lanes if x.op is Ops.CMPLT]
  if not cmps or any(x.op is not Ops.CMPLT and x.op is not Ops.CONST for x in lanes): return None
  var = cmps[0].src[0]
  if not dtypes.is_int(var.dtype) or any(x.src[0] is not var or x.src[1].op is not Ops.CONST for x in cmps): return None
  if not isinstance(var.vmin, int) or not isinstance(var.vmax, int): return None
  def bound(x: UOp) -> UOp:
    if x.op is Ops.CMPLT: return x
    return UOp(Ops.CMPLT, dtypes.bool, (var, UOp.const(var.dtype, var.vmax + 1 if x.arg else var.vmin)))
  return tuple(bound(x) for x in lanes)

def _runs(members: list[tuple[int, UOp]]) -> list[list[UOp]]:
  """Stores sorted by offset -> runs at consecutive offsets (a repeated offset starts a new run)."""
  runs: list[list[UOp]] = []
  prev = None
  for off, s in members:
    if prev is not None and off == prev + 1: runs[-1].append(s)
    else: runs.append([s])
    prev = off
  return runs

def make_pass():
  """The pass's factory (named by the plugin's PassSpec)."""
  def vector_lanes(sink: UOp, ctx) -> UOp: return vectorize(sink, ctx.renderer)
  return vector_lanes

def vectorize(sink: UOp, renderer) -> UOp:
  """Lanes -> vectors where `renderer` declares vector widths for their dtype; unchanged otherwise."""
  if not vector_widths(renderer): return sink
  v = Vectorizer(renderer, BUDGET_PER_NODE * len(sink.toposort()))
  stored = v.stores(sink)
  v.budget = None   # what follows builds one vector per group of loads or of a reduction's leaves: no permutations
  return v.scalar_loads(v.unrolled_reduces(stored) if v.vector_alu else stored)
