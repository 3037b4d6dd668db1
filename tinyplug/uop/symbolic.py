"""Symbolic simplification: tables of UPat -> small named functions, applied with graph_rewrite.

`symbolic_simple` folds constants and removes identities; `symbolic` adds term combining, canonical ordering,
div/mod folding and comparisons decided by bounds; `sym` adds a few rules for lowering (cast chains).

Integer division and modulo follow C: IDIV truncates toward zero and MOD takes the dividend's sign. The
floor-style identities (`(x*c+y)//c == x + y//c`, ...) only hold when dividend and remainder share a sign,
so every such rule checks that with vmin/vmax first. Index arithmetic is assumed not to overflow its dtype
for the div/mod/compare rules (ADD/MUL/SUB reassociation is exact even with wrap-around).
"""
from __future__ import annotations
import functools, math, operator
from tinyplug.uop.dtype import dtypes, _INTS
from tinyplug.uop.ops import Ops, GroupOp, UOp, exec_alu
from tinyplug.uop.upat import UPat, PatternMatcher

INTS = tuple(sorted(_INTS))
INTS_AND_BOOL = INTS + (dtypes.bool,)

# ---------------- helpers ----------------

def _scalar_int(u: UOp) -> bool: return u.dtype.count == 1 and dtypes.is_int(u.dtype)

def _split_sum(u: UOp) -> list[UOp]:
  """The terms of an ADD chain, left to right (iterative: long chains are fine)."""
  out: list[UOp] = []
  stack = [u]
  while stack:
    t = stack.pop()
    if t.op is Ops.ADD: stack.append(t.src[1]); stack.append(t.src[0])
    else: out.append(t)
  return out

def _coefficient(t: UOp) -> tuple[UOp | None, int]:
  """A term as (base, k) with t == base*k; base is None for a constant."""
  if t.op is Ops.CONST: return None, t.arg
  if t.op is Ops.MUL and t.src[1].op is Ops.CONST: return t.src[0], t.src[1].arg
  return t, 1

def _build_sum(like: UOp, terms: list[tuple[UOp | None, int]]) -> UOp:
  """Rebuilds sum(base*k) with the constant last; 0 when there are no terms."""
  out: UOp | None = None
  const = 0
  for base, k in terms:
    if base is None: const += k; continue
    t = base if k == 1 else base * base.const_like(k)
    out = t if out is None else out + t
  if out is None: return like.const_like(const)
  return out + out.const_like(const) if const != 0 else out

def _same_sign(whole: UOp, part: UOp) -> bool:
  """C division of `whole` and of `part` agree on rounding when both are >= 0 or both are <= 0."""
  return (whole.vmin >= 0 and part.vmin >= 0) or (whole.vmax <= 0 and part.vmax <= 0)

# ---------------- symbolic_simple: constants and identities ----------------

def fold_constants(x: UOp) -> UOp | None:
  """An ALU op whose sources are all constants becomes a constant."""
  if x.dtype.count != 1 or any(s.dtype.count != 1 for s in x.src): return None
  vals = [s.arg for s in x.src]
  if x.op in (Ops.IDIV, Ops.MOD) and vals[1] == 0: return None
  try: val = exec_alu(x.op, x.dtype, vals)
  except (ArithmeticError, ValueError, TypeError, KeyError): return None
  return None if isinstance(val, complex) else x.const_like(val)

def fold_cast_const(x: UOp, c: UOp) -> UOp | None:
  return x.const_like(c.arg) if x.dtype.count == 1 else None

def fold_where_const(c: UOp, a: UOp, b: UOp) -> UOp: return a if c.arg else b

def fold_max_by_bounds(a: UOp, b: UOp) -> UOp | None:
  if a.vmin >= b.vmax: return a
  if b.vmin >= a.vmax: return b
  return None

def zero_like(x: UOp) -> UOp: return x.const_like(0)
def false_like(x: UOp) -> UOp: return x.const_like(False)
def true_like(x: UOp) -> UOp: return x.const_like(True)
def keep_x(x: UOp) -> UOp: return x

def _signed_zero(c: UOp) -> bool: return math.copysign(1.0, c.arg) < 0

