"""The STAGE action: a tensor-core kernel's A and B fragments come from shared memory that the whole work-group fills
once per K step, instead of each warp loading its own fragments from global memory.

What it builds, for each operand (A, then B) of the kernel's WMMA, from the graph the other actions left (run when the
actions are done: `Kernel.finished_sink`, so the tile is final):
- the operand's loads (one per fragment element) vary, within one work-group and one trip of the K loop, only with
  the ranges of kind local, warp, upcast and unroll they use; each combination of those is a *slot*, and the slots'
  fragments are exactly the operand's tile of this K step (A's rows of the work-group times the K step, B likewise);
- a `DEFINE_LOCAL` holds the tile in fragment order (slot-major, the elements of a slot side by side, so every lane
  reads its own fragment as a few contiguous vectors), twice: K steps alternate between the halves;
- every thread of the work-group fills slots `tid, tid + T, ...` (T threads; `tid` the hardware order, lanes
  fastest): it loads each element from global memory with the operand's own load, its ranges replaced by the slot's
  coordinates (a PADTO's gates come along), and stores it; a BARRIER waits for all the stores of both operands;
- the WMMA's operands become loads of this thread's slot, from `AFTER(buffer, barrier)`: the linearizer emits the
  barrier (and the stores before it) ahead of them, inside the K loop.

One barrier per K step is enough because of the two halves: a thread writes step k+1's half only after passing step
k's barrier, and reads of step k-1's half (the one step k+1 overwrites) are done by every thread before it reaches
step k's barrier. Refused where the two halves do not fit the renderer's shared memory. With prefetch (STAGE arg 1)
trip k fills step k+1 while its WMMAs read step k (`_prefetched`).

The arg's other bits (`STAGE_*` below): a *vector fill* of B (2) or A (4) reads the operand's tile in global address
order instead, 16 bytes (8 halves) per load, each warp reading whole runs of 64 bytes or more (`_piece_order` picks
which, for fewer bank conflicts), and scatters each element to its slot in shared memory (`_Tile`); a *pad* (8)
leaves one empty slot after each warp's worth of slots, so scattered stores a warp's worth of slots apart hit
different banks. A tile the vector fill cannot describe keeps the slot-by-slot fill."""
from __future__ import annotations
import dataclasses, itertools, math
from dataclasses import dataclass
import numpy as np
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp

STAGE_PREFETCH, STAGE_VECTOR_B, STAGE_VECTOR_A, STAGE_PAD = 1, 2, 4, 8
STAGE_ASYNC = 16   # row-major swizzled tiles, cp.async fills, ldmatrix reads, 2-5 stages (bits 32, 64): tc_async.py
STAGE_DESCRIPTOR = 2048   # bit 16's tiles in 128-byte swizzled column blocks read by descriptors (wgmma): tc_wgmma.py
STAGE_ARGS = 4096   # args 0 .. 4095: any combination of the bits

# the kinds of range whose values differ between the fragment loads of one work-group in one trip of the K loop
VARYING = ("warp", "local", "upcast", "unroll")

class StagingError(ValueError):
  pass

def _size(r: UOp) -> int: return r.src[0].arg

def _linear(ranges: list[UOp], dtype) -> UOp:
  """sum of ranges[i] * prod(sizes before i): ranges[0] is the fastest."""
  total, stride = None, 1
  for r in ranges:
    term = r * stride if stride != 1 else r
    total, stride = term if total is None else total + term, stride * _size(r)
  return total if total is not None else UOp.const(dtype, 0)

def _ranges_of(u: UOp) -> set[UOp]: return {x for x in u.toposort() if x.op is Ops.RANGE}

def _thread_ranges(sink: UOp) -> list[UOp]:
  """The work-group's thread ranges, fastest first, in the order gpudims gives them ids (the warp's lanes, then the
  local ranges, innermost id first): consecutive `tid`s are consecutive lanes of one warp."""
  rs = [r for r in _ranges_of(sink) if r.arg[1] in ("local", "warp")]
  warp = [r for r in rs if r.arg[1] == "warp"]
  return warp + sorted((r for r in rs if r.arg[1] == "local"), key=lambda r: r.arg, reverse=True)

