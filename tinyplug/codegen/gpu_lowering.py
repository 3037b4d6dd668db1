"""GPU-style lowering shared by every renderer with work-groups (OpenCL, CUDA, Metal, AMD, the PYTHON interpreter).

The optimiser's LOCAL action maps an output axis to "local" ranges (gpudims turns them into `lidx`), and its GROUP and
GROUPTOP actions split a reduce axis into "group" ranges that a work-group's threads share.
`lower_group_reduces(sink, renderer)` is the pass that makes "group" ranges real: each thread reduces its slice into
  a register, writes it to `DEFINE_LOCAL[thread]`, a BARRIER waits for the whole group, every thread reduces the
  local array again (a loop over the group), and only the first thread of the group (`lidx == 0`) stores. A group of
  64 threads or more combines in two rounds (about sqrt(G) threads each combine a strided share into a second local
  array, a BARRIER, then every thread combines those), so the local loads grow as G*sqrt(G), not G*G.

A BARRIER orders the local loads after the local stores only through the program order the linearizer emits; the
lowered SINK lists its BARRIERs before its STOREs, and the linearizer emits a SINK's sources in order."""
from __future__ import annotations
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp

def _ranges(sink: UOp, kind: str) -> list[UOp]:
  return sorted((u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] == kind), key=lambda r: r.arg)

def _linear(ranges: list[UOp]) -> tuple[UOp, int]:
  """Row-major index of `ranges` (last fastest) and the number of elements it spans."""
  idx, size = UOp.const(ranges[0].dtype if ranges else dtypes.index, 0), 1
  for r in reversed(ranges):
    term = r if size == 1 else r * size
    idx = term if idx.op is Ops.CONST and idx.arg == 0 else term + idx
    size *= r.src[0].arg
  return idx, size

