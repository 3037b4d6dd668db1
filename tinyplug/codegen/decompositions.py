"""Rewrite ops a renderer lacks in terms of ops it has (declared by `Renderer.native_ops`).

Each missing op has one row in a PatternMatcher; the rows for the ops a renderer lacks are applied with graph_rewrite
until nothing matches, so a decomposition may use other decomposable ops (POW builds EXP2 and LOG2, a float16 EXP2
builds a float32 one, SUB becomes ADD and NEG where SUB is missing).

The math, for float32 and float64 (float16 and bfloat16 compute in float32 and cast back):
- exp2(x): x = q + r with q an integer (rounded by adding and subtracting a magic number) and |r| <= 1/2; 2**r is a
  polynomial (float32: a degree-6 minimax fit, float64: degree 11, economized from Taylor), 2**q an integer add into its exponent bits; results
  in the denormals are built 2**64 larger and rounded once by a multiply, 2**128 comes out as inf.
- log2(x): denormals are scaled up by 2**64 first; x = 2**e * m with m in [sqrt(1/2), sqrt(2)], and
  log2(m) = 2/ln(2) * atanh(s) with s = (m-1)/(m+1), a series in s*s.
- sin(x): k = round(x * 2/pi), r = x - k*pi/2 with pi/2 split into parts short enough that k*part is exact
  (Cody-Waite), then sin(r) or cos(r) by the quadrant k mod 4. float32 from |x| = 2**16 on reduces by Payne-Hanek
  (the bits of 2/pi that matter for x's exponent, times x's mantissa, in 64-bit integers): accurate over the whole
  range. float64 is accurate for |x| < 2**27 * pi/2 (about 2.1e8); past that the result is only bounded to [-1, 1].
- sqrt(x): 1/sqrt(x) from a bit-trick estimate refined by Newton steps, then one Newton step on sqrt itself.
Accuracy is within a few ulp over the whole range, special values (inf, nan, 0, negatives) as in C's libm.
"""
from __future__ import annotations
import functools, math
from fractions import Fraction
from typing import Callable
from tinyplug.device import Renderer
from tinyplug.helpers import TRANSCENDENTAL
from tinyplug.uop.dtype import DType, dtypes
from tinyplug.uop.ops import Ops, UOp
from tinyplug.uop.rewrite import graph_rewrite
from tinyplug.uop.upat import PatternMatcher, UPat

# ---------------- float formats and constants ----------------

def _format(x: UOp) -> tuple[int, int, int]:
  """(exponent bits, mantissa bits, exponent bias) of x's float dtype."""
  exp_bits, mant_bits = dtypes.finfo(x.dtype.scalar())
  return exp_bits, mant_bits, (1 << (exp_bits - 1)) - 1

def _uint_dtype(x: UOp) -> DType:
  """The unsigned integer dtype as wide as x's float dtype (wrapping shifts and adds), with x's vector width."""
  return {4: dtypes.uint32, 8: dtypes.uint64}[x.dtype.scalar().itemsize].vec(x.dtype.count)

def _int_dtype(x: UOp) -> DType:
  """The signed integer dtype as wide as x's float dtype, with x's vector width."""
  return {4: dtypes.int32, 8: dtypes.int64}[x.dtype.scalar().itemsize].vec(x.dtype.count)

def _float_dtype(like: UOp, scalar: DType) -> DType: return scalar.vec(like.dtype.count)

# Taylor coefficients: 2**r = sum (ln2*r)**k / k!, sin r = sum (-1)**k r**(2k+1) / (2k+1)!, cos likewise
def _exp2_coeffs(degree: int) -> tuple[float, ...]:
  return tuple(math.log(2) ** k / math.factorial(k) for k in range(degree + 1))
def _sin_coeffs(terms: int) -> tuple[float, ...]:
  return tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(1, terms + 1))
def _cos_coeffs(terms: int) -> tuple[float, ...]:
  return tuple((-1) ** k / math.factorial(2 * k) for k in range(2, terms + 2))
# ln(1+f) = 2*atanh(s) = 2s + s*R(z), z = s*s, R(z) = 2z/3 + 2z**2/5 + ... = z * P(z)
def _log_coeffs(terms: int) -> tuple[float, ...]:
  return tuple(2 / (2 * k + 3) for k in range(terms))

