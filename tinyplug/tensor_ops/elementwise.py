"""Elementwise math with broadcasting and dtype promotion, built from the primitive ALU ops of ops.py.

Python scalars do not upcast tensors (an int tensor times 2.5 is float, a half tensor plus 1.0 stays half), as in
tinygrad and PyTorch. Everything transcendental reduces to EXP2, LOG2, SIN, SQRT and RECIPROCAL.
"""
from __future__ import annotations
import functools, math
from typing import Any
import numpy as np
from tinyplug.uop.dtype import DType, dtypes, least_upper_dtype, least_upper_float, to_dtype
from tinyplug.uop.ops import Ops, UOp
from tinyplug.tensor_ops import graph
from tinyplug.tensor_ops.graph import DTypeError, ShapeError
from tinyplug.tensor_ops.template import graph_template
from tinyplug.uop.sint import seq

LN2 = math.log(2)
_UINT_OF_SIZE = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}

def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
  """The shape all of `shapes` broadcast to (aligned on the right); a mismatch raises a ValueError naming them."""
  if all(s == shapes[0] for s in shapes): return tuple(shapes[0])   # nothing to broadcast (most ops)
  ndim = max(len(s) for s in shapes)
  padded = [(1,) * (ndim - len(s)) + tuple(s) for s in shapes]
  out = []
  for sizes in zip(*padded):
    big = {s for s in sizes if s != 1}
    if len(big) > 1 and not all(seq(s, next(iter(big))) for s in big):
      raise ShapeError(f"shapes {' and '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together")
    out.append(big.pop() if big else 1)
  return tuple(out)

def _sigmoid_grad(g, s, x): return (g * s * (1 - s),)
def _tanh_grad(g, t, x): return (g * (1 - t * t),)
def _relu_grad(g, out, x): return (out.eq(0).where(0, g),)   # out is 0 exactly where x <= 0 (NaN passes g, as in torch)

_TANH_EDGE = 9.02
_TANH_P = (1.0, 0.13084924221038818, 0.003104936797171831, 1.1163466297148261e-05, -2.025578638154002e-08,
           5.289138224617851e-11, -8.508734623997871e-14)
_TANH_Q = (1.0, 0.4641825258731842, 0.02449919283390045, 0.00025475083384662867)
def _tanh_rational(x):
  """float32 tanh as x * P(x^2) / Q(x^2), a rational fit on |x| <= 9.02 (relative error 7e-9 before float32 rounding,
  at most ~5 float32 ulps after it, under 1 on average): one division and ten multiply-adds, against exp2, a
  reciprocal and a series for small x (a third faster); exact near 0 (P(0) = 1). Beyond 9.02 tanh is +-1.0f."""
  c = x.maximum(-_TANH_EDGE).minimum(_TANH_EDGE)
  z = c * c
  t = c * _horner(z, _TANH_P) / _horner(z, _TANH_Q)
  return (x.abs() > _TANH_EDGE).where((x > 0).where(1.0, -1.0), t)

def _tanh_series_sigmoid(x):
  """float64 tanh: 2*sigmoid(2x)-1, which cancels to nothing near 0 (tanh(1e-8) gave 0): there its odd series to
  x^11 (the next term is below 1e-10 for |x| < 0.25). Clamped at +-10, exp2 never overflows (libmvec's vector exp2
  takes a scalar slow path for each overflowing lane)."""
  far = 2.0 * (2.0 * x.maximum(-10.0).minimum(10.0)).sigmoid() - 1.0
  small = x.abs() < 0.25
  xs = small.where(x, 0.0)   # the series only ever sees small x: x^11 of a large x would make the gradient NaN
  x2 = xs * xs
  near = xs * (1.0 + x2 * (-1 / 3 + x2 * (2 / 15 + x2 * (-17 / 315 + x2 * (62 / 2835 + x2 * (-1382 / 155925))))))
  return small.where(near, far)

def _horner(z, coeffs: tuple[float, ...]):
  acc = z * coeffs[-1] + coeffs[-2]
  for k in reversed(coeffs[:-2]): acc = acc * z + k
  return acc

