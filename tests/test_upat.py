"""UPat and PatternMatcher: every pattern feature, checked through the compiled matcher and the UPat.match interpreter."""
import itertools
import pytest
from tinyplug.uop import UOp, Ops, GroupOp, dtypes, UPat, PatternMatcher, graph_rewrite
from tinyplug.uop.upat import Pattern, compile_row

def all_matches_compiled(pat: UPat, u: UOp) -> list[dict]:
  """Every match, in order, from the compiled row (fn records and returns None so the matcher keeps going)."""
  seen: list[dict] = []
  row = Pattern(pat, lambda **kw: seen.append(kw), owner="test")
  assert row.matcher(u, None) is None
  return seen

def all_matches(pat: UPat, u: UOp) -> list[dict]:
  interpreted = pat.match(u, {})
  assert all_matches_compiled(pat, u) == interpreted, "compiled matcher and interpreter disagree"
  return interpreted

a, b = UOp.variable("a", 0, 9), UOp.variable("b", 0, 9)
f = UOp.variable("f", 0, 1, dtypes.float)
one, two = UOp.const(dtypes.int, 1), UOp.const(dtypes.int, 2)

class TestFields:
  def test_op_and_op_sets(self):
    assert all_matches(UPat(Ops.ADD), a + b) == [{}]
    assert all_matches(UPat(Ops.MUL), a + b) == []
    assert all_matches(UPat((Ops.MUL, Ops.ADD)), a + b) == [{}]
    assert all_matches(UPat(GroupOp.Binary), a + b) == [{}] and all_matches(UPat(GroupOp.Unary), a + b) == []
  def test_dtype(self):
    assert all_matches(UPat(dtype=dtypes.int), a) == [{}]
    assert all_matches(UPat(dtype=dtypes.float), a) == []
    assert all_matches(UPat(dtype=(dtypes.float, dtypes.int)), a) == [{}]
    # a vector matches a pattern naming its scalar type
    v = UOp(Ops.VECTORIZE, dtypes.float.vec(2), (f, f))
    assert all_matches(UPat(Ops.VECTORIZE, dtypes.float), v) == [{}]
    # pointer dtypes compare by value
    g = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(4), arg=0)
    assert all_matches(UPat(dtype=dtypes.float.ptr(4)), g) == [{}] and all_matches(UPat(dtype=dtypes.float.ptr(5)), g) == []
  def test_arg(self):
    assert all_matches(UPat(Ops.CONST, arg=2), two) == [{}]
    assert all_matches(UPat(Ops.CONST, arg=3), two) == []
    assert all_matches(UPat(Ops.DEFINE_VAR, arg=("a", 0, 9)), a) == [{}]
  def test_named(self):
    assert all_matches(UPat(Ops.ADD, name="x"), a + b) == [{"x": a + b}]
  def test_same_name_twice_is_same_node(self):
    pat = UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x")))
    assert all_matches(pat, a + a) == [{"x": a}]
    assert all_matches(pat, a + b) == []

