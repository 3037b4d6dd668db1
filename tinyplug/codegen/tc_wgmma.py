"""STAGE's descriptor mode (arg bit 2048 with bit 16, `STAGE_DESCRIPTOR`): the operands of a tensor core that reads A
and B from shared memory itself (Hopper's `wgmma`; `Renderer.descriptor_cores`) are copied there as STAGE bit 16
copies them (cp.async, 2-5 stages, one wait and barrier per trip: tc_async.py), in the layout the instruction's
128-byte swizzle mode reads, and each WMMA's A and B elements become the descriptors of its sub-tiles.

- Tiles: each operand as it lies in global memory (tc_async's `tile_geometry`): K-major where K is contiguous (rows
  are M or N, each the K step: a row-major A, a B stored N x K), M/N-major where the rows are the K step (a row-major
  B, an A stored K x M); which, from how far one K-tile further moves the operand. The K step is a multiple of 64
  16-bit elements (128 bytes). K-major tiles are stored in 128-byte column blocks of all their rows, M/N-major ones as
  64x64 blocks of 8 KB (groups of 64 rows cut into column blocks); a block's rows 128 bytes apart, 16-byte chunk c of
  row r at c ^ r % 8 (tc_async's `_position`), every tile 1024-byte aligned (the renderer aligns arrays `wgmma*`).
- Descriptors: a WMMA (one value of every range but the lanes) reads a 64x16 block of A and a 16xN block of B; its
  first element's place in the stage, as digits of the ranges (`_digits`), is the descriptor's start (the swizzle
  applies to the address bits, so a start 32, 64 or 96 bytes into a K-major row is the unswizzled one). Strides
  (bytes, `STRIDES`): K-major LBO unused, SBO 1024 (8 rows); M/N-major LBO 8192 (the next 64 columns), SBO 1024.
- The WMMA keeps its element count: each A element is the A descriptor (a LOAD of uint64 with arg "wgmma.k" or
  "wgmma.mn" from the sub-tile's first element), each B element B's; the renderer turns the WMMA into the instruction
  (imm-trans-a/b 1 for an M/N-major A/B).

Refused (StagingError): a renderer without the core, operands whose tiles are not so (a K step not a multiple of 64,
rows or columns not whole 64s), a WMMA whose block is not 64 x 16 (A) or 16 x N (B) from a place digits describe."""
from __future__ import annotations
import dataclasses, math
from typing import TYPE_CHECKING
import numpy as np
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp
from tinyplug.codegen.tc_staging import StagingError, _digits, _size
from tinyplug.codegen.tc_async import CHUNK, _AsyncPlan, _digit_uop, async_stages, pipeline, tile_geometry
if TYPE_CHECKING: from tinyplug.backend import Renderer

ROW_BYTES = 128   # the 128-byte swizzle's row: a K step of A, a column block of B
# (lbo, sbo) of each kind of descriptor tile, in bytes: K-major (LBO unused), M/N-major (LBO: the next 64 columns, a
# 64x64 block); SBO: the next 8 rows of 128 bytes
STRIDES = {"wgmma.k": (16, 1024), "wgmma.mn": (64 * ROW_BYTES, 1024)}

