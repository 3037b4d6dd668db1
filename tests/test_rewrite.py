"""graph_rewrite: fixed point, order, sharing, deep graphs, loop detection, and rewrite tracing through the event bus."""
import sys, types
import pytest
from tinyplug import events
from tinyplug.uop import UOp, Ops, dtypes, UPat, PatternMatcher, graph_rewrite, graph_rewrite_map
from tinyplug.uop.rewrite import RewriteLoopError
from tinyplug.uop.symbolic import symbolic

a, b, c = UOp.variable("a", 0, 9), UOp.variable("b", 0, 9), UOp.variable("c", 0, 9)
def const(v): return UOp.const(dtypes.int, v)

fold_pm = PatternMatcher([(UPat.cvar("c1") + UPat.cvar("c2"), lambda c1, c2: c1.const_like(c1.arg + c2.arg))])

def recorder(seen: list) -> PatternMatcher:
  return PatternMatcher([(UPat(name="x"), lambda x: seen.append(x))])

class TestFixedPoint:
  def test_folds_to_a_constant(self):
    assert graph_rewrite((const(1) + const(2)) + (const(3) + const(4)), fold_pm) is const(10)
  def test_result_of_a_rule_is_rewritten_again(self):
    pm = PatternMatcher([(UPat.var("x") * 1, lambda x: x + 0), (UPat.var("x") + 0, lambda x: x)])
    assert graph_rewrite((a * 1) * 1 + b, pm) is a + b
  def test_no_match_returns_same_graph(self):
    x = (a + b) * c
    assert graph_rewrite(x, fold_pm) is x
  def test_fixed_point_is_stable(self):
    x = ((a + 3) + 4) * 2 + ((a + 3) + 4)
    once = graph_rewrite(x, symbolic)
    assert graph_rewrite(once, symbolic) is once
  def test_rewrite_map(self):
    inner = const(1) + const(2)
    x = inner * a
    m = graph_rewrite_map(x, fold_pm)
    assert m[inner] is const(3) and m[x] is const(3) * a and m[a] is a

class TestOrder:
  def test_default_visits_sources_first(self):
    seen: list = []
    x = (a + b) * c
    graph_rewrite(x, recorder(seen))
    assert seen == [a, b, a + b, c, x]
  def test_bottom_up_visits_node_first(self):
    seen: list = []
    x = (a + b) * c
    graph_rewrite(x, recorder(seen), bottom_up=True)
    assert seen == [x, a + b, a, b, c]
  def test_bottom_up_rule_sees_unrewritten_sources(self):
    # MUL(ADD(const, const), x): with bottom_up the MUL rule fires before the ADD is folded away
    pm = fold_pm + PatternMatcher([(UPat(Ops.MUL, src=(UPat(Ops.ADD), UPat.var("x"))), lambda x: x)])
    x = (const(1) + const(2)) * a
    assert graph_rewrite(x, pm) is const(3) * a
    assert graph_rewrite(x, pm, bottom_up=True) is a
  def test_shared_subgraph_rewritten_once(self):
    seen: list = []
    s = a + b
    graph_rewrite((s * 2) + (s * 3) + s, recorder(seen))
    assert seen.count(s) == 1 and seen.count(a) == 1 and len(seen) == len(set(seen))
  def test_shared_result_is_shared(self):
    s = const(1) + const(2)
    out = graph_rewrite(UOp.sink(s * a, s * b), fold_pm)
    assert out.src[0].src[0] is out.src[1].src[0] is const(3)

class TestDeepGraphs:
  def test_100k_chain_folds_without_recursion(self):
    x = a
    for _ in range(100_000): x = x + 1
    limit = sys.getrecursionlimit()
    assert graph_rewrite(x, symbolic) is a + 100_000
    assert sys.getrecursionlimit() == limit
  def test_100k_const_chain(self):
    x = const(0)
    for _ in range(100_000): x = x + const(1)
    assert graph_rewrite(x, fold_pm) is const(100_000)
  def test_100k_chain_without_matches(self):
    x = a
    for i in range(100_000): x = x + b if i % 2 else x * b
    assert graph_rewrite(x, fold_pm) is x
  def test_100k_chain_bottom_up(self):
    x = a
    for _ in range(100_000): x = x * 2
    assert graph_rewrite(x, fold_pm, bottom_up=True) is x

class TestLoops:
  def test_loop_raises(self):
    pm = PatternMatcher([(UPat.var("x") + 0, lambda x: x * 1), (UPat.var("x") * 1, lambda x: x + 0)])
    with pytest.raises(RewriteLoopError): graph_rewrite(a + 0, pm)
  def test_loop_raises_bottom_up(self):
    pm = PatternMatcher([(UPat.var("x") + 0, lambda x: x * 1), (UPat.var("x") * 1, lambda x: x + 0)])
    with pytest.raises(RewriteLoopError): graph_rewrite((a + 0) * b, pm, bottom_up=True)
  def test_self_rewrite_is_no_change(self):
    pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: x)])
    assert graph_rewrite(a + b, pm) is a + b

# ---------------- tracing ----------------

@pytest.fixture
def trace():
  got: list = []
  cb = got.append
  events.subscribe("rewrite", cb, owner="test")
  try: yield got
  finally: events.unsubscribe("rewrite", cb)

