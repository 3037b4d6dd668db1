"""Layers: small callable objects that hold their parameters as Tensors (found by `nn.state.get_parameters`).

Names, arguments and initialisation follow tinygrad (and through it PyTorch): weights are Kaiming-uniform with
a=sqrt(5), biases uniform in +-1/sqrt(fan_in), normalisation layers start at weight=1 and bias=0.
"""
from __future__ import annotations
import math
from typing import Sequence
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops.indexing import rows_gradient, scatters_rows
from tinyplug.uop.dtype import dtypes
from tinyplug.nn import optim, state, losses  # noqa: F401  (tinygrad exposes nn.optim and nn.state)

# ---------------- initialisation ----------------

def _kaiming_uniform(*shape: int, a: float = math.sqrt(5)) -> Tensor:
  """Uniform in +-bound with bound = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)) (PyTorch's default)."""
  fan_in = math.prod(shape[1:])
  bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a * a)) / math.sqrt(fan_in)
  return Tensor.uniform(*shape, low=-bound, high=bound)

def _fan_in_uniform(size: int, fan_in: int) -> Tensor:
  bound = 1 / math.sqrt(fan_in)
  return Tensor.uniform(size, low=-bound, high=bound)

def _glorot_uniform(*shape: int) -> Tensor:
  bound = math.sqrt(6.0 / (shape[0] + math.prod(shape[1:])))
  return Tensor.uniform(*shape, low=-bound, high=bound)

def _pair(x: int | Sequence[int], n: int = 2) -> tuple[int, ...]:
  return tuple(x) if isinstance(x, (tuple, list)) else (x,) * n

def _channel_view(t: Tensor, ndim: int) -> Tensor:
  """A per-channel vector shaped to broadcast against (N, C, ...) of `ndim` dimensions."""
  return t.reshape(1, -1, *([1] * (ndim - 2)))

# ---------------- linear and convolution ----------------

