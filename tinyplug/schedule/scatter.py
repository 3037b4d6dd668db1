"""The kernels of a SCATTER_ADD (a row gather's gradient on renderers with `row_scatter_add`).

SCATTER_ADD(src (n, w), idx (n,) or (n, w), arg=rows) is built as two kernels writing one buffer: the (rows, w) table
zeroed, then `for j in w: for i in n (in order): out[idx[i], j] += src[i, j]` (idx[i, j] with a per-element index).
The loop over the indices is an "ordered" range: no optimisation action splits, upcasts, unrolls or shares it out
(two indices may name the same row, and each row's additions must happen in index order, as the one-hot sum they
replace did them). The row loop is the output
("loop") axis and outermost: the heuristic vectorises it and threads may share it out, each owning whole columns."""
from __future__ import annotations
from typing import Any
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

def scatter_ast(kb: Any, n: UOp, out: UOp) -> UOp:
  src, idx = n.src
  count, width = src.shape
  rows = n.arg
  g0 = kb.global_for(out)
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