class TestTracing:
  def test_event_has_input_output_and_matches(self, trace):
    x = const(2) + const(2)
    out = graph_rewrite(x, fold_pm, name="fold twos"); line = sys._getframe().f_lineno
    assert out is const(4) and len(trace) == 1
    ev = trace[0]
    assert isinstance(ev, events.RewriteEvent) and ev.name == "fold twos"
    assert ev.input is x and ev.output is out and ev.caller == f"{__file__}:{line}"
    assert ev.start_ns <= ev.end_ns
    (m,) = ev.matches
    assert m.before is x and m.after is out
    # the location is the line the pattern was written on (here the one-line fold_pm table at the top of this file)
    assert (m.file, m.line) == fold_pm.rows[0].upat.location == (__file__, 12)
    assert m.owner == __name__.split(".")[0] and m.time_ns >= 0
  def test_substitute_names_the_line_that_called_it(self, trace):
    x = const(2) + a
    out = x.substitute({a: const(5)}, name="put 5"); line = sys._getframe().f_lineno
    assert out is const(2) + const(5) and trace[-1].name == "put 5"
    ev = trace[-1]
    assert ev.caller == f"{__file__}:{line}" and ev.matches
    assert {(m.file, m.line) for m in ev.matches} == {(__file__, line)}   # not the lookup rule inside ops.py
  def test_core_patterns_are_owned_by_core(self, trace):
    graph_rewrite((a + 3) + 4, symbolic)
    assert trace[-1].matches and {m.owner for m in trace[-1].matches} == {"core"}
    assert all(m.file.endswith("symbolic.py") for m in trace[-1].matches)
  def test_plugin_owner_from_module_name(self, trace):
    mod = types.ModuleType("tinyplug_fakeplug")
    exec("from tinyplug.uop import UPat, PatternMatcher, Ops\n"
         "pm = PatternMatcher([(UPat(Ops.ADD, name='x'), lambda x: x.src[0])])", mod.__dict__)
    graph_rewrite(a + b, mod.pm)
    assert [m.owner for m in trace[-1].matches] == ["fakeplug"]
  def test_explicit_owner(self, trace):
    pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: x.src[0])], owner="myplugin")
    graph_rewrite(a + b, pm)
    assert [m.owner for m in trace[-1].matches] == ["myplugin"]
  def test_every_match_is_listed(self, trace):
    graph_rewrite((const(1) + const(2)) + (const(3) + const(4)), fold_pm)
    assert [m.after.arg for m in trace[-1].matches] == [3, 7, 10]
  def test_scope(self, trace):
    with events.scope("kernel", "k0"): graph_rewrite(a + b, fold_pm)
    assert trace[-1].scope == ("k0",)
  def test_traced_and_untraced_agree(self, trace):
    x = ((a * 4 + b) // 4 + (c + 2) + 3) % 16
    traced = graph_rewrite(x, symbolic)
    events.unsubscribe("rewrite", trace.append)
    assert graph_rewrite(x, symbolic) is traced

def test_nothing_built_without_subscriber(monkeypatch):
  assert not events.enabled("rewrite")
  def boom(*args, **kwargs): raise AssertionError("tracking code ran with no subscriber")
  monkeypatch.setattr(PatternMatcher, "rewrite_tracked", boom)
  monkeypatch.setattr(events, "RewriteMatch", boom)
  monkeypatch.setattr(events, "RewriteEvent", boom)
  assert graph_rewrite((a + 3) + 4, symbolic) is a + 7
  assert graph_rewrite(const(2) + const(2), fold_pm) is const(4)

def test_match_location_is_the_table_row_even_through_helpers():
  def helper(op):   # rows built by a helper point at the row that called it, not at the helper
    return UPat(op, src=(UPat.var("x"), UPat.cvar("c")))
  pm = PatternMatcher([
    (helper(Ops.ADD), lambda x, c: None),
    (helper(Ops.MUL), lambda x, c: None),
  ])
  lines = [r.line for r in pm.rows]
  assert lines[1] == lines[0] + 1 and all(r.file == __file__ for r in pm.rows)

def test_unsubscribe_takes_a_bound_method_again():
  """`events.unsubscribe(kind, obj.method)` removes what `subscribe(kind, obj.method)` added (a new bound-method
  object each time): a test that left `seen.append` subscribed made later 'no subscriber' checks fail."""
  seen: list = []
  events.subscribe("log", seen.append, owner="test")
  events.unsubscribe("log", seen.append)
  assert not events.enabled("log")

def test_walk_rewrites_once_without_revisiting_results():
  # x -> x + 1 would never stop at a fixed point; walk=True applies it once per node of the input graph
  a = UOp.variable("a", 0, 10)
  inc = PatternMatcher([(UPat(Ops.DEFINE_VAR, name="x"), lambda x: x + 1)])
  out = graph_rewrite(a * 2, inc, walk=True)
  assert out.op is Ops.MUL and out.src[0].op is Ops.ADD and out.src[0].src[0] is a
  assert graph_rewrite_map(a * 2, inc, walk=True)[a].op is Ops.ADD
  inc_mul = PatternMatcher([(UPat(Ops.MUL, name="m"), lambda m: m.src[0] * m.src[1] * 3)])
  once = graph_rewrite(a * 2, inc_mul, walk=True, bottom_up=True)
  assert once.op is Ops.MUL and once.src[0].op is Ops.MUL and once.src[0].src[0] is a
