"""The `split_reduce` pass set: a huge reduction into a few outputs (a sum of 16M floats) becomes partial results first
(k of them: a loop the CPU runtime can share out between threads and a GPU between work-groups), then a small reduction
of those. Off (`TINY_PLUGINS=-split_reduce`) such a reduction runs as one long loop: correct, on one core."""
from __future__ import annotations
import math
from tinyplug.uop.ops import GroupOp, Ops, UOp
from tinyplug.uop.upat import PatternMatcher, UPat
from tinyplug.passes.views import view_strides
from tinyplug.schedule import buffer_base

def _split(r: UOp) -> UOp | None:
  op, axes = r.arg
  shape = r.src[0].shape
  if any(isinstance(s, UOp) for s in shape): return None   # a size that is a variable's value: nothing to split by
  if (chunked := _column_chunks(r, shape, axes)) is not None: return chunked
  total = math.prod(shape[a] for a in axes)
  n_out = math.prod(r.shape)
  if total < 2**16 or n_out > 64: return None
  # at least 256 partials where they divide; more for a huge one, each still 64K elements (256M floats: 4096 partials,
  # enough work-groups to fill a GPU; 256 left an H200 at 1% of its bandwidth)
  k = next((c for c in (4096, 2048, 1024, 512) if total % c == 0 and total // c >= 1 << 16), None) or \
      next((c for c in (256, 128, 64, 32, 16) if total % c == 0), None)
  if (inner := _inner_first(r, shape, axes)) is not None: return inner
  if k is None: return None
  order = tuple(a for a in range(len(shape)) if a not in axes) + tuple(axes)
  x = r.src[0] if order == tuple(range(len(shape))) else UOp(Ops.PERMUTE, r.src[0].dtype, (r.src[0],), order)
  x = UOp(Ops.RESHAPE, x.dtype, (x,), (n_out, k, total // k))
  part = UOp(Ops.CONTIGUOUS, r.dtype, (UOp(Ops.REDUCE_AXIS, r.dtype, (x,), (op, (2,))),))
  return UOp(Ops.RESHAPE, r.dtype, (UOp(Ops.REDUCE_AXIS, r.dtype, (part,), (op, (1,))),), r.shape)

# the reduced axes after the last kept one must hold at least this many elements to be reduced first
INNER_FIRST_MIN = 256

def _inner_first(r: UOp, shape: tuple, axes: tuple[int, ...]) -> UOp | None:
  """A reduction over an outer axis and the innermost ones with a kept axis between them (batchnorm's statistics over
  (0, 2, 3) of NCHW): the innermost reduced axes first, in memory order (partials [N, C], each a contiguous run of H*W,
  read as one stream), then the outer ones over those few partials. The flat split would permute C outwards, and
  read each partial's run far from the one before it (64x64x56x56: 2.8 GB/s)."""
  kept = [a for a in range(len(shape)) if a not in axes]
  suffix = tuple(a for a in axes if a > kept[-1]) if kept else ()
  if not suffix or len(suffix) == len(axes) or math.prod(shape[a] for a in suffix) < INNER_FIRST_MIN: return None
  op = r.arg[0]
  part = UOp(Ops.CONTIGUOUS, r.dtype, (UOp(Ops.REDUCE_AXIS, r.dtype, (r.src[0],), (op, suffix)),))
  return UOp(Ops.REDUCE_AXIS, r.dtype, (part,), (op, tuple(a for a in axes if a not in suffix)))

# a reduction down the columns of at least this many rows is summed COLUMN_CHUNK rows at a time first
COLUMN_SPLIT_MIN_ROWS, COLUMN_CHUNK = 1024, 16

def _row_wider_than_registers(dev, row_bytes: int) -> bool:
  """Whether a row of `row_bytes` is more than a CPU-style renderer's register tile down the columns holds (the
  heuristic's COLUMN_VECTORS vectors, at most half the vector registers, or a row of COLUMN_ROW_BYTES whatever the
  registers)."""
  from tinyplug.device import renderer_of
  from tinyplug.passes.heuristic import COLUMN_ROW_BYTES, COLUMN_VECTORS
  if row_bytes <= COLUMN_ROW_BYTES: return False
  if (r := renderer_of(dev)) is None or not r.runs_loops or r.uses_work_groups or not r.vector_bytes: return False
  return row_bytes > r.vector_bytes * max(1, min(COLUMN_VECTORS, (r.vector_registers or 16) // 2))

def _column_chunks(r: UOp, shape: tuple, axes: tuple[int, ...]) -> UOp | None:
  """A long reduction down the columns on a CPU, its rows wider than the register tile (`sum(0)` of 4096x4096): the
  tile walks down all the rows at a stride of a whole row, a new page every step. Summed COLUMN_CHUNK rows at a time
  first (partials 1/16 of the input, each tile reads 16 rows' next cache lines: streams the prefetchers follow), then
  the partials (2 threads, loaded machine: 7.6 -> 4.3-4.6 ms; numpy 3.9). The axes are taken in the order of the
  largest input's memory: a vector times a matrix (`v @ W`) reduces the view's last axis, which in W's memory is
  the column."""
  if len(axes) != 1 or shape[axes[0]] < COLUMN_SPLIT_MIN_ROWS or shape[axes[0]] % COLUMN_CHUNK: return None
  nodes = r.src[0].toposort()
  if any(u.op is Ops.FLIP for u in nodes): return None
  # a broadcast source (a weight gradient `x.T @ g`, each row of x read once per output column) is no stream of
  # rows: its partials would be 1/16 of the broadcast, many times the data it reads (1024^3: 268 MB of them)
  if math.prod(shape) > sum(u.arg for u in nodes if u.op is Ops.BUFFER and isinstance(u.arg, int)): return None
  x, a = r.src[0], axes[0]
  if a == len(shape) - 1 or any(u.op is Ops.PERMUTE for u in nodes):
    if (strides := _largest_input_strides(x)) is None or strides[a] <= 1 or 1 not in strides: return None
    order = tuple(sorted(range(len(shape)), key=lambda i: -strides[i]))
    if order != tuple(range(len(shape))):
      x, shape, a = UOp(Ops.PERMUTE, x.dtype, (x,), order), tuple(shape[i] for i in order), order.index(a)
    if a == len(shape) - 1: return None
  if not _row_wider_than_registers(r.device, math.prod(shape[a + 1:]) * r.dtype.itemsize): return None
  if (streamed := _row_blocks(r, x, shape, a)) is not None: return streamed
  chunks = shape[:a] + (shape[a] // COLUMN_CHUNK, COLUMN_CHUNK) + shape[a + 1:]
  x = UOp(Ops.RESHAPE, x.dtype, (x,), chunks)
  part = UOp(Ops.CONTIGUOUS, r.dtype, (UOp(Ops.REDUCE_AXIS, r.dtype, (x,), (r.arg[0], (a + 1,))),))
  return UOp(Ops.RESHAPE, r.dtype, (UOp(Ops.REDUCE_AXIS, r.dtype, (part,), (r.arg[0], (a,))),), r.shape)

# a sum down the columns in blocks (`_row_blocks`): this many blocks (threads share them), each adding ROW_GROUP rows
# per step into its row of sums
ROW_BLOCKS, ROW_GROUP = 16, 8

def _row_blocks(r: UOp, x: UOp, shape: tuple, a: int) -> UOp | None:
  """A sum down the columns of a matrix (`W.sum(0)`, `v @ W`: x of shape (rows, columns), the rows reduced) on a CPU
  that runs a row scatter-add (`Renderer.row_scatter_add`): ROW_BLOCKS blocks of rows, each adding its rows one after
  another into a row of sums of its own (a SCATTER_ADD with `block_index`), ROW_GROUP rows at a time (added in
  pairs), then the blocks' rows summed. Each block reads ROW_GROUP whole rows side by side (streams the prefetchers
  follow) while its row of sums stays in the L1 or L2; the 16-row chunks' register tile read 16 rows 128 bytes at a time and wrote 1/16 of the
  input as partials (v @ W 4096x4096, one Zen 4 thread, kernels only, interleaved: 3.4 -> 2.4 ms; numpy 2.6). None
  for a max, an outer kept axis, a source with a reduction in it, a row of sums larger than a quarter of the L2, or a
  renderer without the scatter."""
  from tinyplug.schedule.scatter import block_index, needs_own_kernel
  rows, width = shape[a], math.prod(shape[a + 1:])
  if r.arg[0] is not Ops.ADD or a != 0 or x.dtype != r.dtype or not isinstance(r.device, str): return None
  # a source with a reduction in it (a layernorm's weight gradient) would be written out whole first
  if needs_own_kernel(x): return None
  if rows % (ROW_BLOCKS * ROW_GROUP) or rows // (ROW_BLOCKS * ROW_GROUP) < 2: return None
  from tinyplug.device import renderer_of
  if (rend := renderer_of(r.device)) is None or not rend.row_scatter_add: return None
  from tinyplug.passes.heuristic import cache_sizes
  from tinyplug.codegen.expander import balanced_tree
  if width * r.dtype.itemsize * 4 > cache_sizes(rend)[1]: return None
  steps = rows // ROW_GROUP
  grouped = UOp(Ops.RESHAPE, x.dtype, (x,), (steps, ROW_GROUP, width))
  group = [UOp(Ops.RESHAPE, x.dtype, (UOp(Ops.SHRINK, x.dtype, (grouped,), ((0, steps), (g, g + 1), (0, width))),),
               (steps, width)) for g in range(ROW_GROUP)]
  # added in pairs, then pairs of pairs (a tree of depth 3): as a chain, `v @ W`'s products fused into 7 FMAs a
  # vector, each waiting on the one before, and read W ~15% slower per thread
  src = balanced_tree(Ops.ADD, group)
  sums = UOp(Ops.SCATTER_ADD, r.dtype, (src, block_index(ROW_BLOCKS, steps // ROW_BLOCKS, r.device)), ROW_BLOCKS)
  return UOp(Ops.RESHAPE, r.dtype, (UOp(Ops.REDUCE_AXIS, r.dtype, (sums,), (Ops.ADD, (0,))),), r.shape)

def _largest_input_strides(x: UOp) -> tuple[int, ...] | None:
  """The element strides, per axis of elementwise graph x, of the largest buffer it reads; None where a view of it is
  not plain strides (a pad, a shrink, a flip) or x holds more than elementwise math."""
  leaves, todo = [], [x]
  while todo:
    u = todo.pop()
    if u.op is Ops.BUFFER or u.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.PAD, Ops.FLIP): leaves.append(u)
    elif u.op is Ops.CONST or (u.op is Ops.EXPAND and u.src[0].op is Ops.CONST): continue
    elif u.op in GroupOp.ALU or u.op is Ops.CAST: todo.extend(u.src)
    else: return None
  best = max(((leaf, b) for leaf in leaves if (b := buffer_base(leaf)).op is Ops.BUFFER and isinstance(b.arg, int)),
             key=lambda t: t[1].arg, default=None)
  return None if best is None else view_strides(best[0])

def make_pass() -> PatternMatcher: return PatternMatcher([(UPat(Ops.REDUCE_AXIS, name="r"), _split)])