# Exact for every x: -0.0 + -0.0 is -0.0 but -0.0 + 0.0 is +0.0, so a float keeps only x + (-0.0) and x - (+0.0).
def add_zero(x: UOp, c: UOp) -> UOp | None: return x if not dtypes.is_float(x.dtype) or _signed_zero(c) else None
def sub_zero(x: UOp, c: UOp) -> UOp | None: return x if not dtypes.is_float(x.dtype) or not _signed_zero(c) else None

x_var, y_var = UPat.var("x"), UPat.var("y")
x_int = UPat.var("x", dtype=INTS)
x_bool = UPat.var("x", dtype=dtypes.bool)
c_scalar = UPat.cvar("c", vec=False)

def _bin(op: Ops, a: UPat, b: UPat, dtype=None, name: str | None = None, ordered: bool = False) -> UPat:
  """A binary pattern; commutative ops try both orders unless `ordered`."""
  return UPat(op, dtype, (a, b) if ordered or op not in GroupOp.Commutative else [a, b], name=name)

symbolic_simple = PatternMatcher([
  # constant folding
  (UPat(GroupOp.ALU, src=UPat(Ops.CONST), name="x"), fold_constants),
  (UPat(Ops.CAST, src=(c_scalar,), name="x"), fold_cast_const),
  (UPat(Ops.CAST, name="x", src=(UPat.var("y"),)), lambda x, y: y if x.dtype == y.dtype else None),
  # arithmetic identities
  (_bin(Ops.ADD, x_var, UPat.const(None, 0).named("c")), add_zero),
  (_bin(Ops.MUL, x_var, UPat.const(None, 1)), keep_x),
  (_bin(Ops.MUL, x_var, UPat.const(None, 0), dtype=INTS, name="m"), lambda x, m: m.const_like(0)),
  (_bin(Ops.SUB, x_var, UPat.const(None, 0).named("c")), sub_zero),
  (UPat(Ops.SUB, INTS, (x_var, x_var)), zero_like),
  (UPat(Ops.IDIV, src=(x_var, UPat.const(None, 1))), keep_x),
  (UPat(Ops.MOD, INTS, (x_var, UPat.const(None, 1))), zero_like),
  (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(x_var,)),)), keep_x),
  # bool and bitwise identities
  (UPat((Ops.AND, Ops.OR, Ops.MAX), src=(x_var, x_var)), keep_x),
  (_bin(Ops.AND, x_bool, UPat.const(None, True)), keep_x),
  (_bin(Ops.AND, x_bool, UPat.const(None, False)), false_like),
  (_bin(Ops.OR, x_bool, UPat.const(None, True)), true_like),
  (_bin(Ops.OR, x_bool, UPat.const(None, False)), keep_x),
  (_bin(Ops.XOR, x_bool, UPat.const(None, False)), keep_x),
  (_bin(Ops.AND, x_int, UPat.const(None, 0)), zero_like),
  (_bin((Ops.OR, Ops.XOR), x_int, UPat.const(None, 0)), keep_x),
  (UPat(Ops.XOR, INTS_AND_BOOL, (x_var, x_var)), false_like),
  (_bin(Ops.CMPNE, x_bool, UPat.const(None, False)), keep_x),
  (_bin(Ops.CMPEQ, x_bool, UPat.const(None, True)), keep_x),
  (UPat(Ops.CMPNE, src=(UPat(Ops.CMPNE, src=(x_bool, UPat.const(None, True))), UPat.const(None, True))), keep_x),
  # where with a known condition or equal branches
  (UPat(Ops.WHERE, src=(c_scalar, UPat.var("a"), UPat.var("b"))), fold_where_const),
  (UPat(Ops.WHERE, src=(UPat.var(), x_var, x_var)), keep_x),
  (UPat(Ops.WHERE, dtypes.bool, (UPat.var("x"), UPat.const(None, True), UPat.const(None, False))), keep_x),
  # max decided by bounds
  (UPat(Ops.MAX, src=(UPat.var("a"), UPat.var("b"))), fold_max_by_bounds),
])

# ---------------- symbolic: bounds, canonical order, combining terms, div/mod ----------------

def fold_by_bounds(x: UOp) -> UOp | None:
  """An integer or bool expression whose bounds meet is that constant."""
  if x.dtype.count != 1: return None
  lo, hi = x._min_max
  return x.const_like(lo) if lo == hi else None

def const_to_right(u: UOp, c: UOp, x: UOp) -> UOp | None:
  return None if x.op is Ops.CONST else UOp(u.op, u.dtype, (x, c), u.arg)

