"""Loss functions, with tinygrad's names and PyTorch's numbers.

In tinygrad these are Tensor methods (`logits.sparse_categorical_crossentropy(Y)`); here they are plain functions of
(prediction, target, ...) built from elementary Tensor ops, so Tensor methods of the same names can delegate to them.
"""
from __future__ import annotations
from tinyplug.tensor import Tensor
from tinyplug.uop.dtype import dtypes
from tinyplug.tensor_ops.losses import _REDUCTIONS, _check_labels, _check_reduction, _one_hot, _reduce, nll_loss  # noqa: F401
from tinyplug.tensor_ops.indexing import check_index_range

def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
  shifted = x - x.max(axis=axis, keepdim=True).detach()
  return shifted - shifted.exp().sum(axis=axis, keepdim=True).log()

def logsigmoid(x: Tensor) -> Tensor:
  """log(sigmoid(x)), stable for large |x|: min(x, 0) - log(1 + exp(-|x|))."""
  return x.minimum(0) - (-x.abs()).exp().add(1).log()

def sparse_categorical_crossentropy(x: Tensor, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0,
                                    reduction: str = "mean") -> Tensor:
  """Cross-entropy of logits `x` (..., C) against integer labels `Y` (...); labels equal to ignore_index count 0."""
  _check_reduction(reduction)
  _check_labels(x, Y, "sparse_categorical_crossentropy", x.ndim - 1)
  check_index_range(Y, x.shape[-1], "sparse_categorical_crossentropy: class label", allow_negative=False,
                    ignored=ignore_index)
  logp = log_softmax(x, -1)
  keep = (Y != ignore_index).cast(x.dtype)
  nll = -(logp * _one_hot(Y, x.shape[-1], x.dtype)).sum(axis=-1)
  loss = (nll * (1 - label_smoothing) - logp.mean(axis=-1) * label_smoothing) * keep
  if reduction == "mean": return loss.sum() / keep.sum()
  return _reduce(loss, reduction)

def cross_entropy(x: Tensor, Y: Tensor, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
  """PyTorch's cross_entropy: logits (N, C, ...) and either class indices (N, ...) or class probabilities."""
  _check_reduction(reduction)
  axis = 1 if x.ndim >= 2 else 0
  if dtypes.is_int(Y.dtype):
    _check_labels(x, Y, "cross_entropy", axis)
    target = _one_hot(Y, x.shape[axis], x.dtype)
    if axis == 1 and x.ndim > 2: target = target.permute(0, x.ndim - 1, *range(1, x.ndim - 1))
  else:
    if Y.shape != x.shape: raise ValueError(f"cross_entropy: probabilities of shape {Y.shape} != logits {x.shape}")
    target = Y
  if label_smoothing: target = target * (1 - label_smoothing) + label_smoothing / x.shape[axis]
  return _reduce(-(log_softmax(x, axis) * target).sum(axis=axis), reduction)

def binary_crossentropy(x: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
  """BCE of probabilities `x` against targets `Y` (logs clamped at -100, as PyTorch does)."""
  _check_reduction(reduction)
  loss = -(Y * x.log().maximum(-100) + (1 - Y) * (1 - x).log().maximum(-100))
  return _reduce(loss, reduction)

def binary_crossentropy_logits(x: Tensor, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
  """BCE of logits `x` (sigmoid applied inside, stably) against targets `Y`."""
  _check_reduction(reduction)
  pw = 1 if pos_weight is None else pos_weight
  loss = -(pw * Y * logsigmoid(x) + (1 - Y) * logsigmoid(-x))
  return _reduce(loss, reduction)

def mse(x: Tensor, Y: Tensor, reduction: str = "mean") -> Tensor:
  """Mean squared error."""
  _check_reduction(reduction)
  if x.shape != Y.shape: raise ValueError(f"mse: shapes {x.shape} and {Y.shape} differ")
  diff = x - Y
  return _reduce(diff * diff, reduction)

__all__ = ["sparse_categorical_crossentropy", "cross_entropy", "nll_loss", "binary_crossentropy",
           "binary_crossentropy_logits", "mse", "log_softmax", "logsigmoid"]