# degrees chosen so the first omitted term is well below half an ulp on the reduced range
# float32 exp2: a degree-6 fit of 2**r on [-1/2, 1/2] with the constant term 1 (so 2**integer is exact), minimax in
# relative error (2e-9, against 5e-9 for Taylor's degree 7): one multiply-add fewer at the same accuracy
_EXP2_F32_MINIMAX = (1.0, 0.6931471824645996, 0.24022647738456726, 0.055503323674201965, 0.009618437848985195,
                     0.0013398876180872321, 0.00015353357593994588)
_LN2 = Fraction("0.6931471805599453094172321214581765680755001343602552541206800094933936219696947156")

def _chebyshev(n: int) -> list[Fraction]:
  """The coefficients of the Chebyshev polynomial T_n, lowest power first."""
  prev, cur = [Fraction(1)], [Fraction(0), Fraction(1)]
  if n == 0: return prev
  for _ in range(n - 1):
    nxt = [Fraction(0)] + [2 * v for v in cur]
    for i, v in enumerate(prev): nxt[i] -= v
    prev, cur = cur, nxt
  return cur

def _economized_exp2(taylor_degree: int, degree: int, half_width: Fraction = Fraction(1, 2)) -> tuple[float, ...]:
  """2**r's Taylor polynomial, its top terms traded for Chebyshev polynomials on [-half_width, half_width]: each
  removed term c_n r**n adds at most |c_n| * half_width**n / 2**(n-1) of error, far less than dropping it."""
  c = [_LN2 ** k / math.factorial(k) for k in range(taylor_degree + 1)]
  while len(c) - 1 > degree:
    n = len(c) - 1
    t = _chebyshev(n)
    for k in range(n): c[k] -= c[n] * half_width ** (n - k) * t[k] / t[n]
    c.pop()
  return tuple(float(v) for v in c)

# float64: degree 11 economized from Taylor's 16 (1.9e-17 relative, the constant term rounds to 1.0), three
# multiply-adds fewer than Taylor's 14
EXP2_COEFFS = {dtypes.float32: _EXP2_F32_MINIMAX, dtypes.float64: _economized_exp2(16, 11)}
LOG_COEFFS = {dtypes.float32: _log_coeffs(4), dtypes.float64: _log_coeffs(10)}
SIN_COEFFS = {dtypes.float32: _sin_coeffs(4), dtypes.float64: _sin_coeffs(8)}
COS_COEFFS = {dtypes.float32: _cos_coeffs(4), dtypes.float64: _cos_coeffs(7)}

_PI = Fraction("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899862803482534211706798")

def _round_to_bits(v: Fraction, bits: int) -> Fraction:
  """v rounded to `bits` significant bits."""
  exp = math.frexp(float(v))[1]
  scale = Fraction(2) ** (bits - exp)
  return Fraction(round(v * scale)) / scale

def _split(v: Fraction, part_bits: int, parts: int, last_bits: int) -> tuple[float, ...]:
  """v as parts of `part_bits` significant bits each and a last part of `last_bits`: k*part is exact for small k."""
  out = []
  for i in range(parts):
    p = _round_to_bits(v, part_bits if i < parts - 1 else last_bits)
    out.append(float(p))
    v -= p
  return tuple(out)

# Cody-Waite: k = round(x*2/pi) needs at most K_BITS bits in the accurate range, so parts of (mantissa+1 - K_BITS)
# bits multiply by k exactly. float32: |x| < 2**16 * pi/2 ~ 102900 (all of float16); float64: |x| < 2**27 * pi/2.
_K_BITS = {dtypes.float32: 16, dtypes.float64: 27}
_PIO2_NPARTS = {dtypes.float32: 5, dtypes.float64: 5}    # pi/2 to 8*4+24 = 56 bits / 26*4+53 = 157 bits
PIO2_PARTS = {dt: _split(_PI / 2, dtypes.finfo(dt)[1] + 1 - _K_BITS[dt], _PIO2_NPARTS[dt], dtypes.finfo(dt)[1] + 1)
              for dt in (dtypes.float32, dtypes.float64)}

