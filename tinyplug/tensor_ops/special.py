"""Elementwise functions built from the basic math of elementwise.py: inverse trigonometric and hyperbolic functions,
erf, copysign, logaddexp, fmod and isclose. Each is a short composition, so autograd differentiates it as written."""
from __future__ import annotations
import math
from tinyplug.uop.dtype import dtypes

# atan(t) for |t| <= tan(pi/8): the odd Taylor series, whose terms past t**21 are below float32's resolution there
_ATAN_TERMS = tuple((-1) ** k / (2 * k + 1) for k in range(11))
_TAN_PI_8 = math.sqrt(2) - 1
# erf(x) = 1 - poly(t) * exp(-x*x) with t = 1 / (1 + p*|x|): Abramowitz & Stegun 7.1.26 (error below 1.5e-7)
_ERF_P, _ERF_A = 0.3275911, (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_UINT_BITS = {2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}

class SpecialMixin:
  __slots__ = ()
  # ---- inverse trigonometric ----
  def atan(self):
    """Arctangent: reduced to |t| <= 1 (atan(x) = sign(x)*pi/2 - atan(1/x)), halved once more
    (atan(t) = 2*atan(t / (1 + sqrt(1 + t*t)))), then a series."""
    x = self._floats()
    big = x.abs() > 1
    t = big.where(x.reciprocal(), x)
    t = t / (1 + (1 + t * t).sqrt())
    t2 = t * t
    poly = t2 * 0 + _ATAN_TERMS[-1]
    for c in reversed(_ATAN_TERMS[:-1]): poly = poly * t2 + c
    small = 2 * t * poly
    return big.where(x.sign() * (math.pi / 2) - small, small)
  def asin(self):
    x = self._floats()
    return (x / ((1 - x) * (1 + x)).sqrt()).atan()
  def acos(self): return (math.pi / 2) - self.asin()
  # ---- hyperbolic ----
  def sinh(self):
    e = self._floats().exp()
    return (e - e.reciprocal()) * 0.5
  def cosh(self):
    e = self._floats().exp()
    return (e + e.reciprocal()) * 0.5
  def asinh(self):
    x = self._floats()
    return x.sign() * (x.abs() + (x * x + 1).sqrt()).log()
  def acosh(self):
    x = self._floats()
    return (x + ((x - 1) * (x + 1)).sqrt()).log()
  def atanh(self):
    x = self._floats()
    return ((1 + x) / (1 - x)).log() * 0.5
  # ---- others ----
  def erf(self):
    x = self._floats()
    t = (1 + _ERF_P * x.abs()).reciprocal()
    poly = t * 0 + _ERF_A[-1]
    for c in reversed(_ERF_A[:-1]): poly = poly * t + c
    return x.sign() * (1 - poly * t * (-x * x).exp())
  def _sign_bit(self):
    """True where the sign bit is set (-0.0 and negative NaNs included), from the float's bits."""
    x = self._floats()
    bits = _UINT_BITS[x.dtype.itemsize]
    return (x.bitcast(bits) >> (x.dtype.itemsize * 8 - 1)).cast(dtypes.bool)
  def copysign(self, other):
    """The magnitude of self with the sign of `other` (as torch.copysign, -0.0 counts as negative)."""
    x, y = self._floats()._broadcasted(other)
    x, y = x._floats(), y._floats()
    ret = (x._sign_bit() ^ y._sign_bit()).where(-x, x)
    # at x == 0 the result is +-0 whatever x's sign: no gradient flows there (torch's rule)
    return (x == 0).where(ret.detach(), ret)
  def logaddexp(self, other):
    """log(exp(self) + exp(other)) without overflow."""
    x, y = self._broadcasted(other)
    m = x.maximum(y).detach()
    m = m.isinf().where(0, m)   # both -inf (or +inf): no shift
    return ((x - m).exp() + (y - m).exp()).log() + m
  def fmod(self, other):
    """C's fmod: the remainder of truncated division, with the dividend's sign."""
    x, y = self._broadcasted(other)
    if dtypes.is_float(x.dtype): return x - (x / y).trunc() * y
    return x - x.div(y, rounding_mode="trunc") * y
  def isclose(self, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False):
    """|self - other| <= atol + rtol * |other| elementwise (infinities only close to themselves), as torch.isclose."""
    x, y = self._broadcasted(other)
    close = x.eq(y) | ((x - y).abs() <= atol + rtol * y.abs()) & x.isfinite() & y.isfinite() \
      if dtypes.is_float(x.dtype) else x.eq(y) | ((x - y).abs() <= atol + rtol * y.abs())
    return (close | (x.isnan() & y.isnan())) if equal_nan and dtypes.is_float(x.dtype) else close
