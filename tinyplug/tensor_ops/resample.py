"""Resampling and reshaping helpers built from the primitive movement ops: interpolate (a stencil of a few taps per
output where the sizes have a short period, else a fixed weight matrix per spatial dim), unfold (sliding windows),
repeat_interleave, pad_to / shrink_to, normalize."""
from __future__ import annotations
import functools, math
import numpy as np
from tinyplug.uop.dtype import dtypes
from tinyplug.tensor_ops import graph
from tinyplug.tensor_ops.template import graph_template

_MODES = ("linear", "nearest", "nearest-exact")

def _interp_matrix(n_in: int, n_out: int, mode: str, align_corners: bool) -> np.ndarray:
  """(n_out, n_in) weights: output i is sum_j W[i, j] * input j, with torch's source coordinates."""
  w = np.zeros((n_out, n_in), dtype=np.float64)
  i = np.arange(n_out, dtype=np.float64)
  if mode == "linear":
    if align_corners: src = i * ((n_in - 1) / (n_out - 1)) if n_out > 1 else i * 0
    else: src = np.maximum((i + 0.5) * (n_in / n_out) - 0.5, 0)
    lo = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = src - lo
    np.add.at(w, (np.arange(n_out), lo), 1 - frac)
    np.add.at(w, (np.arange(n_out), hi), frac)
  else:
    src = np.floor((i + 0.5) * (n_in / n_out)) if mode == "nearest-exact" else np.floor(i * (n_in / n_out))
    w[np.arange(n_out), np.minimum(src.astype(np.int64), n_in - 1)] = 1
  return w

