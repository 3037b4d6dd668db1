"""Reverse-mode automatic differentiation on the tensor-level UOp graph.

Every differentiable op has one local rule in GRADIENT_RULES, micrograd style: given the gradient `g` flowing into
the op's output `out` and the op's sources, it returns one gradient per source (None where none flows).
`compute_gradient` walks the graph from the root back to the targets and adds up what reaches each node.
Rules are written with Tensor operations (on wrappers that track nothing), so broadcasting and constants read
naturally; the results are plain UOps again.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from typing import Any, Callable
from tinyplug.helpers import argsort
from tinyplug.uop.ops import Ops, UOp

LN2 = math.log(2)

def _expand_grad(g, out, x):
  # an expanded dim received the same value many times: its gradient is the sum over that dim
  axes = tuple(i for i, (a, b) in enumerate(zip(x.shape, out.shape)) if a != b)
  return (g.sum(axes, keepdim=True).cast(g.dtype),)

def _max_grad(g, out, x, y):
  # ties split the gradient evenly, as torch.maximum does
  gx = (x > y).where(g, x.eq(y).where(g * 0.5, g._const_like(0)))
  return (gx, g - gx)

def _reduce_grad(g, out, x):
  op, axes = out.uop.arg
  if op is Ops.ADD: return (g.expand(x.shape),)
  if op is Ops.MAX:
    hit = x.eq(out.expand(x.shape)).cast(g.dtype)  # every maximal element shares the gradient
    return (hit / hit.sum(axes, keepdim=True) * g.expand(x.shape),)
  if op is Ops.MUL:
    # the product of the other elements, exact with zeros: with one zero only that element gets a gradient
    zero = x.eq(0)
    nonzero = zero.where(x._const_like(1), x)
    p = nonzero.prod(axes, keepdim=True).cast(x.dtype).expand(x.shape)
    zeros = zero.cast(x.dtype).sum(axes, keepdim=True).expand(x.shape)
    others = zeros.eq(0).where(p / nonzero, (zeros.eq(1) & zero).where(p, x._const_like(0)))
    return (g.expand(x.shape) * others,)
  raise NotImplementedError(f"no gradient for a {op} reduction")

def _pad_grad(g, out, x):
  return (g.shrink(tuple((b, b + s) for (b, _), s in zip(out.uop.arg, x.shape))),)

def _shrink_grad(g, out, x):
  return (g.pad(tuple((b, s - e) for (b, e), s in zip(out.uop.arg, x.shape))),)

def _no_grad(g, out, *srcs): return (None,) * len(srcs)

def _scatter_add_grad(g, out, src, idx):
  # each element of src gets the gradient of the row it was added to (none where its index was out of range)
  n, w = src.shape
  rows = out.shape[0]
  ix = (idx.reshape(n, 1) if idx.ndim == 1 else idx).reshape(n, -1, 1)
  hit = ix.eq(type(g).arange(rows, device=g.device, dtype=idx.dtype).reshape(1, 1, rows))
  picked = hit.where(g.permute((1, 0)).reshape(1, w, rows), 0).sum(-1)
  return (picked.cast(src.dtype), None)

def _multi_grad(g, out, *parts):
  # each device's part gets its part of the gradient, on its own device
  axis, n = out.uop.arg, len(parts)
  if axis is None: return tuple(g.to(p.device) for p in parts)
  from tinyplug.uop.shapes import shard_bounds
  def part(i: int): return tuple(shard_bounds(s, n, i) if j == axis else (0, s) for j, s in enumerate(g.shape))
  return tuple(g.shrink(part(i)).to(p.device) for i, p in enumerate(parts))

@dataclass(frozen=True)
class GradFn:
  """The arg of a CUSTOM_GRAD node: `fn(g, out, *inputs, **params)` gives one gradient per input (None for none).
  Params are a sorted tuple of (name, value) pairs so that equal calls build equal (hash-consed) nodes."""
  fn: Callable
  params: tuple[tuple[str, Any], ...] = ()

def custom_gradient(value, inputs: tuple, fn: Callable, **params):
  """`value` (a Tensor computed from `inputs`) whose gradient is `fn(g, value, *inputs, **params)` instead of what the
  ops that built it would give. The marker node is stripped before scheduling, so the forward is `value` as built."""
  from tinyplug.tensor import Tensor
  marker = UOp(Ops.CUSTOM_GRAD, value.dtype, (value.uop, *(t.uop for t in inputs)), GradFn(fn, tuple(sorted(params.items()))))
  return Tensor.from_uop(marker, value.requires_grad)

def _custom_grad(g, out, value, *inputs):
  spec: GradFn = out.uop.arg
  grads = spec.fn(g, value, *inputs, **dict(spec.params))
  if len(grads) != len(inputs): raise RuntimeError(f"custom gradient {spec.fn.__name__} gave {len(grads)} gradients "
                                                   f"for {len(inputs)} inputs")
  return (None, *grads)   # nothing flows through the ops that built the value

GRADIENT_RULES: dict[Ops, Callable] = {
  # arithmetic
  Ops.ADD: lambda g, out, x, y: (g, g),
  Ops.SUB: lambda g, out, x, y: (g, -g),
  Ops.MUL: lambda g, out, x, y: (g * y, g * x),
  Ops.FDIV: lambda g, out, x, y: (g / y, -g * out / y),
  Ops.NEG: lambda g, out, x: (-g,),
  Ops.MAX: _max_grad,
  # transcendental
  Ops.RECIPROCAL: lambda g, out, x: (-g * out * out,),
  Ops.SQRT: lambda g, out, x: (g / (out * 2),),
  Ops.EXP2: lambda g, out, x: (g * out * LN2,),
  Ops.LOG2: lambda g, out, x: (g / (x * LN2),),
  Ops.SIN: lambda g, out, x: (g * ((math.pi / 2) - x).sin(),),
  Ops.TRUNC: lambda g, out, x: (g._const_like(0),),
  # selection and conversion
  Ops.WHERE: lambda g, out, c, x, y: (None, c.where(g, 0), c.where(0, g)),
  Ops.CAST: lambda g, out, x: (g.cast(x.dtype),),
  # movement: the inverse movement of the gradient
  Ops.RESHAPE: lambda g, out, x: (g.reshape(x.shape),),
  Ops.EXPAND: _expand_grad,
  Ops.PERMUTE: lambda g, out, x: (g.permute(argsort(list(out.uop.arg))),),
  Ops.PAD: _pad_grad,
  Ops.SHRINK: _shrink_grad,
  Ops.FLIP: lambda g, out, x: (g.flip(tuple(i for i, f in enumerate(out.uop.arg) if f)),),
  Ops.REDUCE_AXIS: _reduce_grad,
  # materialization and devices
  Ops.CONTIGUOUS: lambda g, out, x: (g,),
  Ops.COPY: lambda g, out, x, device: (g.to(x.device), None),
  Ops.MULTI: _multi_grad,
  Ops.DETACH: _no_grad,
  Ops.CUSTOM_GRAD: _custom_grad,
  Ops.SCATTER_ADD: _scatter_add_grad,
  # piecewise constant: no gradient
  **{op: _no_grad for op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.IDIV,
                             Ops.MOD, Ops.BITCAST, Ops.THREEFRY)},
}

def _nodes_toward(root: UOp, targets: set[UOp]) -> list[UOp]:
  """The nodes of root's graph that lie on a path to some target, sources before users; DETACH stops paths."""
  on_path: dict[UOp, bool] = {}
  for u in root.toposort():
    on_path[u] = u in targets or (u.op is not Ops.DETACH and any(on_path[s] for s in u.src))
  return [u for u, keep in on_path.items() if keep]