class Linear:
  """y = x @ W.T + b, with W of shape (out_features, in_features)."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True):
    self.weight = _kaiming_uniform(out_features, in_features)
    self.bias = _fan_in_uniform(out_features, in_features) if bias else None
  def __call__(self, x: Tensor) -> Tensor:
    y = x.matmul(self.weight.transpose())
    return y if self.bias is None else y + self.bias

class Conv2d:
  """2-D convolution over (N, C, H, W); weight (out_channels, in_channels // groups, kh, kw).

  `padding` is an int, a pair, a 4-tuple (left, right, top, bottom) as in Tensor.conv2d, or 'same' / 'valid'."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], stride: int = 1,
               padding: int | Sequence[int] | str = 0, dilation: int = 1, groups: int = 1, bias: bool = True):
    self.kernel_size = _pair(kernel_size)
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"Conv2d: in_channels={in_channels} and out_channels={out_channels} must be divisible by "
                       f"groups={groups}")
    self.stride, self.dilation, self.groups = stride, dilation, groups
    self.padding = _resolve_padding(padding, self.kernel_size, dilation, stride)
    self.weight = _kaiming_uniform(out_channels, in_channels // groups, *self.kernel_size)
    fan_in = (in_channels // groups) * math.prod(self.kernel_size)
    self.bias = _fan_in_uniform(out_channels, fan_in) if bias else None
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                    padding=self.padding)

def _resolve_padding(padding, kernel_size: tuple[int, ...], dilation, stride) -> int | tuple[int, ...]:
  if not isinstance(padding, str): return padding
  if padding == "valid": return 0
  if padding != "same": raise ValueError(f"padding must be an int, a tuple, 'same' or 'valid', not {padding!r}")
  if stride != 1: raise ValueError("padding='same' needs stride=1")
  pads: list[int] = []
  for k, d in zip(reversed(kernel_size), reversed(_pair(dilation, len(kernel_size)))):
    total = d * (k - 1)
    pads += [total // 2, total - total // 2]   # (left, right) per spatial dim, last dim first
  return tuple(pads)

def Conv1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int | str = 0,
           dilation: int = 1, groups: int = 1, bias: bool = True) -> Conv2d:
  """A Conv2d whose kernel has one spatial dimension (input (N, C, L))."""
  return Conv2d(in_channels, out_channels, (kernel_size,), stride, padding, dilation, groups, bias)

class ConvTranspose2d(Conv2d):
  """Transposed 2-D convolution; weight (in_channels, out_channels // groups, kh, kw) as in PyTorch."""
  def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int], stride: int = 1,
               padding: int = 0, output_padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True):
    super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias)
    self.output_padding = output_padding
    self.weight = _kaiming_uniform(in_channels, out_channels // groups, *self.kernel_size)
    fan_in = (out_channels // groups) * math.prod(self.kernel_size)
    self.bias = _fan_in_uniform(out_channels, fan_in) if bias else None
  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
              padding=self.padding, output_padding=self.output_padding)

def ConvTranspose1d(in_channels: int, out_channels: int, kernel_size: int, stride: int = 1, padding: int = 0,
                    output_padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True) -> ConvTranspose2d:
  """A ConvTranspose2d whose kernel has one spatial dimension (input (N, C, L))."""
  return ConvTranspose2d(in_channels, out_channels, (kernel_size,), stride, padding, output_padding, dilation, groups, bias)

def conv_transpose(x: Tensor, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1,
                   padding=0, output_padding=0) -> Tensor:
  """Transposed convolution (Tensor.conv_transpose2d, any number of spatial dims)."""
  return x.conv_transpose2d(weight, bias, groups, stride, dilation, padding, output_padding)

# ---------------- normalisation ----------------

def _realize_lazy(*ts: Tensor) -> None:
  """Give still-lazy state tensors their buffers now, so that `assign` updates them in place."""
  from tinyplug.tensor_ops.graph import is_plain_buffer
  pending = [t for t in ts if not is_plain_buffer(t.uop)]
  if pending: pending[0].realize(*pending[1:])

def _normalize(x: Tensor, axis: tuple[int, ...], eps: float) -> Tensor:
  mean = x.mean(axis=axis, keepdim=True)
  centered = x - mean
  var = (centered * centered).mean(axis=axis, keepdim=True)
  return centered * (var + eps).rsqrt()

class BatchNorm:
  """Batch normalisation over every axis but 1 (channels).

  In training (`Tensor.training`) it normalises with the batch's statistics and, with `track_running_stats`, updates
  running_mean / running_var (unbiased) with `momentum`; in evaluation it uses the running statistics."""
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
               momentum: float = 0.1):
    self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
    self.weight: Tensor | None = Tensor.ones(sz) if affine else None
    self.bias: Tensor | None = Tensor.zeros(sz) if affine else None
    if track_running_stats:
      self.running_mean = Tensor.zeros(sz, requires_grad=False)
      self.running_var = Tensor.ones(sz, requires_grad=False)
      self.num_batches_tracked = Tensor.zeros(1, dtype=dtypes.int32, requires_grad=False)

  def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
    """The batch mean and (biased) variance per channel."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    mean = x.mean(axis=axes)
    centered = x - _channel_view(mean, x.ndim).detach()   # as in tinygrad: the mean's gradient goes through `mean`
    var = (centered * centered).mean(axis=axes)
    return mean, var

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2: raise ValueError(f"BatchNorm needs an input of at least 2 dimensions (N, C, ...), got {x.shape}")
    use_batch = Tensor.training or not self.track_running_stats
    if use_batch:
      mean, var = self.calc_stats(x)
      if Tensor.training and self.track_running_stats:
        _realize_lazy(self.running_mean, self.running_var, self.num_batches_tracked)
        n = x.numel() / x.shape[1]
        m = self.momentum
        self.running_mean.assign((1 - m) * self.running_mean + m * mean.detach())
        self.running_var.assign((1 - m) * self.running_var + m * (n / max(n - 1, 1)) * var.detach())
        self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    else: mean, var = self.running_mean, self.running_var
    y = (x - _channel_view(mean, x.ndim)) * _channel_view((var + self.eps).rsqrt(), x.ndim)
    if self.weight is not None: y = y * _channel_view(self.weight, x.ndim)
    if self.bias is not None: y = y + _channel_view(self.bias, x.ndim)
    return y

BatchNorm2d = BatchNorm1d = BatchNorm3d = BatchNorm

class LayerNorm:
  """Normalises over the trailing `normalized_shape` dimensions, then scales and shifts (elementwise_affine)."""
  def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True):
    self.normalized_shape = _pair(normalized_shape, 1)
    self.axis = tuple(-1 - i for i in range(len(self.normalized_shape)))
    self.eps, self.elementwise_affine = eps, elementwise_affine
    self.weight = Tensor.ones(*self.normalized_shape) if elementwise_affine else None
    self.bias = Tensor.zeros(*self.normalized_shape) if elementwise_affine else None
  def __call__(self, x: Tensor) -> Tensor:
    if tuple(x.shape[-len(self.normalized_shape):]) != self.normalized_shape:
      raise ValueError(f"LayerNorm{self.normalized_shape}: input shape {x.shape} does not end with it")
    y = _normalize(x, self.axis, self.eps)
    return y if not self.elementwise_affine else y * self.weight + self.bias

class LayerNorm2d(LayerNorm):
  """LayerNorm over the channels of (N, C, H, W)."""
  def __call__(self, x: Tensor) -> Tensor: return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

class GroupNorm:
  """Splits the channels into `num_groups` groups and normalises each group over its channels and positions."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
    if num_channels % num_groups:
      raise ValueError(f"GroupNorm: num_channels={num_channels} is not divisible by num_groups={num_groups}")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight = Tensor.ones(num_channels) if affine else None
    self.bias = Tensor.zeros(num_channels) if affine else None
  def __call__(self, x: Tensor) -> Tensor:
    y = _normalize(x.reshape(x.shape[0], self.num_groups, -1), (-1,), self.eps).reshape(x.shape)
    if self.weight is None: return y
    return y * _channel_view(self.weight, x.ndim) + _channel_view(self.bias, x.ndim)

