"""Movement ops: zero-copy views (reshape, permute, expand, pad, shrink, flip) and what is built from them
(transpose, flatten, squeeze, cat, stack, repeat, split, roll, ...)."""
from __future__ import annotations
import math
from typing import Any, Sequence
from tinyplug.uop.dtype import dtypes, least_upper_dtype
from tinyplug.tensor_ops import graph
from tinyplug.tensor_ops.elementwise import _grad_over
from tinyplug.tensor_ops.graph import ShapeError
from tinyplug.tensor_ops.template import graph_template
from tinyplug.uop.ops import Ops, UOp, view_node
from tinyplug.uop.sint import sadd, ssub, smin_of, as_uop, is_symbolic_shape, render_shape, seq, smul, sprod, ssimplify

def _shape_args(shape: Any, args: tuple) -> tuple:
  """`f((2, 3))` and `f(2, 3)` both give (2, 3); entries may be -1 or None where the op allows it."""
  if args: return (shape, *args)
  if isinstance(shape, (tuple, list)): return tuple(shape)
  return (shape,)

def _flat_padding_to_pairs(padding: Sequence[int], ndim: int) -> list[tuple[int, int]]:
  # torch order: (last dim before, last dim after, second-to-last before, ...)
  if len(padding) % 2 or len(padding) // 2 > ndim:
    raise ShapeError(f"flat padding {tuple(padding)} needs an even length of at most {2 * ndim} for {ndim} dims")
  pairs = [(0, 0)] * ndim
  for i in range(len(padding) // 2): pairs[ndim - 1 - i] = (padding[2 * i], padding[2 * i + 1])
  return pairs

def _int_pad_pairs(padding: Any, shape: tuple | None) -> tuple[tuple[int, int], ...] | None:
  """The (before, after) of each dim for `padding` of plain non-negative ints (torch-style flat, or a pair per dim)
  over a plain-int `shape`; None for anything else (None for a dim, a symbolic size, a negative amount, a bad length:
  the general path, which says what is wrong)."""
  if type(padding) is not tuple and type(padding) is not list or not graph.concrete(shape): return None
  n = len(padding)
  if n and type(padding[0]) is not int:
    pairs = graph.int_pairs(padding) if n == len(shape) else None
    return pairs if pairs is not None and all([b >= 0 and a >= 0 for b, a in pairs]) else None
  if n % 2 or n // 2 > len(shape) or not all([type(p) is int and p >= 0 for p in padding]): return None
  return ((0, 0),) * (len(shape) - n // 2) + tuple([(padding[i], padding[i + 1]) for i in range(n - 2, -1, -2)])

# (padding, shape) -> (that padding object, its pairs, the padded shape or None when nothing is added): the same
# padding over the same shape again (a literal tuple in a loop is one object) is converted and checked once
_pad_plans: dict[tuple, tuple] = {}

def _pad_plan(padding: Any, shape: tuple | None) -> tuple | None:
  """(padding, _int_pad_pairs's pairs, the padded shape or None) for `padding` over `shape`; None: the general path."""
  try: plan = _pad_plans.get(key := (padding, shape))
  except TypeError: key = plan = None   # (a list, or lists inside: not kept)
  if plan is not None and plan[0] is padding: return plan   # (an equal tuple of floats or bools is another object)
  if (pairs := _int_pad_pairs(padding, shape)) is None: return None
  plan = _padded(padding, pairs, shape)
  if key is not None:
    if len(_pad_plans) > 1024: _pad_plans.clear()
    _pad_plans[key] = plan
  return plan

def _padded(padding: Any, pairs: tuple, shape: tuple) -> tuple:
  if not any([b or a for b, a in pairs]): return padding, pairs, None
  return padding, pairs, tuple([s + b + a for s, (b, a) in zip(shape, pairs)])

_PAD = Ops.PAD
_PAD_MODES = ("constant", "reflect", "replicate", "circular")

def sum_sizes(sizes) -> Any:
  total = 0
  for s in sizes: total = sadd(total, s)
  return total

class MovementMixin:
  __slots__ = ()
  # Each movement op builds its node with graph's maker and the tensor with from_uop (what _apply_uop does for one
  # input, without its closure and keyword arguments); plain-int arguments over a plain-int shape take the makers'
  # fast paths
  def reshape(self, shape, *args):
    new = _shape_args(shape, args)
    # plain non-negative int sizes (the usual case) need none of the checks below
    if not all([type(s) is int and s >= 0 for s in new]): new = self._reshape_sizes(new)
    if (u := self._uop) is None: u = self._build()
    return self.from_uop(graph.reshape(u, new), _grad_over(self))
  def _reshape_sizes(self, new: tuple) -> tuple[int, ...]:
    """Sizes with None (keep that dim) and one -1 (whatever is left) resolved; bad sizes raise."""
    if new.count(-1) == 1 and graph.concrete(shape := self.shape) and all([type(s) is int and s >= -1 for s in new]):
      # (the usual `x.reshape(-1)` or `x.view(n, -1)`: plain ints, no symbolic helpers)
      known, total = -math.prod(new), math.prod(shape)
      if known > 0 and total % known == 0: return tuple([total // known if s == -1 else s for s in new])
    if len(new) > 0 and any(s is None for s in new):
      new = tuple(self.shape[i] if s is None else s for i, s in enumerate(new))
    if not all(isinstance(s, (int, UOp)) for s in new): raise TypeError(f"reshape sizes must be ints, got {new}")
    ints = [s for s in new if isinstance(s, int)]
    if ints.count(-1) > 1: raise ShapeError(f"reshape to {new}: only one size can be -1")
    if any(s < -1 for s in ints): raise ShapeError(f"reshape to {new}: negative size")
    if len(ints) < len(new) or is_symbolic_shape(self.shape):
      if -1 not in ints: return new
      known = sprod(s for s in new if not (isinstance(s, int) and s == -1))
      rest = ssimplify(as_uop(self.numel()) // as_uop(known))
      if not seq(smul(rest, known), self.numel()):
        raise ShapeError(f"cannot reshape a tensor of shape {render_shape(self.shape)} to {new}")
      return tuple(rest if isinstance(s, int) and s == -1 else s for s in new)
    if -1 in new:
      known, total = math.prod(s for s in new if s != -1), math.prod(self.shape)   # (plain ints: no sprod)
      if known == 0 or total % known:
        raise ShapeError(f"cannot reshape a tensor of shape {self.shape} ({total} elements) to {new}")
      new = tuple(total // known if s == -1 else s for s in new)
    return new
  def view(self, shape, *args): return self.reshape(shape, *args)

  def permute(self, order, *args):
    if (u := self._uop) is None: u = self._build()
    order, n = _shape_args(order, args), 0 if (shape := u.shape) is None else len(shape)
    if not all([type(a) is int and 0 <= a < n for a in order]): order = tuple(graph.normalize_axis(a, n) for a in order)
    return self.from_uop(graph.permute(u, order), _grad_over(self))

  def expand(self, shape, *args):
    new = _shape_args(shape, args)
    if len(new) < self.ndim: raise ShapeError(f"cannot expand shape {self.shape} to {new}: too few dims")
    if all([type(n) is int and n >= 0 for n in new]): return self._broadcast_to(new)   # (no -1 or None to fill in)
    old = (1,) * (len(new) - self.ndim) + self.shape
    return self._broadcast_to(tuple(o if n in (-1, None) else n for o, n in zip(old, new)))

  def pad(self, padding: Sequence, mode: str = "constant", value: float = 0.0):
    """Pad with `value` (mode "constant"), or with the mirror image of the edge ("reflect", the edge itself not
    repeated), copies of the edge element ("replicate") or the other end ("circular"), as torch's F.pad.
    `padding` is torch-style flat ints (last dim first) or one (before, after) or None per dim. Negative amounts cut
    elements away."""
    if mode not in _PAD_MODES:   # NotImplementedError, as torch's F.pad raises for a mode it does not have
      raise NotImplementedError(f"pad mode {mode!r} is not one of {', '.join(_PAD_MODES)}")
    if mode == "constant" and ((t := type(value)) is float or t is int) and value == 0 and \
       (plan := _pad_plan(padding, (u := self.uop).shape)) is not None:
      # the usual call, `x.pad((1, 1, 1, 1))`: zeros around, plain non-negative ints over a plain-int shape
      return self.from_uop(u if plan[2] is None else view_node(_PAD, u, plan[1], plan[2]), _grad_over(self))
    if all(isinstance(p, (int, UOp)) for p in padding): pairs = _flat_padding_to_pairs(padding, self.ndim)
    else:
      if len(padding) != self.ndim:
        raise ShapeError(f"padding {tuple(padding)} needs one entry per dim of {self.shape}")
      pairs = [(0, 0) if p is None else tuple(v if isinstance(v, UOp) else int(v) for v in p) for p in padding]
    if mode != "constant": return self._pad_from_edges(pairs, mode)
    x = self
    if any(smin_of(b) < 0 or smin_of(a) < 0 for b, a in pairs):
      x = x.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pairs, x.shape)))
      pairs = [(max(b, 0), max(a, 0)) for b, a in pairs]
    padded = x._apply_uop(graph.pad, padding=tuple(pairs))
    if (not isinstance(value, UOp) and value == 0) or padded is x: return padded
    inside = x._const_like(True, dtypes.bool)._apply_uop(graph.pad, padding=tuple(pairs))
    return inside.where(padded, value)
  def pad2d(self, padding: Sequence[int], value: float = 0.0): return self.pad(tuple(padding), value=value)
  def _pad_from_edges(self, pairs: Sequence[tuple[int, int]], mode: str):
    """Non-constant pads, one dim at a time: the pieces before and after are views of the dim itself (flipped for
    reflect), joined with cat. A negative amount cuts elements away as torch does: for reflect and replicate off the
    padded result (the other side still mirrors or repeats the uncut edge), for circular before wrapping around."""
    x = self
    for dim, ((pad_before, pad_after), n) in enumerate(zip(pairs, self.shape)):
      if pad_before == pad_after == 0: continue
      before, after = max(pad_before, 0), max(pad_after, 0)
      if mode == "circular" and (pad_before < 0 or pad_after < 0):
        if n + min(pad_before, 0) + min(pad_after, 0) < 0:
          raise ShapeError(f"pad mode {mode!r}: padding ({pad_before}, {pad_after}) cuts more than dim {dim}'s {n} elements")
        x = x.shrink(tuple((-min(pad_before, 0), n + min(pad_after, 0)) if d == dim else None for d in range(x.ndim)))
        n, pad_before, pad_after = x.shape[dim], before, after
      limit = n - 1 if mode == "reflect" else n if mode == "circular" else None
      if n == 0 or (limit is not None and max(before, after) > limit):
        raise ShapeError(f"pad mode {mode!r}: padding ({before}, {after}) of dim {dim} is too large for its size {n}")
      def part(start: int, stop: int):
        return x.shrink(tuple((start, stop) if d == dim else None for d in range(x.ndim)))
      if mode == "reflect": pieces = (part(1, before + 1).flip(dim), x, part(n - 1 - after, n - 1).flip(dim))
      elif mode == "circular": pieces = (part(n - before, n), x, part(0, after))
      else:
        edge = lambda i, k: part(i, i + 1).expand(tuple(k if d == dim else s for d, s in enumerate(x.shape)))
        pieces = (edge(0, before), x, edge(n - 1, after))
      keep = [p for p in pieces if p.shape[dim]]
      x = keep[0].cat(*keep[1:], dim=dim) if len(keep) > 1 else keep[0]
      if pad_before < 0 or pad_after < 0:
        size = x.shape[dim]
        if size + min(pad_before, 0) + min(pad_after, 0) < 0:
          raise ShapeError(f"pad mode {mode!r}: padding ({pad_before}, {pad_after}) cuts more than dim {dim}'s {n} elements")
        x = x.shrink(tuple((-min(pad_before, 0), size + min(pad_after, 0)) if d == dim else None for d in range(x.ndim)))
    return x

  def shrink(self, bounds: Sequence):
    """Keep [start, end) of each dim; None keeps a dim whole."""
    if (u := self._uop) is None: u = self._build()
    shape = () if (s := u.shape) is None else s
    if len(bounds) != len(shape): raise ShapeError(f"shrink {tuple(bounds)} needs one entry per dim of {shape}")
    return self.from_uop(graph.shrink(u, tuple([(0, s) if b is None else b for b, s in zip(bounds, shape)])),
                         _grad_over(self))

  def rearrange(self, pattern: str, **sizes: int):
    """einops-style: `t.rearrange("b c (h w) -> b h w c", h=4)`; names split and merge axes, "1" is a unit axis,
    "..." stands for the dims not named."""
    from tinyplug.tensor_ops.rearrange import rearrange
    return rearrange(self, pattern, **sizes)

  def flip(self, axis, *args):
    if (u := self._uop) is None: u = self._build()
    n = 0 if (shape := u.shape) is None else len(shape)
    axes = _shape_args(axis, args)
    if not all([type(a) is int and 0 <= a < n for a in axes]): axes = tuple(graph.normalize_axis(a, n) for a in axes)
    return self.from_uop(graph.flip(u, axes), _grad_over(self))

  # ---- views built on the above ----
  def transpose(self, dim0: int = 1, dim1: int = 0):
    order = list(range(self.ndim))
    a, b = graph.normalize_axis(dim0, self.ndim), graph.normalize_axis(dim1, self.ndim)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)
  @property
  def T(self):
    if (u := self._uop) is None: u = self._build()
    n = 0 if (shape := u.shape) is None else len(shape)
    return self.from_uop(graph.permute(u, tuple(range(n - 1, -1, -1))), _grad_over(self))
  def flatten(self, start_dim: int = 0, end_dim: int = -1):
    if self.ndim == 0: return self.reshape(1)
    a, b = graph.normalize_axis(start_dim, self.ndim), graph.normalize_axis(end_dim, self.ndim)
    return self.reshape(self.shape[:a] + (math.prod(self.shape[a:b + 1]),) + self.shape[b + 1:])
  def unflatten(self, dim: int, sizes: Sequence[int]):
    d = graph.normalize_axis(dim, self.ndim)
    return self.reshape(self.shape[:d] + tuple(sizes) + self.shape[d + 1:])
  def squeeze(self, dim: int | Sequence[int] | None = None):
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    dims = {graph.normalize_axis(d, self.ndim) for d in ((dim,) if isinstance(dim, int) else dim)}
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))
  def unsqueeze(self, dim: int):
    d = graph.normalize_axis(dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])
  def swapaxes(self, a: int, b: int): return self.transpose(a, b)
  def movedim(self, source: int, destination: int):
    order = list(range(self.ndim))
    order.insert(graph.normalize_axis(destination, self.ndim), order.pop(graph.normalize_axis(source, self.ndim)))
    return self.permute(order)
  def expand_as(self, other): return self.expand(other.shape)
  def reshape_as(self, other): return self.reshape(other.shape)

  # ---- joining and splitting ----
  def cat(*tensors, dim: int = 0):   # type: ignore[misc]
    """Join tensors along `dim` (`a.cat(b, c)` or `Tensor.cat(a, b, c)`); every other dim must match."""
    tensors = _tensor_args(tensors, "cat")
    return tensors[0]._cat(*tensors[1:], dim=dim)
  @graph_template   # a cast, a pad and an add per input a call otherwise, and the scheduler's walk over them
  def _cat(self, *others, dim: int):
    tensors = [self, *others]
    d = graph.normalize_axis(dim, self.ndim)
    for t in tensors:
      if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
        raise ShapeError(f"cat along dim {dim}: shapes {[x.shape for x in tensors]} differ outside that dim")
    out_dtype = least_upper_dtype(*(t.dtype for t in tensors))
    work_dtype = dtypes.uint8 if out_dtype == dtypes.bool else out_dtype
    total = sum_sizes(t.shape[d] for t in tensors)
    pieces, offset = [], 0
    for t in tensors:
      pairs = [(0, 0)] * self.ndim
      pairs[d] = (offset, ssub(ssub(total, offset), t.shape[d]))
      pieces.append(t.cast(work_dtype).pad(tuple(pairs)))
      offset = sadd(offset, t.shape[d])
    out = pieces[0]
    for p in pieces[1:]: out = out + p
    return out.cast(out_dtype)
  def stack(*tensors, dim: int = 0):   # type: ignore[misc]
    tensors = _tensor_args(tensors, "stack")
    return tensors[0]._stack(*tensors[1:], dim=dim)
  @graph_template
  def _stack(self, *others, dim: int):
    d = graph.normalize_axis(dim, self.ndim + 1)
    return self.unsqueeze(d).cat(*[t.unsqueeze(d) for t in others], dim=d)
  def repeat(self, repeats, *args):
    reps = _shape_args(repeats, args)
    if len(reps) < self.ndim: raise ShapeError(f"repeat needs at least {self.ndim} repeat counts, got {reps}")
    base = (1,) * (len(reps) - self.ndim) + self.shape
    spread = self.reshape(tuple(x for s in base for x in (1, s)))
    spread = spread.expand(tuple(x for r, s in zip(reps, base) for x in (r, s)))
    return spread.reshape(tuple(r * s for r, s in zip(reps, base)))
  def split(self, sizes: int | Sequence[int], dim: int = 0):
    d = graph.normalize_axis(dim, self.ndim)
    n = self.shape[d]
    # an AssertionError as in tinygrad: the pieces of a dim whose size is a variable are not known when building
    if isinstance(n, UOp): raise AssertionError(f"cannot split dim {dim} of symbolic size {n.render()}")
    if isinstance(sizes, int):
      if sizes <= 0: raise ShapeError(f"split size must be positive, got {sizes}")
      sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
    if sum(sizes) != n: raise ShapeError(f"split sizes {list(sizes)} do not add up to {n}, the size of dim {dim}")
    out, start = [], 0
    for s in sizes:
      out.append(self.shrink(tuple((start, start + s) if i == d else None for i in range(self.ndim))))
      start += s
    return tuple(out)
  def chunk(self, chunks: int, dim: int = 0):
    if chunks <= 0: raise ShapeError(f"chunk count must be positive, got {chunks}")
    d = graph.normalize_axis(dim, self.ndim)
    if isinstance(self.shape[d], UOp):
      raise AssertionError(f"cannot chunk dim {dim} of symbolic size {self.shape[d].render()}")
    return self.split(max(1, math.ceil(self.shape[d] / chunks)), d)
  def meshgrid(self, *others, indexing: str = "ij"):
    """Coordinate grids of 1-d (or 0-d) tensors, as torch.meshgrid: "ij" gives shape (len(a), len(b), ...), "xy" swaps
    the first two dims."""
    if indexing not in ("ij", "xy"): raise graph.ArgumentError(f"meshgrid: indexing must be 'ij' or 'xy', not {indexing!r}")
    flat = [t.reshape(-1) for t in (self, *others)]
    shape = tuple(t.shape[0] for t in flat)
    grids = [t.reshape(tuple(n if j == i else 1 for j, n in enumerate(shape))).expand(shape) for i, t in enumerate(flat)]
    return tuple(g.transpose(0, 1) if indexing == "xy" and len(shape) > 1 else g for g in grids)
  def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None):
    """Shift elements along `dims` (wrapping around); without dims, along the flattened tensor (as torch)."""
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    if dims is None:
      if len(shifts) != 1: raise ShapeError(f"roll without dims takes one shift, got {shifts}")
      return self.flatten().roll(shifts, 0).reshape(self.shape)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims): raise ShapeError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    x = self
    for shift, dim in zip(shifts, dims):
      d = graph.normalize_axis(dim, x.ndim)
      n = x.shape[d]
      if n == 0 or shift % n == 0: continue
      head, tail = x.split([n - shift % n, shift % n], d)
      x = tail.cat(head, dim=d)
    return x

def _tensor_args(args: tuple, name: str) -> tuple:
  """`f(a, b, c)` or `f((a, b, c))` / `f([a, b, c])`: the tensors, as torch and tinygrad both take them."""
  if args and isinstance(args[0], (list, tuple)):
    if len(args) > 1: raise ShapeError(f"{name} takes tensors, or one list/tuple of them, not a sequence and more tensors")
    args = tuple(args[0])
  if not args: raise ShapeError(f"{name} needs at least one tensor: Tensor.{name}(a, b, ...) or a.{name}(b, ...)")
  return args