def _phase_stencil(w: np.ndarray, align_corners: bool) -> tuple[int, int, list[int], np.ndarray] | None:
  """The resize matrix `w` (n_out, n_in) as a stencil: output P*q + ph is sum_t weights[t, P*q + ph] * input[Q*q + t]
  (reads outside the input have weight 0), or None where the sizes give it no short period or more than 4 taps.
  (P, Q) is the ratio n_out : n_in in lowest terms (of n_out-1 : n_in-1 with align_corners). A 2x bilinear upsample
  is P=2, Q=1 with taps -1, 0, 1: 3 reads per output instead of n_in."""
  n_out, n_in = w.shape
  if n_out < 2 or n_in < 2: return None
  a, b = (n_out - 1, n_in - 1) if align_corners else (n_out, n_in)
  g = math.gcd(a, b)
  P, Q = a // g, b // g
  if P > 64: return None
  rows = -(-n_out // P)
  i, j = np.nonzero(np.abs(w) > 1e-12)
  taps = sorted(set((j - Q * (i // P)).tolist()))
  if not taps or len(taps) > 4: return None
  weights = np.zeros((len(taps), rows * P))
  for k, t in enumerate(taps):
    for out in range(n_out):
      src = Q * (out // P) + t
      if 0 <= src < n_in: weights[k, out] = w[out, src]
  return P, Q, taps, weights

def _weight_bits(max_weight: float) -> int:
  """Fraction bits of torch's (Pillow's) int16 fixed-point resampling weights: the most for which the largest weight,
  at one bit more, still rounds below 2^15 (at most 22)."""
  bits = 0
  while bits < 22 and int(0.5 + max_weight * (1 << (bits + 1))) < (1 << 15): bits += 1
  return bits

class ResampleMixin:
  __slots__ = ()
  @graph_template   # its weights are new tensors every call otherwise: new buffers, and the scheduler's walk (~1 ms)
  def interpolate(self, size, mode: str = "linear", align_corners: bool = False):
    """Resize the trailing len(size) dims to `size`: 'linear' (bi-/trilinear over several dims), 'nearest' or
    'nearest-exact', with torch's coordinate rules (align_corners for linear)."""
    if mode not in _MODES: raise ValueError(f"interpolate: mode must be one of {_MODES}, not {mode!r}")
    size = tuple(size)
    if len(size) > self.ndim: raise ValueError(f"interpolate: size {size} has more dims than the input {self.shape}")
    if mode == "linear" and self.dtype == dtypes.uint8: return self._interpolate_uint8(size, align_corners)
    x = self if dtypes.is_float(self.dtype) else self.cast(dtypes.float32)
    dims = [(d, n_out) for d, n_out in zip(range(self.ndim - len(size), self.ndim), size)
            if not (x.shape[d] == n_out and mode != "linear")]
    mats = {d: _interp_matrix(x.shape[d], n_out, mode, align_corners) for d, n_out in dims}
    # a short period gives a few taps per output (`_phase_stencil`); the rest multiply by the dense weight matrix
    stencils = {d: st for d, _ in dims if isinstance(x.shape[d], int) and
                (st := _phase_stencil(mats[d], align_corners)) is not None}
    if stencils: x = x._resize_stencils({d: (n_out, stencils[d]) for d, n_out in dims if d in stencils})
    for d, n_out in dims:
      if d in stencils: continue
      w = type(self)(mats[d].astype(np.float32), device=self.device, dtype=x.dtype).realize()
      x = x.transpose(d, -1).matmul(w.transpose()).transpose(d, -1)
    return x if x.dtype == self.dtype else x.round().cast(self.dtype) if dtypes.is_int(self.dtype) else x.cast(self.dtype)

  def _resize_stencils(self, plan: dict):
    """The dims of `plan` ({dim: (n_out, _phase_stencil)}) resized by one elementwise kernel after one copy: the input
    padded with zeros for every dim's taps (so no read in the stencil is gated; a tap past an edge has weight 0),
    then, from the last dim to the first, each tap a strided view (one element per row of P outputs) spread over
    the P phases and scaled by its weight per output. The (rows, P) axes are merged only at the end."""
    pads = []
    for i, n_in in enumerate(self.shape):
      if i not in plan: pads.append((0, 0)); continue
      n_out, (P, Q, taps, _) = plan[i]
      pads.append((max(0, -taps[0]), max(0, taps[-1] + Q * -(-n_out // P) - n_in)))
    x = self.pad(tuple(pads)).contiguous() if any(a or b for a, b in pads) else self
    for d in sorted(plan, reverse=True):   # from the last dim: its (rows, P) pair shifts no dim still to do
      n_out, (P, Q, taps, weights) = plan[d]
      (left, _), rows = pads[d], -(-n_out // P)
      pre, post = x.shape[:d], x.shape[d + 1:]
      wts = type(self)(weights.reshape(len(taps), rows, P, *[1] * len(post)).astype(np.float32), device=self.device,
                       dtype=self.dtype).realize() if np.any(weights != 1) else None
      out = None
      for k, t in enumerate(taps):
        v = x.shrink(tuple((left + t, left + t + Q * rows) if i == d else None for i in range(x.ndim)))
        v = v.reshape(*pre, rows, Q, *post)
        if Q > 1: v = v.shrink(tuple((0, 1) if i == d + 1 else None for i in range(v.ndim)))
        if np.all(weights[k] == 1): v = v.expand(*pre, rows, P, *post)
        else: v = v * wts.shrink(((k, k + 1),) + (None,) * (wts.ndim - 1)).reshape(wts.shape[1:])
        out = v if out is None else out + v
      x = out
    x = x.reshape(*[-(-plan[i][0] // plan[i][1][0]) * plan[i][1][0] if i in plan else n
                    for i, n in enumerate(self.shape)])
    if any(x.shape[i] != plan[i][0] for i in plan):
      x = x.shrink(tuple((0, plan[i][0]) if i in plan else None for i in range(self.ndim)))
    return x

  def _interpolate_uint8(self, size: tuple, align_corners: bool):
    """Linear resizing of uint8 images as torch does it: one dim at a time from the last, in integer arithmetic with
    fixed-point weights (as many fraction bits as int16 holds for the dim's largest weight), rounded to uint8 after
    each dim."""
    cls, x = type(self), self
    for d, n_out in reversed(list(zip(range(self.ndim - len(size), self.ndim), size))):
      w = _interp_matrix(x.shape[d], n_out, "linear", align_corners)
      bits = _weight_bits(float(w.max()))
      wi = cls(np.floor(w * (1 << bits) + 0.5).astype(np.int32), device=self.device, dtype=dtypes.int32).realize()
      acc = x.cast(dtypes.int32).transpose(d, -1).matmul(wi.transpose()).transpose(d, -1)
      x = ((acc + (1 << (bits - 1))) >> bits).clip(0, 255).cast(dtypes.uint8)
    return x

  def unfold(self, dim: int, size: int, step: int):
    """Windows of `size` every `step` along `dim`, as a new last dim (torch.Tensor.unfold)."""
    ax = graph.normalize_axis(dim, self.ndim)
    if size < 0 or step <= 0: raise RuntimeError(f"unfold: size must be >= 0 and step > 0, got {size}, {step}")
    n = self.shape[ax]
    if size > n: raise RuntimeError(f"unfold: window {size} is larger than dim {dim} of size {n}")
    count = (n - size) // step + 1
    x = self.transpose(ax, -1)
    windows = [x.shrink(tuple((0, s) for s in x.shape[:-1]) + ((k * step, k * step + size),)).unsqueeze(-2)
               for k in range(count)]
    out = windows[0].cat(*windows[1:], dim=-2) if len(windows) > 1 else windows[0]
    return out.transpose(ax, -2)

  def repeat_interleave(self, repeats: int, dim: int | None = None):
    """Each element repeated `repeats` times along `dim` (over the flattened tensor when None)."""
    x = self.flatten() if dim is None else self
    ax = 0 if dim is None else graph.normalize_axis(dim, self.ndim)
    shape = x.shape
    x = x.unsqueeze(ax + 1).expand(shape[:ax + 1] + (repeats,) + shape[ax + 1:])
    return x.reshape(shape[:ax] + (shape[ax] * repeats,) + shape[ax + 1:])

  def pad_to(self, shape, *args, value=0):
    """Pad at the end of each dim up to `shape` (None keeps a dim)."""
    shape = tuple(shape) + args if isinstance(shape, (tuple, list)) else (shape,) + args   # f(None, 2) too
    if len(shape) != self.ndim: raise ValueError(f"pad_to: shape {shape} needs {self.ndim} dims")
    if any(s is not None and s < n for s, n in zip(shape, self.shape)):
      raise ValueError(f"pad_to: {shape} is smaller than {self.shape}")
    return self.pad(tuple((0, 0 if s is None else s - n) for s, n in zip(shape, self.shape)), value=value)

  def shrink_to(self, shape, *args):
    """Keep the first `shape` elements of each dim (None keeps a dim)."""
    shape = tuple(shape) + args if isinstance(shape, (tuple, list)) else (shape,) + args   # f(None, 2) too
    if len(shape) != self.ndim: raise ValueError(f"shrink_to: shape {shape} needs {self.ndim} dims")
    if any(s is not None and s > n for s, n in zip(shape, self.shape)):
      raise ValueError(f"shrink_to: {shape} is larger than {self.shape}")
    return self.shrink(tuple((0, n if s is None else s) for s, n in zip(shape, self.shape)))

  def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
    """self / max(||self||_p along dim, eps), as torch.nn.functional.normalize."""
    x = self._floats()
    if p == 0: norm = x.ne(0).cast(x.dtype).sum(dim, keepdim=True)
    elif math.isinf(p): norm = x.abs().max(dim, keepdim=True)
    else: norm = (x.abs() ** p).sum(dim, keepdim=True) ** (1 / p)
    return x / norm.maximum(eps)
