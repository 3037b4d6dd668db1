"""Indexing: `x[...]` (ints, slices with any step, None, Ellipsis, integer and bool tensors), `x[...] = v`,
gather and one_hot.

Basic indices become one shrink, one flip, a pad+reshape+shrink for steps and a final reshape. Tensor indices
compare against an arange (a one-hot mask) and sum the selected elements, so no data-dependent kernel is needed.
"""
from __future__ import annotations
import math
from typing import Any
import numpy as np
from tinyplug.caches import BoundedCache
from tinyplug.helpers import ContextVar
from tinyplug.uop.dtype import dtypes, sum_acc_dtype
from tinyplug.uop.ops import GroupOp, Ops, UOp
from tinyplug.tensor_ops import graph
from tinyplug.tensor_ops.elementwise import _grad_over
from tinyplug.tensor_ops.template import graph_template

def _is_int(x: Any) -> bool: return isinstance(x, (int, np.integer)) and not isinstance(x, bool)

def _host_values(idx: Any) -> np.ndarray | None:
  """An index tensor's values when they are already in memory (a realized, allocated buffer, or the host buffer a
  tensor made from Python data is copied from), else None: checking them then costs one copy and no kernel, while
  an index computed lazily in the graph is left unchecked."""
  from tinyplug.engine.realize import buffer_of, has_buffer
  from tinyplug.uop.ops import Ops
  u = idx.uop
  while u.op in (Ops.RESHAPE, Ops.COPY) or (u.op is Ops.CAST and dtypes.is_int(u.src[0].dtype)): u = u.src[0]
  if u.op is Ops.BUFFER and u is not idx.uop.base and has_buffer(u) and buffer_of(u).is_allocated:
    return buffer_of(u).numpy()    # the whole source buffer: exactly the index's elements (reshapes and copies only)
  u = idx.uop
  if not graph.is_realized(u) or not has_buffer(u.base) or not buffer_of(u.base).is_allocated: return None
  return idx.numpy()

def _plain_nested(x: Any) -> Any:
  """Nested lists/tuples as lists (tensors inside as their values), for the Tensor constructor."""
  if isinstance(x, (list, tuple)): return [_plain_nested(v) for v in x]
  return x.tolist() if hasattr(x, "tolist") and not isinstance(x, np.ndarray) else x

def check_index_range(idx: Any, size: int, what: str, allow_negative: bool, ignored: int | None = None) -> None:
  """IndexError (as torch raises) when an index tensor whose values are known holds one outside the valid range
  (other than `ignored`, a loss's ignore_index)."""
  values = _host_values(idx)
  if values is None or values.size == 0: return
  low = -size if allow_negative else 0
  if values.min() >= low and values.max() < size: return   # (the usual labels: two reductions, no masks)
  outside = (values < low) | (values >= size)
  if ignored is not None: outside &= values != ignored
  bad = values[outside]
  if bad.size: raise IndexError(f"{what}: index {int(bad.flat[0])} is out of range for size {size} "
                                f"(valid: {low} to {size - 1})")