def _gated(load: UOp, gate: UOp) -> UOp:
  """`load` read only where `gate` holds (0 elsewhere)."""
  index = load.src[0]
  g = gate if len(index.src) < 3 else UOp(Ops.AND, dtypes.bool, (index.src[2], gate))
  return UOp(Ops.LOAD, load.dtype, (UOp(Ops.INDEX, index.dtype, (*index.src[:2], g), index.arg),
                                    UOp.const(load.dtype, 0)), load.arg)

def stage_operands(sink: UOp, renderer, prefetch: bool = False, arg: int | None = None) -> UOp:
  """`sink` with its WMMAs' A and B operands read from shared memory (see the module docstring); with `prefetch`,
  each K step's loop trip loads the next step's tiles while its tensor cores run (see `_prefetched`). `arg` (STAGE's,
  the `STAGE_*` bits) overrides `prefetch`."""
  from tinyplug.codegen.kernel import replace_nodes
  if arg is None: arg = STAGE_PREFETCH if prefetch else 0
  prefetch = bool(arg & STAGE_PREFETCH)
  if renderer is None or not renderer.has_shared: raise StagingError("the renderer has no shared memory")
  cores = {tc.name: tc for tc in renderer.tensor_cores}
  wmmas = [u for u in sink.toposort() if u.op is Ops.WMMA and u.arg in cores]
  if not wmmas: raise StagingError("the kernel has no tensor-core WMMA to stage (TC first)")
  threads = _thread_ranges(sink)
  operands: dict[tuple[UOp, ...], None] = {}
  for w in wmmas:
    n_a, n_b, _ = cores[w.arg].elements
    operands[tuple(w.src[:n_a])] = None
    operands[tuple(w.src[n_a:n_a + n_b])] = None
  descriptor = {w.arg in renderer.descriptor_cores for w in wmmas}
  if len(descriptor) > 1: raise StagingError("the kernel mixes tensor cores with and without descriptor operands")
  if descriptor == {True} and not arg & STAGE_DESCRIPTOR:
    raise StagingError(f"{wmmas[0].arg} reads its operands from shared memory through descriptors: stage with bit "
                       f"{STAGE_DESCRIPTOR} (and 16)")
  if arg & STAGE_DESCRIPTOR:
    if descriptor != {True}: raise StagingError(f"bit {STAGE_DESCRIPTOR} stages the operands of a descriptor tensor core "
                                                "(Hopper's wgmma, CUDA C on sm_90); this kernel runs on another")
    from tinyplug.codegen.tc_wgmma import stage_descriptors
    return stage_descriptors(sink, renderer, arg, list(operands), threads)
  if arg & STAGE_ASYNC:
    from tinyplug.codegen.tc_async import stage_async
    return stage_async(sink, renderer, arg, list(operands), threads)
  if arg >= STAGE_ASYNC: raise StagingError("bits 32 to 1024 (stages, swizzle, grouped blocks, blocks per SM) belong "
                                            "to bit 16's mode")
  vector = (arg & STAGE_VECTOR_A, arg & STAGE_VECTOR_B)   # operand 0 is A, 1 is B
  plans = [_plan(i, loads, threads, bool(arg & STAGE_PAD), bool(vector[i % 2]), renderer)
           for i, loads in enumerate(operands)]
  shared_bytes = sum(p.buf.dtype.size * p.loads[0].dtype.itemsize for p in plans)
  if renderer.shared_max and shared_bytes > renderer.shared_max:
    raise StagingError(f"staging needs {shared_bytes} bytes of shared memory; the device has {renderer.shared_max}")
  steps = {r for p in plans for r in p.steps}
  loop = next(iter(steps)) if prefetch and len(steps) == 1 and _size(next(iter(steps))) >= 2 else None
  if loop is None:   # each trip fills its own half, then waits
    barrier = UOp(Ops.BARRIER, dtypes.void, tuple(st for p in plans for st in _fill(p, {}, p.buf, threads)))
    return replace_nodes(sink, _reads(plans, barrier))
  return _prefetched(sink, plans, loop, threads)

