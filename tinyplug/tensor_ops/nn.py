"""Neural-network building blocks on top of movement, elementwise and reduce ops: matmul, linear, sliding windows
(conv2d, max_pool2d, avg_pool2d), normalisation, dropout and losses."""
from __future__ import annotations
import functools, itertools, math
from typing import Callable, Sequence
from tinyplug.helpers import make_tuple
from tinyplug.tensor_ops.graph import ShapeError
from tinyplug.tensor_ops.indexing import check_index_range
from tinyplug.tensor_ops.layout import channels_last_copy, output_channel_blocks, padded_copies
from tinyplug.tensor_ops.template import graph_template
from tinyplug.tensor_ops.winograd import WINO, use_winograd, winograd_conv3x3
from tinyplug.uop.dtype import DType, dtypes, least_upper_dtype, to_dtype

def _tuple(x, n: int) -> tuple[int, ...]: return tuple(x) if isinstance(x, (tuple, list)) else (x,) * n

def _pool_dims(kernel_size: int | Sequence[int]) -> int:
  return 2 if isinstance(kernel_size, int) else len(kernel_size)

def _spatial_padding(padding: int | Sequence[int], nd: int) -> list[tuple[int, int]]:
  """int: the same on every side; nd ints: (before=after) per spatial dim; 2*nd ints: torch-flat, last dim first."""
  if isinstance(padding, int): return [(padding, padding)] * nd
  padding = tuple(padding)
  if len(padding) == nd: return [(p, p) for p in padding]
  if len(padding) == 2 * nd: return [(padding[2 * i], padding[2 * i + 1]) for i in reversed(range(nd))]
  raise ValueError(f"padding {padding} must be an int, {nd} ints or {2 * nd} ints")

