"""Reductions over axes (sum, max, min, mean, prod, var, std, argmax, any, all), scans (cumsum, cumprod) and the
softmax family. Reducing dims of size 0 gives the identity (sum 0, prod 1, max -inf), as in tinygrad."""
from __future__ import annotations
import math
from typing import Sequence
from tinyplug.uop.dtype import DType, dtypes, sum_acc_dtype, to_dtype
from tinyplug.uop.ops import Ops
from tinyplug.tensor_ops import graph
from tinyplug.tensor_ops.template import graph_template

_NARROW_FLOATS = (dtypes.float16, dtypes.bfloat16) + dtypes.fp8s   # summed in float32, returned in their own dtype

Axis = int | Sequence[int] | None
# a scan along at most this many elements is one triangle (a reduction per output); longer ones go in blocks
SCAN_DIRECT = 64

class ReduceMixin:
  __slots__ = ()
  def _axes(self, axis: Axis) -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    if isinstance(axis, int): axis = (axis,)
    axes = tuple(sorted({graph.normalize_axis(a, self.ndim) for a in axis}))
    return axes if self.ndim else ()   # a 0-d tensor's axis 0 (or -1) is its one element: nothing to reduce

  def _reduce(self, op: Ops, axis: Axis = None, keepdim: bool = False):
    axes = self._axes(axis)
    kept = tuple(1 if i in axes else s for i, s in enumerate(self.shape))
    if self.numel() == 0:
      identity = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: dtypes.min(self.dtype)}[op]
      ret = self.from_uop(graph.const(identity, self.dtype, self.device, kept), self.requires_grad)
    else: ret = self._apply_uop(graph.reduce, op=op, axes=axes)
    return ret if keepdim else ret.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

  def _reduced_count(self, axis: Axis) -> int: return math.prod(self.shape[a] for a in self._axes(axis))

  @graph_template   # a reshape, a cast and a reduction per call otherwise, and the scheduler would walk the graph
  def sum(self, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None):
    """Sum over `axis` (all axes when None); ints accumulate in at least int32, half and 8-bit floats in float32 (and
    come back in their own dtype)."""
    ret = self.cast(sum_acc_dtype(self.dtype) if dtype is None else to_dtype(dtype))._reduce(Ops.ADD, axis, keepdim)
    return ret.cast(self.dtype) if dtype is None and self.dtype in _NARROW_FLOATS else ret
  def prod(self, axis: Axis = None, keepdim: bool = False, dtype: DType | str | None = None):
    ret = self.cast(sum_acc_dtype(self.dtype) if dtype is None else to_dtype(dtype))._reduce(Ops.MUL, axis, keepdim)
    return ret.cast(self.dtype) if dtype is None and self.dtype in _NARROW_FLOATS else ret
  @graph_template
  def max(self, axis: Axis = None, keepdim: bool = False): return self._reduce(Ops.MAX, axis, keepdim)
  def _inverse(self):
    """An order-reversing map: -x for floats, ~x for integers and bools (-x would overflow the smallest signed int)."""
    return -self if dtypes.is_float(self.dtype) else ~self
  def min(self, axis: Axis = None, keepdim: bool = False): return self._inverse().max(axis, keepdim)._inverse()
  @graph_template
  def mean(self, axis: Axis = None, keepdim: bool = False):
    out_dtype = self.dtype if dtypes.is_float(self.dtype) else dtypes.default_float
    total = self.cast(sum_acc_dtype(self.dtype)).sum(axis, keepdim)
    return total.div(self._reduced_count(axis)).cast(out_dtype)
  def var(self, axis: Axis = None, keepdim: bool = False, correction: int = 1):
    # summed and divided in the accumulation dtype: the count may not fit a half (70000 > 65504)
    squares = (self - self.mean(axis, keepdim=True)).square()
    total = squares.cast(sum_acc_dtype(squares.dtype)).sum(axis, keepdim)
    n = self._reduced_count(axis)
    # a symbolic count: max(n - correction, 0) is computed in the kernel from the variables
    return total.div(max(0, n - correction) if isinstance(n, int) else (n - correction).maximum(0)).cast(squares.dtype)
  def std(self, axis: Axis = None, keepdim: bool = False, correction: int = 1):
    return self.var(axis, keepdim, correction).sqrt()
  def var_mean(self, axis: Axis = None, keepdim: bool = False, correction: int = 1):
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  def std_mean(self, axis: Axis = None, keepdim: bool = False, correction: int = 1):
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)

  def argmax(self, axis: int | None = None, keepdim: bool = False):
    """Index of the first maximum (over the flattened tensor when axis is None), as int32."""
    if axis is None: return self.flatten().argmax(0)
    ax = graph.normalize_axis(axis, self.ndim)
    n = self.shape[ax]
    if n == 0: raise ValueError(f"argmax of an empty dim {axis} (shape {self.shape})")
    is_max = self.eq(self.max(ax, keepdim=True))
    # a NaN is the maximum (the first NaN's index), as in numpy and torch: max propagates NaN, so in a row with one
    # nothing equals the max and the NaNs are marked; in a row without, no element is unequal to itself (no pass of
    # its own to find the NaN rows)
    if dtypes.is_float(self.dtype): is_max = is_max | self.ne(self)
    countdown = type(self).arange(n, 0, -1, device=self.device)
    countdown = countdown.reshape(tuple(n if i == ax else 1 for i in range(self.ndim)))
    return (n - (is_max * countdown).max(ax, keepdim)).cast(dtypes.int32)
  def argmin(self, axis: int | None = None, keepdim: bool = False): return self._inverse().argmax(axis, keepdim)
  def any(self, axis: Axis = None, keepdim: bool = False): return self.bool().max(axis, keepdim)
  def all(self, axis: Axis = None, keepdim: bool = False): return self.logical_not().any(axis, keepdim).logical_not()

  # ---- scans ----
  def _scan(self, axis: int, fill, reduce_name: str):
    ax = graph.normalize_axis(axis, self.ndim)
    if self.ndim == 0: return self
    n = self.shape[ax]
    if n == 0: return self
    x = self.transpose(ax, -1)
    if isinstance(n, int) and n > SCAN_DIRECT: return x._blocked_scan(fill, reduce_name).transpose(ax, -1)
    return x._direct_scan(fill, reduce_name).transpose(ax, -1)
  def _direct_scan(self, fill, reduce_name: str):
    """The inclusive scan of the last axis as one reduction per output over a triangle: n * n work per row."""
    n = self.shape[-1]
    rows = self.unsqueeze(-2).expand(self.shape[:-1] + (n, n))          # [..., i, j] = x[..., j]
    ar = type(self).arange(n, device=self.device)
    upto = ar.reshape(1, n) < ar.reshape(n, 1) + 1                      # j <= i, one compare (its lanes vectorise)
    return getattr(upto.where(rows, fill), reduce_name)(-1)
  def _blocked_scan(self, fill, reduce_name: str):
    """The last axis in b blocks of m (about sqrt(n) each, padded with the identity): the scan inside each block, the
    exclusive scan of the blocks' totals, and the two combined: n * (m + b) work per row instead of n * n (cumsum
    along 1024: 1G masked adds as one triangle, 66M so)."""
    n = self.shape[-1]
    m = math.isqrt(n - 1) + 1
    b = -(-n // m)
    x = self.pad(((0, 0),) * (self.ndim - 1) + ((0, b * m - n),), value=fill) if b * m > n else self
    inner = x.reshape(self.shape[:-1] + (b, m))._direct_scan(fill, reduce_name)     # [..., block, i]
    totals = inner[..., m - 1]                                                      # [..., block]
    # the scan of the blocks before each: the totals shifted one block on
    before = totals.pad(((0, 0),) * (totals.ndim - 1) + ((1, -1),), value=fill)._direct_scan(fill, reduce_name)
    out = inner + before.unsqueeze(-1) if reduce_name == "sum" else inner * before.unsqueeze(-1)
    return out.reshape(self.shape[:-1] + (b * m,))[..., :n]
  def cumsum(self, axis: int = 0): return self._scan(axis, 0, "sum")
  def cumprod(self, axis: int = 0): return self._scan(axis, 1, "prod")

  # ---- softmax family ----
  @graph_template
  def logsumexp(self, axis: Axis = None, keepdim: bool = False):
    m = self.max(axis, keepdim=True).detach()
    out = (self - m).exp().sum(axis, keepdim=True).log() + m
    return out if keepdim else out.squeeze(self._axes(axis))
  @graph_template
  def softmax(self, axis: int = -1, dtype: DType | str | None = None):
    x = self if dtype is None else self.cast(dtype)
    if x.ndim == 0: return x.reshape(1).softmax(0).reshape(())
    e = (x - x.max(axis, keepdim=True).detach()).exp()
    return e / e.sum(axis, keepdim=True)
  def softmin(self, axis: int = -1, dtype: DType | str | None = None): return (-self).softmax(axis, dtype)
  @graph_template
  def log_softmax(self, axis: int = -1, dtype: DType | str | None = None):
    x = self if dtype is None else self.cast(dtype)
    if x.ndim == 0: return x.reshape(1).log_softmax(0).reshape(())
    shifted = x - x.max(axis, keepdim=True).detach()
    return shifted - shifted.exp().sum(axis, keepdim=True).log()