def _prefetched(sink: UOp, plans: list, loop: UOp, threads: list[UOp]) -> UOp:
  """Step 0's tiles are filled before the K loop; trip k waits at the barrier (the fills of step k are in its half),
  then fills step k+1 into the other half (the last trip refills its own step there) while the WMMAs read step
  k: the fill hangs
  on the WMMAs' results as `AFTER(element, stores...)`, so the linearizer emits its global loads before the WMMAs and
  its stores after them. Trip k's stores go into the half trip k-1 read: they are ordered after trip k's barrier."""
  from tinyplug.codegen.kernel import replace_nodes
  first = [st for p in plans for st in _fill(p, {loop: UOp.const(loop.dtype, 0)}, p.buf, threads)]
  barrier = UOp(Ops.BARRIER, dtypes.void, (*first, loop))   # the loop among its sources: one barrier per trip
  # the last trip loads its own step again rather than a step past the end: no gate (a gated load is a branch), and
  # its stores go into the half no trip reads any more
  last = UOp.const(loop.dtype, _size(loop) - 1)
  nxt = UOp(Ops.WHERE, loop.dtype, (UOp(Ops.CMPLT, dtypes.bool, (loop, last)), loop + 1, last))
  half = {p: replace_nodes(p.half, {loop: loop + 1}) for p in plans}
  ahead = tuple(st for p in plans
                for st in _fill(p, {loop: nxt}, UOp(Ops.AFTER, p.buf.dtype, (p.buf, barrier)), threads, half[p]))
  staged = replace_nodes(sink, _reads(plans, barrier))
  elements = {u: UOp(Ops.AFTER, u.dtype, (u, *ahead)) for u in staged.toposort()
              if u.op is Ops.GEP and u.src[0].op is Ops.WMMA}
  return replace_nodes(staged, elements)

@dataclass(frozen=True)
class _Plan:
  """One operand's staging: its loads, the ranges that tell its slots apart (fastest first), its K loop ranges, the
  shared buffer (two halves), where this thread's slot starts in the half of the current K step, and with a pad the
  slots per padded block (a warp's worth: one empty slot follows each); `tile` where the fill reads vectors."""
  loads: tuple[UOp, ...]
  varying: tuple[UOp, ...]
  steps: tuple[UOp, ...]
  buf: UOp
  half: UOp
  slots: int
  block: int = 0
  tile: _Tile | None = None

  def slot_at(self, s):
    """Where slot number `s` (an int or a UOp) starts, in slots from the half's start: past the pad slots before it."""
    if not self.block: return s
    return s + s // self.block