class InstanceNorm:
  """Normalises each (sample, channel) over its positions (N, C, ...), then scales and shifts per channel (affine)."""
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = True):
    self.num_features, self.eps = num_features, eps
    self.weight = Tensor.ones(num_features) if affine else None
    self.bias = Tensor.zeros(num_features) if affine else None
  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 3 or x.shape[1] != self.num_features:
      raise ValueError(f"InstanceNorm({self.num_features}): input must be (N, {self.num_features}, ...), got {x.shape}")
    y = _normalize(x.reshape(x.shape[0], x.shape[1], -1), (-1,), self.eps).reshape(x.shape)
    if self.weight is None: return y
    return y * _channel_view(self.weight, x.ndim) + _channel_view(self.bias, x.ndim)

class RMSNorm:
  """x / sqrt(mean(x^2 over the last axis) + eps), times a learned weight."""
  def __init__(self, dim: int, eps: float = 1e-6, elementwise_affine: bool = True):
    self.eps = eps
    self.weight = Tensor.ones(dim) if elementwise_affine else None
  def _norm(self, x: Tensor) -> Tensor: return x * ((x * x).mean(axis=-1, keepdim=True) + self.eps).rsqrt()
  def __call__(self, x: Tensor) -> Tensor:
    y = self._norm(x.float()).cast(x.dtype)
    return y if self.weight is None else y * self.weight

# ---------------- lookups and regularisation ----------------

class Embedding:
  """A table of `vocab_size` vectors of `embed_size`; call with integer indices of any shape."""
  def __init__(self, vocab_size: int, embed_size: int):
    self.vocab_sz, self.embed_sz = vocab_size, embed_size
    self.weight = _glorot_uniform(vocab_size, embed_size)
  def __call__(self, idx: Tensor) -> Tensor:
    if not dtypes.is_int(idx.dtype): raise TypeError(f"Embedding needs integer indices, got {idx.dtype}")
    # a one-hot mask summed (not a matmul by it): the scheduler's rules turn that sum into one gated read per
    # element, so a lookup reads its rows instead of the whole table; an index outside [0, vocab) gives zeros
    hit = idx.reshape(idx.shape + (1, 1)) == Tensor.arange(self.vocab_sz, device=idx.device).reshape(self.vocab_sz, 1)
    picked = hit.where(self.weight, 0).sum(-2)
    # its gradient: a scatter-add of the rows where the renderer has one (an index outside [0, vocab) adds nothing)
    return rows_gradient(picked, self.weight, idx, wrap=False) if scatters_rows(self.weight, idx) else picked

class LSTMCell:
  """One step of an LSTM (PyTorch's gate order i, f, g, o): `h, c = cell(x, (h, c))`; no state means zeros.

  Weights and biases start uniform in +-1/sqrt(hidden_size), as in PyTorch."""
  def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
    bound = 1 / math.sqrt(hidden_size)
    self.hidden_size = hidden_size
    self.weight_ih = Tensor.uniform(4 * hidden_size, input_size, low=-bound, high=bound)
    self.weight_hh = Tensor.uniform(4 * hidden_size, hidden_size, low=-bound, high=bound)
    self.bias_ih = Tensor.uniform(4 * hidden_size, low=-bound, high=bound) if bias else None
    self.bias_hh = Tensor.uniform(4 * hidden_size, low=-bound, high=bound) if bias else None
  def __call__(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    if hc is None:
      zeros = Tensor.zeros(*x.shape[:-1], self.hidden_size, dtype=x.dtype, device=x.device)
      hc = (zeros, zeros)
    h, c = hc
    gates = x.matmul(self.weight_ih.transpose()) + h.matmul(self.weight_hh.transpose())
    if self.bias_ih is not None: gates = gates + self.bias_ih + self.bias_hh
    i, f, g, o = gates.chunk(4, dim=-1)
    new_c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    new_h = o.sigmoid() * new_c.tanh()
    return new_h.contiguous(), new_c.contiguous()

class Dropout:
  """Zeroes each element with probability p while `Tensor.training`, scaling the rest by 1/(1-p)."""
  def __init__(self, p: float = 0.5):
    if not 0 <= p <= 1: raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    self.p = p
  def __call__(self, x: Tensor) -> Tensor: return x.dropout(self.p)

__all__ = ["Linear", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "InstanceNorm", "LSTMCell", "BatchNorm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d",
           "LayerNorm", "LayerNorm2d", "GroupNorm", "RMSNorm", "Embedding", "Dropout", "optim", "state", "losses"]
