"""Symbolic sizes: a dim of a shape (or a movement op's argument) is an int or an index expression over bound
variables (`Variable("i", 1, 10).bind(3)`), called a `sint`.

A tensor of symbolic shape runs with the variables' values as kernel arguments: its kernels loop up to the expression,
and a buffer that holds one is allocated for the largest shape the variables allow and laid out with that shape's
strides (`max_shape`), so a kernel compiled once serves every value and a result read back with concrete bounds does
not depend on the value it was computed with."""
from __future__ import annotations
import math
from typing import Union
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp

sint = Union[int, UOp]

def is_sym(x: object) -> bool: return isinstance(x, UOp)

def ssimplify(x: sint) -> sint:
  """An int where the expression is a constant, else the simplified expression."""
  if not isinstance(x, UOp): return x
  if x.op is Ops.CONST: return x.arg
  if x.op is Ops.BIND or x.op is Ops.DEFINE_VAR: return x
  if x.op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG) and x.dtype.count == 1 and dtypes.is_int(x.dtype):
    x = _collect_terms(x)
  return x.ssimplify()

def _terms(x: UOp, k: int, out: dict[UOp | None, int]) -> None:
  """Adds k*x to `out` as {base: coefficient} (None: the constant), looking through +, -, negation and *const."""
  if x.op is Ops.CONST: out[None] = out.get(None, 0) + k * x.arg
  elif x.op is Ops.ADD: _terms(x.src[0], k, out); _terms(x.src[1], k, out)
  elif x.op is Ops.SUB: _terms(x.src[0], k, out); _terms(x.src[1], -k, out)
  elif x.op is Ops.NEG: _terms(x.src[0], -k, out)
  elif x.op is Ops.MUL and x.src[1].op is Ops.CONST: _terms(x.src[0], k * x.src[1].arg, out)
  elif x.op is Ops.MUL and x.src[0].op is Ops.CONST: _terms(x.src[1], k * x.src[0].arg, out)
  else: out[x] = out.get(x, 0) + k

def _collect_terms(x: UOp) -> UOp:
  """A sum with like terms combined: (i+j) - i is j, i + (10-i) is 10 (sizes of cat and pad come out this way)."""
  terms: dict[UOp | None, int] = {}
  _terms(x, 1, terms)
  ret: UOp | None = None
  # one order whatever order the terms came in, so equal sizes are one (hash-consed) node
  for base, k in sorted(((b, k) for b, k in terms.items() if b is not None), key=lambda bk: bk[0].render()):
    if k == 0: continue
    t = base if k == 1 else base * k
    ret = t if ret is None else ret + t
  c = terms.get(None, 0)
  if ret is None: return x.const_like(c)
  return ret + c if c else ret

def as_uop(x: sint) -> UOp:
  # an int past int32 (a size of a huge tensor) needs a 64-bit constant
  return x if isinstance(x, UOp) else UOp.const(dtypes.index if -2**31 <= x < 2**31 else dtypes.int64, x)

def sadd(a: sint, b: sint) -> sint:
  if not isinstance(a, UOp) and not isinstance(b, UOp): return a + b
  return ssimplify(as_uop(a) + as_uop(b))

def ssub(a: sint, b: sint) -> sint:
  # a + b*-1: the simplifier combines terms of a sum, so (i+2) - i comes out as 2
  if not isinstance(a, UOp) and not isinstance(b, UOp): return a - b
  return ssimplify(as_uop(a) + as_uop(b) * -1)

def smul(a: sint, b: sint) -> sint:
  if not isinstance(a, UOp) and not isinstance(b, UOp): return a * b
  return ssimplify(as_uop(a) * as_uop(b))

def sprod(xs) -> sint:
  ret: sint = 1
  for x in xs: ret = smul(ret, x)
  return ret

def smax_of(x: sint) -> int:
  """The largest value `x` can take."""
  return int(x.vmax) if isinstance(x, UOp) else x

def smin_of(x: sint) -> int:
  return int(x.vmin) if isinstance(x, UOp) else x

def max_shape(shape: tuple[sint, ...]) -> tuple[int, ...]:
  """The largest shape a symbolic shape can take: the layout of a buffer that holds it."""
  return tuple(smax_of(s) for s in shape)

def is_symbolic_shape(shape: tuple[sint, ...] | None) -> bool:
  return shape is not None and any(isinstance(s, UOp) for s in shape)

def seq(a: sint, b: sint) -> bool:
  """Whether two sizes are surely equal (the same int, or expressions that simplify to the same thing)."""
  if a is b: return True
  if not isinstance(a, UOp) and not isinstance(b, UOp): return a == b
  d = ssub(a, b)
  return not isinstance(d, UOp) and d == 0

def shape_eq(a: tuple[sint, ...] | None, b: tuple[sint, ...] | None) -> bool:
  if a is None or b is None: return a is b
  return len(a) == len(b) and all(seq(x, y) for x, y in zip(a, b))

def resolve(x: UOp | bool, default: bool = True) -> bool:
  """A comparison's truth where the bounds decide it, else `default`."""
  if not isinstance(x, UOp): return bool(x)
  x = x.simplify()
  return bool(x.vmin) if x.vmin == x.vmax else default

def sle(a: sint, b: sint, default: bool = True) -> bool:
  if not isinstance(a, UOp) and not isinstance(b, UOp): return a <= b
  return resolve(as_uop(a) <= as_uop(b), default)

def unbind(u: UOp) -> tuple[UOp, dict[str, int]]:
  """`u` with every bound variable replaced by the variable itself, and the values they were bound to."""
  var_vals: dict[str, int] = {}
  binds = [x for x in u.toposort() if x.op is Ops.BIND and x.src[0].op is Ops.DEFINE_VAR]
  if not binds: return u, var_vals
  for b in binds:
    name, val = b.src[0].arg[0], b.src[1].arg
    if var_vals.get(name, val) != val:
      raise ValueError(f"variable {name!r} is bound to two values ({var_vals[name]} and {val}) in one computation")
    var_vals[name] = val
  return u.substitute({b: b.src[0] for b in binds}, name="unbind"), var_vals

def unbind_shape(shape: tuple[sint, ...]) -> tuple[tuple[sint, ...], dict[str, int]]:
  """A shape with its variables unbound (what a jitted function compares) and their values."""
  out, vals = [], {}
  for s in shape:
    if isinstance(s, UOp):
      s, v = unbind(s)
      vals.update(v)
    out.append(s)
  return tuple(out), vals

def int_size(shape: tuple[sint, ...]) -> int:
  """The element count of a concrete shape; a clear error for a symbolic one."""
  if is_symbolic_shape(shape):
    raise ValueError(f"shape {render_shape(shape)} is symbolic: shrink it to concrete sizes first")
  return math.prod(shape)

def render_shape(shape: tuple[sint, ...]) -> str:
  inner = ", ".join(s.render() if isinstance(s, UOp) else str(s) for s in shape)
  return f"({inner}{',' if len(shape) == 1 else ''})"
