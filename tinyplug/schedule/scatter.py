"""The kernels of a SCATTER_ADD (a row gather's gradient on renderers with `row_scatter_add`).

SCATTER_ADD(src (n, w), idx (n,) or (n, w), arg=rows) is built as two kernels writing one buffer (`builders`): the
(rows, w) table zeroed, then `for j in w: for i in n (in order): out[idx[i], j] += src[i, j]` (idx[i, j] with a
per-element index).
The loop over the indices is an "ordered" range: no optimisation action splits, upcasts, unrolls or shares it out
(two indices may name the same row, and each row's additions must happen in index order, as the one-hot sum they
replace did them). The row loop is the output
("loop") axis and outermost: the heuristic vectorises it and threads may share it out, each owning whole columns.

An index that is `block_index(rows, per_block)` (row i // per_block: each block of indices adds into a row of its
own, split_reduce's partial sums down the columns) is run as `for b in rows: for i in per_block (in order): for j in
w: out[b, j] += src[b * per_block + i, j]`, one kernel (its first step stores what the others add to): threads share
the blocks out, and each block streams its source rows whole while its row of sums stays in cache."""
from __future__ import annotations
from typing import Any, Callable
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp
from tinyplug.schedule.indexing import const_index, index_dtype

def needs_own_kernel(src: UOp) -> bool:
  """Whether a SCATTER_ADD source is computed in a kernel of its own first: one with a reduction in it would nest
  that reduction inside the ordered loop (elementwise math and views of buffers are read in place)."""
  return any(u.op in (Ops.REDUCE_AXIS, Ops.SCATTER_ADD) for u in src.toposort())

def _store(out_global: UOp, out: UOp, offset: UOp, value: UOp, valid: UOp | None = None) -> UOp:
  index = UOp(Ops.INDEX, out.dtype.ptr(out.arg), (out_global, offset) + ((valid,) if valid is not None else ()))
  return UOp(Ops.STORE, dtypes.void, (index, value))

def zero_ast(kb: Any, n: UOp, out: UOp) -> UOp:
  g0 = kb.global_for(out)
  (r,), _ = kb.output_ranges((out.arg,))
  return UOp(Ops.SINK, dtypes.void, (_store(g0, out, r, UOp.const(n.dtype, 0)),))

def block_index(blocks: int, per_block: int, device: str) -> UOp:
  """The int32 index (blocks * per_block,) whose i-th value is i // per_block, as a tensor-level graph of padded
  constants (a step up by one where each block after the first starts). Hash-consed: scatter_ast knows it by identity."""
  n, one = blocks * per_block, UOp(Ops.CONST, dtypes.int32, (UOp(Ops.DEVICE, dtypes.void, arg=device),), 1)
  total = UOp(Ops.EXPAND, dtypes.int32, (UOp(Ops.RESHAPE, dtypes.int32, (UOp(Ops.CONST, dtypes.int32, one.src, 0),),
                                                (1,)),), (n,))
  for k in range(1, blocks):
    step = UOp(Ops.EXPAND, dtypes.int32, (UOp(Ops.RESHAPE, dtypes.int32, (one,), (1,)),), (n - k * per_block,))
    total = UOp(Ops.ADD, dtypes.int32, (total, UOp(Ops.PAD, dtypes.int32, (step,), ((k * per_block, 0),))))
  return total

def _is_block_index(idx: UOp, rows: int, count: int) -> bool:
  if len(idx.shape) != 1 or rows < 2 or count % rows or not isinstance(idx.device, str): return False
  # its last step first: building the index to compare with costs a node per row (an Embedding's table has thousands)
  last, per = idx.src[1] if idx.op is Ops.ADD else None, count // rows
  return last is not None and last.op is Ops.PAD and last.arg == (((rows - 1) * per, 0),) and \
    idx is block_index(rows, per, idx.device)

def builders(n: UOp) -> tuple[Callable[[Any, UOp, UOp], UOp], ...]:
  """The kernels of SCATTER_ADD `n`, in order: the table zeroed, then the rows added; over a block index only the
  second (each block's first step stores its row instead of adding to it)."""
  src, idx = n.src
  return (scatter_ast,) if _is_block_index(idx, n.arg, src.shape[0]) else (zero_ast, scatter_ast)

def scatter_ast(kb: Any, n: UOp, out: UOp) -> UOp:
  src, idx = n.src
  count, width = src.shape
  rows = n.arg
  g0 = kb.global_for(out)
  if _is_block_index(idx, rows, count):
    per = count // rows
    b, i = kb.new_range(rows, "loop"), kb.new_range(per, "ordered")
    j = kb.new_range(width, "loop") if width > 1 else const_index(0)
    index = UOp(Ops.INDEX, out.dtype.ptr(out.arg), (g0, b * const_index(width) + j))
    value = kb.value(src, (b * const_index(per) + i, j))
    # the first step's sums start from zero: no kernel zeroing the table first (one launch less, and a thread's rows
    # are written by that thread only, not zeroed by another core and fetched from its cache)
    old = i.ne(const_index(0)).where(UOp(Ops.LOAD, n.dtype, (index,)), UOp.const(n.dtype, 0))
    return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (index, old + value)),))
  j = kb.new_range(width, "loop") if width > 1 else const_index(0)
  i = kb.new_range(count, "ordered") if count > 1 else const_index(0)
  row = kb.value(idx, (i,) if len(idx.shape) == 1 else (i, j))
  # checked in the index's own dtype: an int64 index past 2^31 must not wrap into range when it becomes an offset
  # (a bound the dtype cannot pass is left out: a uint8 index into 300 rows is always below 300, never negative)
  checks = [] if dtypes.is_unsigned(row.dtype) else [(row < UOp.const(row.dtype, 0)).logical_not()]
  if rows <= dtypes.max(row.dtype): checks.append(row < UOp.const(row.dtype, rows))
  valid = checks[0] & checks[1] if len(checks) == 2 else checks[0] if checks else None
  offset = row.cast(index_dtype()) * const_index(width) + j
  index = UOp(Ops.INDEX, out.dtype.ptr(out.arg), (g0, offset) + ((valid,) if valid is not None else ()))
  old = UOp(Ops.LOAD, n.dtype, (index,) + ((UOp.const(n.dtype, 0),) if valid is not None else ()))
  return UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (index, old + kb.value(src, (i, j)))),))