def _plan(number: int, loads: tuple[UOp, ...], threads: list[UOp], stages: int) -> tuple[_AsyncPlan, np.ndarray, np.ndarray]:
  """The operand's plan (stage buffer, fill) and each slot's sub-tile origin (row, column) in the tile."""
  g = tile_geometry(loads, threads)
  dt = loads[0].dtype
  if dt.itemsize != 2: raise StagingError(f"descriptor tiles here hold 16-bit elements, not {dt.name}")
  per_row = ROW_BYTES // dt.itemsize
  unroll = [r for r in g.varying if r.arg[1] == "unroll"]
  k_step = 16 * math.prod(_size(r) for r in unroll)
  if k_step % per_row:
    raise StagingError(f"a K step of {k_step} elements: descriptor tiles need a multiple of {per_row} (UNROLL 4 or 8 "
                       "of 16-deep K-tiles)")
  # which way K runs: one unroll step further along K moves the operand by 16 elements (K-major: K contiguous, the
  # tile's rows are M or N) or by 16 rows (M/N-major: the tile's rows are the K step)
  r = unroll[0]
  moved = g.off[g.strides[g.varying.index(r)]] - g.off[0]
  if not (moved == moved[0]).all(): raise StagingError("the operand's K-tiles do not lie a fixed distance apart")
  k_major = int(moved[0]) == 16
  if g.rows == 1:   # rows that follow one another in memory were found as one: cut them as the operand's rows are
    w = k_step if k_major else g.width // k_step
    if w < 1 or g.width % w: raise StagingError(f"the operand's tile of {g.width} elements does not cut into rows")
    g = dataclasses.replace(g, rows=g.width // w, width=w, ld=w)
  rel = g.off - g.start
  row, col = rel // g.ld, rel % g.ld
  which = "AB"[number]
  if k_major and (g.width != k_step or g.rows % 64):
    raise StagingError(f"{which}'s tile is {g.rows} x {g.width}: K-major descriptor tiles are rows of the K step, a "
                       "multiple of 64 of them")
  if not k_major and (g.rows != k_step or g.width % per_row):
    raise StagingError(f"{which}'s tile is {g.rows} x {g.width}: M/N-major descriptor tiles are the K step's rows of a "
                       f"multiple of {per_row} columns")
  buf = UOp(Ops.DEFINE_LOCAL, dt.ptr(stages * g.rows * g.width, local=True), (), f"wgmma{number}")
  plan = _AsyncPlan(tuple(loads), g.varying, g.steps, g.gbuf, g.base(), g.rows, g.width, g.ld, buf, False, (), (), 0, 0,
                    True, None, "k" if k_major else "mn")
  return plan, row, col

def _origins(plan: _AsyncPlan, row: np.ndarray, col: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
  """Each slot's WMMA block origin (row, col): the least over its lanes, checked to be a `shape` block it fills."""
  lane = next(i for i, r in enumerate(plan.varying) if r.arg[1] == "warp")
  size = [_size(r) for r in plan.varying]
  # slots as an array over the ranges (fastest first in `varying`: numpy's last axis)
  grid = lambda a: a.reshape(*reversed(size), a.shape[-1])
  ax = len(size) - 1 - lane
  r0 = grid(row).min(axis=(ax, len(size)), keepdims=True)
  c0 = grid(col).min(axis=(ax, len(size)), keepdims=True)
  dr, dc = grid(row) - r0, grid(col) - c0
  if dr.min() < 0 or dr.max() >= shape[0] or dc.max() >= shape[1] or (r0 % 8).any() or (c0 % 8).any():
    raise StagingError(f"a WMMA's operand is not a {shape[0]}x{shape[1]} block starting on whole 8x8 core matrices")
  full = lambda a: np.broadcast_to(a, (*reversed(size), 1)).reshape(-1)
  return np.stack([full(r0), full(c0)], axis=1)

def stage_descriptors(sink: UOp, renderer: Renderer, arg: int, operands: list[tuple[UOp, ...]], threads: list[UOp]) -> UOp:
  """`sink` with its WMMAs' operands copied into descriptor tiles and read by descriptors (the module docstring)."""
  if not renderer.descriptor_cores or not renderer.async_copy:
    raise StagingError("the renderer has no tensor core that reads shared memory through descriptors (wgmma: CUDA C "
                       "on sm_90)")
  if not arg & 16: raise StagingError("bit 2048 stages with cp.async as bit 16 does: add 16")
  if arg & (128 | 14): raise StagingError("descriptor tiles are always swizzled row-major tiles: no bits 2, 4, 8, 128")
  if len(operands) != 2: raise StagingError("descriptor staging needs one A and one B operand")
  stages = async_stages(arg)
  planned = [_plan(i, loads, threads, stages) for i, loads in enumerate(operands)]
  plans = [p for p, _, _ in planned]
  b_cols = len(operands[1]) * 8   # the core's N: B's elements per thread x 128 threads / 16 rows
  descs = []
  for (p, row, col), (mn, _) in zip(planned, ((64, 0), (b_cols, 1))):
    k_major = p.blocks == "k"
    origin = _origins(p, row, col, (mn, 16) if k_major else (16, mn))   # the tile's rows: M/N if K-major, else K
    per = CHUNK // p.loads[0].dtype.itemsize
    r0, c0 = origin[:, 0], origin[:, 1]
    line = 8 * per
    # the block's first element in tc_async._position's layout: K-major, column blocks of all rows; M/N-major, groups
    # of 64 rows (K) cut into 64-column blocks (its blocks start on one: c0 % 64 == 0)
    if k_major: start = (c0 // line) * (p.rows * line) + r0 * line + c0 % line
    else:
      if (c0 % line).any(): raise StagingError("a WMMA's M/N-major block starts inside a 64-column block")
      start = (r0 // 64) * (64 * p.width) + (c0 // line) * (min(p.rows, 64) * line) + (r0 % 64) * line
    strides = [math.prod(_size(r) for r in p.varying[:j]) for j in range(len(p.varying))]
    digits = _digits(start - start[0], tuple(strides[1:])) if (start - start[0]).any() else ()
    if digits is None: raise StagingError("the descriptors' starts are not sums of the ranges' digits")
    descs.append(("wgmma.k" if k_major else "wgmma.mn", digits, int(start[0])))
  def reads(p: _AsyncPlan, mem: UOp, half) -> dict[UOp, UOp]:
    kind, digits, start0 = descs[plans.index(p)]
    at = half + _digit_uop(digits, p.varying, start0, half.dtype)
    desc = UOp(Ops.LOAD, dtypes.uint64, (UOp(Ops.INDEX, p.buf.dtype, (mem, at)),), kind)
    return {x: desc for x in p.loads}
  return pipeline(sink, renderer, arg, plans, stages, threads, reads, proxy=True)
