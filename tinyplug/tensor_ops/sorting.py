"""Sorting and order statistics: sort, argsort, topk (a bitonic network built from movement ops and compares) and the
running extrema cummax / cummin with the index where each was reached."""
from __future__ import annotations
import functools, math
from tinyplug.uop.dtype import dtypes, sum_acc_dtype
from tinyplug.tensor_ops import bitonic, graph
from tinyplug.tensor_ops.run_sums import run_suffix_sum
from tinyplug.tensor_ops.reduce import SCAN_BLOCK, SCAN_DIRECT
from tinyplug.tensor_ops.template import graph_template

_LANES = 16   # rows enough to fill a vector: sort with the sorted axis first
# the values' own network (`_network_values`) codes a float's zeros and NaNs by their index beside its 32-bit rank
VALUE_NETWORK_MAX = 1 << 20   # (NaN codes up to 0x7F800000 + 4n)
# (lane, mirror) bits of the values' network kernels where vectors are narrow (AVX2's 16 registers): 8 lanes of int32
# (1024x1024 rows, one thread, kernels interleaved: 11.0-11.3 ms with bitonic's 5 and 4, 8.3-8.6 ms with 3 and 3, in
# 20 kernels against 14; 4 and 3 9.4-9.7). Wide vectors keep bitonic's, as the int64 keys have there.
NARROW_VALUE_BITS = (3, 3)

# the network's lanes lie a row of the moved tensor apart (the sorted axis first): where that row is a multiple of
# ALIAS_BYTES, a kernel's lanes load and store in one L1 set and its loads wait on the stores 4 KB before them (4K
# aliasing). Where vectors are narrow the transposing copy pads each row by ALIAS_PAD elements (columns sorted as
# rows of their own, cut off at the end). 1024x1024, one thread, kernels interleaved, sums of medians: sort values
# 9.1-10.6 -> 8.0-10.0 ms, argsort 23.2 -> 18.2, topk(16) indices 5.3 -> 4.6. Pads of 8-96 tried, 8 and 24 best: with
# 32 the lanes of a merge at distance 32 were 4 KB multiples apart again (that kernel 0.4 -> 0.8 ms)
ALIAS_PAD = 24

def _alias_pad(shape: tuple[int, ...], at: int, ax: int, itemsize: int, device) -> int:
  """Elements to pad the moved tensor's rows by before the network (its layout (sorted axis, rows)), or 0: only for
  two axes moved by a transposing copy (the pad rides on it) where vectors are narrow."""
  from tinyplug.backend import ALIAS_BYTES
  from tinyplug.device import narrow_vectors_on
  if not ALIAS_PAD or len(shape) != 2 or at != 0 or ax == at or not narrow_vectors_on(device): return 0
  return ALIAS_PAD if shape[1] * itemsize % ALIAS_BYTES == 0 else 0

# where vectors are narrow (AVX2: no 64-bit integer min or max) the keys are float64, rank * FLOAT_KEY_SPAN + index
# (exact for any int32 rank and index below the span: under 2^52): an exchange is a vector min and a max where the
# int64 keys' is a compare and two blends (1024x1024, one thread, in turns against int64 keys: argsort 14.4 ->
# 11.7-12.4 ms, topk(16) indices 3.3-4.2 -> 2.4-3.2)
FLOAT_KEY_SPAN = 1 << 21

def _float_keys(n: int, device) -> bool:
  from tinyplug.device import narrow_vectors_on
  return n <= FLOAT_KEY_SPAN and narrow_vectors_on(device)

def _key_code(key):
  """The rank or code (int32) of the network's keys: the high half of an int64 key, a float64 key's quotient."""
  if key.dtype == dtypes.int64: return (key >> 32).cast(dtypes.int32)
  return (key * (1 / FLOAT_KEY_SPAN)).floor().cast(dtypes.int32)

def _key_index(key):
  """The index (int32) of the network's keys: the low half of an int64 key, a float64 key's remainder."""
  if key.dtype == dtypes.int64: return (key & 0xFFFFFFFF).cast(dtypes.int32)
  return (key - (key * (1 / FLOAT_KEY_SPAN)).floor() * FLOAT_KEY_SPAN).cast(dtypes.int32)

def _value_bits(device) -> tuple[int, int] | None:
  from tinyplug.device import narrow_vectors_on
  return NARROW_VALUE_BITS if narrow_vectors_on(device) else None