class NNMixin:
  __slots__ = ()
  # ---- matrix products ----
  @graph_template   # ~10 Tensor methods and their checks per call otherwise (a 16x16 matmul: ~150 us to build)
  def dot(self, w, dtype: DType | str | None = None):
    """Matrix product with torch.matmul's rules: 1-D operands gain and lose a dim, batch dims broadcast."""
    if self.ndim == 0 or w.ndim == 0:
      raise ShapeError(f"matmul needs tensors of at least 1 dim, got shapes {self.shape} and {w.shape}")
    x = self.unsqueeze(0) if self.ndim == 1 else self
    y = w.unsqueeze(-1) if w.ndim == 1 else w
    if x.shape[-1] != y.shape[-2]:
      raise ShapeError(f"matmul shapes {self.shape} and {w.shape} do not match: {x.shape[-1]} != {y.shape[-2]}")
    out = (x.unsqueeze(-2) * y.transpose(-1, -2).unsqueeze(-3)).sum(-1, dtype=dtype)
    out = out.cast(least_upper_dtype(self.dtype, w.dtype) if dtype is None else to_dtype(dtype))
    if self.ndim == 1: out = out.squeeze(-2)
    if w.ndim == 1: out = out.squeeze(-1)
    return out
  def matmul(self, w, reverse: bool = False, dtype: DType | str | None = None):
    return w.dot(self, dtype=dtype) if reverse else self.dot(w, dtype=dtype)
  def __matmul__(self, w): return self.matmul(w)
  def __rmatmul__(self, w): return self.matmul(w, reverse=True)
  @graph_template
  def linear(self, weight, bias=None):
    """self @ weight + bias, with weight of shape (in, out) as in tinygrad (a 1-D weight scales elementwise)."""
    x = self * weight if weight.ndim == 1 else self.dot(weight)
    return x if bias is None else x + bias
  def sequential(self, layers: Sequence[Callable]): return functools.reduce(lambda x, f: f(x), layers, self)

  # ---- sliding windows ----
  def _pool(self, kernel: Sequence[int], stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1):
    """(..., i1..in) -> (..., o1..on, k1..kn) with out[.., a.., b..] = self[.., a*stride + b*dilation ..]: every
    window of the last len(kernel) dims, as one chain of views for all of them at once.

    Each dim's row is repeated R times and read with a row pitch of i+dilation: position b*(i+dilation) + a*stride
    of the repeated row holds element (b*dilation + a*stride) mod i, and that index never wraps for a valid window."""
    nd = len(kernel)
    if self.ndim < nd: raise ShapeError(f"a {nd}-d window needs at least {nd} dims, got shape {self.shape}")
    strides, dilations = make_tuple(stride, nd), make_tuple(dilation, nd)
    lead, pre, spatial = self.ndim - nd, self.shape[:self.ndim - nd], self.shape[self.ndim - nd:]
    outs = [(i - d * (k - 1) - 1) // s + 1 for i, k, s, d in zip(spatial, kernel, strides, dilations)]
    for i, k, d, o in zip(spatial, kernel, dilations, outs):
      if o <= 0: raise ShapeError(f"kernel {k} (dilation {d}) does not fit in an input of size {i}")
    if _disjoint_windows(kernel, strides, dilations): return self._tiles(kernel, strides)
    nil = (None,) * lead
    def per_dim(*parts): return tuple(v for p in zip(*parts) for v in p)
    reps = [math.ceil(k * (i + d) / i) for i, k, d in zip(spatial, kernel, dilations)]
    x = self.reshape(pre + per_dim([1] * nd, spatial)).expand(pre + per_dim(reps, spatial))
    x = x.reshape(pre + tuple(r * i for r, i in zip(reps, spatial)))
    x = x.shrink(nil + tuple((0, k * (i + d)) for i, k, d in zip(spatial, kernel, dilations)))
    x = x.reshape(pre + per_dim(kernel, [i + d for i, d in zip(spatial, dilations)]))
    # each row of i+d to o*stride columns (a negative pad cuts), then every stride-th column
    x = x.pad(nil + per_dim([None] * nd, [(0, o * s - i - d) for i, d, o, s in zip(spatial, dilations, outs, strides)]))
    x = x.reshape(pre + tuple(v for k, o, s in zip(kernel, outs, strides) for v in (k, o, s)))
    x = x.shrink(nil + tuple(v for _ in range(nd) for v in (None, None, (0, 1))))
    x = x.reshape(pre + per_dim(kernel, outs))
    return x.permute(tuple(range(lead)) + tuple(lead + 2 * j + 1 for j in range(nd)) + tuple(lead + 2 * j for j in range(nd)))

  def _tiles(self, kernel: Sequence[int], strides: Sequence[int]):
    """_pool for windows that do not overlap (stride >= kernel, no dilation): one reshape of all the window dims,
    (n*s,) -> (n, s), cut to (o, k). Index math stays affine, so the windows' gradient is elementwise too. The
    input is padded up to whole tiles rather than cut to o*s first: a reshape of a cut view would leave divisions
    by the bigger dims' sizes in the gradient's index math that only its validity mask could simplify."""
    nd, lead = len(kernel), self.ndim - len(kernel)
    spatial = self.shape[lead:]
    outs = [(i - k) // s + 1 for i, k, s in zip(spatial, kernel, strides)]
    tiles = [-(-i // s) for i, s in zip(spatial, strides)]
    nil = (None,) * lead
    x = self.pad(nil + tuple((0, n * s - i) for i, n, s in zip(spatial, tiles, strides)))
    x = x.reshape(self.shape[:lead] + tuple(v for n, s in zip(tiles, strides) for v in (n, s)))
    x = x.shrink(nil + tuple(v for o, k in zip(outs, kernel) for v in ((0, o), (0, k))))
    return x.permute(tuple(range(lead)) + tuple(lead + 2 * j for j in range(nd)) + tuple(lead + 2 * j + 1 for j in range(nd)))

  def conv2d(self, weight, bias=None, groups: int = 1, stride: int | Sequence[int] = 1,
             dilation: int | Sequence[int] = 1, padding: int | Sequence[int] = 0, dtype: DType | str | None = None):
    """Convolution (really cross-correlation, like torch) over as many spatial dims as the weight has after 2.

    Its gradient is declared (gradient.custom_gradient): the input's is a transposed convolution of the output
    gradient, the weight's a convolution over the batch. Differentiating the window view instead would build a
    (batch, cin, out.., kernel..) window gradient and fold it back: two large kernels. A stride-1 3x3 convolution
    may compute its output and input gradient as Winograd's F(2x2,3x3) instead (tensor_ops/winograd.py, WINO)."""
    return self._conv2d(weight, bias, groups, stride, dilation, padding, dtype,
                        wino=_wants_winograd(self, weight, groups, stride, dilation, padding, dtype))
  @graph_template   # (the Winograd choice is an argument: it reads WINO, which the template's key does not hold)
  def _conv2d(self, weight, bias, groups: int, stride, dilation, padding, dtype, wino: bool = False):
    return _conv(self, weight, bias, groups, stride, dilation, padding, dtype, wino=wino)

  def _conv_valid(self, weight, groups: int, stride: tuple[int, ...], dilation: tuple[int, ...], dtype):
    """The unpadded convolution as a window view times the weight, summed over (cin, kernel..)."""
    (bs, _), (cout, cin), kernel = self.shape[:2], weight.shape[:2], weight.shape[2:]
    nd = len(kernel)
    x = self._pool(kernel, stride, dilation)                                # (bs, cin_total, o.., k..)
    outs = x.shape[2:2 + nd]
    x = x.reshape((bs, groups, 1, cin) + outs + kernel)
    w = weight.reshape((1, groups, cout // groups, cin) + (1,) * nd + kernel)
    red = (3,) + tuple(range(4 + nd, 4 + 2 * nd))
    return (x * w).sum(red, dtype=dtype).reshape((bs, cout) + outs)

  def _spread(self, stride: Sequence[int]):
    """Put stride-1 zeros between neighbours along every spatial dim: (n,) -> ((n-1)*stride + 1,)."""
    if all(s == 1 for s in stride): return self
    lead, spatial = self.shape[:2], self.shape[2:]
    x = self.reshape(lead + tuple(v for n in spatial for v in (n, 1)))
    x = x.pad(((0, 0), (0, 0), *[pair for s in stride for pair in ((0, 0), (0, s - 1))]))
    x = x.reshape(lead + tuple(n * s for n, s in zip(spatial, stride)))
    return x.shrink((None, None, *[(0, (n - 1) * s + 1) for n, s in zip(spatial, stride)]))

  def _pool_prepare(self, kernel_size, stride, padding, dilation, ceil_mode: bool, nd: int = 2):
    """Kernel, stride, and (before, after) pads per dim of the pooled input, plus the extra right pad ceil_mode adds:
    enough for one more window whenever that window starts inside the input or its left padding (torch's rule)."""
    k, d = make_tuple(kernel_size, nd), make_tuple(dilation, nd)
    s = k if stride is None else make_tuple(stride, nd)
    spatial_pads = _spatial_padding(padding, nd)
    extra = [0] * nd
    if ceil_mode:
      for j, (i, kj, sj, dj, (pb, pa)) in enumerate(zip(self.shape[-nd:], k, s, d, spatial_pads)):
        span = i + pb + pa - dj * (kj - 1) - 1
        out = -(-span // sj) + 1
        if (out - 1) * sj >= i + pb: out -= 1
        extra[j] = max(0, (out - 1) * sj - span)
    pads = [(0, 0)] * (self.ndim - nd) + spatial_pads
    return k, s, pads, [(0, 0)] * (self.ndim - nd) + [(0, e) for e in extra]

  def max_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride=None, dilation: int | Sequence[int] = 1,
                 padding: int | Sequence[int] = 0, ceil_mode: bool = False, return_indices: bool = False):
    """Max of each window; with return_indices also where it was (int64 positions in the flattened spatial input, the
    first on ties, as torch), which max_unpool2d takes. A kernel_size of n ints pools the last n dims (1d, 3d too)."""
    if return_indices: return self._max_pool_with_indices(kernel_size, stride, dilation, padding, ceil_mode)
    # the gradient marks where the input equals the max; computed inline in two kernels, the input could round
    # differently in each (LLVM may contract a*b+c into an FMA in one and not the other), match nowhere and leave a
    # window with no gradient. Read from one buffer, both see the same bits (free when it is a buffer already).
    return self.contiguous()._max_pool(kernel_size, stride, dilation, padding, ceil_mode)
  @graph_template   # (outside it, contiguous() looks at whether the input is a buffer)
  def _max_pool(self, kernel_size, stride, dilation, padding, ceil_mode: bool):
    k, s, pads, extra = self._pool_prepare(kernel_size, stride, padding, dilation, ceil_mode, _pool_dims(kernel_size))
    pads = [(b, a + e) for (b, a), (_, e) in zip(pads, extra)]
    out = self.pad(tuple(pads), value=dtypes.min(self.dtype))._pool(k, s, dilation).max(tuple(range(-len(k), 0)))
    if _disjoint_windows(k, s, make_tuple(dilation, len(k))): return out
    from tinyplug.gradient import custom_gradient   # overlapping windows: _taps_gathered says why
    return custom_gradient(out, (self,), _max_pool_backward, kernel=tuple(k), stride=tuple(s),
                           dilation=make_tuple(dilation, len(k)), pads=tuple(pads))
  def _max_pool_with_indices(self, kernel_size, stride, dilation, padding, ceil_mode: bool):
    k, s, pads, extra = self._pool_prepare(kernel_size, stride, padding, dilation, ceil_mode, _pool_dims(kernel_size))
    pads = tuple((b, a + e) for (b, a), (_, e) in zip(pads, extra))
    nd, spatial = len(k), self.shape[-len(k):]
    axes = tuple(range(-nd, 0))
    windows = self.contiguous().pad(pads, value=dtypes.min(self.dtype))._pool(k, s, dilation)
    vals = windows.max(axes)
    where = type(self).arange(math.prod(spatial), device=self.device, dtype=dtypes.int64).reshape(spatial)
    where = where.pad(pads[-nd:], value=-1)._pool(k, s, dilation)           # the padding is never the max's position
    first = windows.eq(vals.reshape(vals.shape + (1,) * nd)).where(where, dtypes.max(dtypes.int64)).min(axes)
    return vals, first
  def max_unpool2d(self, indices, kernel_size: int | Sequence[int] = (2, 2), stride=None, dilation: int | Sequence[int] = 1,
                   padding: int | Sequence[int] = 0, output_size: Sequence[int] | None = None):
    """The inverse of max_pool2d(return_indices=True): each value back at its position, zeros elsewhere. The output's
    spatial size is (in - 1) * stride - pad_before - pad_after + dilation * (kernel - 1) + 1, or the last dims of
    output_size."""
    nd = 2
    k, d = make_tuple(kernel_size, nd), make_tuple(dilation, nd)
    s = k if stride is None else make_tuple(stride, nd)
    pads = _spatial_padding(padding, nd)
    if output_size is None:
      out = tuple((i - 1) * sj - pb - pa + dj * (kj - 1) + 1 for i, kj, sj, dj, (pb, pa) in zip(self.shape[-nd:], k, s, d, pads))
    else: out = tuple(output_size)[-nd:]
    if indices.shape != self.shape: raise ShapeError(f"max_unpool2d: indices {indices.shape} do not match {self.shape}")
    lead = self.shape[:-nd]
    flat, idx = self.reshape(*lead, -1), indices.reshape(*lead, -1)
    return type(self).zeros(*lead, math.prod(out), dtype=self.dtype, device=self.device).scatter(-1, idx, flat) \
      .reshape(*lead, *out)
  @graph_template   # the windows, the divisor and the gradient's parts: ~20 Tensor ops a call otherwise
  def avg_pool2d(self, kernel_size: int | Sequence[int] = (2, 2), stride=None, dilation: int | Sequence[int] = 1,
                 padding: int | Sequence[int] = 0, ceil_mode: bool = False, count_include_pad: bool = True):
    """Mean of each window. With count_include_pad the padding counts in the divisor; the part of a ceil_mode window
    beyond the padding never does (torch's rule). A kernel_size of n ints pools the last n dims (1d, 3d too)."""
    k, s, pads, extra = self._pool_prepare(kernel_size, stride, padding, dilation, ceil_mode, _pool_dims(kernel_size))
    axes, d = tuple(range(-len(k), 0)), make_tuple(dilation, len(k))
    windows = self.pad(tuple(pads)).pad(tuple(extra))._pool(k, s, d)
    if count_include_pad and not any(e for _, e in extra): out = windows.mean(axes)
    else: out = windows.sum(axes) / _avg_divisor(self, k, s, d, pads, extra, count_include_pad)
    if _disjoint_windows(k, s, d): return out
    from tinyplug.gradient import custom_gradient
    return custom_gradient(out, (self,), _avg_pool_backward, kernel=tuple(k), stride=tuple(s), dilation=d,
                           pads=tuple(pads), extra=tuple(extra), count_include_pad=count_include_pad)

  def _tri_mask(self, diagonal: int, upper: bool):
    r, c = self.shape[-2], self.shape[-1]
    rows = type(self).arange(r, device=self.device).reshape(r, 1) + diagonal
    cols = type(self).arange(c, device=self.device).reshape(1, c)
    return rows <= cols if upper else rows >= cols
  def triu(self, diagonal: int = 0): return self._tri_mask(diagonal, upper=True).where(self, self._const_like(0))
  def tril(self, diagonal: int = 0): return self._tri_mask(diagonal, upper=False).where(self, self._const_like(0))
  def scaled_dot_product_attention(self, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                                   enable_gqa: bool = False):
    """softmax(q @ k^T / sqrt(d) + mask) @ v, like torch's; a bool mask keeps where it is True. enable_gqa: key and
    value have fewer heads (dim -3) than the query, each shared by a group of query heads."""
    if is_causal and attn_mask is not None: raise ShapeError("scaled_dot_product_attention: give is_causal or attn_mask, not both")
    if enable_gqa and key.ndim >= 3 and key.shape[-3] != self.shape[-3]:
      if self.shape[-3] % key.shape[-3] or value.shape[-3] != key.shape[-3]:
        raise ShapeError(f"scaled_dot_product_attention: {self.shape[-3]} query heads cannot be grouped over "
                         f"{key.shape[-3]} key and {value.shape[-3]} value heads")
      group = self.shape[-3] // key.shape[-3]
      key, value = key.repeat_interleave(group, -3), value.repeat_interleave(group, -3)
    if dropout_p and type(self).training:   # new random numbers every call: the graph cannot be a template's
      return self._attention_weights(key, attn_mask, is_causal).dropout(dropout_p) @ value
    return self._attention(key, value, attn_mask, is_causal)
  @graph_template   # the scheduler would walk the graph of three templates' outputs (~150 us) on every realize
  def _attention(self, key, value, attn_mask, is_causal: bool):
    if is_causal and len(blocks := _causal_query_blocks(self.shape[-2])) > 1:
      return self._causal_attention_blocks(key, value, blocks)
    return self._attention_weights(key, attn_mask, is_causal) @ value
  def _causal_attention_blocks(self, key, value, blocks: list[tuple[int, int]]):
    """Causal attention by blocks of queries, each against the keys up to its last row only: the scores above the
    diagonal blocks are never computed (about half the work of the whole matrix, forward and backward). The softmax's
    division comes after `@ value` (rows of the head size, not of the keys), and its max is a constant to the
    gradient (it cancels): one pass over the scores fewer each way."""
    scale, outs = 1 / math.sqrt(self.shape[-1]), []
    for start, end in blocks:
      keys = min(end, key.shape[-2])
      scores = (self[..., start:end, :] @ key[..., :keys, :].transpose(-2, -1)) * scale
      rows = type(self).arange(end - start, device=self.device).reshape(end - start, 1) + start
      scores = (rows >= type(self).arange(keys, device=self.device).reshape(1, keys)).where(scores, -math.inf)
      # every row sees its own key (or all of them): the max is finite
      e = (scores - scores.max(-1, keepdim=True).detach()).exp()
      outs.append((e @ value[..., :keys, :]) / e.sum(-1, keepdim=True))
    return outs[0].cat(*outs[1:], dim=-2)
  def _attention_weights(self, key, attn_mask, is_causal: bool):
    scores = (self @ key.transpose(-2, -1)) * (1 / math.sqrt(self.shape[-1]))
    if is_causal: attn_mask = scores._const_like(True, dtypes.bool).tril()
    if attn_mask is not None:
      scores = attn_mask.where(scores, -math.inf) if attn_mask.dtype == dtypes.bool else scores + attn_mask
    return scores.softmax(-1)

  # ---- normalisation, dropout, losses ----
  @graph_template
  def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5):
    y = self - self.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()
  @graph_template   # a reshape and a broadcast op per argument: ~10 Tensor calls per call otherwise
  def batchnorm(self, weight, bias, mean, invstd, axis: int | Sequence[int] = 1):
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    x = self - mean.reshape(shape)
    if weight is not None: x = x * weight.reshape(shape)
    x = x * (invstd.reshape(shape) if invstd.ndim == len(axes) else invstd)
    return x + bias.reshape(shape) if bias is not None else x
  def dropout(self, p: float = 0.5):
    """Zero each element with probability p and scale the rest by 1/(1-p), while Tensor.training (p=1: all zeros)."""
    if not 0.0 <= p <= 1.0: raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if not type(self).training or p == 0: return self
    if p == 1: return self.zeros_like()
    keep = type(self).rand(*self.shape, device=self.device) >= p
    return keep.where(self, 0) * (1 / (1 - p))
  @graph_template   # the sub-pixel form is ~60 Tensor ops per call otherwise (0.7 ms of Python for a 2 ms op)
  def conv_transpose2d(self, weight, bias=None, groups: int = 1, stride=1, dilation=1, padding=0, output_padding=0):
    """Transposed convolution (PyTorch's conv_transpose2d, any number of spatial dims) from a plain convolution:
    spread the input by `stride`, pad by dilation*(k-1)-padding (+output_padding at the end), flip the kernel."""
    x = self
    nd = weight.ndim - 2
    cin, cout_g, kernel = weight.shape[0], weight.shape[1], weight.shape[2:]
    s, d, p, op = (_tuple(v, nd) for v in (stride, dilation, padding, output_padding))
    if x.ndim != nd + 2 or x.shape[1] != cin:
      raise ShapeError(f"conv_transpose: input {x.shape} does not fit weight {weight.shape}")
    if any(si > 1 for si in s) and (out := _subpixel_conv_transpose(x, weight, groups, s, d, p, op)) is not None:
      return out if bias is None else out + bias.reshape((1, -1) + (1,) * nd)
    if any(si > 1 for si in s) and (out := _phased_conv_transpose(x, weight, groups, s, d, p, op)) is not None:
      return out if bias is None else out + bias.reshape((1, -1) + (1,) * nd)
    if any(si > 1 for si in s):   # stride-1 zeros between neighbours: (n,) -> (n, stride) -> (n*stride,) -> cut
      n, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
      x = x.reshape(n, c, *[v for size in spatial for v in (size, 1)])
      x = x.pad(((0, 0), (0, 0), *[pair for si in s for pair in ((0, 0), (0, si - 1))]))
      x = x.reshape(n, c, *[size * si for size, si in zip(spatial, s)])
      x = x.shrink(((0, n), (0, c), *[(0, (size - 1) * si + 1) for size, si in zip(spatial, s)]))
    w = weight.reshape(groups, cin // groups, cout_g, *kernel).transpose(1, 2)
    w = w.reshape(groups * cout_g, cin // groups, *kernel).flip(*range(2, 2 + nd))
    edge = [di * (k - 1) - pi for di, k, pi in zip(d, kernel, p)]
    x = x.pad(((0, 0), (0, 0), *[(e, e + o) for e, o in zip(edge, op)]))   # negative amounts cut
    return x.conv2d(w, bias, groups=groups, dilation=dilation)
  def nll_loss(self, y, weight=None, ignore_index: int | None = None, reduction: str = "mean"):
    """Negative log likelihood of these log-probabilities at class indices `y` (nn.losses.nll_loss)."""
    from tinyplug.tensor_ops.losses import nll_loss
    return nll_loss(self, y, weight, ignore_index, reduction)
  def binary_crossentropy(self, y, reduction: str = "mean"):
    return _reduce_loss(-(y * self.log() + (1 - y) * (1 - self).log()), reduction)
  def binary_crossentropy_logits(self, y, reduction: str = "mean", pos_weight=None):
    """BCE of sigmoid(self) against y, computed from the logits stably; pos_weight scales the positive term (torch)."""
    softplus_neg = (1 + self.abs().neg().exp()).log() + (-self).maximum(0)     # log(1 + e^-x), stable
    if pos_weight is None: return _reduce_loss((1 - y) * self + softplus_neg, reduction)
    return _reduce_loss((1 - y) * self + (1 + (pos_weight - 1) * y) * softplus_neg, reduction)
  def sparse_categorical_crossentropy(self, y, ignore_index: int = -1, label_smoothing: float = 0.0,
                                      reduction: str = "mean"):
    # checked on every call: a graph template's later calls do not run the method's body
    check_index_range(y, self.shape[-1], "sparse_categorical_crossentropy: class label", allow_negative=False,
                      ignored=ignore_index)
    return self._sparse_categorical_crossentropy(y, ignore_index, label_smoothing, reduction)
  @graph_template   # every classifier's loss: ~40 Tensor ops a call otherwise
  def _sparse_categorical_crossentropy(self, y, ignore_index: int, label_smoothing: float, reduction: str):
    log_probs = self.log_softmax()
    mask = y.ne(ignore_index)
    # an ignored label may lie outside the classes (-1, torch's -100): it picks class 0, masked out below
    picked = log_probs.gather(-1, mask.where(y, 0).unsqueeze(-1).cast(dtypes.int32)).squeeze(-1)
    smooth = log_probs.mean(-1)
    loss = -((1 - label_smoothing) * picked + label_smoothing * smooth) * mask
    if reduction == "mean": return loss.sum() / mask.sum()
    return _reduce_loss(loss, reduction)
  def cross_entropy(self, y, reduction: str = "mean", label_smoothing: float = 0.0, ignore_index: int = -100):
    """Cross entropy of logits against class indices (int y) or probabilities (float y of the same shape). The classes
    are dim 1 (dim 0 of a 1-d input), as torch's; class index `ignore_index` adds nothing and is not counted."""
    axis = 1 if self.ndim >= 2 else 0
    if dtypes.is_int(y.dtype):
      x = self.unsqueeze(0) if self.ndim == 1 else self
      if x.ndim > 2: x = x.permute(0, *range(2, x.ndim), 1)   # the class dim last
      loss = x.sparse_categorical_crossentropy(y if self.ndim > 1 else y.reshape(1), ignore_index=ignore_index,
                                               label_smoothing=label_smoothing, reduction=reduction)
      return loss.reshape(()) if self.ndim == 1 and reduction == "none" else loss
    if y.shape != self.shape: raise ShapeError(f"cross_entropy: probabilities {y.shape} do not match logits {self.shape}")
    y = y * (1 - label_smoothing) + label_smoothing / self.shape[axis]
    return _reduce_loss(-(self.log_softmax(axis) * y).sum(axis), reduction)

def _wants_winograd(x, weight, groups, stride, dilation, padding, dtype) -> bool:
  """Whether this conv2d call is Winograd's (WINO not 0, float32/float64 operands of one dtype, and a convolution
  winograd.use_winograd takes; half precision would round the transforms too coarsely)."""
  if not WINO.value or weight.shape[2:] != (3, 3): return False
  nd = weight.ndim - 2
  if nd != 2 or x.ndim != 4 or not all(isinstance(v, int) for v in x.shape + weight.shape): return False
  if x.dtype not in (dtypes.float32, dtypes.float64) or x.dtype != weight.dtype or x.shape[1] != weight.shape[1]:
    return False
  pads = _spatial_padding(padding, nd)
  if any(b < 0 or a < 0 for b, a in pads): return False
  padded = tuple(i + b + a for i, (b, a) in zip(x.shape[2:], pads))
  return use_winograd(x.shape[:2] + padded, weight.shape, groups, make_tuple(stride, nd), make_tuple(dilation, nd),
                      dtype, x.device)

def _conv(self, weight, bias, groups: int, stride, dilation, padding, dtype, channels_last: bool | None = None,
          wino: bool = False):
  """Tensor.conv2d's graph; `channels_last`: whether the convolution reads a channel-innermost copy of the weight
  (None: decided here; False: the weight is one already, a view of `_channels_last`'s copy); `wino`: the product
  and the input gradient as Winograd F(2x2,3x3) (a stride-1 3x3 convolution, `_wants_winograd`)."""
  cin_total, (cout, cin) = self.shape[1], weight.shape[:2]
  nd = weight.ndim - 2
  if self.ndim != nd + 2:
    raise ShapeError(f"conv: input shape {self.shape} does not match weight shape {weight.shape}")
  if groups * cin != cin_total or cout % groups:
    raise ShapeError(f"conv: input channels {cin_total} and weight {weight.shape} do not fit groups={groups}")
  from tinyplug.gradient import custom_gradient
  pads = _spatial_padding(padding, nd)
  strides, dilations = make_tuple(stride, nd), make_tuple(dilation, nd)
  x = self.pad(((0, 0), (0, 0), *pads))
  # every padded input element is read by prod(kernel) windows: padding it once beats a bounds check per read, except
  # where Winograd's window copy and the channels-last weight gradient's copy are its only readers (each pads as it
  # copies: a kernel less per step)
  if any(b or a for b, a in pads) and not (wino and _wants_channels_last_wgrad(cin, groups, strides)):
    x = x.contiguous()
  # a strided or dilated window's row is read every s-th element, and a short row is no whole number of vectors:
  # their math vectorizes along the output channels instead, which wants them contiguous in the weight (a copy of
  # weight size; the gradient is still the weight's)
  row = x.shape[-1] - dilations[-1] * (weight.shape[-1] - 1)
  if channels_last is None:
    channels_last = cout // groups > 1 and (any(v > 1 for v in strides + dilations) or
                                            _short_row(row, cout // groups, cin * math.prod(weight.shape[2:])))
  if wino: out = winograd_conv3x3(x, weight)
  else: out = x._conv_valid(_channels_last(weight) if channels_last else weight, groups, strides, dilations, dtype)
  out = out.cast(least_upper_dtype(self.dtype, weight.dtype) if dtype is None else to_dtype(dtype))
  if bias is not None: out = out + bias.reshape((1, -1) + (1,) * nd)
  # the bias is an input too, so that its gradient reads the one materialized output gradient
  inputs = (x, weight) if bias is None else (x, weight, bias)
  # padded within the kernel's reach, the input gradient is computed for the unpadded input alone (`self`, an input
  # too): the padding's rows are never summed (conv 64->64 28x28 p1: 30x30 outputs of which 28x28 were kept)
  unpadded = any(b or a for b, a in pads) and \
    all(0 <= b <= d * (k - 1) and 0 <= a <= d * (k - 1) for (b, a), k, d in zip(pads, weight.shape[2:], dilations))
  if unpadded: inputs = (x, self, *inputs[1:])
  return custom_gradient(out, inputs, _conv_backward, groups=groups, stride=strides, dilation=dilations,
                         pads=tuple(pads) if unpadded else None, wino=wino)

def _conv_backward(g, out, x, *rest, groups: int, stride: tuple[int, ...], dilation: tuple[int, ...],
                   pads: tuple[tuple[int, int], ...] | None = None, wino: bool = False):
  """Gradients of the convolution out = conv(x, w) (+ bias) of the padded input x: (d x, d w[, d bias]), each again a
  convolution; with `pads`, the inputs are (x, the unpadded input, w[, bias]) and the gradients (None, d unpadded, d w
  [, d bias])."""
  src, (w, *bias) = (rest[0], rest[1:]) if pads is not None else (None, rest)
  nd = w.ndim - 2
  g = g.contiguous()  # read many times by both convolutions below: compute whatever produced it once
  at = src if src is not None else x
  gx = _conv_input_grad(g, w, tuple(x.shape[2:]), groups, tuple(stride), tuple(dilation), pads, wino)
  gw = _conv_weight_grad(g, x, tuple(w.shape[2:]), groups, tuple(stride), tuple(dilation))
  gb = tuple(g.sum((0, *range(2, 2 + nd))).cast(b.dtype) for b in bias)
  return (*((None,) if src is not None else ()), gx.cast(at.dtype), gw.cast(w.dtype), *gb)

# both gradients are graph templates: a strided convolution's input gradient is ~100 Tensor ops per call otherwise
# (conv 64->128 28x28 s2 b8: ~2 ms of Python for a ~9 ms backward)
@graph_template
def _conv_input_grad(g, w, spatial: tuple[int, ...], groups: int, stride: tuple[int, ...], dilation: tuple[int, ...],
                     pads: tuple[tuple[int, int], ...] | None = None, wino: bool = False):
  """d x: the transposed convolution of g with the flipped, transposed weight, over the padded input of size
  `spatial`, or with `pads` over its unpadded part only (each pad within the kernel's reach); `wino`: as Winograd's
  (a stride-1 3x3 convolution's is one too)."""
  nd, kernel, (cout, cin) = w.ndim - 2, w.shape[2:], w.shape[:2]
  pads = pads or ((0, 0),) * nd
  wt = w.reshape(groups, cout // groups, cin, *kernel).transpose(1, 2).reshape(groups * cin, cout // groups, *kernel)
  if all(s == 1 for s in stride):
    edge = [(d * (k - 1) - b, d * (k - 1) - a) for k, d, (b, a) in zip(kernel, dilation, pads)]
    if wino and groups == 1:
      # from the forward's transform of w (the flipped transpose's is a reordering of its planes)
      return winograd_conv3x3(g.pad(((0, 0), (0, 0), *edge)), w, flipped_transpose=True)
    return g._conv2d(wt.flip(tuple(range(2, 2 + nd))), None, groups, 1, dilation,
                     [v for e in reversed(edge) for v in e], None, wino=wino)
  window = [(b, n - a) for n, (b, a) in zip(spatial, pads)]
  if all((hi - lo) % s == 0 for (lo, hi), s in zip(window, stride)):
    return _strided_input_grad(g, wt, spatial, groups, stride, dilation, window)
  gx = _strided_input_grad(g, wt, spatial, groups, stride, dilation)
  return gx.shrink((None, None, *window)) if any(b or a for b, a in pads) else gx

@graph_template
def _conv_weight_grad(g, x, kernel: tuple[int, ...], groups: int, stride: tuple[int, ...], dilation: tuple[int, ...]):
  """d w, in the form `_wants_channels_last_wgrad` picks."""
  if _wants_channels_last_wgrad(x.shape[1] // groups, groups, stride):
    return _weight_grad_channels_last(g, x, kernel, stride, dilation)
  return _weight_grad_batched(g, x, kernel, groups, stride, dilation)

def _wants_channels_last_wgrad(cin: int, groups: int, stride: Sequence[int]) -> bool:
  """Whether the weight gradient is the channels-last matmul: one group with enough input channels to fill a vector
  (a 1-channel first layer or a depthwise convolution keeps the convolution over the batch)."""
  return groups == 1 and cin >= 16 and all(s == 1 for s in stride)

def _weight_grad_batched(g, x, kernel: Sequence[int], groups: int, stride: Sequence[int], dilation: Sequence[int]):
  """d w as a convolution over the batch. Channels become the batch and the batch the channels; g is the kernel, and
  stride and dilation trade places. The input is cut to the rows the kernel's k taps reach, so that the output is k
  wide (uncut, a stride-2 3x3 convolution's came out 4x4: 16/9 of the work, then cut)."""
  nd, (bs, cin_total), spatial = len(kernel), x.shape[:2], x.shape[2:]
  cin = cin_total // groups
  reach = [(k - 1) * d + s * (o - 1) + 1 for k, d, s, o in zip(kernel, dilation, stride, g.shape[2:])]
  xt = x.reshape(bs, groups, cin, *spatial).permute(2, 1, 0, *range(3, 3 + nd)).reshape(cin, groups * bs, *spatial)
  if any(r < i for r, i in zip(reach, spatial)): xt = xt.shrink((None, None, *[(0, r) for r in reach]))
  gt = g.transpose(0, 1)                                                    # (cout, bs, o..)
  return xt.conv2d(gt, groups=groups, stride=dilation, dilation=stride).transpose(0, 1)   # (cout, cin, k..)

def _weight_grad_channels_last(g, x, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]):
  """d w (one group) as a matmul per tap over (batch, out..):
  d w[co, ci, t..] = sum g[b, co, o..] * x[b, ci, o*s + t*d]. Read from a channels-last copy of x, every tap's x
  row is contiguous along ci, so the reduction is an outer product of g's scalars and x's ci vectors (as a
  convolution over the batch, the kernel (cout, cin, k..) summed over (b, o..) had no contiguous output axis to
  vectorize: conv 64->64 28x28 b8, one thread, 10.0 against ~5 ms). The output is (k.., cout, cin), ci innermost,
  then viewed as (cout, cin, k..); a large input sums per image first (`_per_image_wgrad`)."""
  nd, (bs, cin), spatial = len(kernel), x.shape[:2], x.shape[2:]
  cout, outs = g.shape[1], g.shape[2:]
  xc = channels_last_copy(x)                                                # (b, ci, i..) view
  win = xc._pool(kernel, stride, dilation)                                  # (b, ci, o.., k..)
  if _per_image_wgrad(math.prod(x.shape), bs, cout * cin * math.prod(kernel)):
    # product axes (b, k.., co, ci, o..): one partial sum per image, whose input stays in the L2 over the passes of
    # its tile, then the images' sum
    xw = win.permute(0, *range(2 + nd, 2 + 2 * nd), 1, *range(2, 2 + nd)).reshape(bs, *kernel, 1, cin, *outs)
    gg = g.reshape((bs,) + (1,) * nd + (cout, 1) + tuple(outs))
    gw = (xw * gg).sum(tuple(range(nd + 3, 2 * nd + 3))).contiguous().sum(0)   # (k.., co, ci)
  else:
    # product axes (co, k.., ci, b, o..), summed over the last 1 + nd: the output channels outermost, the loop that
    # threads share out (the taps were: 3 shares for 2 threads, one core idle a third of the kernel)
    xw = win.permute(*range(2 + nd, 2 + 2 * nd), 1, 0, *range(2, 2 + nd)).reshape(1, *kernel, cin, bs, *outs)
    gg = g.permute(1, 0, *range(2, 2 + nd)).reshape((cout,) + (1,) * nd + (1, bs) + tuple(outs))
    gw = (xw * gg).sum(tuple(range(nd + 2, 2 * nd + 3)))                    # (co, k.., ci)
    return gw.contiguous().permute(0, nd + 1, *range(1, nd + 1))
  return gw.contiguous().permute(nd, nd + 1, *range(nd))

# inputs of at least this many elements (4 MB of floats: several times a core's L2) get the weight gradient as one
# partial sum per image (conv 64->64 56x56 b8, one thread: 19.5 -> 16.9 + 0.1 ms; 28x28 and smaller: even)
PER_IMAGE_ELEMENTS = 1 << 20

def _per_image_wgrad(x_elements: int, bs: int, w_elements: int) -> bool:
  """Whether the channels-last weight gradient sums per image first: a large input, re-read from beyond the L2 on
  every pass of the tile over it, where the partials (bs weights) are no larger than the input."""
  return bs > 1 and x_elements >= PER_IMAGE_ELEMENTS and bs * w_elements <= x_elements

# causal attention's query blocks: sequences from _CAUSAL_SPLIT_FROM on are cut into blocks of at most
# _CAUSAL_BLOCK rows (two halves below 2 * _CAUSAL_BLOCK), multiples of 16; measured on Zen 3 (AVX2), one thread:
# 64-row blocks win at 128, 128-row ones at 512 and 1024 (more kernels cost more than they save)
_CAUSAL_SPLIT_FROM, _CAUSAL_BLOCK = 128, 128

def _causal_query_blocks(t: int) -> list[tuple[int, int]]:
  """(start, end) of each block of query rows, or one block where splitting would not pay."""
  if t < _CAUSAL_SPLIT_FROM: return [(0, t)]
  size = min(_CAUSAL_BLOCK, -(-t // 32) * 16)
  return [(a, min(a + size, t)) for a in range(0, t, size)]

def _disjoint_windows(kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> bool:
  """Windows that do not overlap (stride >= kernel, no dilation): a reshape of the input, whose gradient is elementwise."""
  return all(d == 1 and s >= k for k, s, d in zip(kernel, strides, dilations))

def _placed(t, shift: Sequence[int], phase: Sequence[int], stride: Sequence[int], qs: Sequence[int]):
  """t (..., o..) on a grid (..., q, s ..) of phases: t[o] at row o + shift, phase slot `phase`; zeros elsewhere."""
  nd = len(shift)
  lead, outs = t.shape[:-nd], t.shape[-nd:]
  x = t.pad(tuple([(0, 0)] * len(lead) + [(c, max(0, q - c - o)) for c, q, o in zip(shift, qs, outs)]))
  if any(q < c + o for c, q, o in zip(shift, qs, outs)): x = x.shrink(tuple([None] * len(lead) + [(0, q) for q in qs]))
  x = x.reshape(lead + tuple(v for q in qs for v in (q, 1)))
  return x.pad(tuple([(0, 0)] * len(lead) + [p for r, si in zip(phase, stride) for p in ((0, 0), (r, si - 1 - r))]))

def _phase_grid(x, stride: Sequence[int]):
  """x (..., n..) padded to whole strides and viewed as (..., q, s ..): element q*s + r at (q, r)."""
  nd = len(stride)
  lead, size = x.shape[:-nd], x.shape[-nd:]
  x = x.pad(tuple([(0, 0)] * len(lead) + [(0, -(-n // si) * si - n) for n, si in zip(size, stride)]))
  return x.reshape(lead + tuple(v for n, si in zip(size, stride) for v in (-(-n // si), si)))

def _taps_gathered(share, size: Sequence[int], kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int],
                   grid=None, out=None):
  """The gradient of overlapping windows on the input grid (..., size..) they were cut from, share (..., o..) being
  what each element of window o receives (where `grid` equals `out`, the window's max, when they are given). Input
  row h = q*s + r is read by tap t of window q - (t*d)//s when t*d % s == r: on the grid of (q, r) every tap's share
  is a shifted copy of `share` in one phase slot, so the sum is one elementwise kernel whose phase lanes keep only their
  own taps (differentiated through the window view instead, it folds a repeated-row view back: a 4x4 reduction of
  masked index math per input element for k3 s2)."""
  nd = len(kernel)
  lead = share.shape[:-nd]
  qs = [-(-n // si) for n, si in zip(size, stride)]
  total = None
  for taps in itertools.product(*(range(kk) for kk in kernel)):
    reach = [t * d for t, d in zip(taps, dilation)]
    shift, phase = [r // si for r, si in zip(reach, stride)], [r % si for r, si in zip(reach, stride)]
    term = _placed(share, shift, phase, stride, qs)
    if grid is not None: term = grid.eq(_placed(out, shift, phase, stride, qs)).where(term, 0.0)
    total = term if total is None else total + term
  total = total.reshape(lead + tuple(q * si for q, si in zip(qs, stride)))
  return total.shrink(tuple([None] * len(lead) + [(0, n) for n in size])) if any(q * si != n for q, si, n in zip(qs, stride, size)) else total

def _unpadded(grad, x, pads: Sequence[tuple[int, int]]):
  nd = len(pads)
  return grad.shrink((None,) * (x.ndim - nd) + tuple((b, b + n) for (b, _), n in zip(pads, x.shape[-nd:]))).cast(x.dtype)

def _max_pool_backward(g, out, x, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                       pads: tuple[tuple[int, int], ...]):
  """d x of overlapping max-pool windows: each window's gradient shared by its maximal elements, as the max
  reduction's own rule shares it."""
  nd = len(kernel)
  padded = x.pad(pads, value=dtypes.min(x.dtype))
  hits = padded._pool(kernel, stride, dilation).eq(out.reshape(out.shape + (1,) * nd)).cast(g.dtype).sum(tuple(range(-nd, 0)))
  share = (hits._const_like(1.0) / hits) * g
  total = _taps_gathered(share, padded.shape[-nd:], kernel, stride, dilation, _phase_grid(padded, stride), out)
  return (_unpadded(total, x, pads[-nd:]),)

def _avg_pool_backward(g, out, x, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...],
                       pads: tuple[tuple[int, int], ...], extra: tuple[tuple[int, int], ...], count_include_pad: bool):
  """d x of overlapping average-pool windows: each window's gradient over its divisor, gathered per input element."""
  nd = len(kernel)
  if count_include_pad and not any(e for _, e in extra): share = g * (1.0 / math.prod(kernel))
  else: share = g / _avg_divisor(x, kernel, stride, dilation, pads, extra, count_include_pad)
  size = [n + b + a + e for n, (b, a), (_, e) in zip(x.shape[-nd:], pads[-nd:], extra[-nd:])]
  return (_unpadded(_taps_gathered(share, size, kernel, stride, dilation), x, pads[-nd:]),)

def _avg_divisor(x, kernel, stride, dilation, pads, extra, count_include_pad: bool):
  """How many elements each average-pool window divides by: its padding counted or not, never the ceil_mode part."""
  ones = x._const_like(1.0, dtypes.default_float)
  counted = ones.pad(tuple(pads), value=1.0 if count_include_pad else 0.0).pad(tuple(extra))
  return counted._pool(kernel, stride, dilation).sum(tuple(range(-len(kernel), 0)))

def _channels_last(w):
  """The same weight (cout, cin, k..) read from a copy with the output channel innermost. A small window's copy is a
  2-D transpose (cout, rest) -> (rest, cout): as a (cin, k.., cout) permute LLVM fully unrolled its short loops
  (E_32_3_3_64: ~300 ms to compile, 26 ms without the unroll). A large one (a weight gradient's output-gradient
  "weight", 12x12) is that permute: the heuristic tiles it as a transposing copy (as (cin*k, cout) the transposed
  view's index had a division, and it ran 0.56 against 0.36 ms)."""
  cout, rest = w.shape[0], w.shape[1:]
  # a gradient read as a weight (its window a whole output) in blocks of channels where the machine takes them; a
  # 4x4 kernel's plain (the phase tiles read its channels as vectors)
  if math.prod(rest[1:]) > 16 and (blocked := output_channel_blocks(w)) is not None: return blocked
  if math.prod(rest[1:]) >= 16: return w.permute(*range(1, w.ndim), 0).contiguous().permute(w.ndim - 1, *range(w.ndim - 1))
  return w.reshape(cout, -1).transpose(0, 1).contiguous().reshape(*rest, cout).permute(w.ndim - 1, *range(w.ndim - 1))

# a short output row: narrower than two AVX-512 vectors, and positions the channel tile takes (4 to 8 of them:
# heuristic `_channel_vector_tile`)
SHORT_ROW, SHORT_ROW_POSITIONS = 16, range(4, 9)

def _short_row(row: int, cout: int, products: int) -> bool:
  """Whether an unstrided convolution's output row runs faster with its tile turned around, a few positions by a
  vector of output channels, each position a broadcast, than as whole rows whose last vector is partly filled (28 =
  16 + 8 + 4 lanes; 7 or 14 a lane mask over most of a vector): a row under 32 wide, not a multiple of 8 (24 is 8 x 8
  tiles: 3.9 against 4.4 ms turned around; 8 level), that 4-8 positions divide, enough channels for a vector and a
  long reduction. Conv 3x3 p1 b8, one Zen 4 thread, forward (input gradient the same), against a copy of the weight:
  64->64 28x28 4.76 -> 4.35 ms, 20x20 2.56 -> 2.27, 30x30 8.47 -> 5.12; 64->64 7x7 0.76 -> 0.25 ms, 14x14 1.72 ->
  1.00, 256->256 14x14 28.5 -> 16.7, 512->512 7x7 49.5 -> 21.8 (37 -> 85 GFLOP/s)."""
  return row < 2 * SHORT_ROW and row % 8 != 0 and any(row % d == 0 for d in SHORT_ROW_POSITIONS) and \
    cout >= SHORT_ROW and products >= 64

def _phase_taps(n: int, k: int, s: int, d: int, p: int) -> tuple[slice, int, int] | None:
  """One dim of a strided convolution's input gradient, for the input positions j = s*q + p: the kernel taps that
  reach them (a slice of the kernel, every s/gcd(s, d)-th tap), and the left and right pads of the output gradient
  (o long) that make the phase a plain convolution with dilation d/gcd(s, d) over q < ceil(n/s). None: no tap."""
  taps = [t for t in range(k) if (t * d - p) % s == 0]
  if not taps: return None
  o = (n - d * (k - 1) - 1) // s + 1
  first, last = (taps[0] * d - p) // s, (taps[-1] * d - p) // s
  return slice(taps[0], taps[-1] + 1, s // math.gcd(s, d)), last, -(-n // s) - first - o

def _strided_input_grad(g, wt, spatial, groups: int, stride, dilation, window=None):
  """The input gradient of a strided convolution as one stride-1 convolution per phase (input position modulo the
  stride), each with the taps that reach it, interleaved: prod(stride) times less work than convolving g spread
  by the stride with zeros (a stride-2 3x3: 9 taps per position instead of 36). `window`: the (lo, hi) of each dim
  wanted, each hi - lo a multiple of the stride (a transposed convolution's padding cut): every phase then
  computes only the rows it contributes, all the same count (28 of 29 for conv_transpose2d k4 s2 p1 on 28x28)."""
  nd = len(spatial)
  bs, chans = g.shape[0], wt.shape[0]
  window = window or [(0, -(-n // s) * s) for n, s in zip(spatial, stride)]
  qs = [(hi - lo) // s for (lo, hi), s in zip(window, stride)]
  plan = {phase: [_phase_taps(n, k, s, d, p) for n, k, s, d, p in zip(spatial, wt.shape[2:], stride, dilation, phase)]
          for phase in itertools.product(*[range(s) for s in stride])}
  # g padded once for every phase (each reads a window of it): padding inside each phase's convolution would put a
  # bounds check on every read
  most = [(max(t[j][1] for t in plan.values() if None not in t), max(max(t[j][2] for t in plan.values() if None not in t), 0))
          for j in range(nd)] if any(None not in t for t in plan.values()) else []
  # the phases' rows are short (13 for a 26-wide input): their math vectorizes along the channels instead, which wants
  # those contiguous in the weight (one copy for every phase)
  wt = _channels_last(wt)
  # ... and stored channel-innermost where the tile's channel vectors are whole (heuristic `_channels_inner_tile`):
  # each tile's stores are then vectors, not a scalar per channel, and the interleave transposes them back
  last = _phase_channels_last(chans, qs[-1], groups)
  if most and last and nd > 1 and padded_copies(g.device) and not any(qs[-1] % d == 0 for d in PAIR_ROW_POSITIONS):
    # a spare row below, where the heuristic pads a phase row by one position (`_padded_row_positions`): the padded
    # position's reads then stay inside the copy, ungated
    most[0] = (most[0][0], most[0][1] + 1)
  gpad = g.pad(((0, 0), (0, 0), *most)).contiguous() if most else g
  phases = []
  for out_phase in itertools.product(*[range(s) for s in stride]):
    # output row lo + s*q + r is input phase (lo + r) % s, that phase's row (lo + r) // s + q
    dims = plan[tuple((lo + r) % s for (lo, _), r, s in zip(window, out_phase, stride))]
    q0 = [(lo + r) // s for (lo, _), r, s in zip(window, out_phase, stride)]
    if any(t is None for t in dims):
      phases.append(g.zeros_like().shrink(((0, bs), (0, 1), *[(0, 1)] * nd)).expand(bs, chans, *qs)); continue
    gp = gpad.shrink((None, None, *[(m - left + q, m + n + right - (-(-sp // s) - q - c))
                                    for n, sp, s, (m, _), (_, left, right), q, c in zip(g.shape[2:], spatial, stride, most, dims, q0, qs)]))
    sub = wt[(slice(None), slice(None), *[t[0] for t in dims])].flip(tuple(range(2, 2 + nd)))
    phase = _conv(gp, sub, None, groups, 1, [d // math.gcd(s, d) for s, d in zip(stride, dilation)], 0, None,
                  channels_last=False)
    if last: phase = phase.permute(0, *range(2, 2 + nd), 1).contiguous().permute(0, nd + 1, *range(1, nd + 1))
    phases.append(phase)
  gx = phases[0].stack(*phases[1:], dim=2).reshape(bs, chans, *stride, *qs)
  gx = gx.permute(0, 1, *[v for j in range(nd) for v in (2 + nd + j, 2 + j)])
  gx = gx.reshape(bs, chans, *[q * s for q, s in zip(qs, stride)])
  return gx.shrink((None, None, *[(0, min(n, hi) - lo) for n, (lo, hi) in zip(spatial, window)]))

# the positions of AVX2's phase tile by two vectors of channels (heuristic `_positions_by_channels`): a phase row that
# none of them divides is padded by one position there, and the phases' copy of g gets a spare row for it
PAIR_ROW_POSITIONS = range(4, 7)

# the channels of a phase tile stored channel-innermost (AVX-512's cpu_tile width: two vectors)
PHASE_TILE_CHANNELS = 32
# the longest phase row stored so (longer rows that are not whole vectors are rare; untried)
PHASE_ROW_MAX = 64

def _phase_channels_last(chans: int, row: int, groups: int) -> bool:
  """Whether a strided convolution's input-gradient phases are stored channel-innermost: one group, whole tiles of
  channels, and a phase row (at most PHASE_ROW_MAX, not a multiple of 16) that 4-8 positions divide, the rows the
  channel tile takes. Conv 64->128 s2 p1 b8, one Zen 4 thread, the four phases in a step's flow: 28x28 2.37 -> 2.08 ms
  (the interleave 0.13 -> 0.20), 56x56 9.5 -> 8.6 ms (0.5 -> 1.0); rows of 36, 42 and 56, which channels-outermost
  took the generic tile: 72x72 37.6 -> 14.9 ms (0.9 -> 1.8), 84x84 71.5 -> 24.2 (2.6 -> 3.0), 112x112 56.0 -> 38.4
  (2.1 -> 4.2)."""
  return groups == 1 and chans % PHASE_TILE_CHANNELS == 0 and row <= PHASE_ROW_MAX and row % 16 != 0 and \
    any(row % d == 0 for d in range(4, 9))

def _phased_conv_transpose(x, weight, groups: int, s, d, p, op):
  """A strided transposed convolution as the input gradient of the convolution it transposes (one stride-1
  convolution per output phase, `_strided_input_grad`), cut by the padding: the stride's zeros are never multiplied
  (a stride-2 4x4 kernel: 4 taps per output instead of 16). None where the shapes do not line up (the caller then
  spreads the input)."""
  kernel, spatial = weight.shape[2:], x.shape[2:]
  if not all(isinstance(v, int) for v in (*kernel, *spatial)): return None
  full = [(n - 1) * si + di * (k - 1) + 1 + max(0, o - pi) for n, k, si, di, pi, o in zip(spatial, kernel, s, d, p, op)]
  if any((f - di * (k - 1) - 1) // si + 1 != n for f, n, k, si, di in zip(full, spatial, kernel, s, d)): return None
  cin, cout_g = weight.shape[:2]
  wt = weight.reshape(groups, cin // groups, cout_g, *kernel).transpose(1, 2).reshape(groups * cout_g, cin // groups, *kernel)
  window = [(pi, f - max(0, o - pi) + o - pi) for f, pi, o in zip(full, p, op)]
  if all((hi - lo) % si == 0 for (lo, hi), si in zip(window, s)): return _strided_input_grad(x, wt, full, groups, s, d, window)
  return _strided_input_grad(x, wt, full, groups, s, d).shrink((None, None, *window))

def _subpixel_taps(s: int, k: int, d: int, p: int, o: int) -> tuple[int, int, bool] | None:
  """One dim of a transposed convolution as a sub-pixel convolution: output s*q + r (r < s) sums T = k/s taps t of
  input q + c0 + a*r + t, kernel tap k-1-(s*t + (s-1-r if flip else r)). Affine in (q, r, t) only where every phase
  has T taps and the padding's shift by p % s does not wrap a phase round (p % s == 0, or s == 2: the shift reverses
  the two phases). (c0, a, flip) or None."""
  if d != 1 or o != 0 or k % s: return None
  m, taps = p % s, k // s
  if m == 0: return p // s - (taps - 1), 0, True
  if s == 2: return p // s - (taps - 1), 1, False
  return None

def _subpixel_conv_transpose(x, weight, groups: int, s, d, p, op):
  """A strided transposed convolution as one convolution whose output axes are (q, r) per dim, output s*q + r: each
  output phase r reads its T = k/s taps, and the output comes out in its final order (no interleave, no per-phase
  copies; a k4 s2 transposed convolution is one kernel of 4 taps per output). None where the taps are not affine in
  the phase (`_subpixel_taps`): the caller then convolves each phase on its own."""
  kernel, spatial = weight.shape[2:], x.shape[2:]
  if not all(isinstance(v, int) for v in (*kernel, *spatial)): return None
  plan = [_subpixel_taps(*a) for a in zip(s, kernel, d, p, op)]
  if any(t is None for t in plan): return None
  nd, (bs, cin), cout_g = len(kernel), x.shape[:2], weight.shape[1]
  taps = [k // si for k, si in zip(kernel, s)]
  qs = [((n - 1) * si - 2 * pi + k) // si for n, si, pi, k in zip(spatial, s, p, kernel)]
  if any(q <= 0 for q in qs): return None   # an empty output: the caller's general path says so
  # input row j of the padded copy is input row j + c0; the window q + a*r + t of it spans a*(s-1) + T rows
  spans = [a * (si - 1) + t for (_, a, _), si, t in zip(plan, s, taps)]
  xp = x.pad(((0, 0), (0, 0), *[(-c0, q + u - 1 - n + c0) for (c0, _, _), q, u, n in zip(plan, qs, spans, spatial)]))
  # every padded element is read by prod(k) windows: padded once, no bounds check per read
  xw = xp.contiguous()._pool(spans)._pool(taps)          # (bs, cin, q.., r.., t..); r is 1 long where a == 0 ...
  xw = xw.expand(bs, cin, *qs, *s, *taps)                # ... and its phases share one window
  xw = xw.reshape(bs, groups, 1, cin // groups, *qs, *s, *taps)
  xw = xw.permute(0, 1, 2, *[v for j in range(nd) for v in (4 + j, 4 + nd + j)], 3, *range(4 + 2 * nd, 4 + 3 * nd))
  # the kernel tap k-1-(s*t + j): flipped, split into (T, s), j turned round where it counts s-1-r
  w = weight.flip(tuple(range(2, 2 + nd)))
  w = w.reshape(groups, cin // groups, cout_g, *[v for t, si in zip(taps, s) for v in (t, si)])
  w = w.flip(tuple(4 + 2 * j for j, (_, _, f) in enumerate(plan) if f)) if any(f for _, _, f in plan) else w
  w = w.permute(0, 2, *[4 + 2 * j for j in range(nd)], 1, *[3 + 2 * j for j in range(nd)])   # (g, cout_g, r.., cin, t..)
  # the output channels innermost (the tile's vectors run along them): one copy of weight size
  w = w.permute(0, *range(2, w.ndim), 1).contiguous().permute(0, w.ndim - 1, *range(1, w.ndim - 1))
  w = w.reshape(1, groups, cout_g, *[v for si in s for v in (1, si)], cin // groups, *taps)
  out = (xw * w).sum(tuple(range(3 + 2 * nd, 4 + 3 * nd)))
  # realized in (q, r) order, the reshape to (q*r) is a view: merged before, the ranges read q and r back by / and %
  out = out.contiguous().reshape(bs, groups * cout_g, *[q * si for q, si in zip(qs, s)])
  out = out.cast(least_upper_dtype(x.dtype, weight.dtype))
  from tinyplug.gradient import custom_gradient
  return custom_gradient(out, (x, weight), _subpixel_backward, groups=groups, stride=tuple(s), padding=tuple(p))

def _subpixel_backward(g, out, x, w, *, groups: int, stride: tuple[int, ...], padding: tuple[int, ...]):
  """The transposed convolution's gradients from the convolution it transposes, conv(., w, stride, padding): the
  input's is that convolution of g, the weight's that convolution's weight gradient with x as its output gradient
  (differentiating the window views instead folds a (batch, cin, q.., r.., t..) window gradient back)."""
  nd = len(stride)
  pads = ((0, 0), (0, 0), *[(pi, pi) for pi in padding])
  if padded_copies(g.device) and any(padding):
    # one padded copy of g for both: the weight gradient's reads through the border were masked, a branch per read;
    # g realized first (the pad fused onto whatever made g recomputed it per element: 6 ms against 0.3 + 0.3)
    gp = g.contiguous().pad(pads).contiguous()
    gx = gp.conv2d(w, groups=groups, stride=stride)
  else:
    gp = g.pad(pads)
    gx = g.conv2d(w, groups=groups, stride=stride, padding=padding)
  gw = _conv_weight_grad(x.contiguous(), gp, tuple(w.shape[2:]), groups, tuple(stride), (1,) * nd)
  return gx.cast(x.dtype), gw.cast(w.dtype)

def _reduce_loss(loss, reduction: str):
  if reduction == "none": return loss
  if reduction == "sum": return loss.sum()
  if reduction == "mean": return loss.mean()
  raise ValueError(f"reduction must be 'none', 'sum' or 'mean', not {reduction!r}")
