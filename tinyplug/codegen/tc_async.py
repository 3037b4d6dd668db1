"""STAGE's asynchronous mode (arg bit 16, `STAGE_ASYNC`): a tensor-core kernel's A and B tiles go through shared memory
the way fast mma.sync kernels do it, for renderers that declare `async_copy` (CUDA C from sm_80 on).

- Each operand's tile of one K step is kept in shared memory *as it lies in global memory*: R rows of W contiguous
  elements (A: the work-group's M rows by the K step, row-major; B: the K step's rows by its N columns), found by
  evaluating the operand's fragment loads over every slot (tc_staging's `_slot_offsets`). Rows are stored W apart, their
  16-byte chunks XOR-swizzled (`_swizzle`: chunk ^ a few row bits) so that the 8 rows one ldmatrix reads, and the 8
  chunks a quarter warp copies, fall into different banks; STAGE bit 128 turns the swizzle off (to measure it).
- The fill: every thread copies 16-byte chunks `tid, tid + T, ...` straight from global to shared memory, without
  registers: a STORE of a LOAD with arg "cp.async" (the renderer writes one `cp.async.cg.shared.global`). A K step's
  copies are one commit group (a BARRIER with arg "cp.async.commit").
- S stages (2 + the two bits 32 and 64 of the arg: 2 to 5 buffers per operand): before the K loop the first S-1
  steps are copied, a group each; trip k waits until at most S-2 groups are pending and for the work-group (one
  BARRIER with arg ("cp.async.wait", S-2): `cp.async.wait_group` then `__syncthreads()`), copies step k+S-1 into the
  buffer step k-1 used (every thread finished reading it before the barrier), commits, and reads step k. The last
  S-1 trips copy nothing (their copies are gated off; the groups stay, empty), so none is in flight at the end.
- The reads: each WMMA's A fragment (8 elements, 4 registers) is one `ldmatrix.x4`, its B fragment (4 elements) one
  `ldmatrix.x2`; `.trans` where the fragment's element pairs run down the shared tile's columns (B of a row-major KxN
  matrix). Each lane gives the address of one 8-element row of one 8x8 matrix: a LOAD of the fragment vector with arg
  "ldmatrix" / "ldmatrix.trans", its address a sum of digits of the lane and the tile ranges (`_digits`), checked
  against every element of every lane's fragment before it is used.

With bit 256 the work-groups run in grouped order (`_grouped`) for the L2 cache. Bits 512 and 1024 (1 to 3) ask the
compiler to fit that many work-groups per multiprocessor (CUDA: `__launch_bounds__(threads, blocks)`, fewer registers
per thread): the wait's arg carries it, ("cp.async.wait", S-2, blocks, proxy), 0 for no ask (proxy: True where the
tiles are read by the tensor cores themselves, tc_wgmma.py's descriptor mode: the wait fences the async proxy too).

Refused (StagingError, with the reason): a renderer without `async_copy`, operands read through a gate (a PADTO's:
cp.async copies whole 16-byte chunks), tiles that are not whole 16-byte aligned rows, fragments no ldmatrix gathers,
more than one K loop, and tiles whose S buffers do not fit the shared memory."""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING
import numpy as np
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp
from tinyplug.codegen.tc_staging import VARYING, StagingError, _digits, _linear, _ranges_of, _size, _slot_offsets
if TYPE_CHECKING: from tinyplug.backend import Renderer

STAGE_DEPTH, STAGE_NO_SWIZZLE, STAGE_GROUPED, STAGE_BLOCKS = 32, 128, 256, 512   # bit 16 is tc_staging's STAGE_ASYNC
CHUNK = 16   # bytes one cp.async copies and one ldmatrix row holds

