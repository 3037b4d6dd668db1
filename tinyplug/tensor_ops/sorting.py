"""Sorting and order statistics: sort, argsort, topk (a bitonic network built from movement ops and compares) and the
running extrema cummax / cummin with the index where each was reached."""
from __future__ import annotations
import math
from tinyplug.uop.dtype import dtypes
from tinyplug.tensor_ops import graph

class SortingMixin:
  __slots__ = ()
  def _key_gt(self, a, ai, b, bi, descending: bool):
    """Whether (a, index ai) goes after (b, index bi): values in order, NaN after every number (before, descending),
    equal values by index, so the sort is stable."""
    if dtypes.is_float(a.dtype):
      an, bn = a.isnan(), b.isnan()
      same = a.eq(b) | (an & bn)
      after = (an & bn.logical_not()) | ((an | bn).logical_not() & (a > b)) if not descending \
        else (bn & an.logical_not()) | ((an | bn).logical_not() & (a < b))
    else:
      same, after = a.eq(b), (a > b) if not descending else (a < b)
    return after | (same & (ai > bi))

  def sort(self, dim: int = -1, descending: bool = False):
    """(values, int32 indices) along `dim`, stable (equal values keep their order); NaN sorts last (first when
    descending), as in torch. A bitonic network: log2(n)*(log2(n)+1)/2 compare-exchange steps over the whole axis."""
    if self.ndim == 0: return self, type(self).zeros((), dtype=dtypes.int32, device=self.device)
    ax = graph.normalize_axis(dim, self.ndim)
    n = self.shape[ax]
    idx_shape = tuple(n if i == ax else 1 for i in range(self.ndim))
    idx = type(self).arange(n, device=self.device, dtype=dtypes.int32).reshape(idx_shape).expand(self.shape)
    if n <= 1: return self, idx
    x, ix = self.transpose(ax, -1), idx.transpose(ax, -1)
    size = 1 << (n - 1).bit_length()
    if size != n:   # pad with values that sort after everything (ties go by index, and theirs are the largest)
      fill = (math.nan if not descending else -math.inf) if dtypes.is_float(x.dtype) else \
        (dtypes.max(x.dtype) if not descending else dtypes.min(x.dtype))
      pads = ((0, 0),) * (x.ndim - 1) + ((0, size - n),)
      ar = type(self).arange(size, device=self.device, dtype=dtypes.int32)
      x, ix = x.pad(pads, value=fill), ix.pad(pads) + (ar >= n).where(ar, 0)   # pads: distinct indices past n
    lead = x.shape[:-1]
    block = 2
    while block <= size:
      # first step of a stage: each block's second half is reversed, so every compare-exchange puts the smaller first
      x, ix = self._exchange(x, ix, lead, size, block, flip=True, descending=descending)
      half = block // 4
      while half >= 1:
        x, ix = self._exchange(x, ix, lead, size, half * 2, flip=False, descending=descending)
        half //= 2
      block *= 2
    if size != n:
      cut = tuple((0, s) for s in lead) + ((0, n),)
      x, ix = x.shrink(cut), ix.shrink(cut)
    return x.transpose(ax, -1), ix.transpose(ax, -1)

  def _exchange(self, x, ix, lead, size: int, span: int, flip: bool, descending: bool):
    """Compare-exchange element i with its partner in each group of `span` (i + span/2, or the mirror when flip)."""
    shape = lead + (size // span, 2, span // 2)
    v, i = x.reshape(shape), ix.reshape(shape)
    a, b, ai, bi = v[..., 0, :], v[..., 1, :], i[..., 0, :], i[..., 1, :]
    if flip: b, bi = b.flip(-1), bi.flip(-1)
    swap = self._key_gt(a, ai, b, bi, descending)
    lo, hi, lo_i, hi_i = swap.where(b, a), swap.where(a, b), swap.where(bi, ai), swap.where(ai, bi)
    if flip: hi, hi_i = hi.flip(-1), hi_i.flip(-1)
    # each step is materialized: every step reads both halves of the last, so a fused chain would grow 2x per step
    return lo.unsqueeze(-2).cat(hi.unsqueeze(-2), dim=-2).reshape(lead + (size,)).contiguous(), \
      lo_i.unsqueeze(-2).cat(hi_i.unsqueeze(-2), dim=-2).reshape(lead + (size,)).contiguous()

  def argsort(self, dim: int = -1, descending: bool = False): return self.sort(dim, descending)[1]

  def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True):
    """(values, int32 indices) of the k largest (smallest) along `dim`, largest first (smallest first)."""
    ax = graph.normalize_axis(dim, self.ndim) if self.ndim else 0
    n = self.shape[ax] if self.ndim else 1
    if not 0 <= k <= n: raise ValueError(f"topk: k={k} is out of range for a dim of size {n}")
    values, indices = self.sort(dim, descending=largest)
    if self.ndim == 0: return values, indices
    cut = tuple((0, k) if i == ax else (0, s) for i, s in enumerate(self.shape))
    return values.shrink(cut), indices.shrink(cut)

  # ---- running extrema with their index ----
  def _cum_extreme(self, axis: int, largest: bool):
    ax = graph.normalize_axis(axis, self.ndim)
    if self.ndim == 0: return self, type(self).zeros((), dtype=dtypes.int32, device=self.device)
    n = self.shape[ax]
    if n == 0: return self, self.cast(dtypes.int32)
    x = self.transpose(ax, -1)
    rows = x.unsqueeze(-2).expand(x.shape[:-1] + (n, n))               # [..., i, j] = x[..., j]
    ar = type(self).arange(n, device=self.device, dtype=dtypes.int32)
    upto = ar.reshape(n, 1) >= ar.reshape(1, n)                          # j <= i
    fill = dtypes.min(self.dtype) if largest else dtypes.max(self.dtype)
    vals = upto.where(rows, fill).max(-1) if largest else upto.where(rows, fill).min(-1)
    # the last j <= i where the extreme was reached (torch's choice on ties)
    hit = upto & rows.eq(vals.unsqueeze(-1))
    idx = hit.where(ar.reshape(1, n), -1).max(-1)
    return vals.transpose(ax, -1), idx.cast(dtypes.int32).transpose(ax, -1)
  def cummax(self, axis: int = 0):
    """(running maximum, int32 index where it was reached) along `axis`, as torch.cummax."""
    return self._cum_extreme(axis, largest=True)
  def cummin(self, axis: int = 0):
    """(running minimum, int32 index where it was reached) along `axis`, as torch.cummin."""
    return self._cum_extreme(axis, largest=False)
  def logcumsumexp(self, axis: int = 0):
    """log(cumsum(exp(self))) along `axis`. Each prefix is shifted by its own running maximum: one shift for the whole
    axis would underflow the early terms to 0 when a later value is much larger ([0, 100] gave log(e^-100) = -inf)."""
    if self.ndim == 0: return self
    ax = graph.normalize_axis(axis, self.ndim)
    x = self.transpose(ax, -1)
    n = x.shape[-1]
    if n == 0: return self
    m = x._cum_extreme(-1, largest=True)[0].detach()
    m = m.isinf().where(0, m).unsqueeze(-1)                               # [..., i, 1]: the shift of prefix i
    ar = type(self).arange(n, device=self.device, dtype=dtypes.int32)
    upto = ar.reshape(n, 1) >= ar.reshape(1, n)                          # j <= i
    # [..., i, j] = exp(x[j] - m[i]) for j <= i: masked before exp, so a later, larger x[j] (exp(x[j] - m[i]) = inf
    # in float32) never reaches the gradient as 0 * inf = NaN
    terms = upto.where(x.unsqueeze(-2) - m, -math.inf).exp()
    return (terms.sum(-1).log() + m.squeeze(-1)).transpose(ax, -1)
