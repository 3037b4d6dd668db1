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
trip k fills step k+1 while its WMMAs read step k (`_prefetched`)."""
from __future__ import annotations
import math
from dataclasses import dataclass
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp

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

def stage_operands(sink: UOp, renderer, prefetch: bool = False) -> UOp:
  """`sink` with its WMMAs' A and B operands read from shared memory (see the module docstring); with `prefetch`,
  each K step's loop trip loads the next step's tiles while its tensor cores run (see `_prefetched`)."""
  from tinyplug.codegen.kernel import replace_nodes
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
  plans = [_plan(i, loads, threads) for i, loads in enumerate(operands)]
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
  shared buffer (two halves) and where this thread's slot starts in the half of the current K step."""
  loads: tuple[UOp, ...]
  varying: tuple[UOp, ...]
  steps: tuple[UOp, ...]
  buf: UOp
  half: UOp
  slots: int

def _plan(i: int, loads: tuple[UOp, ...], threads: list[UOp]) -> _Plan:
  if any(x.op is not Ops.LOAD or x.src[0].op is not Ops.INDEX or x.src[0].src[0].op is not Ops.DEFINE_GLOBAL
         for x in loads): raise StagingError("a WMMA operand is not a load from global memory")
  used = set().union(*(_ranges_of(x) for x in loads))
  if any(r.src[0].op is not Ops.CONST for r in used): raise StagingError("a WMMA operand's range has no fixed size")
  varying = [r for r in threads if r in used] + sorted((r for r in used if r.arg[1] in VARYING and r not in threads),
                                                      key=lambda r: r.arg)
  steps = sorted((r for r in used if r.arg[1] == "reduce"), key=lambda r: r.arg, reverse=True)
  idx_dt = (varying + threads + steps)[0].dtype if varying + threads + steps else dtypes.index
  n, slots = len(loads), math.prod(_size(r) for r in varying)
  buf = UOp(Ops.DEFINE_LOCAL, loads[0].dtype.ptr(2 * slots * n, local=True), (), f"stage{i}")
  half = (_linear(steps, idx_dt) % 2) * (slots * n) if steps else UOp.const(idx_dt, 0)
  return _Plan(tuple(loads), tuple(varying), tuple(steps), buf, half, slots)

def _fill(p: _Plan, at_step: dict, mem: UOp, threads: list[UOp], half: UOp | None = None) -> list[UOp]:
  """The stores of this thread's slots `tid, tid + T, ...` of `p`'s tile, for the K step `at_step` gives (the
  current one where empty), each slot's coordinates decoded from its number, into `mem` (the buffer, or an AFTER
  of it) at `half` (default: the step's half)."""
  from tinyplug.codegen.kernel import replace_nodes
  tid, n_threads = _linear(threads, p.half.dtype), math.prod(_size(r) for r in threads)
  if half is None: half = replace_nodes(p.half, at_step) if at_step else p.half
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
      idx = half + s * n + e
      at = UOp(Ops.INDEX, p.buf.dtype, (mem, idx) if gate is None else (mem, idx, gate))
      out.append(UOp(Ops.STORE, dtypes.void, (at, value)))
  return out

def _reads(plans: list[_Plan], barrier: UOp) -> dict[UOp, UOp]:
  """Each operand load -> the load of this thread's slot element from the current half, after `barrier`."""
  subs = {}
  for p in plans:
    mem = UOp(Ops.AFTER, p.buf.dtype, (p.buf, barrier))
    base = p.half + _linear(list(p.varying), p.half.dtype) * len(p.loads)
    for e, x in enumerate(p.loads): subs[x] = UOp(Ops.LOAD, x.dtype, (UOp(Ops.INDEX, p.buf.dtype, (mem, base + e)),))
  return subs