def _plan(i: int, loads: tuple[UOp, ...], threads: list[UOp], pad: bool = False, vector: bool = False,
          renderer=None) -> _Plan:
  if any(x.op is not Ops.LOAD or x.src[0].op is not Ops.INDEX or x.src[0].src[0].op is not Ops.DEFINE_GLOBAL
         for x in loads): raise StagingError("a WMMA operand is not a load from global memory")
  used = set().union(*(_ranges_of(x) for x in loads))
  if any(r.src[0].op is not Ops.CONST for r in used): raise StagingError("a WMMA operand's range has no fixed size")
  varying = [r for r in threads if r in used] + sorted((r for r in used if r.arg[1] in VARYING and r not in threads),
                                                      key=lambda r: r.arg)
  steps = sorted((r for r in used if r.arg[1] == "reduce"), key=lambda r: r.arg, reverse=True)
  idx_dt = (varying + threads + steps)[0].dtype if varying + threads + steps else dtypes.index
  n, slots = len(loads), math.prod(_size(r) for r in varying)
  # the pad: one empty slot after each warp's worth of slots (the lanes of the warp range come first)
  block = _size(varying[0]) if pad and varying and varying[0].arg[1] == "warp" and slots > _size(varying[0]) else 0
  padded = slots + (slots // block if block else 0)
  buf = UOp(Ops.DEFINE_LOCAL, loads[0].dtype.ptr(2 * padded * n, local=True), (), f"stage{i}")
  half = (_linear(steps, idx_dt) % 2) * (padded * n) if steps else UOp.const(idx_dt, 0)
  plan = _Plan(tuple(loads), tuple(varying), tuple(steps), buf, half, slots, block)
  if vector and (tile := _tile(plan, threads, renderer)) is not None: plan = dataclasses.replace(plan, tile=tile)
  return plan

def _fill(p: _Plan, at_step: dict, mem: UOp, threads: list[UOp], half: UOp | None = None) -> list[UOp]:
  """The stores of this thread's slots `tid, tid + T, ...` of `p`'s tile, for the K step `at_step` gives (the
  current one where empty), each slot's coordinates decoded from its number, into `mem` (the buffer, or an AFTER
  of it) at `half` (default: the step's half)."""
  from tinyplug.codegen.kernel import replace_nodes
  tid, n_threads = _linear(threads, p.half.dtype), math.prod(_size(r) for r in threads)
  if half is None: half = replace_nodes(p.half, at_step) if at_step else p.half
  if p.tile is not None: return _vector_fill(p, p.tile, at_step, mem, tid, half)
  n, out = len(p.loads), []
  for j in range(-(-p.slots // n_threads)):
    s = tid + n_threads * j if j else tid
    gate = UOp(Ops.CMPLT, dtypes.bool, (s, UOp.const(s.dtype, p.slots))) if p.slots % n_threads else None
    coords, stride = dict(at_step), 1
    for r in p.varying:
      coords[r] = (s // stride if stride != 1 else s) % _size(r)
      stride *= _size(r)
    for e, x in enumerate(p.loads):
      value = replace_nodes(x, coords)
      if gate is not None: value = _gated(value, gate)
      idx = half + p.slot_at(s) * n + e
      at = UOp(Ops.INDEX, p.buf.dtype, (mem, idx) if gate is None else (mem, idx, gate))
      out.append(UOp(Ops.STORE, dtypes.void, (at, value)))
  return out

def _reads(plans: list[_Plan], barrier: UOp) -> dict[UOp, UOp]:
  """Each operand load -> the load of this thread's slot element from the current half, after `barrier`."""
  subs = {}
  for p in plans:
    mem = UOp(Ops.AFTER, p.buf.dtype, (p.buf, barrier))
    base = p.half + p.slot_at(_linear(list(p.varying), p.half.dtype)) * len(p.loads)
    for e, x in enumerate(p.loads): subs[x] = UOp(Ops.LOAD, x.dtype, (UOp(Ops.INDEX, p.buf.dtype, (mem, base + e)),))
  return subs

# ---- the vector fill: the tile read in address order, 16 bytes a load, scattered to the slots ----

@dataclass(frozen=True)
class _Tile:
  """An operand's tile in whole 16-byte pieces: element x (0 .. count-1; piece x // width, in the order the threads
  take them: thread t's piece of round j is number `t + threads * j`) is at global index `base + offset(x)` and goes
  to shared position `half + position0 + position(x)`. Both functions are kept as digits `(lo, radix, coef)`:
  f(x) = sum(((x // lo) % radix) * coef), split where x crosses a piece (`width` elements) and a round of the
  work-group's threads (`width * threads`), so each digit depends on the piece's lane, the thread or the round alone;
  `base` holds the work-group's and the K step's ranges."""
  base: UOp
  width: int
  threads: int
  count: int
  offset: tuple[tuple[int, int, int], ...]
  position: tuple[tuple[int, int, int], ...]
  position0: int

_INT_OPS = {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.SUB: np.subtract, Ops.IDIV: np.floor_divide, Ops.MOD: np.mod,
            Ops.MAX: np.maximum, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.CMPEQ: np.equal,
            Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or, Ops.XOR: np.bitwise_xor, Ops.SHL: np.left_shift,
            Ops.SHR: np.right_shift}

def _evaluate(u: UOp, values: dict[UOp, object], memo: dict | None = None):
  """The integer value of index expression `u` with its RANGEs at `values` (ints or numpy arrays); a RANGE not given
  is 0. Raises StagingError on anything else (a variable, a load)."""
  memo = {} if memo is None else memo
  if u in memo: return memo[u]
  if u.op is Ops.CONST: out = int(u.arg)
  elif u.op is Ops.RANGE: out = values.get(u, 0)
  elif u.op in _INT_OPS: out = _INT_OPS[u.op](*(_evaluate(x, values, memo) for x in u.src))
  elif u.op is Ops.NEG: out = -_evaluate(u.src[0], values, memo)
  elif u.op is Ops.WHERE: out = np.where(*(_evaluate(x, values, memo) for x in u.src))
  elif u.op is Ops.CAST: out = _evaluate(u.src[0], values, memo)
  else: raise StagingError(f"cannot evaluate {u.op} in an index")
  memo[u] = out
  return out

def _slot_offsets(varying: tuple[UOp, ...], indexes: list[UOp], unit: int,
                  what: str) -> tuple[dict[UOp, np.ndarray], np.ndarray]:
  """Each slot's value of each `varying` range (fastest first), and the global index of every [slot, element] of an
  operand whose loads read `indexes`. Raises StagingError where another range (the work-group's, the K step's) moves
  the tile by other than whole multiples of `unit` elements (`what` names them), or an index does not evaluate."""
  n_slots = math.prod(_size(r) for r in varying)
  slot, coords, stride = np.arange(n_slots), {}, 1
  for r in varying:
    coords[r] = (slot // stride) % _size(r)
    stride *= _size(r)
  def offsets(at: dict) -> np.ndarray:
    memo: dict = {}
    return np.stack([np.broadcast_to(_evaluate(i, {**coords, **at}, memo), (n_slots,)) for i in indexes], axis=1)
  off = offsets({})
  for r in {r for i in indexes for r in _ranges_of(i)} - set(varying):
    for v in {1, _size(r) - 1} - {0}:
      d = offsets({r: v}) - off
      if not (d == d.flat[0]).all() or d.flat[0] % unit:
        raise StagingError(f"range {r.arg} moves the tile by other than whole {what}")
  return coords, off

def _digits(f: np.ndarray, breaks: tuple[int, ...]) -> tuple[tuple[int, int, int], ...] | None:
  """f (f[0] == 0) as digits `(lo, radix, coef)` of x with a digit boundary at each of `breaks`, or None."""
  digits, lo, size = [], 1, len(f)
  while lo < size:
    g, coef = f[::lo], int(f[lo])
    m = 1
    while m < len(g) and g[m] == m * coef: m += 1
    cut = min((b // lo for b in breaks if lo < b < lo * m and b % lo == 0), default=m)
    m = next((d for d in range(min(m, cut), 1, -1) if len(g) % d == 0), 1)
    if m < 2: return None
    digits.append((lo, m, coef))
    lo *= m
  x, bounds = np.arange(size), {a * b for a, b, _ in digits}
  if any(b < size and b not in bounds for b in breaks): return None
  if lo != size or not np.array_equal(sum(((x // a) % b) * c for a, b, c in digits), f): return None
  return tuple(digits)

def _tile(p: _Plan, threads: list[UOp], renderer) -> _Tile | None:
  """The vector fill of plan `p`, or None where the tile is not a set of whole, aligned 16-byte pieces that digits
  describe (a gated load, a tile smaller than one round of the threads): then the slot-by-slot fill stays."""
  from tinyplug.codegen.kernel import replace_nodes
  dt, n = p.loads[0].dtype, len(p.loads)
  widths = [w for w in (renderer.vector_widths or {}).get(dt, ()) if w * dt.itemsize <= 16]
  n_threads = math.prod(_size(r) for r in threads)
  if not widths or any(len(x.src) > 1 or len(x.src[0].src) > 2 or x.src[0].src[0] is not p.loads[0].src[0].src[0]
                       for x in p.loads): return None
  width, count = max(widths), p.slots * n
  if count % (width * n_threads): return None
  indexes = [x.src[0].src[1] for x in p.loads]
  try: coords, off = _slot_offsets(p.varying, indexes, width, "vectors")
  except StagingError: return None
  flat = off.reshape(-1)
  order = np.argsort(flat, kind="stable")
  start = int(flat[order[0]])
  rel = flat[order] - start
  if start % width or len(np.unique(rel)) != count: return None
  pieces = rel.reshape(-1, width)
  if (pieces[:, 0] % width).any() or (pieces - pieces[:, :1] != np.arange(width)).any(): return None
  slot_of, e_of = order // n, order % n
  position = np.array([p.slot_at(int(s)) for s in slot_of]) * n + e_of
  breaks = (width, width * n_threads)
  for pieces in (_piece_order(rel, position, width, n_threads, dt.itemsize), None):
    x = np.arange(count) if pieces is None else (pieces[:, None] * width + np.arange(width)).reshape(-1)
    offset_digits, position_digits = _digits(rel[x], breaks), _digits(position[x] - position[0], breaks)
    if offset_digits is not None and position_digits is not None: break
  else: return None
  s0, e0 = divmod(int(order[0]), n)
  first = {r: UOp.const(r.dtype, int(c[s0])) for r, c in coords.items()}
  return _Tile(replace_nodes(indexes[e0], first), width, n_threads, count, offset_digits, position_digits,
               int(position[0]))

def _bank_conflicts(position: np.ndarray, width: int, pieces: np.ndarray, itemsize: int) -> int:
  """The shared-memory wavefronts of the stores of `pieces` (one per thread of a warp), summed over a piece's lanes:
  for each lane, the most distinct 4-byte words that fall into one of the 32 banks."""
  total = 0
  for v in range(width):
    words = np.unique(position[pieces * width + v] * itemsize // 4)
    total += int(np.bincount(words % 32).max())
  return total

def _piece_order(rel: np.ndarray, position: np.ndarray, width: int, n_threads: int, itemsize: int) -> np.ndarray | None:
  """Which piece (in address order) each thread takes, round by round, where a warp of threads in address order
  would store into few banks: the bits of the piece number are permuted so that a warp still reads whole 128-byte
  runs (the pieces' lowest, contiguous bits stay the threads' lowest) and its other thread bits are those with the
  fewest bank conflicts (the lowest such bits). None: address order (it is best, or the counts are not powers of 2)."""
  pieces = len(rel) // width
  bits, tbits = pieces.bit_length() - 1, n_threads.bit_length() - 1
  if 1 << bits != pieces or 1 << tbits != n_threads: return None
  warp_bits = min(5, tbits, bits)
  low = 0
  while low < min(3, warp_bits) and rel[(1 << low) * width] == (1 << low) * width: low += 1
  def lanes(bs) -> np.ndarray:
    t = np.arange(1 << len(bs))
    return sum((((t >> k) & 1) << b for k, b in enumerate(bs)), np.zeros_like(t))
  best = min(itertools.combinations(range(low, bits), warp_bits - low),
             key=lambda c: (_bank_conflicts(position, width, lanes(list(range(low)) + list(c)), itemsize), c))
  order = list(range(low)) + list(best)
  order += [b for b in range(bits) if b not in order]
  if order == list(range(bits)): return None
  return lanes(order)

def _digit_terms(digits, tid: UOp, width: int, n_threads: int, x0: int) -> tuple[UOp | None, int]:
  """f(x0 + tid * width) split into (the thread's part, a UOp or None; the constant part): x0 holds the vector
  lane and the round, tid only the thread digits."""
  term, const = None, 0
  for lo, radix, coef in digits:
    if lo >= width and lo * radix <= width * n_threads:
      d = tid // (lo // width) if lo != width else tid
      t = (d % radix if lo * radix != width * n_threads else d) * coef
      term = t if term is None else term + t
    else: const += ((x0 // lo) % radix) * coef
  return term, const

def _vector_fill(p: _Plan, tile: _Tile, at_step: dict, mem: UOp, tid: UOp, half: UOp) -> list[UOp]:
  """The stores of this thread's pieces of the tile: piece `tid + T * j` of round j, `width` elements from
  consecutive global addresses (one vector load after the vectorize pass), each stored to its slot's position."""
  from tinyplug.codegen.kernel import replace_nodes
  base = replace_nodes(tile.base, at_step) if at_step else tile.base
  g_term, _ = _digit_terms(tile.offset, tid, tile.width, tile.threads, 0)
  s_term, _ = _digit_terms(tile.position, tid, tile.width, tile.threads, 0)
  g_base = base + g_term if g_term is not None else base
  s_base = half + s_term if s_term is not None else half
  src, dt, out = p.loads[0].src[0], p.loads[0].dtype, []
  for j in range(tile.count // (tile.width * tile.threads)):
    x0 = j * tile.width * tile.threads
    g_const = _digit_terms(tile.offset, tid, tile.width, tile.threads, x0)[1]
    # one vector load (the vectorize pass would group the lanes as the stores' runs go: in pairs, for A)
    index = UOp(Ops.INDEX, src.dtype.vec(tile.width), (src.src[0], g_base + g_const if g_const else g_base), src.arg)
    vector = UOp(Ops.LOAD, dt.vec(tile.width), (index,), p.loads[0].arg)
    for v in range(tile.width):
      s_const = _digit_terms(tile.position, tid, tile.width, tile.threads, x0 + v)[1] + tile.position0
      at = UOp(Ops.INDEX, p.buf.dtype, (mem, s_base + s_const if s_const else s_base))
      out.append(UOp(Ops.STORE, dtypes.void, (at, UOp(Ops.GEP, dt, (vector,), (v,)))))
  return out
