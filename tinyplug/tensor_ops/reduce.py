"""Reductions over axes (sum, max, min, mean, prod, var, std, argmax, any, all), scans (cumsum, cumprod) and the
softmax family. Reducing dims of size 0 gives the identity (sum 0, prod 1, max -inf), as in tinygrad."""
from __future__ import annotations
import math
from typing import Any, Sequence
from tinyplug.uop.dtype import DType, dtypes, sum_acc_dtype, to_dtype
from tinyplug.uop.ops import Ops
from tinyplug.tensor_ops import graph
from tinyplug.tensor_ops.template import graph_template

_NARROW_FLOATS = (dtypes.float16, dtypes.bfloat16) + dtypes.fp8s   # summed in float32, returned in their own dtype

Axis = int | Sequence[int] | None
# a scan along at most this many elements is one triangle (a reduction per output); longer ones go in blocks
SCAN_DIRECT = 64
# the block of a longer scan: a triangle of this many per output (one AVX-512 vector of float32 outputs, two AVX2)
SCAN_BLOCK = 16
# the block where vectors are narrow (AVX2): 8 float32 outputs, one register, half the triangle's work per output; the
# blocks' totals are twice as many, so their own scan is blocked too (1024x1024, Zen 3, one thread, kernels
# interleaved: cumsum(1) 1.39-1.43 -> 1.09-1.22 ms in 5 kernels against 3, cumsum(0) 1.99 -> 1.19 ms)
NARROW_SCAN_BLOCK = 8

def scan_block(device: Any) -> int:
  """The block of a long blocked scan on `device`: NARROW_SCAN_BLOCK where `backend.narrow_vectors` holds."""
  from tinyplug.device import narrow_vectors_on
  return NARROW_SCAN_BLOCK if narrow_vectors_on(device) else SCAN_BLOCK

# how a blocked scan adds the blocks before each block to the scan inside it
_SCAN_COMBINE = {"sum": "add", "prod": "mul", "max": "maximum", "min": "minimum"}

def _reverse_cumsum(t, axis: int):
  """t[i] + t[i+1] + ... along `axis`: the forward's blocked kernels over the flipped axis."""
  return t.flip(axis).cumsum(axis).flip(axis)

def _empty_input_grad(g, out, x):
  return (x.zeros_like(),)

def _cumsum_grad(g, out, x, axis: int):
  # each element reaches every output from it on (through the ops that built the scan, this gradient was one
  # triangle over the merged axis, 4x slower)
  return (_reverse_cumsum(g, axis),)

def _cumprod_grad(g, out, x, axis: int):
  # d out[i] / d x[j] = prod(x[k], k <= i, k != j) for j <= i. Where out[j] != 0 that is out[i] / x[j] (the backward
  # scan of g * out, divided); at a row's first zero z (x[z] == 0, out[z - 1] != 0) it is the sum of g[i] times the
  # running product with x[z] taken as 1, for i >= z; after z every such product has x[z] in it. A product that
  # underflowed to 0 reads as past a zero: its gradients are 0 either way, as torch's; one that met inf * 0 is NaN
  # from there on, and so is its gradient. Scans only, where the products' gradients through the blocked scan had an
  # n^3 kernel over the blocks (256x1024: 16 ms, torch 1.8); before and the first zero read from out, not from a
  # scan of zero counts (a scan less, 1024x1024: benchmarks/README.md)
  before = out.ne(0)
  first = x.eq(0) & before.pad(tuple((1, -1) if i == axis else (0, 0) for i in range(x.ndim)), value=True)
  grad_before = _reverse_cumsum(g * out, axis) / before.where(x, 1)
  past_z = first.where(1, x).cumprod(axis)     # out up to z, then the product with x[z] taken as 1
  at_z = before.where(0, g * past_z).sum(axis, keepdim=True)
  return (before.where(grad_before, first.where(at_z, 0)).cast(x.dtype),)

