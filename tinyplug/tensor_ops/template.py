"""Graph templates for composite Tensor methods: the UOp graph a method builds depends only on its inputs' shapes,
dtypes, devices and gradient flags and on its other arguments, so it is built once, over placeholder inputs, and
later calls rebuild it over their own inputs: one UOp per node instead of a chain of Tensor methods (conv2d: ~25
of them, validation and all).

Only for methods whose graph does not look at their inputs beyond that (not, say, whether an input is a buffer
already). Placeholders are unallocated BUFFER views, so a template holds no memory."""
from __future__ import annotations
import functools
from typing import Any, Callable
from tinyplug.uop.ops import UOp

MAX_TEMPLATES = 1024
_templates: dict[tuple, tuple[tuple[UOp, ...], tuple[UOp, ...], bool | None]] = {}   # holders, nodes, grad flag

def _frozen(x: Any) -> Any:
  """x as a hashable key part (lists become tuples); a TypeError says it cannot be one."""
  if isinstance(x, (list, tuple)): return tuple(_frozen(v) for v in x)
  hash(x)
  return x

def _rebuild(order: tuple[UOp, ...], mapping: dict[UOp, UOp]) -> UOp:
  """The template's nodes (in toposort order) rebuilt with the placeholders swapped for the inputs."""
  new = dict(mapping)
  for u in order:
    if u in new: continue
    src = tuple([new.get(s, s) for s in u.src])
    new[u] = u if all(a is b for a, b in zip(src, u.src)) else UOp(u.op, u.dtype, src, u.arg)
  return new[order[-1]]

def graph_template(fn: Callable) -> Callable:
  """Decorate a Tensor method; its tensor arguments (positional or keyword) become the template's inputs, every other
  argument is part of the key (an unhashable one just skips the template)."""
  @functools.wraps(fn)
  def wrapper(self, *args, **kwargs):
    tt = type(self)
    names = sorted(k for k, v in kwargs.items() if isinstance(v, tt))
    tensors = [self] + [a for a in args if isinstance(a, tt)] + [kwargs[k] for k in names]
    try:
      key = (fn, tuple((t.shape, t.dtype, t.device, t.requires_grad) for t in tensors),
             tuple(None if isinstance(a, tt) else _frozen(a) for a in args),
             tuple((k, None if isinstance(v, tt) else _frozen(v)) for k, v in sorted(kwargs.items())),
             tt.no_grad, tt.training)
    except TypeError: return fn(self, *args, **kwargs)
    if (hit := _templates.get(key)) is None:
      if any(t.numel() == 0 for t in tensors): return fn(self, *args, **kwargs)
      holders = [tt.from_uop(UOp.new_buffer(t.device, t.numel(), t.dtype).reshape(t.shape), t.requires_grad)
                 for t in tensors]
      pos = iter(holders[1:1 + len(tensors) - 1 - len(names)])
      by_name = dict(zip(names, holders[len(holders) - len(names):]))
      out = fn(holders[0], *[next(pos) if isinstance(a, tt) else a for a in args],
               **{k: by_name.get(k, v) for k, v in kwargs.items()})
      if len(_templates) >= MAX_TEMPLATES: _templates.clear()
      hit = _templates[key] = (tuple(h.uop for h in holders), tuple(out.uop.toposort()), out.requires_grad)
    holder_uops, order, requires_grad = hit
    return tt.from_uop(_rebuild(order, dict(zip(holder_uops, (t.uop for t in tensors)))), requires_grad)
  return wrapper