def add_self(x: UOp) -> UOp | None: return None if x.dtype == dtypes.bool else x * x.const_like(2)

def combine_coefficients(x: UOp, c1: UOp, c2: UOp) -> UOp: return x * x.const_like(c1.arg + c2.arg)
def combine_with_one(x: UOp, c1: UOp) -> UOp: return x * x.const_like(c1.arg + 1)

def fold_add_consts(x: UOp, c1: UOp, c2: UOp) -> UOp: return x + x.const_like(c1.arg + c2.arg)
def fold_mul_consts(x: UOp, c1: UOp, c2: UOp) -> UOp: return x * x.const_like(c1.arg * c2.arg)

def const_outward(x: UOp, c1: UOp, y: UOp) -> UOp | None:
  """(x+c1)+y -> (x+y)+c1, so constants meet at the top of a sum."""
  return None if y.op is Ops.CONST else (x + y) + c1

def sub_const(x: UOp, c: UOp) -> UOp: return x + x.const_like(-c.arg)
def neg_mul_const(x: UOp, c: UOp) -> UOp: return x * x.const_like(-c.arg)

def fold_div_of_sum(d: UOp, x: UOp, c: UOp) -> UOp | None:
  """x//c for a sum x: divide out a common factor, or pull out the terms that c divides."""
  if c.arg <= 0 or not _scalar_int(d): return None
  terms = [_coefficient(t) for t in _split_sum(x)]
  g = math.gcd(c.arg, *(k for _, k in terms))
  if g > 1:  # exact for every sign: (g*s) / (g*c') truncates like s / c'
    return _build_sum(x, [(b, k // g) for b, k in terms]) // c.const_like(c.arg // g)
  quotient = [(b, k // c.arg) for b, k in terms if k % c.arg == 0]
  if not quotient: return _div_by_multiple(x, terms, c.arg)
  rest = _build_sum(x, [(b, k) for b, k in terms if k % c.arg != 0])
  if not _same_sign(x, rest): return None
  out = _build_sum(x, quotient)
  return out if rest.op is Ops.CONST and rest.arg == 0 else out + rest // c

def _div_by_multiple(x: UOp, terms: list[tuple[UOp | None, int]], c: int) -> UOp | None:
  """(b*k + rest) // (k*m) is b // m when b >= 0 and 0 <= rest < k: the rest never carries into b. A view's index
  through a reshape: (n*K + k) // (32*K) with 0 <= k < K is n // 32 (the panel of column n of a packed matrix)."""
  for i, (b, k) in enumerate(terms):
    if b is None or k <= 1 or c % k != 0 or b.vmin < 0: continue
    rest = _build_sum(x, terms[:i] + terms[i + 1:])
    if rest.vmin >= 0 and rest.vmax < k: return b // b.const_like(c // k)
  return None

def fold_mod_of_sum(m: UOp, x: UOp, c: UOp) -> UOp | None:
  """x%c for a sum x: drop the terms that c divides and reduce the other coefficients mod c."""
  if c.arg <= 0 or not _scalar_int(m): return None
  terms = [_coefficient(t) for t in _split_sum(x)]
  g = math.gcd(c.arg, *(k for _, k in terms))
  if g == c.arg: return m.const_like(0)
  if g > 1 and all(k // g == 1 for b, k in terms if b is not None):  # exact for every sign: (g*s) % (g*c') == g*(s % c')
    return (_build_sum(x, [(b, k // g) for b, k in terms]) % c.const_like(c.arg // g)) * c.const_like(g)
  reduced = [(b, k % c.arg) for b, k in terms if k % c.arg != 0]
  if reduced == terms: return _mod_of_multiple_and_rest(x, terms, c)
  rest = _build_sum(x, reduced)
  return rest % c if _same_sign(x, rest) else None

def _mod_of_multiple_and_rest(x: UOp, terms: list[tuple[UOp | None, int]], c: UOp) -> UOp | None:
  """(a + r) % c is a % c + r when a >= 0 is a multiple of some g dividing c and 0 <= r < g: r never carries past
  the next multiple of g. An upcast lane of a reshaped axis, (4*i + 1) % 16, is then 4*(i % 4) + 1 (and with the
  quotient's part, 4*i + 1: lanes at consecutive addresses, one vector load instead of four)."""
  for g in sorted({math.gcd(c.arg, k) for b, k in terms if b is not None}, reverse=True):
    if g <= 1: break
    multiple = [(b, k) for b, k in terms if b is not None and k % g == 0]
    rest = [(b, k) for b, k in terms if b is None or k % g != 0]
    if not rest: continue
    a, r = _build_sum(x, multiple), _build_sum(x, rest)
    if a.vmin >= 0 and r.vmin >= 0 and r.vmax < g: return a % c + r
  return None

def mod_in_range(x: UOp, c: UOp) -> UOp | None:
  """x%c is x when |x| < c (C keeps the dividend's sign)."""
  return x if c.arg > 0 and -c.arg < x.vmin and x.vmax < c.arg else None

def fold_div_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  return x // x.const_like(c1.arg * c2.arg) if c1.arg > 0 and c2.arg > 0 else None

def fold_mod_mod(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  return x % c2 if c1.arg > 0 and c2.arg > 0 and c1.arg % c2.arg == 0 else None

def div_of_mod(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  """(x % m) // d is (x // d) % (m // d) where d divides m and x >= 0: the quotient then simplifies on its own (a
  channel recovered from a flattened group view, ((c*3136 + p) % 25088) // 3136 with p < 3136, is c % 8)."""
  return (x // c2) % x.const_like(c1.arg // c2.arg) if c1.arg > 0 and c2.arg > 0 and c1.arg % c2.arg == 0 and \
    x.vmin >= 0 else None

def recombine_div_mod_sum(x: UOp, y: UOp, c: UOp, c2: UOp) -> UOp | None:
  """(x + y//c)*c + y%c is x*c + y, for either sign of y: a flattened view's index (a 4096x4096 tensor summed as
  256 rows of 65536 reads row*16 + col//4096 and col%4096), which then walks memory with stride 1 again."""
  return x * c + y if c.arg == c2.arg and c.arg != 0 else None

def _div_mod_term(t: UOp) -> tuple[UOp, Ops, int, int] | None:
  """t as (x, IDIV or MOD, c, k) when t is (x // c) * k or (x % c) * k (k = 1 without the product)."""
  k = 1
  if t.op is Ops.MUL and t.src[1].op is Ops.CONST: t, k = t.src[0], t.src[1].arg
  if t.op in (Ops.IDIV, Ops.MOD) and t.src[1].op is Ops.CONST and t.src[1].arg > 0: return t.src[0], t.op, t.src[1].arg, k
  return None

def recombine_scaled_div_mod(s: UOp) -> UOp | None:
  """... + (x//c)*(c*k) + ... + (x%c)*k is ... + x*k, for either sign of x (x//c*c + x%c is x; k = 1 and no other
  terms: the plain recombination): a reshaped axis's index split into quotient and rest, each scaled by its stride,
  joined again so loads see one index."""
  if not _scalar_int(s) or (last := _div_mod_term(s.src[1])) is None: return None
  x, op, c, k = last
  terms = _split_sum(s.src[0])
  for i, t in enumerate(terms):
    if (other := _div_mod_term(t)) is None or other[0] is not x or other[1] is op or other[2] != c: continue
    k_div, k_mod = (k, other[3]) if op is Ops.IDIV else (other[3], k)
    if k_div != c * k_mod: continue
    merged = x if k_mod == 1 else x * x.const_like(k_mod)
    return functools.reduce(operator.add, [*terms[:i], *terms[i + 1:], merged])
  return None

def _lt_const(x: UOp, bound: int) -> UOp | None:
  """x < bound, when bound fits x's dtype (else the rule would wrap the constant)."""
  return x < x.const_like(bound) if x.dtype.min <= bound <= x.dtype.max else None

def lt_of_add(x: UOp, c1: UOp, c2: UOp) -> UOp | None: return _lt_const(x, c2.arg - c1.arg)
def lt_of_mul(x: UOp, c1: UOp, c2: UOp) -> UOp | None: return _lt_const(x, -((-c2.arg) // c1.arg)) if c1.arg > 0 else None
def lt_of_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  return _lt_const(x, c2.arg * c1.arg) if c1.arg > 0 and x.vmin >= 0 else None

# ---------------- arange digits and one-hot reductions (gathers) ----------------

def _pow2(v: object) -> int | None:
  return v.bit_length() - 1 if type(v) is int and v > 0 and v & (v - 1) == 0 else None

def _digit_of(y: UOp) -> tuple[UOp, int] | None:
  """y as (b, k) when y is bit k of b (0 or 1): (b // 2**k) % 2, b % 2, or b // 2**k with b < 2**(k+1)."""
  if y.op is Ops.MOD and y.src[1].op is Ops.CONST and y.src[1].arg == 2:
    inner = y.src[0]
    if inner.op is Ops.IDIV and inner.src[1].op is Ops.CONST and (k := _pow2(inner.src[1].arg)) is not None:
      return (inner.src[0], k) if inner.src[0].vmin >= 0 else None
    return (inner, 0) if inner.vmin >= 0 else None
  if y.op is Ops.IDIV and y.src[1].op is Ops.CONST and (k := _pow2(y.src[1].arg)) is not None:
    b = y.src[0]
    return (b, k) if b.vmin >= 0 and b.vmax < 2 ** (k + 1) else None
  return None

def _bit_test(cond: UOp) -> tuple[UOp, int, bool] | None:
  """cond as (b, k, is_set): cond is `bit k of b is set` (is_set) or `... is clear`."""
  negated = cond.op is Ops.CMPNE and cond.src[1].op is Ops.CONST and cond.src[1].arg is True
  c = cond.src[0] if negated else cond
  if c.op is not Ops.CMPLT or c.src[1].op is not Ops.CONST: return None
  y, bound = c.src[0], c.src[1].arg
  if bound == 1 and (d := _digit_of(y)) is not None: return d[0], d[1], negated   # digit < 1: the bit is clear
  if (k := _pow2(bound)) is not None and y.vmin >= 0 and y.vmax < 2 ** (k + 1): return y, k, negated  # y < 2**k
  return None

def _digit_term(t: UOp) -> tuple[UOp, int] | None:
  """t as (b, k) when t is 2**k if bit k of b is set, else 0 (one digit of an arange: create.arange_uop)."""
  if t.op is not Ops.WHERE or t.src[1].op is not Ops.CONST or t.src[2].op is not Ops.CONST: return None
  if (test := _bit_test(t.src[0])) is None: return None
  b, k, is_set = test
  on, off = (t.src[1].arg, t.src[2].arg) if is_set else (t.src[2].arg, t.src[1].arg)
  return (b, k) if off == 0 and on == 2 ** k else None

def fold_bit_digits(x: UOp) -> UOp | None:
  """A sum of b's binary digits, each weighted by its place (2**k if bit k of b is set), is b itself, when every
  digit of b's range [0, 2**B) is there: `arange` is built from such digits (create.arange_uop), so this turns an
  arange in a kernel back into its loop index, which the one-hot rules below and the index rules can then read."""
  if not _scalar_int(x) or not any(s.op is Ops.WHERE for s in x.src): return None
  terms = _split_sum(x)
  digits: dict[UOp, dict[int, int]] = {}
  for i, t in enumerate(terms):
    if (d := _digit_term(t)) is not None: digits.setdefault(d[0], {}).setdefault(d[1], i)
  for b, bits in digits.items():
    width = max(1, int(b.vmax).bit_length())
    if b.vmin < 0 or b.dtype != x.dtype or set(bits) != set(range(width)): continue
    rest = [t for i, t in enumerate(terms) if i not in bits.values()]
    out = b
    for t in rest: out = out + t
    return out
  return None

def fold_lone_digit(x: UOp) -> UOp | None:
  """An arange of two is a lone digit, (b is 1 ? 1 : 0) for b in [0, 2): b itself (fold_bit_digits needs a sum)."""
  if not _scalar_int(x) or (d := _digit_term(x)) is None: return None
  b, k = d
  return b if k == 0 and b.vmin >= 0 and b.vmax <= 1 and b.dtype == x.dtype else None

def _widened(v: UOp, r: UOp) -> UOp:
  """r for r itself or r cast to a wider int (an int32 arange compared with an int64 index), else v."""
  if v.op is Ops.CAST and v.src[0] is r and dtypes.is_int(v.dtype) and v.dtype.count == 1 and \
     v.dtype.min <= r.dtype.min and r.dtype.max <= v.dtype.max: return r
  return v

def collapse_onehot_reduce(red: UOp) -> UOp | None:
  """sum over r in [0, n) of (e == r ? v(r) : 0), e not depending on r, is (0 <= e < n ? v(e) : 0): a gather
  (`x[idx]`, `gather`, built as a one-hot mask summed) reads the one selected element instead of all n. Loads whose
  address moved with r get the range check as their gate, so an index outside [0, n) reads nothing and gives 0."""
  if red.arg is not Ops.ADD or len(red.src) < 2: return None
  val, wider = red.src[0], None
  # a half table's sum accumulates in float: sum(cast(mask ? v : 0)) picks cast(v) just the same
  if val.op is Ops.CAST and val.src[0].op is Ops.WHERE: val, wider = val.src[0], val.dtype
  if val.op is not Ops.WHERE or val.src[2].op is not Ops.CONST or val.src[2].arg != 0: return None
  cond = val.src[0]
  if cond.op is not Ops.CMPEQ: return None
  for r in red.src[1:]:
    if r.op is not Ops.RANGE or r.src[0].op is not Ops.CONST: continue
    a, b = (_widened(v, r) for v in cond.src)
    e = cond.src[1] if a is r else cond.src[0] if b is r else None
    if e is None or r in e.toposort(): continue
    n = r.src[0].arg
    valid = (e < e.const_like(0)).logical_not() & (e < e.const_like(n))
    at = e if e.dtype == r.dtype else e.cast(r.dtype)   # an int64 index in range fits the range's dtype
    mapping: dict[UOp, UOp] = {r: at}
    for u in val.src[1].toposort():
      if u.op is Ops.INDEX and r in u.src[1].toposort():
        idx = u.src[1].substitute({r: at})
        gate = valid if len(u.src) < 3 else u.src[2].substitute({r: at}) & valid
        mapping[u] = UOp(Ops.INDEX, u.dtype, (u.src[0], idx, gate) + u.src[3:], u.arg)
    got = val.src[1].substitute(mapping)
    # a load we just gated (or a cast of one) already gives 0 where the index is out of range: no second select
    load = got.src[0] if got.op is Ops.CAST else got
    gated = load.op is Ops.LOAD and len(load.src) == 1 and load.src[0] in mapping.values() and \
      math.copysign(1.0, val.src[2].arg) > 0
    picked = got if gated else valid.where(got, val.src[2])
    if wider is not None: picked = picked.cast(wider)
    rest = tuple(x for x in red.src[1:] if x is not r)
    return UOp(Ops.REDUCE, red.dtype, (picked,) + rest, red.arg) if rest else picked
  return None

def _one_hot(v: UOp) -> bool:
  """v is (e == r ? x : 0) (or a cast of it), what collapse_onehot_reduce reads."""
  if v.op is Ops.CAST: v = v.src[0]
  return v.op is Ops.WHERE and v.src[0].op is Ops.CMPEQ and v.src[2].op is Ops.CONST and v.src[2].arg == 0

def split_onehot_reduce(red: UOp) -> UOp | None:
  """sum over the ranges of -(v) is -(sum of v), and of (a + onehot) with `a` not depending on them is a * n + (sum of
  the one-hot), so that the one-hot sum collapses into one read: a softmax cross-entropy's gradient sums its one-hot
  row (-(g + (y == c ? h : 0)) over the classes c), a pass over every row otherwise."""
  if red.arg is not Ops.ADD or len(red.src) < 2 or red.dtype.count != 1: return None
  ranges = red.src[1:]
  if any(r.op is not Ops.RANGE or r.src[0].op is not Ops.CONST for r in ranges): return None
  val = red.src[0]
  if val.op is Ops.NEG:
    inner = UOp(Ops.REDUCE, red.dtype, (val.src[0],) + ranges, red.arg)
    if _one_hot(val.src[0]): return -inner
    if val.src[0].op is Ops.ADD and (split := split_onehot_reduce(inner)) is not None: return -split
    return None
  if val.op is not Ops.ADD: return None
  for a, b in (val.src, val.src[::-1]):
    if _one_hot(b) and not any(r in a.toposort() for r in ranges):
      n = math.prod(r.src[0].arg for r in ranges)
      return a * a.const_like(n) + UOp(Ops.REDUCE, red.dtype, (b,) + ranges, red.arg)
  return None

c1_scalar, c2_scalar = UPat.cvar("c1", vec=False), UPat.cvar("c2", vec=False)

symbolic = PatternMatcher([
  # an integer expression whose bounds meet is a constant: tried first
  (UPat(GroupOp.ALU, INTS_AND_BOOL, name="x"), fold_by_bounds),
  # canonical order: constants on the right of commutative ops
  (UPat(GroupOp.Commutative, src=(c_scalar, x_var), name="u"), const_to_right),
]) + symbolic_simple + PatternMatcher([
  # combining terms (integers: float reassociation would change rounding)
  (UPat(Ops.ADD, INTS, (x_var, x_var)), add_self),
  (UPat(Ops.ADD, INTS, (x_var * c1_scalar, x_var * c2_scalar)), combine_coefficients),
  (UPat(Ops.ADD, INTS, [x_var * c1_scalar, x_var]), combine_with_one),
  (UPat(Ops.ADD, INTS, [x_var, UPat(Ops.NEG, src=(x_var,))]), zero_like),
  (UPat(Ops.ADD, INTS, (x_var + c1_scalar, c2_scalar)), fold_add_consts),
  (UPat(Ops.MUL, INTS, (x_var * c1_scalar, c2_scalar)), fold_mul_consts),
  (UPat(Ops.ADD, INTS, [x_var + c1_scalar, y_var]), const_outward),
  (UPat(Ops.SUB, INTS, (x_var, c_scalar)), sub_const),
  (UPat(Ops.NEG, INTS, (x_var * c_scalar,)), neg_mul_const),
  # division and modulo (C semantics; see the module docstring)
  (UPat(Ops.IDIV, src=(UPat(Ops.IDIV, src=(x_var, c1_scalar)), c2_scalar)), fold_div_div),
  (UPat(Ops.IDIV, INTS, (UPat(Ops.MOD, src=(x_var, c1_scalar)), c2_scalar)), div_of_mod),
  (UPat(Ops.IDIV, INTS, (x_var, c_scalar), name="d"), fold_div_of_sum),
  (UPat(Ops.MOD, src=(x_var, c_scalar)), mod_in_range),
  (UPat(Ops.MOD, src=(UPat(Ops.MOD, src=(x_var, c1_scalar)), c2_scalar)), fold_mod_mod),
  (UPat(Ops.MOD, INTS, (x_var, c_scalar), name="m"), fold_mod_of_sum),
  (UPat(Ops.ADD, INTS, [UPat(Ops.MUL, src=(UPat(Ops.ADD, src=[x_var, UPat(Ops.IDIV, src=(y_var, c_scalar))]), c2_scalar)),
                        UPat(Ops.MOD, src=(y_var, c_scalar))]), recombine_div_mod_sum),
  (UPat(Ops.ADD, INTS, name="s"), recombine_scaled_div_mod),
  # comparisons
  (UPat((Ops.CMPLT, Ops.CMPNE), src=(x_int, x_int)), lambda x: UOp.const(dtypes.bool, False)),
  (UPat(Ops.CMPLT, src=(x_int + c1_scalar, c2_scalar)), lt_of_add),
  (UPat(Ops.CMPLT, src=(x_int * c1_scalar, c2_scalar)), lt_of_mul),
  (UPat(Ops.CMPLT, src=(x_int // c1_scalar, c2_scalar)), lt_of_div),
  # an arange's digits summed back into its index; a one-hot mask's sum into one gated read
  (UPat(Ops.ADD, INTS, name="x"), fold_bit_digits),
  (UPat(Ops.WHERE, INTS, name="x"), fold_lone_digit),
  (UPat(Ops.REDUCE, name="red"), collapse_onehot_reduce),
  (UPat(Ops.REDUCE, name="red"), split_onehot_reduce),
])

# ---------------- sym: symbolic plus rules used while lowering ----------------

def fold_cast_chain(x: UOp, y: UOp) -> UOp | None:
  """cast(cast(y, wider int), target) is cast(y, target) when the middle cast loses nothing."""
  mid = x.src[0].dtype
  if _scalar_int(y) and dtypes.is_int(mid) and mid.count == 1 and mid.min <= y.dtype.min and y.dtype.max <= mid.max:
    return y.cast(x.dtype)
  return None

sym = symbolic + PatternMatcher([
  (UPat(Ops.CAST, name="x", src=(UPat(Ops.CAST, src=(UPat.var("y"),)),)), fold_cast_chain),
])