def _keyed_argmax(device) -> bool:
  """Whether argmax is one pass over int64 keys on `device`: on CPU-style targets (loops; int64 is native there,
  and 4096x4096 argmax(0) took ~40% less CPU time than the max-then-index form) with wide vectors. GPUs keep the two
  passes: their int64 is a pair of 32-bit ops, and the row's second pass is a work-group's, not a second trip to
  memory. So do narrow vectors (AVX2: no 64-bit max, a compare and a blend per 4 keys against a max per 8 floats;
  Zen 3, one thread, benchmarks/argmax_ab.py: 4096x4096 argmax(1) 7.26 -> 4.75 ms, argmax(0) 9.20 -> 8.41 ms,
  8192x10 0.073 -> 0.043 ms)."""
  if not isinstance(device, str): return False   # a multi-device tensor
  from tinyplug.backend import narrow_vectors
  from tinyplug.device import Device
  renderer = Device[device].renderer
  return renderer.runs_loops and not narrow_vectors(renderer)

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
      if dtypes.is_float(self.dtype):   # no kernel, but backward() still reaches the input (its gradient is empty)
        from tinyplug.gradient import custom_gradient
        ret = custom_gradient(ret, (self,), _empty_input_grad)
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
  @graph_template   # a mean, a subtract, a square, a sum and a divide: ~15 Tensor calls per call otherwise
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

  @graph_template   # the compare, countdown (an arange) and reduction: ~20 Tensor calls and a graph walk per call
  def argmax(self, axis: int | None = None, keepdim: bool = False):
    """Index of the first maximum (over the flattened tensor when axis is None; kept as a 1 per dim with keepdim, as
    numpy and torch do), as int32."""
    if axis is None:
      flat = self.flatten().argmax(0)
      return flat.reshape((1,) * self.ndim) if keepdim else flat
    ax = graph.normalize_axis(axis, self.ndim)
    n = self.shape[ax]
    if n == 0: raise ValueError(f"argmax of an empty dim {axis} (shape {self.shape})")
    if isinstance(n, int) and self.dtype.itemsize <= 4 and _keyed_argmax(self.device):
      # one pass: the max of an int64 per element, the order key (tensor_ops/sorting.py: NaN above +inf, -0 as +0)
      # in the high half and n-1-index in the low, so equal values pick the first index
      countdown = type(self).arange(n - 1, -1, -1, device=self.device, dtype=dtypes.int64)
      countdown = countdown.reshape(tuple(n if i == ax else 1 for i in range(self.ndim)))
      keys = self._order_rank(largest_first=False).cast(dtypes.int64).lshift(32) | countdown
      return ((n - 1) - (keys.max(ax, keepdim) & 0xFFFFFFFF)).cast(dtypes.int32)
    is_max = self.eq(self.max(ax, keepdim=True))
    # a NaN is the maximum (the first NaN's index), as in numpy and torch: max propagates NaN, so in a row with one
    # nothing equals the max and the NaNs are marked; in a row without, no element is unequal to itself (no pass of
    # its own to find the NaN rows)
    if dtypes.is_float(self.dtype): is_max = is_max | self.ne(self)
    countdown = type(self).arange(n, 0, -1, device=self.device)
    countdown = countdown.reshape(tuple(n if i == ax else 1 for i in range(self.ndim)))
    return (n - (is_max * countdown).max(ax, keepdim)).cast(dtypes.int32)
  @graph_template
  def argmin(self, axis: int | None = None, keepdim: bool = False): return self._inverse().argmax(axis, keepdim)
  def any(self, axis: Axis = None, keepdim: bool = False): return self.bool().max(axis, keepdim)
  def all(self, axis: Axis = None, keepdim: bool = False): return self.logical_not().any(axis, keepdim).logical_not()

  # ---- scans ----
  # along their own axis, not moved last: down the columns (cumsum(0)) each step reads whole rows, which the
  # heuristic reads as vectors (1024x1024 cumsum(0): moved last, its reads and writes were strided)
  def _scan(self, axis: int, fill, reduce_name: str):
    ax = graph.normalize_axis(axis, self.ndim)
    if self.ndim == 0: return self
    n = self.shape[ax]
    if n == 0: return self
    if isinstance(n, int) and n > SCAN_DIRECT: return self._blocked_scan(ax, fill, reduce_name)
    return self._direct_scan(ax, fill, reduce_name)
  def _direct_scan(self, ax: int, fill, reduce_name: str):
    """The inclusive scan of axis `ax` as one reduction per output over a triangle: n * n work per row."""
    n, rest = self.shape[ax], self.shape[ax + 1:]
    rows = self.unsqueeze(ax).expand(self.shape[:ax] + (n,) + self.shape[ax:])   # [..., i, j, rest] = x[..., j, rest]
    ar = type(self).arange(n, device=self.device)
    upto = ar.reshape(1, n) < ar.reshape(n, 1) + 1                      # j <= i, one compare (its lanes vectorise)
    upto = upto.reshape((n, n) + (1,) * len(rest))
    return getattr(upto.where(rows, fill), reduce_name)(ax + 1)
  def _blocked_scan(self, ax: int, fill, reduce_name: str):
    """Axis `ax` in blocks of `scan_block` (padded with the identity): each block's total, the exclusive scan of the
    totals (itself blocked when long), and the scan inside each block plus the blocks before it, in one kernel (a
    triangle of the block per output: a vector of outputs per step on CPUs). Two passes over the data (the totals,
    then the scan), about block + 1 operations per element; blocks of sqrt(n) were 2 * sqrt(n) and a third pass
    (cumsum(1) of 1024x1024, loaded machine: 3 kernels, 6-10 ms -> 2 kernels, see benchmarks/README.md)."""
    n, lead, rest = self.shape[ax], self.shape[:ax], self.shape[ax + 1:]
    m = scan_block(self.device)
    b = -(-n // m)
    x = self.pad(((0, 0),) * ax + ((0, b * m - n),) + ((0, 0),) * len(rest), value=fill) if b * m > n else self
    blocks = x.reshape(lead + (b, m) + rest)                                              # [..., block, i, rest]
    totals = getattr(blocks, reduce_name)(ax + 1)                                         # [..., block, rest]
    # the scan of the blocks before each: the totals shifted one block on
    before = totals.pad(((0, 0),) * ax + ((1, -1),) + ((0, 0),) * len(rest), value=fill)._scan(ax, fill, reduce_name)
    inner = blocks._direct_scan(ax + 1, fill, reduce_name)
    out = getattr(inner, _SCAN_COMBINE[reduce_name])(before.unsqueeze(ax + 1))
    # computed in the blocks' shape (i its own axis: the triangle's mask one compare per lane, not i's digits out of
    # a merged axis), then viewed whole
    out = out.contiguous().reshape(lead + (b * m,) + rest)
    return out.shrink(tuple((0, n) if i == ax else (0, s) for i, s in enumerate(out.shape))) if b * m > n else out
  # templates: a blocked scan is ~40 Tensor calls (pads, reshapes, the triangles' aranges) and a graph walk per call
  @graph_template
  def cumsum(self, axis: int = 0):
    out = self._scan(axis, 0, "sum")
    if out is self or not out.requires_grad: return out
    from tinyplug.gradient import custom_gradient
    return custom_gradient(out, (self,), _cumsum_grad, axis=graph.normalize_axis(axis, self.ndim))
  @graph_template
  def cumprod(self, axis: int = 0):
    out = self._scan(axis, 1, "prod")
    if out is self or not out.requires_grad or not dtypes.is_float(self.dtype): return out
    from tinyplug.gradient import custom_gradient
    return custom_gradient(out, (self,), _cumprod_grad, axis=graph.normalize_axis(axis, self.ndim))

  # ---- softmax family ----
  @graph_template
  def logsumexp(self, axis: Axis = None, keepdim: bool = False):
    m = self.max(axis, keepdim=True).detach()
    m = m.isinf().where(0.0, m)   # a row of -inf gives -inf (not -inf - -inf = nan), one holding +inf gives +inf
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