def blocks_per_sm(arg: int) -> int:
  """The work-groups per multiprocessor STAGE's arg asks the compiler to fit (bits 512, 1024: 1 to 3; 0: no ask)."""
  return (arg // STAGE_BLOCKS) % 4

def async_stages(arg: int) -> int:
  """The number of shared buffers per operand STAGE's arg asks for (2 to 5)."""
  return 2 + (arg // STAGE_DEPTH) % 4

@dataclass(frozen=True)
class _AsyncPlan:
  """One operand: its loads, the ranges telling its fragments apart (fastest first), the global buffer and the tile's
  first element (`base`, a UOp of the work-group's and the K step's ranges), the tile's `rows` rows of `width`
  elements, `ld` apart in global memory, the shared buffer (`stages` tiles), and for the reads the ldmatrix variant,
  the digits of each lane's row address (row, chunk) over the slot number."""
  loads: tuple[UOp, ...]
  varying: tuple[UOp, ...]
  steps: tuple[UOp, ...]
  gbuf: UOp
  base: UOp
  rows: int
  width: int
  ld: int
  buf: UOp
  trans: bool
  row_digits: tuple
  chunk_digits: tuple
  row0: int
  chunk0: int
  swizzle: bool
  pair: int | None = None   # varying[pair]: loaded two fragments at a time (x4 for two 2-register fragments)
  blocks: str = ""          # descriptor tiles (tc_wgmma.py): "k" K-major, "mn" M/N-major (`_position`)

  @property
  def tile(self) -> int: return self.rows * self.width
  @property
  def chunks(self) -> int: return self.width * self.loads[0].dtype.itemsize // CHUNK   # per row

def _swizzle(row: UOp | int, chunks: int, on: bool):
  """The XOR applied to a row's chunk numbers: the row's bits that make 8 consecutive rows (or the rows of one
  128-byte line, for short rows) meet 8 different 16-byte bank groups; 0 where off, or where a row's chunk count is
  not a power of two (the XOR would leave the row)."""
  if not on or chunks < 2 or chunks & (chunks - 1): return 0
  if chunks >= 8: return row % 8
  return (row // (8 // chunks)) % chunks

def _position(p: _AsyncPlan, row, chunk):
  """Element offset (in one stage) of chunk `chunk` of row `row`, swizzled. With `blocks` (descriptor tiles) rows
  are 128 bytes apart in 128-byte column blocks, swizzled as the 128-byte swizzle of Hopper's descriptors wants it
  (chunk ^ row % 8: the shared address bits 4-6 ^= bits 7-9): "k" (K-major: rows are M or N) stores each column
  block's rows together, one block after the other; "mn" (rows are the K step) cuts the rows into groups of 64 first,
  so every 64x64 block is 8 KB (the descriptors' fixed leading byte offset)."""
  if p.blocks:
    per = CHUNK // p.loads[0].dtype.itemsize
    line = 8 * per   # elements of a 128-byte row
    within = chunk % 8 if p.chunks > 8 else chunk
    phys = UOp(Ops.XOR, within.dtype, (within, row % 8)) if isinstance(within, UOp) else within ^ (row % 8)
    group = p.blocks == "mn" and p.rows > 64
    pos = (row % 64 if group else row) * line + phys * per
    if p.chunks > 8: pos = pos + (chunk // 8) * ((64 if group else p.rows) * line)
    if group: pos = pos + (row // 64) * (64 * p.width)
    return pos
  sw = _swizzle(row, p.chunks, p.swizzle)
  phys = chunk if isinstance(sw, int) and sw == 0 else UOp(Ops.XOR, chunk.dtype, (chunk, sw)) \
    if isinstance(chunk, UOp) else chunk ^ sw
  per = CHUNK // p.loads[0].dtype.itemsize
  return row * p.width + phys * per

def _digit_uop(digits, varying: tuple[UOp, ...], const: int, dtype) -> UOp:
  """sum(((slot // lo) % radix) * coef) + const with the slot number's digits read off the ranges themselves (each
  digit lies within one range: `_digits` splits at the ranges' boundaries)."""
  starts, s = [], 1
  for r in varying:
    starts.append(s)
    s *= _size(r)
  total = UOp.const(dtype, const)
  for lo, radix, coef in digits:
    if coef == 0: continue
    j = max(i for i, st in enumerate(starts) if st <= lo)
    r, st = varying[j], starts[j]
    d = r // (lo // st) if lo != st else r
    if lo * radix != st * _size(r): d = d % radix
    total = total + (d * coef if coef != 1 else d)
  return total

@dataclass(frozen=True)
class Geometry:
  """Where an operand's tile lies in global memory: its buffer, the ranges that tell its fragments apart (fastest
  first; `strides` their slot strides), its K loop ranges, each slot's range values (`coords`) and each [slot,
  element]'s global index (`off`, first at `start`), `rows` rows of `width` elements `ld` apart, the loads' indexes."""
  gbuf: UOp
  varying: tuple[UOp, ...]
  steps: tuple[UOp, ...]
  strides: list[int]
  coords: dict
  off: np.ndarray
  start: int
  rows: int
  width: int
  ld: int
  indexes: list[UOp]

  def base(self) -> UOp:
    """The index of the tile's first element, a UOp of the work-group's and the K step's ranges."""
    from tinyplug.codegen.kernel import replace_nodes
    s0, e0 = np.unravel_index(int(np.argmin(self.off)), self.off.shape)
    return replace_nodes(self.indexes[e0], {r: UOp.const(r.dtype, int(self.coords[r][s0])) for r in self.varying})

def tile_geometry(loads: tuple[UOp, ...], threads: list[UOp]) -> Geometry:
  """The operand's tile as equally long rows of whole, aligned 16-byte chunks (StagingError where it is not)."""
  if any(x.op is not Ops.LOAD or x.src[0].op is not Ops.INDEX or x.src[0].src[0].op is not Ops.DEFINE_GLOBAL
         for x in loads): raise StagingError("a WMMA operand is not a load from global memory")
  if any(len(x.src) > 1 or len(x.src[0].src) > 2 for x in loads):
    raise StagingError("a WMMA operand is read through a gate (a PADTO): asynchronous copies move whole 16-byte "
                       "chunks; stage it without bit 16")
  gbuf = loads[0].src[0].src[0]
  if any(x.src[0].src[0] is not gbuf for x in loads): raise StagingError("a WMMA operand reads two buffers")
  dt = loads[0].dtype
  per = CHUNK // dt.itemsize
  used = set().union(*(_ranges_of(x) for x in loads))
  if any(r.src[0].op is not Ops.CONST for r in used): raise StagingError("a WMMA operand's range has no fixed size")
  varying = tuple([r for r in threads if r in used] + sorted((r for r in used if r.arg[1] in VARYING and r not in threads),
                                                             key=lambda r: r.arg))
  steps = tuple(sorted((r for r in used if r.arg[1] == "reduce"), key=lambda r: r.arg, reverse=True))
  if len([r for r in varying if r.arg[1] == "warp"]) != 1: raise StagingError("the WMMA's lanes are not one range")
  strides = [math.prod(_size(r) for r in varying[:i]) for i in range(len(varying))]
  indexes = [x.src[0].src[1] for x in loads]
  coords, off = _slot_offsets(varying, indexes, per, "16-byte chunks")   # [slot, element] -> global index
  start = int(off.min())
  rel = off - start
  uniq = np.unique(rel)
  width = next((i for i in range(1, len(uniq)) if uniq[i] != i), len(uniq))
  rows = len(uniq) // width
  ld = int(uniq[width]) if rows > 1 else width
  if rows * width != len(uniq) or not np.array_equal(uniq, (np.arange(rows)[:, None] * ld + np.arange(width)).reshape(-1)) \
     or ld < width: raise StagingError("the operand's tile is not a set of equally long rows in global memory")
  if width % per or ld % per or start % per: raise StagingError("the tile's rows are not whole, aligned 16-byte chunks")
  return Geometry(gbuf, varying, steps, strides, coords, off, start, rows, width, ld, indexes)

def plan_async(number: int, loads: tuple[UOp, ...], threads: list[UOp], stages: int, swizzle: bool) -> _AsyncPlan:
  g = tile_geometry(loads, threads)
  varying, steps, strides, coords, off, rows, width, ld = g.varying, g.steps, g.strides, g.coords, g.off, g.rows, g.width, g.ld
  dt, per, slot = loads[0].dtype, CHUNK // loads[0].dtype.itemsize, np.arange(math.prod(_size(r) for r in varying))
  warp = [i for i, r in enumerate(varying) if r.arg[1] == "warp"]
  if len(warp) != 1 or _size(varying[warp[0]]) != 32: raise StagingError("the WMMA's lanes are not one warp of 32")
  rel = off - g.start
  row, col = rel // ld, rel % ld
  # the ldmatrix rows: lane L gives the address of row L % 8 of matrix (register) L // 8; matrix i is elements 2i, 2i+1
  n = len(loads)
  if n % 2 or n // 2 not in (1, 2, 4): raise StagingError(f"a fragment of {n} elements is no ldmatrix")
  regs, ls = n // 2, strides[warp[0]]
  lane = coords[varying[warp[0]]]
  at_lane = lambda l: slot + (l - lane) * ls   # the slot with the same tile coordinates, at lane l
  L = lane % (8 * regs)
  i, rho = L // 8, L % 8
  found = None
  for trans in (False, True):
    # non-trans: lane l holds (row l//4, elements 2(l%4), +1) of each 8x8 matrix; .trans: (elements 2(l%4), +1 of
    # column l//4): the source of row rho is lane 4*rho (elements 2i) or lane rho//2 (element 2i + rho % 2)
    src_slot, src_e = (at_lane(4 * rho), 2 * i) if not trans else (at_lane(rho // 2), 2 * i + rho % 2)
    a_row, a_col = row[src_slot, src_e], col[src_slot, src_e]
    ok = not (a_col % per).any()
    for reg in range(regs):
      for h in range(2):
        if not ok: break
        e = 2 * reg + h
        if not trans:
          s2 = at_lane(4 * (lane // 4))
          ok = np.array_equal(row[:, e], row[s2, 2 * reg]) and np.array_equal(col[:, e], col[s2, 2 * reg] + 2 * (lane % 4) + h)
        else:
          s2 = at_lane(lane % 4)
          ok = np.array_equal(row[:, e], row[s2, e]) and np.array_equal(col[:, e], col[s2, e] + lane // 4)
          # and lane l%4's element 2i+h is the row that matrix row 2(l%4)+h names: its source is that lane too
    if ok:
      found = (trans, a_row, a_col // per)
      break
  if found is None: raise StagingError("the fragment's element pairs run along neither the rows nor the columns of the "
                                       "shared tile: no ldmatrix gathers it")
  trans, a_row, a_chunk = found
  breaks = tuple(strides[1:])
  # a 2-register fragment (B) is loaded with its neighbour along an even upcast or unroll range by one ldmatrix.x4:
  # matrices 2 and 3 are the neighbour's (each fragment is checked above, so the pair is too)
  pair = next((j for j, r in enumerate(varying) if regs == 2 and r not in threads and r.arg[1] in ("upcast", "unroll")
               and _size(r) % 2 == 0), None)
  if pair is not None:
    r, sp = varying[pair], strides[pair]
    L, cr = lane, coords[varying[pair]]
    i, rho = L // 8, L % 8
    at_pair = slot + (2 * (cr // 2) + i // 2 - cr) * sp   # the slot of the fragment matrix i belongs to
    if not trans: src_slot, src_e = at_pair + (4 * rho - lane) * ls, 2 * (i % 2)
    else: src_slot, src_e = at_pair + (rho // 2 - lane) * ls, 2 * (i % 2) + rho % 2
    a_row, a_chunk = row[src_slot, src_e], col[src_slot, src_e] // per
    breaks = tuple(sorted(set(breaks) | {2 * sp}))
  row_d = _digits(a_row - a_row[0], breaks) if (a_row - a_row[0]).any() else ()
  chunk_d = _digits(a_chunk - a_chunk[0], breaks) if (a_chunk - a_chunk[0]).any() else ()
  if row_d is None or chunk_d is None: raise StagingError("the ldmatrix addresses are not sums of the ranges' digits")
  buf = UOp(Ops.DEFINE_LOCAL, dt.ptr(stages * rows * width, local=True), (), f"stage{number}")
  return _AsyncPlan(tuple(loads), varying, steps, g.gbuf, g.base(), rows, width, ld, buf, trans, row_d, chunk_d,
                    int(a_row[0]), int(a_chunk[0]), swizzle, pair)

def _fill(p: _AsyncPlan, at_step: dict, mem: UOp, threads: list[UOp], half, live: UOp | None = None) -> list[UOp]:
  """This thread's cp.async copies of `p`'s tile at the K step `at_step` gives, into `mem` at element `half`; only
  where `live` holds, if given."""
  from tinyplug.codegen.kernel import replace_nodes
  base = replace_nodes(p.base, at_step) if at_step else p.base
  n_threads = math.prod(_size(r) for r in threads)
  tid = _linear(threads, base.dtype)
  total, c = p.rows * p.chunks, p.chunks
  per = CHUNK // p.loads[0].dtype.itemsize
  vec = p.loads[0].dtype.vec(per)
  out = []
  for j in range(-(-total // n_threads)):
    if n_threads % c == 0:   # a thread keeps its chunk column: row and column without a division per round
      row, chunk = tid // c + (n_threads // c) * j if j else tid // c, tid % c
    else:
      x = tid + n_threads * j if j else tid
      row, chunk = x // c, x % c
    gate = live
    if total % n_threads:
      x = tid + n_threads * j if j else tid
      inside = UOp(Ops.CMPLT, dtypes.bool, (x, UOp.const(x.dtype, total)))
      gate = inside if gate is None else UOp(Ops.AND, dtypes.bool, (gate, inside))
    g_idx = base + row * p.ld + chunk * per
    s_idx = half + _position(p, row, chunk)
    src = UOp(Ops.INDEX, p.gbuf.dtype, (p.gbuf, g_idx) if gate is None else (p.gbuf, g_idx, gate))
    value = UOp(Ops.LOAD, vec, (src,), "cp.async")
    at = UOp(Ops.INDEX, p.buf.dtype, (mem, s_idx) if gate is None else (mem, s_idx, gate))
    out.append(UOp(Ops.STORE, dtypes.void, (at, value)))
  return out

def _reads(p: _AsyncPlan, mem: UOp, half) -> dict[UOp, UOp]:
  """Each of the operand's loads -> its element of this lane's ldmatrix of the fragment."""
  dtype = half.dtype
  row = _digit_uop(p.row_digits, p.varying, p.row0, dtype)
  chunk = _digit_uop(p.chunk_digits, p.varying, p.chunk0, dtype)
  addr = half + _position(p, row, chunk)
  n = len(p.loads)
  frag = UOp(Ops.LOAD, p.loads[0].dtype.vec(2 * n if p.pair is not None else n),
             (UOp(Ops.INDEX, p.buf.dtype, (mem, addr)),), "ldmatrix.trans" if p.trans else "ldmatrix")
  if p.pair is None: return {x: UOp(Ops.GEP, x.dtype, (frag,), (e,)) for e, x in enumerate(p.loads)}
  first = UOp(Ops.CMPLT, dtypes.bool, (p.varying[p.pair] % 2, UOp.const(p.varying[p.pair].dtype, 1)))
  return {x: UOp(Ops.WHERE, x.dtype, (first, UOp(Ops.GEP, x.dtype, (frag,), (e,)), UOp(Ops.GEP, x.dtype, (frag,), (n + e,))))
          for e, x in enumerate(p.loads)}

def stage_async(sink: UOp, renderer: Renderer, arg: int, operands: list[tuple[UOp, ...]], threads: list[UOp]) -> UOp:
  """`sink` with its WMMAs' operands (each a tuple of loads) read by ldmatrix from S-stage shared
  tiles that cp.async fills (the module docstring)."""
  if not renderer.async_copy:
    raise StagingError("the renderer has no asynchronous copies to shared memory and no ldmatrix (CUDA C, sm_80+): "
                       "stage without bit 16")
  if arg & 14: raise StagingError("bits 2, 4 and 8 shape fragment-order tiles; bit 16 keeps row-major tiles")
  stages = async_stages(arg)
  plans = [plan_async(i, loads, threads, stages, not arg & STAGE_NO_SWIZZLE) for i, loads in enumerate(operands)]
  return pipeline(sink, renderer, arg, plans, stages, threads, _reads)

def pipeline(sink: UOp, renderer: Renderer, arg: int, plans: list[_AsyncPlan], stages: int, threads: list[UOp], reads,
             proxy: bool = False) -> UOp:
  """`sink` with its operands copied by cp.async into `stages` buffers each (the module docstring's loop) and each
  operand load replaced by what `reads(plan, buffer after the copies, the stage's first element)` maps it to. With
  `proxy` each wait also fences the async proxy (the tiles are read by the tensor cores' own loads: wgmma)."""
  from tinyplug.codegen.kernel import replace_nodes
  shared = sum(p.buf.dtype.size * p.loads[0].dtype.itemsize for p in plans)
  if renderer.shared_max and shared > renderer.shared_max:
    raise StagingError(f"{stages} stages need {shared} bytes of shared memory; the device has {renderer.shared_max}")
  steps = {r for p in plans for r in p.steps}
  if len(steps) > 1: raise StagingError("the operands run over more than one K loop")
  loop = next(iter(steps), None)
  idx_dt = plans[0].base.dtype
  const = lambda v: UOp.const(idx_dt, v)
  if loop is None:   # no K loop: one copy, one wait
    commit = UOp(Ops.BARRIER, dtypes.void, tuple(st for p in plans for st in _fill(p, {}, p.buf, threads, const(0))),
                 "cp.async.commit")
    wait = UOp(Ops.BARRIER, dtypes.void, (commit,), ("cp.async.wait", 0, blocks_per_sm(arg), proxy))
    subs = {}
    for p in plans: subs.update(reads(p, UOp(Ops.AFTER, p.buf.dtype, (p.buf, wait)), const(0)))
    return _grouped(replace_nodes(sink, subs), plans) if arg & STAGE_GROUPED else replace_nodes(sink, subs)
  n = _size(loop)
  prev = None
  for s in range(stages - 1):   # the prologue: steps 0 .. S-2 (those that exist), a commit group each
    at = {loop: UOp.const(loop.dtype, s)}
    mem = {p: p.buf if prev is None else UOp(Ops.AFTER, p.buf.dtype, (p.buf, prev)) for p in plans}   # group order
    fills = [st for p in plans for st in _fill(p, at, mem[p], threads, const(s * p.tile))] if s < n else []
    prev = UOp(Ops.BARRIER, dtypes.void, (*fills, *((prev,) if prev is not None else ())), "cp.async.commit")
  wait = UOp(Ops.BARRIER, dtypes.void, (prev, loop), ("cp.async.wait", stages - 2, blocks_per_sm(arg), proxy))
  # the last S-1 trips copy nothing (their groups are empty): no copy is in flight when the kernel ends
  ahead = loop + (stages - 1)
  live = UOp(Ops.CMPLT, dtypes.bool, (ahead, UOp.const(loop.dtype, n)))
  fills = [st for p in plans for st in _fill(p, {loop: ahead}, UOp(Ops.AFTER, p.buf.dtype, (p.buf, wait)), threads,
                                              (ahead % stages) * p.tile, live)]
  commit = UOp(Ops.BARRIER, dtypes.void, tuple(fills), "cp.async.commit")
  subs = {}
  for p in plans:   # the reads come after this trip's copies are issued (they overlap the tensor cores)
    subs.update(reads(p, UOp(Ops.AFTER, p.buf.dtype, (p.buf, wait, commit)), (loop % stages) * p.tile))
  return _grouped(replace_nodes(sink, subs), plans) if arg & STAGE_GROUPED else replace_nodes(sink, subs)

GROUP_ROWS = 8   # block rows a group of consecutive blocks spans (STAGE_GROUPED)

def _grouped(sink: UOp, plans: list[_AsyncPlan]) -> UOp:
  """The work-groups in grouped order (STAGE bit 256): launched with the N blocks fastest, block number l = m * NB + n
  takes block row (l // (G * NB)) * G + l % G and column (l % (G * NB)) // G, so the blocks running at once read G
  rows of A's blocks against fewer of B's and the tiles they share stay in the L2 cache. A bijection of the two block
  ranges (A's alone and B's alone); refused where there are not exactly those two or G divides no block count."""
  from tinyplug.codegen.kernel import replace_nodes
  a, b = (({r for r in _ranges_of(p.base) if r.arg[1] == "loop"}) for p in plans[:2]) if len(plans) == 2 else ((), ())
  mine, theirs = set(a) - set(b), set(b) - set(a)
  if len(mine) != 1 or len(theirs) != 1: raise StagingError("grouped blocks need one block range of A and one of B")
  rm, rn = next(iter(mine)), next(iter(theirs))
  mb, nb = _size(rm), _size(rn)
  g = next((g for g in (GROUP_ROWS, 4, 2) if mb % g == 0), None)
  if g is None: raise StagingError(f"no group of 2, 4 or 8 block rows divides {mb}")
  l = rm * nb + rn
  within = l % (g * nb)
  return replace_nodes(sink, {rm: (l // (g * nb)) * g + within % g, rn: within // g})