def _substitute_outside_reduce_ranges(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
  """`root` with the mapped nodes replaced everywhere, REDUCE range lists included."""
  memo: dict[UOp, UOp] = dict(mapping)
  for u in root.toposort():
    if u in memo: continue
    src = tuple(memo.get(s, s) for s in u.src)
    if any(a is not b for a, b in zip(src, u.src)): memo[u] = UOp(u.op, u.dtype, src, u.arg)
  return memo.get(root, root)

def _combine_lanes(g_size: int) -> int | None:
  """How many threads combine a group of `g_size` partials in a first round: the divisor nearest sqrt(g_size), so
  both rounds are short; None for groups small enough to combine in one round."""
  if g_size < 64: return None
  return min((d for d in range(2, g_size) if g_size % d == 0), key=lambda d: (abs(d * d - g_size), d), default=None)

def lower_group_reduces(sink: UOp, renderer=None) -> UOp:
  """Lower every REDUCE over "group" ranges to local memory + BARRIER (see the module docstring). Run before gpudims."""
  grouped = [u for u in sink.toposort() if u.op is Ops.REDUCE and any(r.arg[1] == "group" for r in u.src[1:])]
  if not grouped: return sink
  if renderer is not None and not renderer.has_shared:
    raise ValueError(f"{type(renderer).__name__} has no shared memory: it cannot run a grouped reduction")
  group_ranges = _ranges(sink, "group")
  as_local = {g: UOp(Ops.RANGE, g.dtype, g.src, (g.arg[0], "local")) for g in group_ranges}
  threads = sorted(_ranges(sink, "local") + list(as_local.values()), key=lambda r: r.arg)
  thread_idx, n_threads = _linear(threads)
  next_axis = 1 + max(u.arg[0] for u in sink.toposort() if u.op is Ops.RANGE)
  shared_bytes, replace, barriers = 0, {}, []
  # inner reduces first: a grouped reduce nested in another one's value sees the lowered inner one
  for i, red in enumerate(grouped):
    red_now = _substitute_outside_reduce_ranges(red, replace) if replace else red
    gs = [r for r in red.src[1:] if r.arg[1] == "group"]
    rest = tuple(r for r in red_now.src[1:] if r.arg[1] != "group")
    value = _substitute_outside_reduce_ranges(red_now.src[0], as_local)
    partial = UOp(Ops.REDUCE, red.dtype, (value, *rest), red.arg) if rest else value
    buf = UOp(Ops.DEFINE_LOCAL, red.dtype.ptr(n_threads, local=True), (), f"temp{i}")
    shared_bytes += n_threads * red.dtype.itemsize
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buf.dtype, (buf, thread_idx)), partial))
    barriers.append(UOp(Ops.BARRIER, dtypes.void, (store,)))
    if len(gs) == 1 and (lanes := _combine_lanes(gs[0].src[0].arg)):
      # two rounds: `lanes` threads each combine a strided share of the partials, then every thread combines theirs
      # (every thread reading all G partials is G*G local loads per group: quadratic, slow from G=256 on)
      t, g_size = as_local[gs[0]], gs[0].src[0].arg
      step = UOp(Ops.RANGE, t.dtype, (UOp.const(t.dtype, g_size // lanes),), (next_axis, "reduce"))
      lane = t % lanes
      share = UOp(Ops.LOAD, red.dtype, (UOp(Ops.INDEX, buf.dtype,
                  (buf, _substitute_outside_reduce_ranges(thread_idx, {t: lane + step * lanes}))),))
      buf2 = UOp(Ops.DEFINE_LOCAL, red.dtype.ptr(n_threads, local=True), (), f"temp{i}b")
      shared_bytes += n_threads * red.dtype.itemsize
      store2 = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buf2.dtype, (buf2, thread_idx, t < lanes)),
                                            UOp(Ops.REDUCE, red.dtype, (share, step), red.arg)))
      barriers.append(UOp(Ops.BARRIER, dtypes.void, (store2,)))
      final = UOp(Ops.RANGE, t.dtype, (UOp.const(t.dtype, lanes),), (next_axis + 1, "reduce"))
      next_axis += 2
      load = UOp(Ops.LOAD, red.dtype, (UOp(Ops.INDEX, buf2.dtype,
                 (buf2, _substitute_outside_reduce_ranges(thread_idx, {t: final}))),))
      replace[red] = UOp(Ops.REDUCE, red.dtype, (load, final), red.arg)
      continue
    # every thread reads the whole group's partials: the group axes become a reduce loop over local memory
    again = {}
    for g in gs:
      again[as_local[g]] = UOp(Ops.RANGE, g.dtype, g.src, (next_axis, "reduce"))
      next_axis += 1
    read_idx = _substitute_outside_reduce_ranges(thread_idx, again)
    load = UOp(Ops.LOAD, red.dtype, (UOp(Ops.INDEX, buf.dtype, (buf, read_idx)),))
    replace[red] = UOp(Ops.REDUCE, red.dtype, (load, *again.values()), red.arg)
  shared_max = renderer.shared_max if renderer is not None else 0
  if shared_max and shared_bytes > shared_max:
    raise ValueError(f"grouped reductions need {shared_bytes} bytes of local memory; the device has {shared_max}")
  first_thread = None
  for g in group_ranges:
    c = as_local[g].eq(0)
    first_thread = c if first_thread is None else first_thread & c
  stores = []
  for st in sink.src:
    st = _substitute_outside_reduce_ranges(st, replace)
    if st.op is Ops.STORE and first_thread is not None:
      index = st.src[0]
      gate = first_thread if len(index.src) < 3 else index.src[2] & first_thread
      st = st.replace(src=(index.replace(src=(index.src[0], index.src[1], gate)),) + st.src[1:])
    stores.append(st)
  # BARRIERs first: the linearizer emits a SINK's sources in order, so all local stores and barriers come before
  # the loads of the final reductions
  return UOp(Ops.SINK, sink.dtype, tuple(barriers) + tuple(stores), sink.arg)
