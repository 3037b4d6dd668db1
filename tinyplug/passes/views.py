"""Strides of movement views on the tensor graph, for the scheduler passes that choose by memory order."""
from __future__ import annotations
from tinyplug.schedule.indexing import strides_for
from tinyplug.uop.ops import GroupOp, Ops, UOp

def view_strides(u: UOp, offset_ok: bool = False) -> tuple[int, ...] | None:
  """The element strides of movement view u over the row-major value at its bottom (a buffer or computed); None
  where the view is no plain strides (a pad, a shrink, a flip) or a shape is symbolic. With `offset_ok` a shrink is
  its strides from another start (q, k and v cut from one buffer)."""
  if u.op not in GroupOp.Movement:
    return strides_for(u.shape) if u.shape is not None and all(isinstance(d, int) for d in u.shape) else None
  if (inner := view_strides(u.src[0], offset_ok)) is None: return None
  if u.op is Ops.SHRINK and offset_ok: return inner
  if u.op is Ops.PERMUTE: return tuple(inner[i] for i in u.arg)
  if u.op is Ops.EXPAND: return tuple(0 if s == 1 and o != 1 else st for s, o, st in zip(u.src[0].shape, u.shape, inner))
  if u.op is Ops.RESHAPE: return reshaped_strides(u.src[0].shape, inner, u.shape)
  return None

def reshaped_strides(old: tuple, strides: tuple[int, ...], new: tuple) -> tuple[int, ...] | None:
  """Strides of a reshape of a strided view, or None where it would need a copy (merged dims not contiguous)."""
  if any(not isinstance(d, int) for d in (*old, *new)): return None
  olds = [(d, st) for d, st in zip(old, strides) if d != 1]
  news = [i for i, d in enumerate(new) if d != 1]
  out, oi, ni = [0] * len(new), 0, 0
  while ni < len(news) and oi < len(olds):
    nsize, osize, nj, oj = new[news[ni]], olds[oi][0], ni + 1, oi + 1
    while nsize != osize:
      if nsize < osize: nsize, nj = nsize * new[news[nj]], nj + 1
      else: osize, oj = osize * olds[oj][0], oj + 1
    if any(olds[k][1] != olds[k + 1][0] * olds[k + 1][1] for k in range(oi, oj - 1)): return None
    st = olds[oj - 1][1]
    for k in range(nj - 1, ni - 1, -1): out[news[k]], st = st, st * new[news[k]]
    ni, oi = nj, oj
  return tuple(out)