def _pow_grad(g, out, a, b):
  """torch's: d/da = b * a^(b-1), 0 where b == 0; d/db = a^b * ln(a), 0 where a == 0 and b >= 0."""
  da = b.eq(0).where(0.0, b * a.pow(b - 1))
  db = (a.eq(0) & (b >= 0)).where(0.0, out * a.log())
  return g * da, g * db

def _alu(u: UOp, op: Ops, c: UOp) -> UOp: return graph.alu(op, u, c)
def _alu_rev(u: UOp, op: Ops, c: UOp) -> UOp: return graph.alu(op, c, u)

_ADD, _MUL, _EXP2, _LOG2 = Ops.ADD, Ops.MUL, Ops.EXP2, Ops.LOG2   # (an attribute of the Ops enum costs ~80 ns)
# the scales of exp and log10, one float object each: graph.const finds a constant it was given before by identity
_INV_LN2, _LN2_OVER_LN10 = 1 / LN2, LN2 / math.log(10)
_FLOAT_IDS = frozenset(map(id, dtypes.floats))   # (a float dtype by identity: dtypes.is_float's first look, inline)

def _grad_over(t) -> bool | None:
  """requires_grad of an op's output over the one tensor `t` (False under no_grad)."""
  if t.no_grad: return False
  rg = t.requires_grad
  return rg if rg is None or rg is True or rg is False else True in (rg,)