def _nan_base(n: int, largest_first: bool) -> int:
  """The code of a NaN at index 0: past +inf's moved rank (0x7F800000 + 2n - 1), or below -inf's when the largest
  go first."""
  return 0x7F800000 + 2 * n if not largest_first else -(1 << 31)

def _joint_outputs_on(device) -> bool:
  """Whether topk's values and indices realized together come from one network (`_joint_outputs`): where vectors are
  narrow (measured there: benchmarks/README.md, session 27 topk11); wide ones keep a network each until measured."""
  from tinyplug.device import narrow_vectors_on
  return narrow_vectors_on(device)

def _joint_topk(ax: int, largest: bool, k: int, values, indices):
  """topk's values and indices (both deferred over the same input) from one network (`_joint_outputs`): their uops."""
  (x,), (y,) = values._defer[1], indices._defer[1]
  if x is not y: return None
  v, i = type(values).from_uop(x)._joint_outputs(ax, largest, k)
  return v.uop, i.uop

def _to_reached(g, out, x, idx, axis: int):
  # each output's gradient goes wholly to the one place its extreme was reported reached (torch's rule, ties
  # included; the triangle's max would split it among ties). The outputs reporting j are a run starting at j (the
  # indices never decrease), so j's gradient is the run's sum: vectorised scans, where a scatter-add of every element
  # was one ordered loop (1024x1024, one thread: 3.6-7.6 ms of a 9 ms step; now four kernels, 1.4-2.1 ms)
  ar = type(g).arange(g.shape[axis], device=g.device, dtype=idx.dtype)
  reported = idx.eq(ar.reshape(tuple(g.shape[axis] if i == axis else 1 for i in range(g.ndim))))
  return (run_suffix_sum(g.cast(sum_acc_dtype(g.dtype)), idx, axis, keep=reported).cast(g.dtype), None)