class TestSources:
  def test_ordered(self):
    pat = UPat(Ops.SUB, src=(UPat.var("x"), UPat.cvar("c")))
    assert all_matches(pat, a - 1) == [{"x": a, "c": one}]
    assert all_matches(pat, 1 - a) == []
  def test_permuted(self):
    pat = UPat(Ops.ADD, src=[UPat.var("x"), UPat.cvar("c")])
    assert all_matches(pat, a + 1) == [{"x": a, "c": one}]
    assert all_matches(pat, 1 + a) == [{"x": a, "c": one}]
  def test_permuted_gives_every_order(self):
    pat = UPat(Ops.ADD, src=[UPat.var("x"), UPat.var("y")])
    assert all_matches(pat, a + b) == [{"x": a, "y": b}, {"x": b, "y": a}]
  def test_length(self):
    assert all_matches(UPat(Ops.ADD, src=(UPat(),)), a + b) == []
    assert all_matches(UPat(Ops.WHERE, src=(UPat(), UPat())), (a < 1).where(a, b)) == []
  def test_allow_any_len(self):
    pat = UPat(Ops.SINK, src=(UPat.var("x"),), allow_any_len=True)
    assert all_matches(pat, UOp.sink(a, b, one)) == [{"x": a}]
    assert all_matches(UPat(Ops.SINK, src=(UPat.var("x"),)), UOp.sink(a, b)) == []
  def test_repeated_src_any_length(self):
    pat = UPat(Ops.SINK, src=UPat(Ops.CONST))
    for n in range(0, 5):
      assert all_matches(pat, UOp(Ops.SINK, dtypes.void, tuple(UOp.const(dtypes.int, i) for i in range(n)))) == [{}]
    assert all_matches(pat, UOp.sink(one, a)) == []
  def test_repeated_named_src_must_be_one_node(self):
    pat = UPat(Ops.SINK, src=UPat.var("x"))
    assert all_matches(pat, UOp.sink(a, a, a)) == [{"x": a}]
    assert all_matches(pat, UOp.sink(a, b)) == []
  def test_nested(self):
    pat = UPat(Ops.ADD, src=[UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar("c1")]), UPat.var("x")])
    assert all_matches(pat, a * 3 + a) == [{"x": a, "c1": UOp.const(dtypes.int, 3)}]
    assert all_matches(pat, a + 3 * a) == [{"x": a, "c1": UOp.const(dtypes.int, 3)}]
    assert all_matches(pat, a * 3 + b) == []

class TestConstructors:
  def test_var_cvar_const(self):
    assert all_matches(UPat.var("x"), a) == [{"x": a}]
    assert all_matches(UPat.var("x", dtypes.float), a) == []
    assert all_matches(UPat.cvar("c"), two) == [{"c": two}] and all_matches(UPat.cvar("c"), a) == []
    vc = UOp.const(dtypes.int.vec(2), (1, 2))
    assert all_matches(UPat.cvar("c"), vc) == [{"c": vc}] and all_matches(UPat.cvar("c", vec=False), vc) == []
    assert all_matches(UPat.const(dtypes.int, 2), two) == [{}] and all_matches(UPat.const(dtypes.float, 2), two) == []
  def test_any(self):
    pat = UPat.any(UPat(Ops.ADD, name="x"), UPat(Ops.MUL, name="y"))
    assert all_matches(pat, a + b) == [{"x": a + b}] and all_matches(pat, a * b) == [{"y": a * b}]
    assert all_matches(pat, a - b) == []
  def test_any_nested(self):
    pat = UPat(Ops.NEG, src=(UPat.any(UPat.cvar("c"), UPat(Ops.ADD, name="s")),))
    assert all_matches(pat, -one) == [{"c": one}] and all_matches(pat, -(a + b)) == [{"s": a + b}]
  def test_operator_sugar(self):
    x, c = UPat.var("x"), UPat.cvar("c")
    assert all_matches(x + c, 1 + a) == [{"x": a, "c": one}]
    assert all_matches(x * c, a * 1) == [{"x": a, "c": one}]
    assert all_matches(x - c, a - 1) == [{"x": a, "c": one}] and all_matches(x - c, 1 - a) == []
    assert all_matches(x // c, a // 1) == [{"x": a, "c": one}]
    assert all_matches(x % c, a % 1) == [{"x": a, "c": one}]
    assert all_matches(x < c, a < 1) == [{"x": a, "c": one}]
    assert all_matches(x.ne(c), a.ne(1)) == [{"x": a, "c": one}]
    assert all_matches(x + 2, a + 2) == [{"x": a}] and all_matches(x + 2, a + 1) == []
    assert all_matches(-x, -a) == [{"x": a}]
    assert all_matches(x.cast(dtypes.float), a.cast(dtypes.float)) == [{"x": a}]
    assert all_matches(x.maximum(c), one.maximum(a)) == [{"x": a, "c": one}]

class TestPatternMatcher:
  def test_first_non_none_wins(self):
    pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: None), (UPat(Ops.ADD, name="x"), lambda x: one),
                         (UPat(Ops.ADD, name="x"), lambda x: two)])
    assert pm.rewrite(a + b) is one and pm.rewrite(a * b) is None
  def test_ctx(self):
    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="x"), lambda ctx, x: ctx.get(x.arg[0]))])
    assert pm.rewrite(a, ctx={"a": two}) is two
    assert graph_rewrite(a + b, pm, ctx={"a": one, "b": two}) is one + two
  def test_no_ctx_param_gets_no_ctx(self):
    pm = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="x"), lambda x: one)])
    assert pm.rewrite(a, ctx="ignored") is one
  def test_dispatch_by_op(self):
    calls = {"mul": 0, "add": 0, "any": 0}
    def on(kind):
      def fn(**kw): calls[kind] += 1
      return fn
    pm = PatternMatcher([(UPat(Ops.MUL, name="x"), on("mul")), (UPat(Ops.ADD, name="x"), on("add")),
                         (UPat(name="x"), on("any"))])
    for _ in range(10): pm.rewrite(a + b)
    assert calls == {"mul": 0, "add": 10, "any": 10}
    # the table compiled for ADD holds no row of MUL at all
    pm2 = PatternMatcher([(UPat(Ops.MUL), lambda: one)])
    assert pm2._row_ids[Ops.ADD] == [] and pm2.rewrite(a + b) is None and pm2.rewrite(a * b) is one
  def test_add_tables(self):
    pm = PatternMatcher([(UPat(Ops.ADD), lambda: one)]) + PatternMatcher([(UPat(Ops.MUL), lambda: two)])
    assert len(pm) == 2 and pm.rewrite(a + b) is one and pm.rewrite(a * b) is two
  def test_owner(self):
    pm = PatternMatcher([(UPat(Ops.ADD), lambda: one)])
    assert pm.rows[0].owner == __name__.split(".")[0]  # top-level package when not tinyplug / tinyplug_<x>
    assert PatternMatcher([(UPat(Ops.ADD), lambda: one)], owner="myplug").rows[0].owner == "myplug"
    from tinyplug.uop.symbolic import symbolic
    assert {r.owner for r in symbolic.rows} == {"core"}

