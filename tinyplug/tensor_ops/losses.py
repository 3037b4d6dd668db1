"""The loss helpers that Tensor methods need (layer tensor_ops); `tinyplug.nn.losses` builds the rest on them."""
from __future__ import annotations
from tinyplug.uop.dtype import dtypes
from tinyplug.tensor_ops.indexing import check_index_range

_REDUCTIONS = ("mean", "sum", "none")

def _reduce(loss, reduction: str):
  if reduction == "mean": return loss.mean()
  if reduction == "sum": return loss.sum()
  if reduction == "none": return loss
  raise ValueError(f"reduction must be one of {_REDUCTIONS}, not {reduction!r}")

def _check_reduction(reduction: str) -> None:
  if reduction not in _REDUCTIONS: raise ValueError(f"reduction must be one of {_REDUCTIONS}, not {reduction!r}")

def _one_hot(labels, num_classes: int, dtype=dtypes.float32):
  return (labels.unsqueeze(-1) == type(labels).arange(num_classes, device=labels.device)).cast(dtype)

def _check_labels(x, Y, name: str, class_axis: int) -> None:
  if not dtypes.is_int(Y.dtype): raise TypeError(f"{name}: class labels must be integers, got {Y.dtype}")
  expected = x.shape[:class_axis] + x.shape[class_axis + 1:]
  if tuple(Y.shape) != tuple(expected):
    raise ValueError(f"{name}: labels of shape {Y.shape} do not fit predictions of shape {x.shape} "
                     f"(expected labels of shape {expected})")

def nll_loss(x, Y, weight=None, ignore_index: int | None = None,
             reduction: str = "mean"):
  """Negative log likelihood of log-probabilities `x` (N, C, ...) at class indices `Y` (N, ...)."""
  _check_reduction(reduction)
  axis = 1 if x.ndim >= 2 else 0
  _check_labels(x, Y, "nll_loss", axis)
  check_index_range(Y, x.shape[axis], "nll_loss: class label", allow_negative=False, ignored=ignore_index)
  target = _one_hot(Y, x.shape[axis], x.dtype)
  if axis == 1 and x.ndim > 2: target = target.permute(0, x.ndim - 1, *range(1, x.ndim - 1))
  w = target if weight is None else target * weight.reshape(-1, *([1] * (x.ndim - axis - 1)))
  if ignore_index is not None: w = w * (Y != ignore_index).cast(x.dtype).unsqueeze(axis)
  loss = -(x * w).sum(axis=axis)
  if reduction == "mean": return loss.sum() / w.sum()
  return _reduce(loss, reduction)