def _decode_values(code, n: int, largest_first: bool, dtype):
  """The values of `SortingMixin._value_code`'s codes along an axis of n; a NaN comes back as the quiet NaN of its
  sign (its payload bits are not kept: numpy's sort does not keep them either)."""
  if not dtypes.is_float(dtype):
    key = ~code if largest_first else code
    return (key ^ -(1 << 31)).bitcast(dtypes.uint32) if dtype == dtypes.uint32 else key.cast(dtype)
  rank = (code >= 2 * n).where(code - (2 * n - 1), code)
  key = -rank if largest_first else rank
  bits = (key < 0).where((-key) | -(1 << 31), key)
  nan = (code >= _nan_base(n, False)) if not largest_first else (code < -0x7F800000)
  special = nan | ((code >= 0) & (code < 2 * n))
  bits = special.where(((code & 1) << 31) | nan.where(0x7FC00000, 0), bits)
  return bits.bitcast(dtypes.float32).cast(dtype)

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
    descending), as in torch. A bitonic network (tensor_ops/bitonic.py) over int64 keys that pack each element's
    32-bit order key with its index, a few steps per kernel, gives the indices; the values run a network of their own
    on int32 codes (`_network_values`), bit for bit but a NaN's payload. With many rows the sorted axis goes first
    and the rows last, so the kernels compare whole vectors of rows, lane by lane. 64-bit values run a network of
    their own (two kernels a step: the values and the indices)."""
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
    if self.dtype.itemsize > 4: return self._sort_wide(ax, descending)
    return self._sorted_values(ax, descending), self._network_order(ax, descending)

  def _sorted_values(self, ax: int, largest_first: bool, k: int | None = None):
    """The values in `_network_order`'s order: their own network on int32 codes where 32-bit keys keep the order
    (`_value_code`), else the indices' network and a gather."""
    if self._values_coded(ax): return self._network_values(ax, largest_first, k)
    return self._ordered_values(ax, largest_first, k)

  def _values_coded(self, ax: int) -> bool:
    """Whether `_value_code` keeps the values along `ax` (32 bits keep their order, the axis no longer than
    VALUE_NETWORK_MAX)."""
    return self.shape[ax] <= VALUE_NETWORK_MAX and self.dtype != dtypes.bool

  @graph_template   # ~2,000 nodes for 1024-long rows: rebuilt one node each (no Tensor methods), or not at all
  def _network_order(self, ax: int, largest_first: bool, k: int | None = None):
    """The int32 indices of the elements along `ax` in order (the largest first or the smallest first; equal values
    by index, NaN as the largest): all of them, or the first k (a topk: runs of k merged into the smaller half)."""
    indices, at = self._key_network(ax, largest_first, k, coded=False)
    indices = indices.transpose(ax, at)
    return indices.contiguous() if at != ax else indices   # the gather then reads it along its rows

  def _key_network(self, ax: int, largest_first: bool, k: int | None, coded: bool):
    """(the network's output, the axis it sorted along): the int32 indices in order, or where `coded` the keys
    themselves, of `_value_code` and index (the same order: zeros and NaNs are coded by index; the value comes back
    from the code, `_key_code`)."""
    n = self.shape[ax]
    first = math.prod(self.shape) // n >= _LANES    # the sorted axis first (rows as vector lanes) or last
    at = 0 if first else self.ndim - 1
    T = type(self)
    size = 1 << (n - 1).bit_length()
    # the values are transposed as they are (a plain copy, the fewest bytes); the first network kernel works out the
    # ranks and packs the keys (1024x1024 float32, one thread: 0.65 ms for the copy, 1.1 ms with the ranks in it)
    moved = self.detach().transpose(ax, at)
    kept = moved.shape   # (the pad's columns are cut off at the end)
    if pad := _alias_pad(kept, at, ax, 8, self.device): moved = moved.pad(((0, 0), (0, pad)))
    moved = moved.contiguous() if at != ax else moved
    rank = moved._value_code(at, largest_first) if coded else moved._order_rank(largest_first)
    line = (n,) + (1,) * (self.ndim - 1 - at)
    if _float_keys(n, self.device):
      index = T.arange(n, device=self.device, dtype=dtypes.int32).reshape(line).expand(rank.shape)
      keys = rank.cast(dtypes.float64) * FLOAT_KEY_SPAN + index.cast(dtypes.float64)
      fill, finish = math.inf, ((lambda u: _key_index(T.from_uop(u)).uop) if not coded else None)
    else:
      index = T.arange(n, device=self.device, dtype=dtypes.int64).reshape(line).expand(rank.shape)
      keys = rank.cast(dtypes.int64).lshift(32) | index   # (rank, index) in one int64: every key distinct
      fill, finish = dtypes.max(dtypes.int64), (bitonic.low_index if not coded else None)
    if size != n:   # padded past every real key
      keys = keys.pad(tuple((0, size - n) if i == at else (0, 0) for i in range(self.ndim)), value=fill)
    # the network's last kernel stores the indices (int32), not the keys (unless `coded`: both outputs read them)
    if k is None: ordered = T.from_uop(bitonic.sort_runs(keys.uop, at, size.bit_length() - 1, finish=finish))
    else: ordered = T.from_uop(bitonic.smallest(keys.uop, at, (k - 1).bit_length(), finish=finish))
    m = n if k is None else k
    return ordered.shrink(tuple((0, m) if i == at else (0, s) for i, s in enumerate(kept))), at

  @graph_template
  def _network_keys(self, ax: int, largest_first: bool, k: int | None = None):
    """The keys of `_key_network` (coded) back in `ax`'s place, as their own buffer: what `_keys_values` and
    `_keys_indices` read both outputs from (`_joint_outputs`)."""
    keys, at = self._key_network(ax, largest_first, k, coded=True)
    return keys.transpose(ax, at).contiguous()

  @graph_template
  def _keys_values(self, n: int, largest_first: bool, dtype):
    """The values of `_network_keys`' keys (self) along an axis of n."""
    return _decode_values(_key_code(self), n, largest_first, dtype)

  @graph_template
  def _keys_indices(self):
    """The int32 indices of `_network_keys`' keys (self)."""
    return _key_index(self)

  def _joint_outputs(self, ax: int, largest_first: bool, k: int | None):
    """(values, indices) from one network on keys that carry the value's code with its index: both outputs realized,
    where apart they are two networks (int32 codes for the values, keys for the indices)."""
    keys = self._network_keys(ax, largest_first, k).realize()
    values, indices = keys._keys_values(self.shape[ax], largest_first, self.dtype), keys._keys_indices()
    return values.realize(indices), indices

  @graph_template
  def _ordered_values(self, ax: int, largest_first: bool, k: int | None = None):
    """The values in `_network_order`'s order, as one template with the network: realized over a buffer, its kernels
    run from a plan (engine/plan.py) with no graph rebuilt or walked; with the gather outside it, the ~1,500-node
    graph was rebuilt and walked by the scheduler per call (topk 16 of 1024x1024, one thread: ~8 ms of Python
    around ~2.5 ms of kernels). The indices are a template of their own: realized apart, the network runs again."""
    return self._gather_exact(ax, self._network_order(ax, largest_first, k))

  @graph_template
  def _network_values(self, ax: int, largest_first: bool, k: int | None = None):
    """The sorted values (all, or the first k) from a network on one int32 code per element (`_value_code`): half the
    bytes of the (rank, index) keys, and an exchange is a vector min and max of 8 lanes on AVX2 where the int64 keys'
    is a compare and two blends of 4 (1024x1024 rows, one thread: see benchmarks/README.md, session 24 sort8)."""
    n = self.shape[ax]
    first = math.prod(self.shape) // n >= _LANES
    at = 0 if first else self.ndim - 1
    T = type(self)
    size = 1 << (n - 1).bit_length()
    moved = self.detach().transpose(ax, at)
    kept = moved.shape   # (the pad's columns are cut off at the end)
    if pad := _alias_pad(kept, at, ax, 4, self.device): moved = moved.pad(((0, 0), (0, pad)))
    moved = moved.contiguous() if at != ax else moved
    code = moved._value_code(at, largest_first)
    if size != n:   # padded past every real code
      code = code.pad(tuple((0, size - n) if i == at else (0, 0) for i in range(self.ndim)),
                      value=dtypes.max(dtypes.int32))
    # the network's last kernel stores the values (decoded there: the transpose back is then a plain copy)
    def finish(u): return _decode_values(T.from_uop(u), n, largest_first, self.dtype).uop
    bits = _value_bits(self.device)
    if k is None: ordered = T.from_uop(bitonic.sort_runs(code.uop, at, size.bit_length() - 1, finish=finish, bits=bits))
    else: ordered = T.from_uop(bitonic.smallest(code.uop, at, (k - 1).bit_length(), finish=finish, bits=bits))
    m = n if k is None else k
    return ordered.shrink(tuple((0, m) if i == at else (0, s) for i, s in enumerate(kept))).transpose(ax, at)

  def _value_code(self, at: int, largest_first: bool):
    """An int32 per element that orders as the sort does, for the values alone: an integer as itself (equal codes
    are equal values); a float as `_order_rank`, but its ties that differ in sign (-0.0 and 0.0, NaNs) coded apart
    in index order, the sign in the low bit: a zero as 2 * index + sign in [0, 2n), the nonzero ranks moved off that
    range, a NaN as NaN_BASE + 2 * index + sign above +inf (below -inf when the largest go first)."""
    if not dtypes.is_float(self.dtype): return self._order_rank(largest_first)
    n = self.shape[at]
    key = self._order_rank(False)
    rank = -key if largest_first else key
    ix = type(self).arange(n, device=self.device, dtype=dtypes.int32).reshape(
      tuple(n if i == at else 1 for i in range(self.ndim)))
    f = self.detach().cast(dtypes.float32)
    tie = ix * 2 + (f.bitcast(dtypes.int32) < 0).cast(dtypes.int32)
    coded = key.eq(0).where(tie, (rank > 0).where(rank + (2 * n - 1), rank))
    return f.isnan().where(tie + _nan_base(n, largest_first), coded)

  def _order_rank(self, largest_first: bool):
    """An int32 per element, smaller first in the wanted order: a float's bits folded so they compare as signed ints
    (every NaN the largest int32, above +inf; -0 as +0), an int as itself; inverted when the largest go first."""
    x = self.detach()
    if dtypes.is_float(x.dtype):
      f = x.cast(dtypes.float32)
      # sign and magnitude to two's complement: -m for negatives (so -0 is +0), NaN (of either sign) above +inf
      bits = f.bitcast(dtypes.int32)
      sign = bits >> 31
      key = f.isnan().where(dtypes.max(dtypes.int32), ((bits & 0x7FFFFFFF) ^ sign) - sign)
    elif x.dtype == dtypes.uint32: key = x.bitcast(dtypes.int32) ^ -(1 << 31)
    else: key = x.cast(dtypes.int32)
    return ~key if largest_first else key

  def _gather_exact(self, ax: int, indices):
    """self.gather(ax, indices), bit for bit: 16-bit floats go through float32, whose gather is one load (theirs
    sums the picked value with zeros, and -0.0 + 0.0 is 0.0)."""
    if dtypes.is_float(self.dtype) and self.dtype.itemsize < 4:
      return self.cast(dtypes.float32).gather(ax, indices).cast(self.dtype)
    return self.gather(ax, indices)

  def _sort_wide(self, ax: int, descending: bool):
    """sort() of 64-bit values (no room in the int64 key for an index): the network one step a kernel on values and
    indices, the partner read as a flip of a reshape."""
    n = self.shape[ax]
    first = math.prod(self.shape) // n >= _LANES
    at = 0 if first else self.ndim - 1
    T = type(self)
    x = self.transpose(ax, at)
    size = 1 << (n - 1).bit_length()
    pre, post = x.shape[:at], x.shape[at + 1:]
    line = (size,) + (1,) * len(post)
    ix = T.arange(size, device=self.device, dtype=dtypes.int32).reshape(line).expand(pre + (size,) + post)
    if size != n:   # pad with values that sort after everything (ties go by index, and theirs are past n)
      fill = (math.nan if not descending else -math.inf) if dtypes.is_float(x.dtype) else \
        (dtypes.max(x.dtype) if not descending else dtypes.min(x.dtype))
      x = x.pad(((0, 0),) * len(pre) + ((0, size - n),) + ((0, 0),) * len(post), value=fill)
    steps = [(half * 2, half * 2 == block) for block in (1 << b for b in range(1, size.bit_length()))
             for half in (block >> s for s in range(1, block.bit_length()))]
    for span, flip in steps: x, ix = self._exchange(x, ix, pre, post, span, flip, descending)
    if size != n:
      cut = tuple((0, s) for s in pre) + ((0, n),) + tuple((0, s) for s in post)
      x, ix = x.shrink(cut), ix.shrink(cut)
    return x.transpose(ax, at), ix.transpose(ax, at)

  def _exchange(self, x, ix, pre: tuple, post: tuple, span: int, flip: bool, descending: bool):
    """Compare-exchange each element with its partner in its group of `span` along the sorted axis (between `pre`
    and `post`): the element span/2 away, or the mirror image in the group when flip. Each element keeps the smaller
    (first half) or the larger (second half) of the pair; ties go by index, so one comparison decides both sides."""
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
    by index, NaN largest, as sort orders them. Up to 32 bits, runs of k (a power of two up) are sorted and each two
    neighbouring runs merged into the better half, halving the axis a kernel or two at a time."""
    ax = graph.normalize_axis(dim, self.ndim) if self.ndim else 0
    n = self.shape[ax] if self.ndim else 1
    if not 0 <= k <= n: raise ValueError(f"topk: k={k} is out of range for a dim of size {n}")
    if self.ndim and 0 < k and 1 << (k - 1).bit_length() < n and self.dtype.itemsize <= 4:
      if self.requires_grad:
        indices = self.detach()._network_order(ax, largest, k)
        return self.gather(ax, indices), indices
      values, indices = self._sorted_values(ax, largest, k), self._network_order(ax, largest, k)
      if values._defer is not None and indices._defer is not None and self._values_coded(ax) and \
         _joint_outputs_on(self.device):
        from tinyplug.engine import plan
        plan.pair(values, indices, functools.partial(_joint_topk, ax, largest, k))
      return values, indices
    values, indices = self.sort(dim, descending=largest)
    if self.ndim == 0: return values, indices
    cut = tuple((0, k) if i == ax else (0, s) for i, s in enumerate(self.shape))
    return values.shrink(cut), indices.shrink(cut)

  # ---- running extrema with their index ----
  def _cum_extreme(self, axis: int, largest: bool):
    """Running max (min) along `axis` as a blocked scan (`_scan`, about 17 operations per element; the triangle over
    the whole axis was n per element: 1024x1024 cummax(1) 242 ms, torch 1.2 ms) and the index where it was last
    reached: j is such a place when x[j] equals the running extreme there (a tie too: torch reports the last) or is a
    NaN (torch's NaN wins and each later NaN takes over), so the index is the running max of those places."""
    ax = graph.normalize_axis(axis, self.ndim)
    if self.ndim == 0: return self, type(self).zeros((), dtype=dtypes.int32, device=self.device)
    n = self.shape[ax]
    if n == 0: return self, self.cast(dtypes.int32)
    if self.dtype == dtypes.bool or not isinstance(n, int): return self._cum_extreme_triangle(ax, largest)
    if self.requires_grad:
      from tinyplug.gradient import custom_gradient
      vals, idx = self.detach()._cum_extreme(ax, largest)
      return custom_gradient(vals, (self, idx), _to_reached, axis=ax), idx
    vals = self._running_extreme(ax, largest)
    return vals, self._reached_index(vals, ax)

  # templates: the two blocked scans were ~110 Tensor calls a step (1024x1024 cummax(1) with its gradient: 117 -> 10)
  @graph_template
  def _running_extreme(self, ax: int, largest: bool):
    return self._scan(ax, dtypes.min(self.dtype) if largest else dtypes.max(self.dtype), "max" if largest else "min")
  @graph_template
  def _reached_index(self, vals, ax: int):
    reached = self.eq(vals)
    if dtypes.is_float(self.dtype): reached = reached | self.ne(self)
    n = self.shape[ax]
    ar = type(self).arange(n, device=self.device, dtype=dtypes.int32)
    ar = ar.reshape(tuple(n if i == ax else 1 for i in range(self.ndim)))
    return reached.where(ar, -1)._scan(ax, -1, "max")

  def _cum_extreme_triangle(self, ax: int, largest: bool):
    """The running extreme as one reduction per output over the whole axis (n per element): what gradients and bools
    take (its max reductions route the gradient to the extreme as torch does)."""
    n = self.shape[ax]
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
    axis would underflow the early terms to 0 when a later value is much larger ([0, 100] gave log(e^-100) = -inf).
    An axis longer than SCAN_DIRECT goes in blocks of SCAN_BLOCK: the prefixes inside each block, the log-sum-exp of
    the blocks before it (the blocks' own log-sum-exps, scanned), the two added as logaddexp (1024x1024: one n x n
    triangle was 2.7 s, now 8 kernels of ~17 ms under load; torch 58 ms)."""
    if self.ndim == 0: return self
    ax = graph.normalize_axis(axis, self.ndim)
    x = self.transpose(ax, -1)
    n = x.shape[-1]
    if n == 0: return self
    if isinstance(n, int) and n > SCAN_DIRECT: return x._blocked_logcumsumexp().transpose(ax, -1)
    return x._logcumsumexp_last().transpose(ax, -1)

  def _logcumsumexp_last(self):
    """logcumsumexp of the last axis as one triangle (n per element)."""
    n = self.shape[-1]
    m = self.detach()._cum_extreme(-1, largest=True)[0]
    # [..., i, 1]: the shift of prefix i, its own kernel (inside the triangle it is n maxima more for every term)
    m = m.isinf().where(0, m).contiguous().unsqueeze(-1)
    ar = type(self).arange(n, device=self.device, dtype=dtypes.int32)
    upto = ar.reshape(n, 1) >= ar.reshape(1, n)                          # j <= i
    # [..., i, j] = exp(x[j] - m[i]) for j <= i: the others' exponent is 0 before exp (a later, larger x[j] would be
    # exp(x[j] - m[i]) = inf in float32 and reach the gradient as 0 * inf = NaN) and their term 0 after; not -inf
    # before exp: a vector exp with special lanes takes libmvec's scalar path (1024x1024, last kernel: 51 -> 11 ms)
    terms = upto.where(upto.where(self.unsqueeze(-2) - m, 0).exp(), 0)
    return terms.sum(-1).log() + m.squeeze(-1)

  def _blocked_logcumsumexp(self):
    n, lead = self.shape[-1], self.shape[:-1]
    b = -(-n // SCAN_BLOCK)
    x = self.pad(((0, 0),) * len(lead) + ((0, b * SCAN_BLOCK - n),), value=-math.inf) if b * SCAN_BLOCK > n else self
    blocks = x.reshape(lead + (b, SCAN_BLOCK))
    inner = blocks._logcumsumexp_last()                                   # [..., block, i]
    top = blocks.detach().max(-1, keepdim=True)
    top = top.isinf().where(0, top)                                       # (a block of -inf: no inf - inf)
    totals = (blocks - top).exp().sum(-1).log() + top.squeeze(-1)         # each block's log-sum-exp
    # the log-sum-exp of the blocks before each: the totals shifted one block on, scanned
    before = totals.pad(((0, 0),) * len(lead) + ((1, -1),), value=-math.inf).logcumsumexp(-1).unsqueeze(-1)
    big = inner.detach().maximum(before.detach())
    big = big.isinf().where(0, big)
    out = ((inner - big).exp() + (before - big).exp()).log() + big
    # computed in the blocks' shape (the triangle's mask one compare per lane, not i's digits out of a merged axis)
    out = out.contiguous().reshape(lead + (b * SCAN_BLOCK,))
    return out.shrink(tuple((0, s) for s in lead) + ((0, n),)) if b * SCAN_BLOCK > n else out