# ---------------- compiled vs interpreted, over many pattern/node pairs ----------------

def _patterns() -> list[UPat]:
  x, y, c = UPat.var("x"), UPat.var("y"), UPat.cvar("c")
  return [x + c, x * c + y, (x + c) * y, x + x, UPat(Ops.ADD, src=(x, y)), UPat(Ops.ADD, src=[x, x * c]),
          UPat(GroupOp.ALU, src=UPat(Ops.CONST)), UPat(GroupOp.ALU, dtype=dtypes.int, name="u"),
          UPat.any(x + c, x * c), UPat(Ops.WHERE, src=(UPat.var("g"), x, x)), (x // c) % c,
          UPat(Ops.ADD, src=[UPat(Ops.MUL, src=[x, c]), UPat(Ops.MUL, src=[y, c])]), UPat(Ops.SINK, src=(x,), allow_any_len=True),
          UPat(Ops.SINK, src=UPat(dtype=dtypes.int, name="x")), UPat(src=(UPat(Ops.CONST), UPat(Ops.CONST)))]

def _nodes() -> list[UOp]:
  base = [a, b, one, two, f]
  out = list(base)
  for p, q in itertools.product(base[:4], repeat=2):
    out += [p + q, p * q, p // 2, (p + q) * q, (p * 2 + q * 2), (p // 2) % 2, p + p * 3]
  out += [(a < 2).where(b, b), UOp.sink(a, b), UOp.sink(one, one), UOp.sink(f, a), f + f]
  return out

def test_compiled_equals_interpreted():
  for pat in _patterns():
    assert compile_row(pat, lambda **kw: None, False) is not None or pat.repeat is not None
    for u in _nodes(): all_matches(pat, u)