# 1/ln2 = log2(e) in a high part with half the mantissa bits (so hi * part is exact when hi has half the bits too)
_LOG2_E = Fraction("1.44269504088896340735992468100189213742664595415298593413544940693110921918118507988552662289350634")
INV_LN2_PARTS = {dt: _split(_LOG2_E, (dtypes.finfo(dt)[1] + 1) // 2, 2, dtypes.finfo(dt)[1] + 1)
                 for dt in (dtypes.float32, dtypes.float64)}
# keeps the high half of the mantissa bits of a float (and its sign and exponent)
_HIGH_HALF_MASK = {dtypes.float32: ~((1 << 12) - 1), dtypes.float64: ~((1 << 27) - 1)}

# Payne-Hanek (float32): 2/pi as a string of bits, 16 zero bits first (so a window may start before its point), in
# 32-bit words; a 64-bit window of it at the bit where a float's exponent puts it gives x*2/pi mod 4 exactly enough
_PH_LEAD_ZEROS, _PH_WORDS = 16, 7
_PH_BITS = int(Fraction(2) / _PI * 2 ** (32 * _PH_WORDS - _PH_LEAD_ZEROS))
TWO_OVER_PI_WORDS = tuple((_PH_BITS >> (32 * (_PH_WORDS - 1 - i))) & 0xFFFFFFFF for i in range(_PH_WORDS))
PAYNE_HANEK_FROM = 2.0 ** 16   # float32 |x| from here on reduces by Payne-Hanek (Cody-Waite is exact below ~102900)

# x + 1.5 * 2**mant_bits rounds x (|x| < 2**(mant_bits-1)) to an integer, which lands in the sum's low mantissa bits
_ROUND_MAGIC = {dtypes.float32: 1.5 * 2.0 ** 23, dtypes.float64: 1.5 * 2.0 ** 52}
# exp2's results in the denormals are built 2**64 larger (normal) and scaled down by one multiply
_DENORMAL_STEP = 64

# first guesses of 1/sqrt(x) from the bits of x (published constants)
RSQRT_MAGIC = {dtypes.float32: 0x5F3759DF, dtypes.float64: 0x5FE6EB50C7B537A9}
RSQRT_NEWTON_STEPS = {dtypes.float32: 3, dtypes.float64: 4}

# ---------------- small building blocks ----------------

def _horner(x: UOp, coeffs: tuple[float, ...]) -> UOp:
  """coeffs[0] + coeffs[1]*x + coeffs[2]*x**2 + ..."""
  acc = x.const_like(coeffs[-1])
  for c in reversed(coeffs[:-1]): acc = acc * x + c
  return acc

def _clamp(x: UOp, lo: float, hi: float) -> UOp:
  """x clamped to [lo, hi]; NaN becomes hi (comparisons with NaN are false)."""
  return (x < hi).where((x < lo).where(lo, x), hi)

def _round_to_int(x: UOp) -> UOp:
  """x rounded to the nearest integer (halves away from zero), as the int dtype of x's width. |x| must fit it."""
  return (x + (x < 0.0).where(x.const_like(-0.5), 0.5)).cast(_int_dtype(x))

def _is_nan(x: UOp) -> UOp: return x.ne(x)

# ---------------- exp2, log2, sin, sqrt on float32 / float64 ----------------

def exp2_float(x: UOp) -> UOp:
  """2**x = 2**r * 2**q, q = round(x), 2**r by polynomial, 2**q added into its exponent bits.

  About 20 vector ops for float32: the rounding is an add and a subtract of a magic number (no int conversions), 2**q
  one shift and an integer add, and only results in the denormals take a second, exact step."""
  _, mant_bits, bias = _format(x)
  uints = _uint_dtype(x)
  # below -(bias+mant_bits+1) every result rounds to 0 (those lanes are zeroed at the end) and from bias+1 on it is
  # inf, so clamping at those bounds keeps q small without changing results (2**(bias+1) comes out as the exponent
  # field all ones: inf); NaN is clamped here too and restored below
  lo = -float(bias + mant_bits + 1)
  xc = _clamp(x, lo, float(bias + 1))
  magic = x.const_like(_ROUND_MAGIC[x.dtype.scalar()])
  t = xc + magic                              # xc rounded to an integer q (to even), q in t's low mantissa bits
  r = xc - (t - magic)                        # exact, |r| <= 1/2
  poly = _horner(r, EXP2_COEFFS[x.dtype.scalar()])   # in [sqrt(1/2), sqrt(2)]: exponent field bias-1 or bias
  # t's bits shifted up by the mantissa width are q in the exponent field (the magic's bits leave the word), so an
  # integer add scales poly by 2**q while the result is a normal float. Results below the normals add q+64 and
  # multiply by 2**-64 after: that multiply rounds once, into the denormals
  tiny = xc < float(2 - bias)
  shift = t.bitcast(uints) << mant_bits
  shift = shift + tiny.where(shift.const_like(_DENORMAL_STEP << mant_bits), shift.const_like(0))
  # lanes whose result is 0 (a masked softmax's -inf) multiply by 0: 2**-64 would underflow there, and an underflowing
  # multiply costs a microcode assist on some cores (exp of -inf ~2.7x slower than of 0 on Zen 3)
  scale = (x < lo).where(x.const_like(0.0), tiny.where(x.const_like(2.0 ** -_DENORMAL_STEP), 1.0))
  out = (poly.bitcast(uints) + shift).bitcast(x.dtype) * scale
  return _is_nan(x).where(x, out)

def log2_float(x: UOp) -> UOp:
  """log2(x) = e + log2(1+f) with x = 2**e * (1+f), 1+f in [sqrt(1/2), sqrt(2)].

  ln(1+f) = 2*atanh(s) = f - (f*f/2 - s*(f*f/2 + R(s*s))) with s = f/(2+f); the leading f - f*f/2 is cut to half
  its bits (hi) so that hi times the high half of 1/ln2 is exact, and the rest is carried as lo."""
  _, mant_bits, bias = _format(x)
  scalar = x.dtype.scalar()
  ints = _int_dtype(x)
  small = x < 2.0 ** (1 - bias)                          # denormals (and zero, negatives): scale into the normals
  xs = small.where(x * 2.0 ** 64, x)
  bits = xs.bitcast(ints)
  exponent = (bits >> mant_bits) + (-bias)
  mantissa = ((bits & ((1 << mant_bits) - 1)) | (bias << mant_bits)).bitcast(x.dtype)   # in [1, 2)
  big = math.sqrt(2) < mantissa
  f = big.where(mantissa * 0.5, mantissa) - 1.0          # exact
  e = exponent.cast(x.dtype) + big.where(x.const_like(1.0), 0.0) + small.where(x.const_like(-64.0), 0.0)
  s = f / (f + 2.0)
  z = s * s
  half_f2 = 0.5 * f * f
  hi = ((f - half_f2).bitcast(ints) & _HIGH_HALF_MASK[scalar]).bitcast(x.dtype)
  lo = (f - hi) - half_f2 + s * (half_f2 + z * _horner(z, LOG_COEFFS[scalar]))
  inv_ln2_hi, inv_ln2_lo = INV_LN2_PARTS[scalar]
  lo_part = (lo + hi) * inv_ln2_lo + lo * inv_ln2_hi
  hi_part = hi * inv_ln2_hi                              # exact
  total = e + hi_part                                    # its rounding error is recovered exactly: |hi_part| <= |e|
                                                         # or e == 0
  out = (lo_part + ((e - total) + hi_part)) + total
  out = (x < math.inf).where(out, x)                     # inf -> inf, nan -> nan
  out = x.ne(0.0).where(out, -math.inf)                  # +-0 -> -inf
  return (x < 0.0).where(math.nan, out)                  # negatives -> nan

def _word(i: UOp, like: UOp) -> UOp:
  """TWO_OVER_PI_WORDS[i] as a uint64 (i a uint64 in 0..5), by selects: kernels have no constant tables."""
  out = like.const_like(TWO_OVER_PI_WORDS[5])
  for k in range(4, -1, -1): out = i.eq(k).where(like.const_like(TWO_OVER_PI_WORDS[k]), out)
  return out

def payne_hanek_f32(ax: UOp) -> tuple[UOp, UOp]:
  """(k, r) with ax = k*pi/2 + r, |r| <= pi/4, for float32 ax >= 2**16 (k as int32, correct mod 4).

  ax = m * 2**e with m a 24-bit integer. Bits of 2/pi worth 4 or more after multiplying by 2**e only add multiples
  of 4 to ax*2/pi, so a 64-bit window w of 2/pi from bit e-1 on is enough: ax*2/pi = m*w / 2**62 (mod 4, to 2**-38).
  Bits 32..63 of the 88-bit product m*w are that value in fixed point: 2 bits of quadrant, 30 of fraction."""
  u64 = dtypes.uint64.vec(ax.dtype.count)
  bits = ax.bitcast(dtypes.uint32.vec(ax.dtype.count)).cast(u64)
  m = (bits & 0x7FFFFF) | 0x800000
  e = bits >> 23                                                    # the biased exponent; ax = m * 2**(e - 150)
  t = e + (_PH_LEAD_ZEROS - 1 - 151)                                # window start: bit e-151 of 2/pi, in the string
  t = (t < 118).where(t, t.const_like(118))                         # lanes that take the other path: kept in range
  word, off = t >> 5, t & 31
  hi = (_word(word, m) << 32) | _word(word + 1, m)
  w = (hi << off) | (_word(word + 2, m) >> (32 - off))
  z = ((m * (w >> 32)) + ((m * (w & 0xFFFFFFFF)) >> 32)) & 0xFFFFFFFF
  q, frac = z >> 30, (z & 0x3FFFFFFF).cast(dtypes.int64.vec(ax.dtype.count))
  up = frac >= (1 << 29)                                             # nearest quadrant: the fraction goes negative
  k = (q + up.cast(u64)).cast(dtypes.int32.vec(ax.dtype.count))
  r = (frac - up.where(frac.const_like(1 << 30), 0)).cast(ax.dtype) * (math.pi / 2 / 2 ** 30)
  return k, r

def sin_float(x: UOp) -> UOp:
  """sin(x) with Cody-Waite reduction by pi/2 and a sin or cos polynomial by quadrant."""
  scalar = x.dtype.scalar()
  finite = (x < math.inf).where(-math.inf < x, False)
  xs = finite.where(x, 0.0)
  k_limit = 2.0 ** (30 if scalar == dtypes.float32 else 62)   # beyond the accurate range, but the cast stays defined
  k = _round_to_int(_clamp(xs * (2 / math.pi), -k_limit, k_limit))
  kf = k.cast(x.dtype)
  # r + lo = x - k*pi/2: the first part is subtracted exactly, the rounding error of each later step goes to lo
  first, *rest = PIO2_PARTS[scalar]
  r, lo = xs - kf * first, x.const_like(0.0)
  for part in rest:
    step = kf * part
    new_r = r - step
    lo = lo + ((r - new_r) - step)                        # the rounding error of new_r (Fast2Sum, as |r| >= |step|)
    r = new_r
  if scalar == dtypes.float32:   # large float32: Payne-Hanek on |x|, the signs turned back for negative x
    neg = xs < 0.0
    far = neg.where(-xs, xs) >= PAYNE_HANEK_FROM
    k_far, r_far = payne_hanek_f32(neg.where(-xs, xs))
    k = far.where(neg.where(-k_far, k_far), k)
    r, lo = far.where(neg.where(-r_far, r_far), r), far.where(0.0, lo)
  r2 = r * r
  # sin(r + lo) ~ sin(r) + lo*cos(r), cos(r + lo) ~ cos(r) - lo*sin(r)
  sin_r = r + (lo * (1.0 - 0.5 * r2) + r * r2 * _horner(r2, SIN_COEFFS[scalar]))
  cos_r = 1.0 + (r2 * (-0.5 + r2 * _horner(r2, COS_COEFFS[scalar])) - r * lo)
  quadrant = k & 3
  v = (quadrant & 1).ne(0).where(cos_r, sin_r)
  v = (quadrant & 2).ne(0).where(-v, v)
  # past the accurate range k*part is no longer exact and r can be anything: keep the result a value in [-1, 1]
  return finite.where(_clamp(v, -1.0, 1.0), math.nan)

def sqrt_float(x: UOp) -> UOp:
  """sqrt(x) = x * rsqrt(x), rsqrt refined from a bit-trick guess, then one Newton step on the root."""
  _, mant_bits, bias = _format(x)
  scalar = x.dtype.scalar()
  ints = _int_dtype(x)
  small = x < 2.0 ** (1 - bias)
  xs = small.where(x * 2.0 ** 64, x)                     # sqrt(x * 2**64) = sqrt(x) * 2**32
  sign_bit = 1 << (scalar.itemsize * 8 - 1)
  magnitude = xs.bitcast(ints) & (sign_bit - 1)          # negatives give garbage here; they become nan below
  y = (magnitude.const_like(RSQRT_MAGIC[scalar]) - (magnitude >> 1)).bitcast(x.dtype)
  half = xs * 0.5
  for _ in range(RSQRT_NEWTON_STEPS[scalar]): y = y * (1.5 - (half * y) * y)   # (half*y)*y: no denormal in between
  root = xs * y
  root = root + (xs - root * root) * (y * 0.5)
  root = small.where(root * 2.0 ** -32, root)
  root = (x < math.inf).where(root, x)                   # inf -> inf, nan -> nan
  root = (x < 0.0).where(math.nan, root)
  return x.ne(0.0).where(root, x)                        # +-0 -> +-0

def pow_float(a: UOp, b: UOp) -> UOp:
  """a**b = exp2(b*log2|a|), with pow's signs and special cases as numpy has them (for float32 / float64 operands).
  The relative error grows with |b*log2|a||: about that many ulp of the result."""
  scalar = a.dtype.scalar()
  ints = _int_dtype(a)
  big = 2.0 ** (dtypes.finfo(scalar)[1] + 1)             # every float this large is an even integer
  bc = _clamp(b, -big, big)
  b_int = bc.cast(ints)
  is_integer = b_int.cast(a.dtype).ne(bc).ne(True)
  is_odd = (b_int & 1).ne(0)
  magnitude = (a < 0.0).where(-a, a)
  out = (b * magnitude.log2()).exp2()
  # a negative base: the sign of an odd integer power, nan for a non-integer one
  out = (a < 0.0).where(is_integer.where(is_odd.where(-out, out), math.nan), out)
  out = a.ne(1.0).where(out, 1.0)                        # 1**b is 1, even for nan b
  return b.ne(0.0).where(out, 1.0)                       # a**0 is 1, even for nan a

# ---------------- rewrite rules ----------------

_COMPUTED = (dtypes.float32, dtypes.float64)
_WIDENED = (dtypes.float16, dtypes.bfloat16)

def _in_compute_dtype(x: UOp, srcs: tuple[UOp, ...], fn: Callable[..., UOp]) -> UOp | None:
  """fn on float32/float64 sources directly; float16/bfloat16 go through float32."""
  scalar = x.dtype.scalar()
  if scalar in _COMPUTED: return fn(*srcs)
  if scalar in _WIDENED:
    wide = _float_dtype(x, dtypes.float32)
    return fn(*(s.cast(wide) for s in srcs)).cast(x.dtype)
  return None

def decompose_exp2(x: UOp) -> UOp | None: return _in_compute_dtype(x, x.src, exp2_float)
def decompose_log2(x: UOp) -> UOp | None: return _in_compute_dtype(x, x.src, log2_float)
def decompose_sin(x: UOp) -> UOp | None: return _in_compute_dtype(x, x.src, sin_float)
def decompose_sqrt(x: UOp) -> UOp | None: return _in_compute_dtype(x, x.src, sqrt_float)
def decompose_pow(x: UOp) -> UOp | None: return _in_compute_dtype(x, x.src, pow_float)

def reciprocal_as_fdiv(x: UOp, a: UOp) -> UOp: return a.const_like(1.0) / a
def fdiv_as_reciprocal(x: UOp, a: UOp, b: UOp) -> UOp: return a * b.reciprocal()
def mulacc_as_mul_add(a: UOp, b: UOp, c: UOp) -> UOp: return UOp(Ops.ADD, c.dtype, (UOp(Ops.MUL, c.dtype, (a, b)), c))
def cmpeq_as_not_cmpne(x: UOp, a: UOp, b: UOp) -> UOp: return a.ne(b).ne(True)
def sub_as_add_neg(x: UOp, a: UOp, b: UOp) -> UOp: return UOp(Ops.ADD, a.dtype, (a, -b))
def neg_as_mul(x: UOp, a: UOp) -> UOp:
  return a.ne(True) if x.dtype.scalar() == dtypes.bool else UOp(Ops.MUL, x.dtype, (a, a.const_like(-1)))

def _power_of_two_shift(x: UOp, c: UOp) -> int | None:
  """log2(c) when x is integer math and c a positive power-of-two constant, else None."""
  if not dtypes.is_int(x.dtype) or not isinstance(c.arg, int) or c.arg <= 0 or c.arg & (c.arg - 1): return None
  return c.arg.bit_length() - 1

def _toward_zero_bias(a: UOp, c: UOp) -> UOp:
  """c-1 where a is negative, else 0: adding it makes an arithmetic shift truncate toward zero, as C division does."""
  return (a >> (a.dtype.scalar().itemsize * 8 - 1)) & (c.arg - 1)

def idiv_by_power_of_two(x: UOp, a: UOp, c: UOp) -> UOp | None:
  if (shift := _power_of_two_shift(x, c)) is None: return None
  if dtypes.is_unsigned(a.dtype) or a.vmin >= 0: return a >> shift
  return (a + _toward_zero_bias(a, c)) >> shift

def mod_by_power_of_two(x: UOp, a: UOp, c: UOp) -> UOp | None:
  if _power_of_two_shift(x, c) is None: return None
  if dtypes.is_unsigned(a.dtype) or a.vmin >= 0: return a & (c.arg - 1)
  # C's remainder takes the dividend's sign: a - trunc(a/c)*c, with trunc(a/c)*c = (a + bias) with the low bits cleared
  return a + -((a + _toward_zero_bias(a, c)) & ~(c.arg - 1))

_unary = lambda op: UPat(op, src=(UPat.var("a"),), name="x")
_binary = lambda op: UPat(op, src=(UPat.var("a"), UPat.var("b")), name="x")

# op -> the rows that decompose it; the ops each decomposition builds must be native or decomposable themselves
RULES: dict[Ops, list[tuple[UPat, Callable]]] = {
  Ops.EXP2: [(UPat(Ops.EXP2, name="x"), decompose_exp2)],
  Ops.LOG2: [(UPat(Ops.LOG2, name="x"), decompose_log2)],
  Ops.SIN: [(UPat(Ops.SIN, name="x"), decompose_sin)],
  Ops.SQRT: [(UPat(Ops.SQRT, name="x"), decompose_sqrt)],
  Ops.POW: [(UPat(Ops.POW, name="x"), decompose_pow)],
  Ops.RECIPROCAL: [(_unary(Ops.RECIPROCAL), reciprocal_as_fdiv)],
  Ops.FDIV: [(_binary(Ops.FDIV), fdiv_as_reciprocal)],
  Ops.MULACC: [(UPat(Ops.MULACC, src=(UPat.var("a"), UPat.var("b"), UPat.var("c"))), mulacc_as_mul_add)],
  Ops.CMPEQ: [(_binary(Ops.CMPEQ), cmpeq_as_not_cmpne)],
  Ops.SUB: [(_binary(Ops.SUB), sub_as_add_neg)],
  Ops.NEG: [(_unary(Ops.NEG), neg_as_mul)],
  Ops.IDIV: [(UPat(Ops.IDIV, src=(UPat.var("a"), UPat.cvar("c", vec=False)), name="x"), idiv_by_power_of_two)],
  Ops.MOD: [(UPat(Ops.MOD, src=(UPat.var("a"), UPat.cvar("c", vec=False)), name="x"), mod_by_power_of_two)],
}
DECOMPOSABLE = frozenset(RULES)
_TRANSCENDENTAL_OPS = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})