class ElementwiseMixin:
  __slots__ = ()
  # ---- broadcasting and promotion ----
  def _to_tensor(self, y: Any, dtype: DType | None = None):
    """A Python value as a tensor on our device; scalars get our dtype where that loses nothing (int into float)."""
    if isinstance(y, type(self)): return y
    if isinstance(y, UOp) and y.shape is None:   # a bound variable or an expression of them: an int scalar
      return self.from_uop(graph.const(y, dtype or self._scalar_dtype(0), self.device, ()), requires_grad=False)
    if isinstance(y, UOp): return self.from_uop(y)
    if isinstance(y, (bool, int, float)):
      return self.from_uop(graph.const(y, dtype or self._scalar_dtype(y), self.device, ()), requires_grad=False)
    if isinstance(y, (list, tuple, np.ndarray, np.generic)): return type(self)(y, device=self.device, dtype=dtype)
    raise TypeError(f"cannot combine a Tensor with {type(y).__name__}")

  def _scalar_dtype(self, y: bool | int | float) -> DType:
    keep = dtypes.is_float(self.dtype) or (dtypes.is_int(self.dtype) and isinstance(y, int))
    return self.dtype if keep else dtypes.from_py(y)

  def _broadcast_to(self, shape: tuple[int, ...]):
    if (u := self._uop) is None: u = self._build()
    if (old := u.shape) == (shape := tuple(shape)): return self
    if graph.concrete(old) and len(shape) >= len(old) and all([type(s) is int for s in shape]):
      # plain ints: the reshape and the expand as nodes, one tensor (their makers' fast paths)
      padded = (1,) * (len(shape) - len(old)) + old
      if all([n == s or n == 1 for n, s in zip(padded, shape)]):
        return self.from_uop(graph.expand(graph.reshape(u, padded), shape), _grad_over(self))
    padded = (1,) * (len(shape) - self.ndim) + self.shape
    if len(shape) < self.ndim or any(s != n and s != 1 for s, n in zip(padded, shape)):
      raise ShapeError(f"cannot expand (broadcast) shape {self.shape} to {tuple(shape)}: only dims of size 1 can grow")
    x = self.reshape(padded)
    return x._apply_uop(graph.expand, shape=tuple(shape))

  def _broadcasted(self, y: Any, reverse: bool = False, match_dtype: bool = True):
    if type(y) in (int, float, bool) and (not match_dtype or (sdt := self._scalar_dtype(y)) == self.dtype):
      # the common `x * 2.0`: the constant is made at x's shape at once (one node chain, one tensor)
      u = self.uop
      shape = () if (s := u.shape) is None else s
      dtype = sdt if match_dtype else self._scalar_dtype(y)
      c = self.from_uop(graph.const(y, dtype, u.device, shape), requires_grad=False)
      return (c, self) if reverse else (self, c)
    x, y = self, self._to_tensor(y)
    if x.device != y.device: raise ValueError(f"tensors are on different devices: {x.device} and {y.device}")
    if match_dtype and x.dtype != y.dtype:
      out = least_upper_dtype(x.dtype, y.dtype)
      x, y = x.cast(out), y.cast(out)
    if reverse: x, y = y, x
    shape = broadcast_shape(x.shape, y.shape)
    return x._broadcast_to(shape), y._broadcast_to(shape)

  def _binop(self, op: Ops, y: Any, reverse: bool = False):
    if (ty := type(y)) is float or ty is int or ty is bool:
      if (u := self._uop) is None: u = self.uop
      # _scalar_dtype, inline: the constant takes our dtype where that loses nothing (int into float)
      dt = u.dtype
      sdt = dt if id(dt) in _FLOAT_IDS or dtypes.is_float(dt) or (ty is not float and dtypes.is_int(dt)) else \
        dtypes.from_py(y)
    else: sdt = None
    if sdt is not None and (sdt is dt or sdt == dt):
      # `x + 1.0`: the constant goes into the graph as it is, without a Tensor of its own (it would require no grad,
      # which leaves x's gradient flag as it is)
      if (shape := u.shape) is None or type(dev := u.device) is not str:   # (a deviceless constant's, a multi-device
        c = graph.const(y, sdt, u.device, () if shape is None else shape)   # graph: alu2 looks at both sources)
        return self.from_uop(graph.alu2(op, c, u) if reverse else graph.alu2(op, u, c), _grad_over(self))
      c = graph.const(y, sdt, dev, shape)
      # _apply_uop's work for one input, inline: the busiest op of a small loop (`t + 1.0`). The constant is made at
      # u's shape and on its device: the node is alu2's, without its look at both sources
      return self.from_uop(graph.alu2_known(op, c, u, shape, dev) if reverse else graph.alu2_known(op, u, c, shape, dev),
                           _grad_over(self))
    a, b = self._broadcasted(y, reverse)
    return a._apply_uop(lambda u, v: graph.alu(op, u, v), b)

  def _const_like(self, value: Any, dtype: DType | None = None):
    """`value` broadcast to our shape, as a foldable constant (unlike full_like, which makes a buffer of its own)."""
    return self.from_uop(graph.const(value, dtype or self.dtype, self.device, self.shape), requires_grad=False)
  def _unop(self, op: Ops):
    # _apply_uop's work for one input, inline (no closure): exp2 and friends in every small graph
    if (u := self._uop) is None: u = self.uop
    return self.from_uop(graph.alu1(op, u), _grad_over(self))
  def _floats(self): return self if dtypes.is_float(self.dtype) else self.cast(least_upper_float(self.dtype))
  def _scaled_unop(self, op: Ops, before: float | None, after: float | None = None):
    """`op(x * before) * after` of x = self._floats() (either scale may be None: left out) as one tensor: the same
    graph as the ops one by one, without a Tensor for each step (exp is exp2 of x / ln 2: every softmax builds it)."""
    if (u := self._uop) is not None and id(u.dtype) in _FLOAT_IDS: x = self   # (_floats' usual answer, inline)
    else:
      x = self._floats()
      if (u := x._uop) is None: u = x.uop
    if (shape := u.shape) is not None and type(dev := u.device) is str:
      # the constants made at u's shape and on its device: alu2_known's nodes
      dt = u.dtype
      if before is not None: u = graph.alu2_known(Ops.MUL, u, graph.const(before, dt, dev, shape), shape, dev)
      u = graph.alu1(op, u)
      if after is not None: u = graph.alu2_known(Ops.MUL, u, graph.const(after, dt, dev, shape), shape, dev)
      return self.from_uop(u, _grad_over(x))
    shape = () if shape is None else shape   # (a deviceless constant's or a multi-device graph: alu2's checks)
    if before is not None: u = graph.alu2(Ops.MUL, u, graph.const(before, u.dtype, u.device, shape))
    u = graph.alu1(op, u)
    if after is not None: u = graph.alu2(Ops.MUL, u, graph.const(after, u.dtype, u.device, shape))
    return self.from_uop(u, _grad_over(x))

  # ---- arithmetic ----
  def add(self, y, reverse: bool = False): return self._binop(Ops.ADD, y, reverse)
  def sub(self, y, reverse: bool = False):
    if not reverse and type(y) in (int, float) and dtypes.is_float(self.dtype):
      return self._binop(Ops.ADD, -y)   # `x - c` is `x + (-c)` exactly in IEEE arithmetic: one constant, no NEG node
    a, b = self._broadcasted(y, reverse)
    if a.dtype == dtypes.bool: raise TypeError("subtraction of bool tensors is not supported; use logical_xor or ^")
    return a._binop(Ops.ADD, -b)
  def mul(self, y, reverse: bool = False): return self._binop(Ops.MUL, y, reverse)
  def div(self, y, reverse: bool = False, rounding_mode: str | None = None):
    """True division (ints give floats); rounding_mode 'trunc' or 'floor' rounds the quotient like torch.div."""
    a, b = self._broadcasted(y, reverse)
    if rounding_mode is None:
      a, b = a._floats(), b.cast(least_upper_float(b.dtype))
      return a._apply_uop(lambda u, v: graph.alu(Ops.FDIV, u, v), b)
    if rounding_mode not in ("trunc", "floor"):
      raise graph.ArgumentError(f"rounding_mode must be None, 'trunc' or 'floor', not {rounding_mode!r}")
    if dtypes.is_float(a.dtype): return a.div(b).trunc() if rounding_mode == "trunc" else a.div(b).floor()
    q = a._apply_uop(lambda u, v: graph.alu(Ops.IDIV, u, v), b)
    if rounding_mode == "trunc" or dtypes.is_unsigned(a.dtype) or a.dtype == dtypes.bool: return q
    # C division truncates toward zero; floor division steps one lower when the signs differ and it is inexact
    inexact = (q * b).ne(a)
    return (inexact & ((a < 0).ne(b < 0))).where(q - 1, q)
  def mod(self, y, reverse: bool = False):
    """Remainder with the sign of the divisor, like Python's % and torch.remainder."""
    a, b = self._broadcasted(y, reverse)
    if dtypes.is_float(a.dtype): return a - b * a.div(b).floor()
    r = a._apply_uop(lambda u, v: graph.alu(Ops.MOD, u, v), b)
    if dtypes.is_unsigned(a.dtype): return r
    return (r.ne(0) & ((r < 0).ne(b < 0))).where(r + b, r)

  def pow(self, y, reverse: bool = False):
    """x ** y. Small integer exponents multiply; otherwise exp2(y * log2|x|) with the sign of negative bases fixed.
    An integer tensor to a float power is a float tensor (as torch). Gradients follow torch's conventions at 0 and
    infinities: d/dx is 0 where y == 0, d/dy is 0 where x == 0 and y >= 0."""
    if not reverse and isinstance(y, float) and not dtypes.is_float(self.dtype): return self._floats().pow(y)
    small_int = isinstance(y, (int, float)) and not isinstance(y, bool) and float(y).is_integer() and abs(y) <= 8
    if not reverse and small_int: return self._int_pow(int(y))
    if not reverse and isinstance(y, float) and y == 0.5: return self.sqrt()
    a, b = self._broadcasted(y, reverse)
    if not dtypes.is_float(a.dtype) and isinstance(y, int) and not reverse: return a._int_pow(y)
    out_dtype = a.dtype
    a, b = a._floats(), b.cast(least_upper_float(b.dtype))
    mag = (b * a.abs().log2()).exp2()
    b_is_int = b.trunc().eq(b)
    b_is_odd = b_is_int & (b - (b * 0.5).floor() * 2).eq(1)
    # a negative base to a fractional power is NaN, except -inf (C's pow: +inf or +0, like the magnitude)
    signed = (a < 0).where(b_is_int.where(b_is_odd.where(-mag, mag), a.eq(-math.inf).where(mag, math.nan)), mag)
    out = b.eq(0).where(1.0, signed)
    if not dtypes.is_float(out_dtype): return out.round().cast(out_dtype)
    if out.requires_grad is False: return out
    from tinyplug.gradient import custom_gradient
    return custom_gradient(out, (a, b), _pow_grad)

  def _int_pow(self, n: int):
    if n < 0:
      if not dtypes.is_float(self.dtype):   # as torch: the result would not be an integer
        raise DTypeError(f"integer tensors ({self.dtype}) to negative integer powers ({n}) are not allowed")
      return self._int_pow(-n).reciprocal()
    if n == 0: return self._const_like(1)
    result, base = None, self
    while n:
      if n & 1: result = base if result is None else result * base
      n >>= 1
      if n: base = base * base
    return result

  def maximum(self, y):
    return self._binop(Ops.MAX, y)
  def minimum(self, y):
    a, b = self._broadcasted(y)
    if not dtypes.is_float(a.dtype): return (a < b).where(a, b)   # -x would overflow the smallest signed int
    return -((-a).maximum(-b))
  def where(self, x, y):
    """self ? x : y, elementwise with broadcasting; x and y are promoted to a common dtype."""
    if (fast := self._where_same(x, y)) is not None: return fast
    if isinstance(x, type(self)): x, y = x._broadcasted(y)
    elif isinstance(y, type(self)): y, x = y._broadcasted(x)
    cond, x = self._broadcasted(x, match_dtype=False)
    cond, y = cond._broadcasted(y, match_dtype=False)
    x, y = x._broadcasted(y)
    cond = cond._broadcast_to(x.shape).cast(dtypes.bool)
    return cond._apply_uop(lambda c, u, v: graph.alu(Ops.WHERE, c, u, v), x, y)

  def _where_same(self, x, y):
    """where() when there is nothing to promote or broadcast (relu's `(x > 0).where(x, 0)`): a bool condition, and
    tensors of its shape and device and of one dtype, and Python scalars that take that dtype as they are (as
    `_broadcasted` gives them). None otherwise: the general path promotes and broadcasts."""
    tt = type(self)
    t = x if isinstance(x, tt) else y if isinstance(y, tt) else None
    cu = self.uop
    if t is None or cu.dtype != dtypes.bool or t.uop.shape != cu.shape or t.uop.device != cu.device: return None
    srcs, tensors = [cu], [self]
    for v in (x, y):
      if isinstance(v, tt):
        vu = v.uop
        if v is not t and (vu.dtype != t.uop.dtype or vu.shape != cu.shape or vu.device != cu.device): return None
        srcs.append(v.uop); tensors.append(v)
      elif type(v) in (int, float, bool) and t._scalar_dtype(v) == t.uop.dtype:
        srcs.append(graph.const(v, t.uop.dtype, cu.device, () if cu.shape is None else cu.shape))
      else: return None
    flags = [u.requires_grad for u in tensors]
    requires_grad = False if tt.no_grad else True if True in flags else (None if None in flags else False)
    return self.from_uop(graph.alu(Ops.WHERE, *srcs), requires_grad)

  # ---- comparisons (bool results) ----
  def __lt__(self, y): return self._binop(Ops.CMPLT, y)
  def __gt__(self, y): return self._binop(Ops.CMPLT, y, reverse=True)
  def __le__(self, y):
    a, b = self._broadcasted(y)
    return (a < b) | a.eq(b)
  def __ge__(self, y):
    a, b = self._broadcasted(y)
    return (b < a) | a.eq(b)
  def eq(self, y): return self._binop(Ops.CMPEQ, y)
  def ne(self, y): return self._binop(Ops.CMPNE, y)
  def __eq__(self, y): return self.eq(y)  # type: ignore[override]
  def __ne__(self, y): return self.ne(y)  # type: ignore[override]

  # ---- bitwise and logical ----
  def _bitwise(self, op: Ops, name: str, y, reverse: bool = False):
    other = y.dtype if hasattr(y, "dtype") else float if isinstance(y, float) else None
    if dtypes.is_float(self.dtype) or other is float or (other is not None and other is not float and dtypes.is_float(other)):
      what = self.dtype if dtypes.is_float(self.dtype) else other if other is not float else "a Python float"
      raise DTypeError(f"{name} needs bool or integer tensors, not {what}")
    return self._binop(op, y, reverse)
  def bitwise_and(self, y, reverse: bool = False): return self._bitwise(Ops.AND, "&", y, reverse)
  def bitwise_or(self, y, reverse: bool = False): return self._bitwise(Ops.OR, "|", y, reverse)
  def bitwise_xor(self, y, reverse: bool = False): return self._bitwise(Ops.XOR, "^", y, reverse)
  def bitwise_not(self):
    if dtypes.is_float(self.dtype): raise DTypeError(f"~ needs bool or integer tensors, not {self.dtype}")
    return self.logical_not() if self.dtype == dtypes.bool else self.bitwise_xor(-1)
  def lshift(self, y, reverse: bool = False): return self._bitwise(Ops.SHL, "<<", y, reverse)
  def rshift(self, y, reverse: bool = False): return self._bitwise(Ops.SHR, ">>", y, reverse)
  def logical_not(self): return self.cast(dtypes.bool).ne(True)
  def logical_and(self, y): return self.cast(dtypes.bool) & self._to_tensor(y).cast(dtypes.bool)
  def logical_or(self, y): return self.cast(dtypes.bool) | self._to_tensor(y).cast(dtypes.bool)
  def logical_xor(self, y): return self.cast(dtypes.bool) ^ self._to_tensor(y).cast(dtypes.bool)

  # ---- unary math ----
  def neg(self): return self.logical_not() if self.dtype == dtypes.bool else self._unop(Ops.NEG)
  def reciprocal(self): return self._floats()._unop(Ops.RECIPROCAL)
  def sqrt(self): return self._floats()._unop(Ops.SQRT)
  def rsqrt(self): return self.sqrt().reciprocal()
  def exp2(self): return self._floats()._unop(Ops.EXP2)
  def log2(self): return self._floats()._unop(Ops.LOG2)
  def exp(self): return self._scaled_unop(_EXP2, _INV_LN2)
  def log(self): return self._scaled_unop(_LOG2, None, LN2)
  def log10(self): return self._scaled_unop(_LOG2, None, _LN2_OVER_LN10)
  def sin(self): return self._floats()._unop(Ops.SIN)
  def cos(self):
    x = self._floats()
    # halves and fp8s shift by pi/2 in float32: in float16, -17 + pi/2 already rounds by 0.004 (cos(-17) was 3% off)
    if x.dtype.itemsize < 4: return ((math.pi / 2) - x.cast(dtypes.float32)).sin().cast(x.dtype)
    return ((math.pi / 2) - x).sin()
  def tan(self): return self.sin() / self.cos()
  def square(self): return self * self
  def abs(self):
    if dtypes.is_unsigned(self.dtype) or self.dtype == dtypes.bool: return self
    if dtypes.is_int(self.dtype): return (self < 0).where(-self, self)
    return self * self.sign()
  def sign(self):
    if self.dtype == dtypes.bool: return self
    return (self > 0).where(self._const_like(1), (self < 0).where(self._const_like(-1), self._const_like(0)))
  def trunc(self): return self._unop(Ops.TRUNC) if dtypes.is_float(self.dtype) else self
  def floor(self):
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (t > self).where(t - 1, t)
  def ceil(self):
    if not dtypes.is_float(self.dtype): return self
    t = self.trunc()
    return (t < self).where(t + 1, t)
  def round(self):
    """Round half to even, like torch.round and numpy."""
    if not dtypes.is_float(self.dtype): return self
    f = self.floor()
    frac = self - f
    f_is_odd = (f - (f * 0.5).floor() * 2).eq(1)
    return (frac > 0.5).where(f + 1, (frac < 0.5).where(f, f_is_odd.where(f + 1, f)))
  def frac(self): return self - self.trunc()
  def lerp(self, end, weight): return self + (end - self) * weight
  def isnan(self): return self.ne(self)
  def isinf(self, detect_positive: bool = True, detect_negative: bool = True):
    pos = self.eq(math.inf) if detect_positive else self._const_like(False, dtypes.bool)
    return (pos | self.eq(-math.inf)) if detect_negative else pos
  def isfinite(self): return (self.isinf() | self.isnan()).logical_not()

  # ---- activations ----
  @graph_template   # a few Tensor ops per call otherwise
  def relu(self):
    if not dtypes.is_float(self.dtype): return (self > 0).where(self, 0)
    out = (self > 0).where(self, self.isnan().where(self, 0))   # relu(nan) is nan, as in torch
    if out.requires_grad is False: return out
    # the gradient reads the output, not the input: a materialized activation is then the one value both passes read
    from tinyplug.gradient import custom_gradient
    return custom_gradient(out, (self,), _relu_grad)
  @graph_template
  def sigmoid(self):
    x = self._floats()
    s = (1 + (x * (-1 / LN2)).exp2()).reciprocal()
    if s.requires_grad is False: return s
    # d/dx through the ops is -(1+e)^-2 * e*ln2: inf * 0 = NaN once exp2 overflows (x < -88); s*(1-s) is exact there
    from tinyplug.gradient import custom_gradient
    return custom_gradient(s, (x,), _sigmoid_grad)
  def logsigmoid(self): return -(-self).softplus()
  @graph_template
  def tanh(self):
    x = self._floats()
    if x.dtype == dtypes.float64: t = _tanh_series_sigmoid(x)
    else:   # halves and fp8s through float32: the fit's coefficients and x^12 terms are beyond their range
      t = _tanh_rational(x if x.dtype == dtypes.float32 else x.cast(dtypes.float32))
      if t.dtype != x.dtype: t = t.cast(x.dtype)
    if t.requires_grad is False: return t
    # 1 - t^2 from the value: differentiating the formula through (gelu's backward in a matmul epilogue) costs twice
    # the ops
    from tinyplug.gradient import custom_gradient
    return custom_gradient(t, (x,), _tanh_grad)
  @graph_template
  def leaky_relu(self, neg_slope: float = 0.01): return (self < 0).where(self * neg_slope, self)
  @graph_template
  def elu(self, alpha: float = 1.0): return self.relu() - alpha * (1 - self.exp()).relu()
  def celu(self, alpha: float = 1.0): return self.maximum(0) + (alpha * ((self / alpha).exp() - 1)).minimum(0)
  def selu(self, alpha: float = 1.67326, gamma: float = 1.0507):
    return gamma * (self >= 0).where(self, alpha * (self.exp() - 1))
  @graph_template
  def gelu(self, approximate: str = "tanh"):
    """approximate='tanh' (the default, as in tinygrad) or 'none' (x * Phi(x) with erf), as torch's gelu."""
    if approximate == "none": return 0.5 * self * (1 + (self * (1 / math.sqrt(2))).erf())
    if approximate != "tanh": raise ValueError(f"gelu: approximate must be 'tanh' or 'none', not {approximate!r}")
    return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())
  @graph_template
  def quick_gelu(self): return self * (self * 1.702).sigmoid()
  @graph_template
  def silu(self): return self * self.sigmoid()
  def swish(self): return self.silu()
  @graph_template
  def softplus(self, beta: float = 1.0):
    bx = self._floats() * beta
    return (bx.relu() + (-bx.abs()).exp().add(1).log()) * (1 / beta)
  @graph_template
  def mish(self): return self * self.softplus().tanh()
  @graph_template
  def relu6(self): return self.relu() - (self - 6).relu()
  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5):
    return (alpha * self + beta).relu() - (alpha * self + beta - 1).relu()
  @graph_template
  def hardswish(self): return self * (self + 3).relu6() * (1 / 6)
  def hardtanh(self, min_val: float = -1, max_val: float = 1): return self.clip(min_val, max_val)
  def softsign(self): return self / (1 + self.abs())
  def clip(self, min_=None, max_=None):
    """Clamp to [min_, max_] (either may be None); the gradient passes where min_ <= x <= max_, as in torch."""
    if min_ is None and max_ is None: raise RuntimeError("clip needs at least one of min_ or max_")
    out = self
    if min_ is not None: out = (out < min_).where(min_, out)
    if max_ is not None: out = (out > max_).where(max_, out)
    return out
  def clamp(self, min_=None, max_=None): return self.clip(min_, max_)

  # ---- dtypes ----
  def cast(self, dtype: DType | str):
    dtype = to_dtype(dtype)
    return self if self.dtype == dtype else self._apply_uop(graph.cast, dtype=dtype)
  def bitcast(self, dtype: DType | str):
    """Reinterpret the bits as `dtype`, like torch's view(dtype): to a smaller element the last dim grows (little
    endian: the low bytes first), to a bigger one it shrinks."""
    dtype = to_dtype(dtype)
    if self.dtype == dtype: return self
    if dtype.itemsize != self.dtype.itemsize:
      if not self.shape or (self.shape[-1] * self.dtype.itemsize) % dtype.itemsize:
        raise ShapeError(f"cannot bitcast shape {self.shape} of {self.dtype} to {dtype}: the last dim does not divide")
      if dtypes.bool in (dtype, self.dtype): raise ValueError(f"cannot bitcast {self.dtype} to {dtype}: bool has no bits to share")
      return self._bitcast_resize(dtype)
    return self._apply_uop(graph.bitcast, dtype=dtype)
  def _bitcast_resize(self, dtype: DType):
    """A size-changing bitcast as shifts and masks on unsigned ints of each size (works on every device)."""
    small, big = sorted((self.dtype.itemsize, dtype.itemsize))
    ratio, bits = big // small, 8 * small
    src_u, dst_u = _UINT_OF_SIZE[self.dtype.itemsize], _UINT_OF_SIZE[dtype.itemsize]
    x, lead, n = self.bitcast(src_u), self.shape[:-1], self.shape[-1]
    if self.dtype.itemsize > dtype.itemsize:   # split each element into `ratio` pieces
      mask = (1 << bits) - 1
      parts = [((x >> (bits * i)) & mask).cast(dst_u) for i in range(ratio)]
      out = parts[0].stack(*parts[1:], dim=-1).reshape(lead + (n * ratio,))
    else:                                      # join each `ratio` neighbours into one element
      x = x.reshape(lead + (n // ratio, ratio)).cast(dst_u)
      out = functools.reduce(lambda acc, i: acc | (x[..., i] << (bits * i)), range(1, ratio), x[..., 0])
    return out.bitcast(dtype)
  def float(self): return self.cast(dtypes.float32)
  def half(self): return self.cast(dtypes.float16)
  def double(self): return self.cast(dtypes.float64)
  def bfloat16(self): return self.cast(dtypes.bfloat16)
  def int(self): return self.cast(dtypes.int32)
  def long(self): return self.cast(dtypes.int64)
  def short(self): return self.cast(dtypes.int16)
  def char(self): return self.cast(dtypes.int8)
  def byte(self): return self.cast(dtypes.uint8)
  def bool(self): return self.cast(dtypes.bool)

  # ---- Python operators ----
  def __neg__(self): return self.neg()
  def __invert__(self): return self.bitwise_not()
  # (the busiest operators go to _binop at once: a frame and an enum lookup less per `x + 1.0`)
  def __add__(self, y): return self._binop(_ADD, y)
  def __radd__(self, y): return self._binop(_ADD, y, True)
  def __sub__(self, y): return self.sub(y)
  def __rsub__(self, y): return self.sub(y, reverse=True)
  def __mul__(self, y): return self._binop(_MUL, y)
  def __rmul__(self, y): return self._binop(_MUL, y, True)
  def __truediv__(self, y): return self.div(y)
  def __rtruediv__(self, y): return self.div(y, reverse=True)
  def __floordiv__(self, y): return self.div(y, rounding_mode="floor")
  def __rfloordiv__(self, y): return self.div(y, reverse=True, rounding_mode="floor")
  def __mod__(self, y): return self.mod(y)
  def __rmod__(self, y): return self.mod(y, reverse=True)
  def __pow__(self, y): return self.pow(y)
  def __rpow__(self, y): return self.pow(y, reverse=True)
  def __and__(self, y): return self.bitwise_and(y)
  def __rand__(self, y): return self.bitwise_and(y, reverse=True)
  def __or__(self, y): return self.bitwise_or(y)
  def __ror__(self, y): return self.bitwise_or(y, reverse=True)
  def __xor__(self, y): return self.bitwise_xor(y)
  def __rxor__(self, y): return self.bitwise_xor(y, reverse=True)
  def __lshift__(self, y): return self.lshift(y)
  def __rlshift__(self, y): return self.lshift(y, reverse=True)
  def __rshift__(self, y): return self.rshift(y)
  def __rrshift__(self, y): return self.rshift(y, reverse=True)
  def __iadd__(self, y): return self.assign(self.add(y))
  def __isub__(self, y): return self.assign(self.sub(y))
  def __imul__(self, y): return self.assign(self.mul(y))
  def __itruediv__(self, y): return self.assign(self.div(y))