class IndexingMixin:
  __slots__ = ()
  def _index_items(self, indices: Any) -> list:
    """Indices as a list of int / slice / None / Tensor, with Ellipsis expanded and bool masks made integer."""
    items = list(indices) if isinstance(indices, tuple) else [indices]
    cls = type(self)
    fixed: list = []
    for it in items:
      # a list (or a tuple inside the index tuple) is an advanced index, as in numpy and torch
      if isinstance(it, (list, tuple, np.ndarray)): it = cls(_plain_nested(it), device=self.device)
      if isinstance(it, cls) and it.dtype == dtypes.bool:
        at = sum(1 for x in fixed if x is not None)
        if Ellipsis not in fixed and it.shape != self.shape[at:at + it.ndim]:
          raise IndexError(f"a boolean mask of shape {it.shape} does not match the dims {self.shape[at:at + it.ndim]} "
                           f"it indexes")
        # a boolean mask picks the positions where it is true: one integer index tensor per mask dim
        fixed.extend(cls(np.ascontiguousarray(n).astype(np.int32), device=self.device) for n in np.nonzero(it.numpy()))
        continue
      if isinstance(it, cls) and not dtypes.is_int(it.dtype):
        raise IndexError(f"tensors used as indices must be integer or bool, not {it.dtype}")
      if not (it is None or it is Ellipsis or _is_int(it) or isinstance(it, (slice, cls))):
        raise IndexError(f"unsupported index {it!r} of type {type(it).__name__}")
      fixed.append(int(it) if _is_int(it) else it)
    if sum(it is Ellipsis for it in fixed) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for it in fixed if it is not None and it is not Ellipsis)
    if consumed > self.ndim:
      raise IndexError(f"too many indices for a tensor of {self.ndim} dims: {consumed} were given")
    fill = [slice(None)] * (self.ndim - consumed)
    if any(it is Ellipsis for it in fixed):
      at = next(i for i, it in enumerate(fixed) if it is Ellipsis)
      return fixed[:at] + fill + fixed[at + 1:]
    return fixed + fill

  def __getitem__(self, indices: Any):
    if (basic := self._basic_index(indices)) is not None: return basic
    items = self._index_items(indices)
    bounds, flips, strides, out_dims, tensor_idx = [], [], [], [], []
    d = 0
    for it in items:
      if it is None:
        out_dims.append(None)
        continue
      size = self.shape[d]
      if isinstance(it, slice) and _symbolic_slice(it, size):
        bounds.append(_symbolic_bounds(it, size, d)); flips.append(False); strides.append(1)
        out_dims.append(d)
      elif isinstance(it, int) and isinstance(size, UOp):
        if it < 0: raise IndexError(f"a negative index {it} into dim {d} of symbolic size {size.render()}")
        bounds.append((it, it + 1)); flips.append(False); strides.append(1)
      elif isinstance(it, int):
        if not -size <= it < size: raise IndexError(f"index {it} is out of bounds for dim {d} with size {size}")
        it += size if it < 0 else 0
        bounds.append((it, it + 1)); flips.append(False); strides.append(1)
      elif isinstance(it, slice):
        start, stop, step = it.indices(size)
        count = len(range(start, stop, step))
        if count == 0: bounds.append((0, 0))
        elif step > 0: bounds.append((start, start + (count - 1) * step + 1))
        else: bounds.append((start + (count - 1) * step, start + 1))
        flips.append(step < 0 and count > 1); strides.append(abs(step) if count > 1 else 1)
        out_dims.append(d)
      else:
        bounds.append((0, size)); flips.append(False); strides.append(1)
        tensor_idx.append((len(out_dims), it))
        out_dims.append(d)
      d += 1
    x = self.shrink(tuple(bounds))
    if any(flips): x = x.flip(tuple(i for i, f in enumerate(flips) if f))
    if any(s > 1 for s in strides): x = x._take_every(strides)
    x = x.reshape(tuple(1 if od is None else x.shape[od] for od in out_dims))
    return x._index_with_tensors(tensor_idx) if tensor_idx else x

  def _basic_index(self, indices: Any):
    """`x[1]`, `x[1:3]`, `x[:, -1]`: plain ints in range and slices of plain ints with no step, over a plain-int shape,
    as __getitem__ builds them (a shrink, a reshape for the dims the ints drop) in one tensor; None for anything else
    (the general path, which also says what is wrong)."""
    if (u := self._uop) is None or not graph.concrete(shape := u.shape): return None
    items = indices if type(indices) is tuple else (indices,)
    if len(items) > len(shape): return None
    bounds, out = [], []
    for it, size in zip(items, shape):
      if type(it) is int:
        if not -size <= it < size: return None
        it += size if it < 0 else 0
        bounds.append((it, it + 1))
      elif type(it) is slice and it.step is None and ((b := it.start) is None or type(b) is int) and \
           ((e := it.stop) is None or type(e) is int):
        start, stop, _ = it.indices(size)
        bounds.append((start, stop) if stop > start else (0, 0))
        out.append(max(stop - start, 0))
      else: return None
    rest = shape[len(items):]
    x = graph.shrink(u, (*bounds, *[(0, s) for s in rest]))
    return self.from_uop(graph.reshape(x, (*out, *rest)), _grad_over(self))

  def _take_every(self, strides: list[int]):
    """Every strides[i]-th element of dim i, starting with the first (the dims hold (n-1)*stride+1 elements)."""
    counts = [(s - 1) // st + 1 if s else 0 for s, st in zip(self.shape, strides)]
    x = self.pad(tuple((0, c * st - s if s else 0) for s, c, st in zip(self.shape, counts, strides)))
    x = x.reshape(tuple(v for c, st in zip(counts, strides) for v in (c, st)))
    x = x.shrink(tuple(b for c in counts for b in ((0, c), (0, 1))))
    return x.reshape(tuple(counts))

  def _index_with_tensors(self, tensor_idx: list):
    """Advanced indexing: dims at the given positions are picked by integer tensors broadcast together. Indices the
    host can see are range-checked here; the graph is `_pick_by_tensors`, a template (it reads only shapes)."""
    for p, idx in tensor_idx: check_index_range(idx, self.shape[p], f"index into dim {p}", allow_negative=True)
    scatter = len(tensor_idx) == 1 and tensor_idx[0][0] == 0 and scatters_rows(self, tensor_idx[0][1])
    return self._pick_by_tensors(*[t for _, t in tensor_idx], positions=tuple(p for p, _ in tensor_idx), scatter=scatter)

  @graph_template   # ~60 Tensor ops per call otherwise, and the scheduler would walk the one-hot graph every realize
  def _pick_by_tensors(self, *indices, positions: tuple[int, ...], scatter: bool = False):
    from tinyplug.tensor_ops.elementwise import broadcast_shape
    cls = type(self)
    tensor_idx = list(zip(positions, indices))
    positions = list(positions)
    bshape = broadcast_shape(*(t.shape for _, t in tensor_idx))
    sizes = [self.shape[p] for p in positions]
    others = [i for i in range(self.ndim) if i not in positions]
    # the selected elements: x moved to (others..., broadcast dims..., indexed dims...)
    x = self.permute(others + positions)
    x = x.reshape(x.shape[:len(others)] + (1,) * len(bshape) + tuple(sizes))
    x = x.expand(x.shape[:len(others)] + bshape + tuple(sizes))
    mask = None
    for j, ((_, idx), n) in enumerate(zip(tensor_idx, sizes)):
      idx = idx._broadcast_to(bshape)
      idx = (idx < 0).where(idx + n, idx)
      along_j = tuple(n if k == j else 1 for k in range(len(sizes)))
      classes = cls.arange(n, device=self.device).reshape((1,) * len(bshape) + along_j)
      onehot = idx.reshape(bshape + (1,) * len(sizes)).eq(classes)
      mask = onehot if mask is None else mask & onehot
    picked = mask.where(x, x._const_like(0)).sum(tuple(range(x.ndim - len(sizes), x.ndim))).cast(self.dtype)
    # numpy/torch placement: together in place of the indexed dims when those are adjacent, else first
    n_b = len(bshape)
    if positions == list(range(positions[0], positions[0] + len(positions))):
      picked = picked.permute(_place_first(len(others), n_b, positions[0]))
    else: picked = picked.permute(list(range(len(others), len(others) + n_b)) + list(range(len(others))))
    # `scatter` (rows of dim 0, on a renderer with row_scatter_add): the gradient is a scatter-add; inside the template
    # so the lookup keeps its graph's key (realized without a walk)
    return rows_gradient(picked, self, indices[0], wrap=True) if scatter else picked

  def __setitem__(self, indices: Any, value: Any) -> None:
    """`x[indices] = value`, as in tinygrad: a tensor not computed yet gets a new graph (where the indices point, the
    value; gradients flow to both), a realized one is written in place (through views of its buffer)."""
    cls = type(self)
    value = self._to_tensor(value)
    functional = not graph.is_realized(self.uop) and not graph.is_writable_view(self.uop)
    _check_no_stale_readers(self, value, functional)
    if not functional and not graph.is_plain_buffer(self.uop) and not graph.is_writable_view(self.uop):
      self.replace(self.contiguous().realize())   # a view no write can go through (expand, pad): a buffer of its own
    value = value.cast(self.dtype)
    if not functional:
      base = self.uop
      while base.op in GroupOp.Movement or base.op is Ops.DETACH: base = base.src[0]
      if base in value.uop.toposort():   # t[1:] = t[:-1]: read the old values before any is overwritten
        value = value.contiguous().realize()
    work = dtypes.uint8 if self.dtype == dtypes.bool else self.dtype
    # scatter through the gradient of the selection: d(x[indices])/dx applied to the value puts it in place
    proxy = cls.empty(*self.shape, device=self.device, dtype=work)
    selected = proxy[indices]
    value = value.cast(work)._broadcast_to(selected.shape)
    hit_proxy = cls.empty(*self.shape, device=self.device, dtype=dtypes.float32)
    hit_sel = hit_proxy[indices]
    ones = hit_sel._const_like(1)
    if (last := self._last_writes(indices)) is not None:   # duplicate targets: the last write wins, as in torch/numpy
      value, ones = last.where(value, value._const_like(0)), last.where(ones, ones._const_like(0))
    placed, = selected.gradient(proxy, gradient=value)
    hits, = hit_sel.gradient(hit_proxy, gradient=ones)
    new = (hits > 0).where(placed.cast(self.dtype), self)
    if functional: self.uop = new.uop
    else: self.assign(new).realize()

  def _last_writes(self, indices: Any):
    """For indices with tensors in them: a bool tensor over the selection, true where no later selected element
    writes the same target (None when every target is written once). The targets' flat positions are selected
    from an arange and compared on the host: setitem is eager anyway."""
    items = indices if isinstance(indices, tuple) else (indices,)
    if not any(isinstance(it, (type(self), list, np.ndarray)) for it in items): return None   # basic indexing
    flat = type(self).arange(math.prod(self.shape), device=self.device).reshape(self.shape)[indices].numpy()
    later = np.zeros(flat.size, dtype=bool)
    _, first_from_end = np.unique(flat.ravel()[::-1], return_index=True)
    later[:] = True
    later[flat.size - 1 - first_from_end] = False        # the last occurrence of each target is kept
    if not later.any(): return None
    return type(self)(~later.reshape(flat.shape), device=self.device)

  def gather(self, dim: int, index):
    """out[i][j] = self[index[i][j]][j] for dim 0 (and so on), like torch.gather."""
    d = graph.normalize_axis(dim, self.ndim)
    if index.ndim != self.ndim or any(index.shape[i] > self.shape[i] for i in range(self.ndim) if i != d):
      raise graph.ShapeError(f"gather: index shape {index.shape} does not fit self shape {self.shape} along dim {dim}")
    n = self.shape[d]
    check_index_range(index, n, f"gather along dim {dim}", allow_negative=False)
    x = self.shrink(tuple((0, index.shape[i]) if i != d else None for i in range(self.ndim)))
    x = x.unsqueeze(-1).transpose(d, -1)                        # dim d moved last, a size-1 dim in its place
    x = x.expand(index.shape + (n,))
    onehot = index.unsqueeze(-1).eq(type(self).arange(n, device=self.device))
    return onehot.where(x, x._const_like(0)).sum(-1).cast(self.dtype)

  def one_hot(self, num_classes: int = -1):
    if num_classes == -1: num_classes = int(self.max().item()) + 1
    else: check_index_range(self, num_classes, "one_hot", allow_negative=False)
    return self.unsqueeze(-1).eq(type(self).arange(num_classes, device=self.device)).where(1, 0)

  def masked_fill(self, mask, value): return mask.where(value, self)

_scatter_devices: BoundedCache = BoundedCache("tensor.row_scatter_devices", 64)
ROW_SCATTER = ContextVar("ROW_SCATTER", 1, "0: the gradients of x[idx] and nn.Embedding stay one-hot sums over (rows x "
                         "indices) even where the renderer declares `row_scatter_add` (A/B comparisons, tests)")

def scatters_rows(table: Any, idx: Any, need_grad: bool = True) -> bool:
  """Whether adding rows into `table` at `idx` is a real scatter-add (SCATTER_ADD): concrete shapes and a device
  whose renderer declares `row_scatter_add`; `need_grad` (a gather's gradient): a float table that may need one."""
  if not ROW_SCATTER.value or not isinstance(table.device, str): return False
  if need_grad and (table.requires_grad is False or not dtypes.is_float(table.dtype)): return False
  if not all(isinstance(s, int) and s > 0 for s in table.shape + idx.shape): return False
  if (known := _scatter_devices.get(table.device)) is None:
    from tinyplug.device import Device
    try: known = (r := Device[table.device].renderer) is not None and r.row_scatter_add
    except (RuntimeError, ValueError): known = False
    _scatter_devices.put(table.device, known)
  return known

def rows_gradient(picked: Any, table: Any, idx: Any, wrap: bool) -> Any:
  """`picked` (table's rows at idx, shape idx.shape + table.shape[1:]) with the scatter-add gradient: each index's
  row of the incoming gradient added to the table's row it names, in index order (`wrap`: negatives count from the
  end, as x[idx] does; Embedding drops them). Sums run in the dtype the one-hot sum used, so results are the same."""
  from tinyplug.gradient import custom_gradient
  return custom_gradient(picked, (table, idx), _scatter_rows, wrap=wrap)

def scatter_add(src: Any, idx: Any, rows: int) -> Any:
  """A (rows, w) table of zeros with row i of `src` (n, w) added to row idx[i] (idx[i, j] per element), i in order:
  Ops.SCATTER_ADD, for devices where `scatters_rows`; in src's dtype."""
  return type(src).from_uop(UOp(Ops.SCATTER_ADD, src.dtype, (src.uop, idx.uop), rows))

def _scatter_rows(g: Any, value: Any, table: Any, idx: Any, wrap: bool) -> tuple:
  rows, n, width = table.shape[0], math.prod(idx.shape), math.prod(table.shape[1:])
  flat = idx.reshape(n)
  if wrap: flat = (flat < 0).where(flat + rows, flat)
  out = scatter_add(g.cast(sum_acc_dtype(g.dtype)).reshape(n, width), flat, rows)
  return (out.cast(table.dtype).reshape(table.shape), None)

def _place_first(n_others: int, n_b: int, at: int) -> list[int]:
  """Permutation taking (others..., B...) to (others[:at], B..., others[at:])."""
  others = list(range(n_others))
  b = list(range(n_others, n_others + n_b))
  return others[:at] + b + others[at:]

def _symbolic_slice(it: slice, size: Any) -> bool:
  return any(isinstance(v, UOp) for v in (it.start, it.stop, it.step, size))

def _symbolic_bounds(it: slice, size: Any, d: int) -> tuple:
  """(start, stop) of a slice with a symbolic end, start or dim size (step 1 only; negatives count from an int end)."""
  if it.step not in (None, 1):
    raise IndexError(f"a slice of dim {d} with symbolic bounds or size needs step 1, got {it.step}")
  start, stop = 0 if it.start is None else it.start, size if it.stop is None else it.stop
  for v in (start, stop):
    if isinstance(v, int) and v < 0 and isinstance(size, UOp):
      raise IndexError(f"a negative slice bound {v} into dim {d} of symbolic size {size.render()}")
  start = start + size if isinstance(start, int) and start < 0 else start
  stop = stop + size if isinstance(stop, int) and stop < 0 else stop
  if isinstance(size, int) and isinstance(stop, int): stop = min(stop, size)
  return start, stop

def _check_no_stale_readers(t: Any, value: Any, functional: bool) -> None:
  """A RuntimeError where another live tensor would keep a stale view of what setitem changes (as tinygrad raises):
  for a tensor not computed yet, any other tensor using its graph; for a realized one, any tensor not computed yet
  that reads its buffer (it would see the write, or not, depending on when it runs)."""
  from tinyplug.tensor import live_tensors
  base = t.uop
  while base.op in GroupOp.Movement or base.op is Ops.DETACH: base = base.src[0]
  skip = {id(t), id(value)}
  for other in live_tensors():
    if id(other) in skip or other.uop is value.uop: continue
    if functional:
      if t.uop in other.uop.toposort():
        raise RuntimeError("setitem on a tensor whose (not yet computed) graph another tensor also uses: that tensor "
                           "would keep the old value; realize() it first")
    elif not graph.is_realized(other.uop) and base in other.uop.toposort():
      raise RuntimeError("setitem on a realized tensor that a tensor not computed yet reads: realize() that tensor "
                         "first, or it would see the new values")