@functools.cache
def decompositions_for(missing: frozenset[Ops]) -> PatternMatcher:
  """The rows for the ops in `missing`. FDIV and RECIPROCAL are written in terms of each other, so not both."""
  ops = set(missing) & DECOMPOSABLE
  if {Ops.FDIV, Ops.RECIPROCAL} <= ops: ops -= {Ops.FDIV, Ops.RECIPROCAL}
  return PatternMatcher([row for op in sorted(ops) for row in RULES[op]])

def decompose_for(sink: UOp, renderer: Renderer) -> UOp:
  """Rewrite the ops of `sink` that `renderer` lacks; raises NotImplementedError for a missing op left over
  (an integer POW, an IDIV by a non-power-of-two, FDIV and RECIPROCAL both missing, ...)."""
  # TRANSCENDENTAL>=2: exp2/log2/sin from the polynomials here, also where the renderer has its own
  forced = _TRANSCENDENTAL_OPS if TRANSCENDENTAL >= 2 else frozenset()
  if renderer.native_ops is None and not forced: return sink
  missing = (DECOMPOSABLE - frozenset(renderer.native_ops) if renderer.native_ops is not None else frozenset()) | forced
  if not missing & {u.op for u in sink.toposort()}: return sink
  sink = graph_rewrite(sink, decompositions_for(missing), name="decompositions")
  if left := missing & {u.op for u in sink.toposort()}:
    raise NotImplementedError(f"renderer {type(renderer).__name__} lacks {sorted(o.name for o in left)} "
                              "and they could not be decomposed here")
  return sink
