"""Sorting and order statistics: sort, argsort, topk (a bitonic network built from movement ops and compares) and the
running extrema cummax / cummin with the index where each was reached."""
from __future__ import annotations
import math
from tinyplug.uop.dtype import dtypes
from tinyplug.tensor_ops import graph

_LANES = 16   # rows enough to fill a vector: sort with the sorted axis first

def _select_limit(n: int) -> int:
  """The largest k that topk finds by k selection passes (two reduce kernels each) rather than by a sort: up to the
  sorting network's step count (two elementwise kernels each, every one costlier than a reduce pass)."""
  b = (n - 1).bit_length()
  return max(1, b * (b + 1) // 2)

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
    descending), as in torch. A bitonic network: log2(n)*(log2(n)+1)/2 compare-exchange steps over the whole axis,
    each one elementwise kernel for the values and one for the indices. With many rows the sorted axis goes first
    and the rows last, so a step compares whole vectors of rows, lane by lane, instead of shuffling within a row."""
    if self.ndim == 0: return self, type(self).zeros((), dtype=dtypes.int32, device=self.device)
    if self.requires_grad:   # the network on plain values, then a gather: its gradient is one scatter, not 2^steps
      indices = self.detach().sort(dim, descending)[1]
      return self.gather(dim, indices), indices
    ax = graph.normalize_axis(dim, self.ndim)
    n = self.shape[ax]
    T = type(self)
    if n <= 1:
      return self, T.arange(n, device=self.device, dtype=dtypes.int32).reshape(
        tuple(n if i == ax else 1 for i in range(self.ndim))).expand(self.shape)
    first = math.prod(self.shape) // n >= _LANES    # the sorted axis first (rows as vector lanes) or last
    at = 0 if first else self.ndim - 1
    # up to 32 bits: the network sorts int32 order keys (one integer compare a step, not NaN tests), and the values
    # are gathered at the end, bit for bit (-0.0 and NaN payloads too)
    keyed = self.dtype.itemsize <= 4
    x = (self._order_key(largest=not descending) if keyed else self).transpose(ax, at)
    size = 1 << (n - 1).bit_length()
    pre, post = x.shape[:at], x.shape[at + 1:]
    line = lambda m: (m,) + (1,) * len(post)    # a length-m vector along the sorted axis, broadcast over the rest
    ix = T.arange(size, device=self.device, dtype=dtypes.int32).reshape(line(size)).expand(pre + (size,) + post)
    desc = descending and not keyed   # keys sort ascending
    if size != n:   # pad with values that sort after everything (ties go by index, and theirs are past n)
      fill = (math.nan if not desc else -math.inf) if dtypes.is_float(x.dtype) else \
        (dtypes.max(x.dtype) if not desc else dtypes.min(x.dtype))
      x = x.pad(((0, 0),) * len(pre) + ((0, size - n),) + ((0, 0),) * len(post), value=fill)
    steps = [(half * 2, half * 2 == block) for block in (1 << b for b in range(1, size.bit_length()))
             for half in (block >> s for s in range(1, block.bit_length()))]
    for span, flip in steps: x, ix = self._exchange(x, ix, pre, post, span, flip, desc)
    if size != n:
      cut = tuple((0, s) for s in pre) + ((0, n),) + tuple((0, s) for s in post)
      x, ix = x.shrink(cut), ix.shrink(cut)
    ix = ix.transpose(ax, at)
    return (self._gather_exact(ax, ix) if keyed else x.transpose(ax, at)), ix

  def _gather_exact(self, ax: int, indices):
    """self.gather(ax, indices), bit for bit: 16-bit floats go through float32, whose gather is one load (theirs
    sums the picked value with zeros, and -0.0 + 0.0 is 0.0)."""
    if dtypes.is_float(self.dtype) and self.dtype.itemsize < 4:
      return self.cast(dtypes.float32).gather(ax, indices).cast(self.dtype)
    return self.gather(ax, indices)

  def _exchange(self, x, ix, pre: tuple, post: tuple, span: int, flip: bool, descending: bool):
    """Compare-exchange each element with its partner in its group of `span` along the sorted axis (between `pre`
    and `post`): the element span/2 away, or the mirror image in the group when flip. The partner is a flip of a
    reshape, so every load stays an affine, contiguous index (no cat of halves, whose masked loads became gathers);
    each element keeps the smaller (first half) or the larger (second half) of the pair. Keys are distinct (ties go
    by index), so one comparison decides both sides."""
    size = x.shape[len(pre)]
    group = (size // span, span) if flip else (size // span, 2, span // 2)
    shape, at = pre + group + post, len(pre) + 1
    v, i = x.reshape(shape), ix.reshape(shape)
    pv, pi = v.flip(at), i.flip(at)
    n_at = shape[at]
    upper = (type(self).arange(n_at, device=self.device, dtype=dtypes.int32) >= n_at // 2) \
      .reshape((n_at,) + (1,) * (len(shape) - at - 1))
    swap = self._key_gt(v, i, pv, pi, descending) != upper
    # each step is materialized: a step reads two elements of the last, so a fused chain of steps grows 2x per step
    return swap.where(pv, v).reshape(x.shape).contiguous(), swap.where(pi, i).reshape(x.shape).contiguous()

  def argsort(self, dim: int = -1, descending: bool = False): return self.sort(dim, descending)[1]

  def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True):
    """(values, int32 indices) of the k largest (smallest) along `dim`, largest first (smallest first); equal values
    by index, NaN largest, as sort orders them. A small k is k selection passes over the axis (each a max and a min
    reduce) instead of a whole sort."""
    ax = graph.normalize_axis(dim, self.ndim) if self.ndim else 0
    n = self.shape[ax] if self.ndim else 1
    if not 0 <= k <= n: raise ValueError(f"topk: k={k} is out of range for a dim of size {n}")
    if self.ndim and 0 < k <= _select_limit(n) and self.dtype.itemsize <= 4:
      return self._topk_select(k, ax, largest)
    values, indices = self.sort(dim, descending=largest)
    if self.ndim == 0: return values, indices
    cut = tuple((0, k) if i == ax else (0, s) for i, s in enumerate(self.shape))
    return values.shrink(cut), indices.shrink(cut)

  def _order_key(self, largest: bool):
    """An int32 per element whose order is the topk order (larger key first): a float's bits folded so they compare
    as signed ints (every NaN one value above +inf, -0 as +0), an int as itself; inverted when `largest` is False."""
    x = self.detach()
    if dtypes.is_float(x.dtype):
      f = x.cast(dtypes.float32)
      f = f.isnan().where(math.nan, (f == 0).where(0.0, f))
      bits = f.bitcast(dtypes.int32)
      key = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    elif x.dtype == dtypes.uint32: key = x.bitcast(dtypes.int32) ^ -(1 << 31)
    else: key = x.cast(dtypes.int32)
    return (key if largest else ~key).contiguous()

  def _topk_select(self, k: int, ax: int, largest: bool):
    """k passes: the next pick is the largest key after the last pick (key below it, or equal with a larger index)
    and, among equal keys, the smallest index; the values are then gathered. The keys lie with the selected axis
    first, so each pass reduces across rows with whole-vector compares, lane by lane (one row a lane)."""
    x = self.transpose(ax, -1)
    n = x.shape[-1]
    key = x.transpose(0, -1)._order_key(largest) if x.ndim > 1 else x._order_key(largest)   # [n, ..., rows]
    ar = type(self).arange(n, device=self.device, dtype=dtypes.int32).reshape((n,) + (1,) * (x.ndim - 1))
    picks, last = [], None
    for _ in range(k):
      avail = None if last is None else (key < last[0]) | (key.eq(last[0]) & (ar > last[1]))
      best = (key if avail is None else avail.where(key, dtypes.min(dtypes.int32))).max(0, keepdim=True).contiguous()
      hit = key.eq(best) if avail is None else avail & key.eq(best)
      # the first hit, as a max (the min of ints is a max between two negations)
      idx = (n - 1) - hit.where(n - 1 - ar, -1).max(0, keepdim=True).contiguous()
      picks.append(idx)
      last = (best, idx)
    indices = picks[0].cat(*picks[1:], dim=0) if k > 1 else picks[0]                          # [k, ..., rows]
    indices = indices.transpose(0, -1) if x.ndim > 1 else indices
    values = x.gather(-1, indices) if self.requires_grad else x._gather_exact(x.ndim - 1, indices)
    return values.transpose(ax, -1), indices.cast(dtypes.int32).transpose(ax, -1)

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