def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
  """d(root)/d(t) for each target t reached from root, given d(loss)/d(root) = root_grad (rebuilt from a template
  when a graph of this structure was differentiated before: gradient_template.py)."""
  from tinyplug.gradient_template import gradient
  return gradient(root, root_grad, targets, derive_gradient)

def derive_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
  """compute_gradient without templates: the rules applied from the root back to the targets."""
  from tinyplug.tensor import Tensor
  wrap = Tensor.from_uop
  nodes = _nodes_toward(root, targets)
  needed = set(nodes)
  grads: dict[UOp, Tensor] = {root: wrap(root_grad)}
  for node in reversed(nodes):
    g = grads.get(node)
    if g is None or not any(s in needed for s in node.src): continue
    rule = GRADIENT_RULES.get(node.op)
    if rule is None: raise NotImplementedError(f"no gradient rule for {node.op}")
    src_grads = rule(g, wrap(node), *[wrap(s) for s in node.src])
    for s, sg in zip(node.src, src_grads):
      if sg is None or s not in needed: continue
      if sg.shape != s.shape:
        raise RuntimeError(f"gradient of {node.op} gave shape {sg.shape} for a source of shape {s.shape}")
      grads[s] = sg if s not in grads else grads[s] + sg
  return {t: grads[t].uop for t in targets if t in grads}
