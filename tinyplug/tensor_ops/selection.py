"""Selecting and placing by data: masked_select and nonzero (their length is read from the device unless `size` is
given), scatter and scatter_reduce (one-hot matches of the index against every target position)."""
from __future__ import annotations
import math
from tinyplug.uop.dtype import dtypes, sum_acc_dtype
from tinyplug.tensor_ops import graph

_SCATTER_REDUCE = ("sum", "prod", "mean", "amax", "amin")

class SelectionMixin:
  __slots__ = ()
  def _true_positions(self, size: int | None, fill_value):
    """The flat positions of the True elements of this bool tensor, in order, as int32 of length `size`
    (the count of True elements when None), padded with `fill_value`."""
    flat = self.flatten() if self.ndim else self.reshape(1)
    n = flat.shape[0]
    count = int(flat.cast(dtypes.int32).sum().item()) if size is None else size
    if count == 0 or n == 0:
      return type(self).full((count,), fill_value, dtype=dtypes.int32, device=self.device), count
    rank = flat.cast(dtypes.int32).cumsum(0) - 1                         # place of each True element in the output
    k = type(self).arange(count, device=self.device, dtype=dtypes.int32).reshape(count, 1)
    hit = flat.reshape(1, n) & rank.reshape(1, n).eq(k)                    # [k, j]: element j is the k-th True one
    pos = hit.where(type(self).arange(n, device=self.device, dtype=dtypes.int32).reshape(1, n), 0).sum(1)
    found = hit.any(1)
    return found.where(pos, fill_value).cast(dtypes.int32), count

  def masked_select(self, mask, size: int | None = None, fill_value=0):
    """The elements where `mask` (broadcast to self) is True, as a 1-D tensor. Without `size` the number of
    True elements is read back from the device first; with it the result has that length, padded with fill_value."""
    mask = self._to_tensor(mask).cast(dtypes.bool)
    x, mask = self, mask._broadcast_to(self.shape) if mask.shape != self.shape else mask
    pos, count = mask._true_positions(size, -1)
    flat = x.flatten() if x.ndim else x.reshape(1)
    if count == 0 or flat.shape[0] == 0: return type(self).full((count,), fill_value, dtype=self.dtype, device=self.device)
    picked = flat[pos.maximum(0)]
    return (pos >= 0).where(picked, fill_value) if size is not None else picked

  def nonzero(self, size: int | None = None, fill_value=0):
    """The int32 coordinates (rows of ndim numbers) of the non-zero elements, in row-major order, as torch.nonzero."""
    pos, count = self.ne(0)._true_positions(size, -1)
    if self.ndim == 0: return type(self).zeros((count, 0), dtype=dtypes.int32, device=self.device)
    strides = [math.prod(self.shape[i + 1:]) for i in range(self.ndim)]
    coords = [(pos // st) % sh if sh else pos * 0 for st, sh in zip(strides, self.shape)]
    out = coords[0].reshape(count, 1).cat(*[c.reshape(count, 1) for c in coords[1:]], dim=1) if count else \
      type(self).zeros((0, self.ndim), dtype=dtypes.int32, device=self.device)
    return (pos.reshape(count, 1) >= 0).where(out, fill_value).cast(dtypes.int32) if size is not None and count else out

  # ---- scatter ----
  def _scatter_parts(self, dim: int, index, src):
    """(self moved to put `dim` last, restricted to index's extent, one-hot [.., m, t] of index == t, src, dim)."""
    ax = graph.normalize_axis(dim, self.ndim)
    if index.ndim != self.ndim: raise RuntimeError(f"scatter: index has {index.ndim} dims, self has {self.ndim}")
    if not dtypes.is_int(index.dtype): raise RuntimeError(f"scatter: index must be integer, not {index.dtype}")
    for i, (a, b) in enumerate(zip(index.shape, self.shape)):
      if i != ax and a > b: raise RuntimeError(f"scatter: index shape {index.shape} is larger than self {self.shape}")
    if not isinstance(src, type(self)): src = type(self).full(index.shape, src, dtype=self.dtype, device=self.device)
    elif src.dtype != self.dtype:   # as torch: no silent cast of the values written
      raise graph.DTypeError(f"scatter: src is {src.dtype}, self is {self.dtype}; cast one of them first")
    if any(a > b for a, b in zip(index.shape, src.shape)):
      raise RuntimeError(f"scatter: index shape {index.shape} is larger than src {src.shape}")
    src = src.shrink(tuple((0, s) for s in index.shape)).cast(self.dtype)
    n = self.shape[ax]
    x = self.shrink(tuple((0, s) if i != ax else (0, n) for i, s in enumerate(index.shape))).transpose(ax, -1)
    idx, src = index.transpose(ax, -1), src.transpose(ax, -1)
    onehot = idx.unsqueeze(-1).eq(type(self).arange(n, device=self.device, dtype=index.dtype))  # [..., m, t]
    return x, onehot, src, ax

  def _column_sums(self, ax: int, index, src):
    """For dim 0 of a 2-D tensor on a device with `row_scatter_add`: (the sums of src added at index, per column, in
    self's dtype; whether any index hit), both transposed as _scatter_parts lays them out; two SCATTER_ADDs,
    O(index elements) where the one-hot sum is O(rows x index elements). None elsewhere."""
    from tinyplug.tensor_ops.indexing import scatter_add, scatters_rows
    if ax != 0 or self.ndim != 2 or self.dtype == dtypes.bool or index.numel() == 0: return None
    if not scatters_rows(self, index, need_grad=False): return None
    rows, (m, k) = self.shape[0], index.shape
    s = src.transpose(0, 1).cast(sum_acc_dtype(self.dtype))   # src comes transposed: (k, m) -> (m, k)
    sums = scatter_add(s, index, rows).cast(self.dtype)
    hits = scatter_add(type(self).ones(m, k, dtype=dtypes.int32, device=self.device), index, rows)
    return sums.transpose(0, 1), (hits > 0).transpose(0, 1)

  def _scatter_back(self, ax: int, region, touched):
    """Put the result for index's extent back into self's shape (elsewhere self is unchanged)."""
    region, touched = region.transpose(ax, -1), touched.transpose(ax, -1)
    pads = tuple((0, s - r) for s, r in zip(self.shape, region.shape))
    if all(p == (0, 0) for p in pads): return touched.where(region, self)
    return touched.pad(pads).where(region.pad(pads), self)

  def scatter(self, dim: int, index, src, reduce: str | None = None):
    """self with self[..., index[..., m], ...] = src[..., m, ...] along `dim` (the last write wins where index
    repeats), or accumulated with reduce='add' / 'multiply', as torch.scatter."""
    if reduce not in (None, "add", "multiply"): raise TypeError(f"scatter: reduce must be 'add' or 'multiply', not {reduce!r}")
    x, onehot, src, ax = self._scatter_parts(dim, index, src)
    if reduce == "add" and (sums := self._column_sums(ax, index, src)) is not None:
      return self._scatter_back(ax, x + sums[0], sums[1])
    m = onehot.shape[-2]
    touched = onehot.any(-2)
    if reduce is None:
      pos = type(self).arange(m, device=self.device, dtype=dtypes.int32).reshape(m, 1)
      last = onehot.where(pos, -1).max(-2, keepdim=True)                # the last m that writes each t
      pick = onehot & pos.eq(last)
      value = pick.where(src.unsqueeze(-1), 0).sum(-2).cast(self.dtype)
    elif reduce == "add": value = x + onehot.where(src.unsqueeze(-1), 0).sum(-2).cast(self.dtype)
    else: value = x * onehot.where(src.unsqueeze(-1), 1).prod(-2).cast(self.dtype)
    return self._scatter_back(ax, value, touched)

  def scatter_reduce(self, dim: int, index, src, reduce: str, include_self: bool = True):
    """Accumulate src into self along `dim` at `index` with sum, prod, mean, amax or amin, as torch.scatter_reduce."""
    if reduce not in _SCATTER_REDUCE: raise RuntimeError(f"scatter_reduce: reduce must be one of {_SCATTER_REDUCE}, not {reduce!r}")
    x, onehot, src, ax = self._scatter_parts(dim, index, src)
    if reduce == "sum" and (sums := self._column_sums(ax, index, src)) is not None:
      return self._scatter_back(ax, (sums[0] + (x if include_self else 0)).cast(self.dtype), sums[1])
    touched = onehot.any(-2)
    s = src.unsqueeze(-1)
    if reduce in ("sum", "mean"):
      acc = onehot.where(s, 0).sum(-2).cast(self.dtype) + (x if include_self else 0)
      if reduce == "mean":
        count = onehot.cast(dtypes.int32).sum(-2) + (1 if include_self else 0)
        acc = acc / count.maximum(1) if dtypes.is_float(self.dtype) else acc.div(count.maximum(1), rounding_mode="floor")
        acc = acc.cast(self.dtype)
    elif reduce == "prod": acc = onehot.where(s, 1).prod(-2).cast(self.dtype) * (x if include_self else 1)
    else:
      big = reduce == "amax"
      fill = dtypes.min(self.dtype) if big else dtypes.max(self.dtype)
      acc = onehot.where(s, fill).max(-2) if big else onehot.where(s, fill).min(-2)
      if include_self: acc = acc.maximum(x) if big else acc.minimum(x)
    return self._scatter_back(ax, acc.cast(self.dtype), touched)
