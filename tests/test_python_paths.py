"""The Python fast paths of a small realize (issue 20): UOp interning, constants, the one-op graph plan's becomes map,
shallow keys over computed operands, the structure walk, parameter plans, one-op runners, constants kept on their second
use. Values against numpy; a changed input dtype, shape, constant or device never reuses another graph's plan."""
import dataclasses, gc
import numpy as np
import pytest
from tinyplug.tensor import Tensor
from tinyplug.engine import plan as P, realize as engine
from tinyplug.schedule import cache as C
from tinyplug.tensor_ops import graph
from tinyplug.uop.dtype import dtypes, from_np_dtype
from tinyplug.uop.ops import Ops, UOp

def test_an_interned_node_is_an_immutable_uop_made_once():
  c = UOp(Ops.CONST, dtypes.float32, arg=2.5)
  a, b = UOp(Ops.NEG, dtypes.float32, (c,)), UOp(Ops.NEG, dtypes.float32, (c,))
  assert a is b and type(a) is UOp and isinstance(a, UOp) and a.src == (c,) and a.arg is None
  with pytest.raises(AttributeError): a.arg = 1
  with pytest.raises(AttributeError): a.op = Ops.EXP2
  buf = UOp.new_buffer("CPU", 7, dtypes.int32)
  assert type(buf) is UOp and buf.shape == (7,) and buf.device == "CPU" and buf.src[0].op is Ops.UNIQUE
  assert UOp(Ops.BUFFER, dtypes.int32, buf.src, 7) is buf   # hash-consed like any node

@pytest.mark.parametrize("shape", [(), (1,), (3,), (2, 1, 4), (0, 2)], ids=str)
def test_a_constant_is_the_chain_reshape_and_expand_make(shape):
  got = graph.const(1.2345678, dtypes.float32, "CPU", shape)
  c = UOp(Ops.CONST, dtypes.float32, (graph.device_uop("CPU"),), 1.2345678)
  assert got is graph.expand(graph.reshape(c, (1,) * len(shape)), shape) and got.shape == shape
  assert graph.const(-0.0, dtypes.float32, "CPU", shape) is not graph.const(0.0, dtypes.float32, "CPU", shape)
  assert graph.const(1, dtypes.int32, "CPU", shape) is not graph.const(1, dtypes.float32, "CPU", shape)

def test_dtype_kinds_of_equal_dtypes_made_elsewhere():
  f, i = dataclasses.replace(dtypes.float32), dataclasses.replace(dtypes.int64)
  assert f is not dtypes.float32 and f == dtypes.float32
  assert dtypes.is_float(f) and not dtypes.is_int(f) and dtypes.is_int(i) and not dtypes.is_float(i)
  assert dtypes.is_float(dtypes.half.vec(4)) and dtypes.is_int(dtypes.uint8) and not dtypes.is_float(dtypes.bool)

def test_tiny_ops_replay_their_plan_and_other_dtypes_and_shapes_do_not_reuse_it():
  for dtype, shape, step in ((np.float32, (1,), 1.0), (np.int32, (1,), 3), (np.float32, (2,), 0.5),
                             (np.float32, (2, 3), 2.0), (np.float16, (1,), 0.25)):
    t = Tensor(np.zeros(shape, dtype)).realize()
    hits = P.counters["graph_hits"] + P.counters["param_hits"]
    for _ in range(6): t = (t + step).realize()
    np.testing.assert_array_equal(t.numpy(), np.full(shape, 6 * step, dtype))
    assert t.dtype == from_np_dtype(np.dtype(dtype)) and t.shape == shape
    # the first realizes record the plan; a graph plan, or a parameter plan where earlier graphs of this structure had
    # other constants (scalars.py then made the constant a kernel argument)
    if engine.plans_apply(): assert P.counters["graph_hits"] + P.counters["param_hits"] - hits >= 4
  # another constant is another graph
  t = Tensor(np.zeros(1, np.float32)).realize()
  for k in (1.0, 2.0, 1.0, -0.0, 3.5):
    t = (t + k).realize()
  np.testing.assert_array_equal(t.numpy(), np.array([7.5], np.float32))

def test_a_tiny_op_held_by_another_graph_points_every_holder_at_the_buffer():
  t = Tensor(np.ones(1, np.float32)).realize()
  for _ in range(3): (t + 1.0).realize()   # the plan exists
  x = t + 1.0
  y = x * 3.0   # a graph over x's node
  x.realize()
  assert graph.is_realized(x.uop)
  np.testing.assert_array_equal(y.numpy(), np.array([6.0], np.float32))
  np.testing.assert_array_equal(x.numpy(), np.array([2.0], np.float32))

def test_one_op_over_a_computed_operand_takes_the_walk_and_is_right():
  a = np.arange(4, dtype=np.float32)
  c = Tensor.full((4,), 3.0) * 2.0   # a computed operand without a buffer
  assert C.shallow_key((Tensor(a).realize() + c).uop) is None
  for i in range(4):
    x = Tensor(a + i).realize()
    np.testing.assert_array_equal((x + c).realize().numpy(), a + i + 6.0)
  x = Tensor(a).realize()
  assert C.shallow_key((x + 1.0).uop) is not None   # constants and buffers: the shallow key

def test_the_structure_walk_is_toposort_order_and_stops_at_uncovered_ops():
  x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).realize()
  y = ((x * 2.0 + x) - 1.0).exp().sum(1)
  sink = UOp(Ops.SINK, dtypes.void, (y.uop,))
  key, nodes = C._walk(sink)
  assert nodes == list(sink.toposort()) and len(key) == len(nodes)
  pos = {n: i for i, n in enumerate(nodes)}
  assert all(k[3] == tuple(pos[s] for s in n.src) for k, n in zip(key, nodes))
  assert C._walk(UOp(Ops.SINK, dtypes.void, (UOp(Ops.KERNEL, dtypes.void, (), None),))) is None

def test_new_constants_each_call_run_from_a_parameter_plan_with_their_own_values():
  rng = np.random.default_rng(3)
  a = rng.random(64, dtype=np.float32)
  x = Tensor(a).realize()
  hits = P.counters["param_hits"]
  for k in rng.random(8) + 1.0:
    np.testing.assert_allclose(((x * float(k)) + 1.0).exp().numpy(), np.exp(a * np.float32(k) + 1), rtol=1e-6)
  if engine.plans_apply(): assert P.counters["param_hits"] > hits
  # another shape or dtype is another plan: still right
  b = rng.random((4, 4), dtype=np.float32)
  np.testing.assert_allclose(((Tensor(b) * 1.7) + 1.0).exp().numpy(), np.exp(b * np.float32(1.7) + 1), rtol=1e-6)
  h = a.astype(np.float16)
  np.testing.assert_allclose(((Tensor(h) * 1.7) + 1.0).exp().numpy(), np.exp(h * np.float16(1.7) + np.float16(1)),
                             rtol=2e-3)

def _one_op_runners() -> int:
  return sum(1 for v in P._one_op_plans.values() if v[4] is not None)

@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_one_op_runners_over_each_kind_of_operand_are_right_and_never_take_another_graphs_plan(device):
  rng = np.random.default_rng(7)
  f32, i32 = np.float32, np.int32
  # (name, input shapes, dtype, the op on tensors, the op on numpy): views, two buffers, one buffer twice, a constant on
  # the left, a comparison (a bool output), other dtypes, shapes and constants, taking turns so all their plans exist
  cases = [
    ("add", [(1,)], f32, lambda t: t[0] + 1.0, lambda a: a[0] + f32(1.0)),
    ("add another constant", [(1,)], f32, lambda t: t[0] + 2.5, lambda a: a[0] + f32(2.5)),
    ("add -0.0", [(1,)], f32, lambda t: t[0] + -0.0, lambda a: a[0] + f32(-0.0)),
    ("another shape", [(7,)], f32, lambda t: t[0] + 1.0, lambda a: a[0] + f32(1.0)),
    ("int32", [(1,)], i32, lambda t: t[0] + 1, lambda a: a[0] + i32(1)),
    ("view", [(6,)], f32, lambda t: t[0].reshape(2, 3) * 3.0, lambda a: a[0].reshape(2, 3) * f32(3.0)),
    ("two buffers", [(5,), (5,)], f32, lambda t: t[0] * t[1], lambda a: a[0] * a[1]),
    ("one buffer twice", [(5,)], f32, lambda t: t[0] + t[0], lambda a: a[0] + a[0]),
    ("constant on the left", [(3,)], f32, lambda t: 1.0 + t[0], lambda a: f32(1.0) + a[0]),
    ("comparison", [(4,)], f32, lambda t: t[0] < 0.5, lambda a: a[0] < f32(0.5)),
  ]
  for rnd in range(4):
    for name, shapes, dtype, op, ref in cases:
      arrays = [(rng.random(s) * 100 - 50).astype(dtype) for s in shapes]
      got = op([Tensor(a, device=device).realize() for a in arrays]).realize()
      want = ref(arrays)
      assert got.shape == want.shape and got.device == device and got.dtype == from_np_dtype(want.dtype), name
      np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{name}, round {rnd}")
  if engine.plans_apply(): assert _one_op_runners() > 0

def test_a_one_op_runner_replays_a_chain_with_the_right_values_and_counts_its_kernels():
  from tinyplug.helpers import GlobalCounters
  t = Tensor(np.zeros(1, np.float32)).realize()
  for _ in range(4): t = (t + 1.0).realize()   # the plan and its runner exist
  gc.collect()   # (garbage of earlier tests in this process frees its buffers now, not in the middle)
  kernels, mem = GlobalCounters.kernel_count, GlobalCounters.mem_used
  for _ in range(50): t = (t + 1.0).realize()
  assert GlobalCounters.kernel_count - kernels == 50
  gc.collect()
  assert GlobalCounters.mem_used == mem   # each output's memory given back when the tensor let go of it
  np.testing.assert_array_equal(t.numpy(), np.array([54.0], np.float32))
  GlobalCounters.reset()
  assert GlobalCounters.kernel_count == 0 and GlobalCounters.mem_used == mem

def test_a_constant_asked_for_once_waits_and_its_second_use_keeps_it():
  value = 0.123456789012345   # a constant no other test uses
  first = graph.const(value, dtypes.float32, "CPU", (3,))
  keys = lambda cache: [k for k in cache if k[0] is float and k[1] == value]
  assert keys(graph._new_consts) and not keys(graph._consts)
  assert graph.const(value, dtypes.float32, "CPU", (3,)) is first   # the second use: the same nodes, now kept
  assert keys(graph._consts) and not keys(graph._new_consts)
  c = UOp(Ops.CONST, dtypes.float32, (graph.device_uop("CPU"),), value)
  assert first is graph.expand(graph.reshape(c, (1, )), (3,)) and first.src[0].src[0].arg == value
  # constants used once, many of them: each right, and one pushed out of the waiting room is built again (the same
  # node while anything holds it)
  a = np.arange(3, dtype=np.float32)
  x = Tensor(a).realize()
  ks = [1.0 + i / 64 for i in range(80)]
  held = x * ks[0]
  for k in ks: np.testing.assert_array_equal((x * k).numpy(), a * np.float32(k))
  assert (x * ks[0]).uop is held.uop
  # the kinds stay apart: -0.0 and 0.0, nan, an int and a float of the same value, a float into an int tensor
  assert graph.const(-0.0, dtypes.float32, "CPU", ()) is not graph.const(0.0, dtypes.float32, "CPU", ())
  assert graph.const(1, dtypes.float32, "CPU", (2,)) is graph.const(1.0, dtypes.float32, "CPU", (2,))   # 1.0 either way
  assert graph.const(1, dtypes.int32, "CPU", (2,)) is not graph.const(1.0, dtypes.float32, "CPU", (2,))
  np.testing.assert_array_equal((x + float("nan")).numpy(), a + np.float32("nan"))
  with np.errstate(divide="ignore"):   # 1/+0 and 1/-0: the zeros' signs kept apart
    for zero in (0.0, -0.0, 0.0):
      np.testing.assert_array_equal((1.0 / (x * zero)).numpy(), np.float32(1.0) / (a * np.float32(zero)))
  xi = Tensor(np.arange(3, dtype=np.int32)).realize()
  got = xi * 1.5
  assert got.dtype == dtypes.float32
  np.testing.assert_array_equal(got.numpy(), np.arange(3, dtype=np.int32) * np.float32(1.5))

@pytest.mark.parametrize("shape,np_dtype", [((256, 1024), np.float32), ((3,), np.int32), ((2, 3, 4), np.float16),
                                            ((), np.float64), ((5, 7), np.bool_), ((4, 1, 3), np.uint8)], ids=str)
def test_a_tensor_from_data_is_one_copy_and_no_kernel(shape, np_dtype):
  """The host buffer is shaped before its copy, so the copy's output is the tensor's buffer (a reshape after the copy
  took a kernel copying it again); the values arrive as they were, later changes to the array do not."""
  from tinyplug.schedule import create_schedule
  a = np.asarray(np.random.default_rng(3).standard_normal(shape) * 50).astype(np_dtype)
  t = Tensor(a)
  assert [it.ast.op for it in create_schedule([t.uop])[0]] == [Ops.COPY]
  keep = a.copy()
  if a.ndim: a[...] = 0
  for _ in range(3): np.testing.assert_array_equal(Tensor(keep).numpy(), keep)
  np.testing.assert_array_equal(t.numpy(), keep)

def _counting_compiles(monkeypatch) -> list:
  """A list that gets an entry for every kernel codegen builds from now on (a new kernel to compile)."""
  import tinyplug.codegen as codegen
  built, real = [], codegen.get_program
  def counting(*args, **kwargs):
    built.append(1)
    return real(*args, **kwargs)
  monkeypatch.setattr(codegen, "get_program", counting)
  return built

def test_a_new_constant_runs_from_its_skeleton_compiling_nothing_with_its_own_value(monkeypatch):
  from tinyplug.helpers import GlobalCounters
  rng = np.random.default_rng(5)
  a = rng.random(257, dtype=np.float32)
  x = Tensor(a).realize()
  f = lambda t, k: ((t * k) + 1.0).exp()
  for k in (1.25, 1.5, 1.75): f(x, k).realize()   # the usual way: the constant becomes a kernel argument
  built = _counting_compiles(monkeypatch)
  hits, kernels = P.counters["skeleton_hits"], GlobalCounters.kernel_count
  for _ in range(20):
    k = float(rng.random()) + 0.5
    np.testing.assert_allclose(f(x, k).realize().numpy(), np.exp(a * np.float32(k) + np.float32(1.0)), rtol=2e-6)
  assert not built and P.counters["skeleton_hits"] - hits == 20 and GlobalCounters.kernel_count - kernels == 20
  # another buffer of the same shape: the same plan over its memory; a write into a buffer is read by the next run
  b = rng.random(257, dtype=np.float32)
  y = Tensor(b).realize()
  np.testing.assert_allclose(f(y, 0.3).realize().numpy(), np.exp(b * np.float32(0.3) + np.float32(1.0)), rtol=2e-6)
  y.assign(Tensor(a)).realize()
  np.testing.assert_allclose(f(y, 0.7).realize().numpy(), np.exp(a * np.float32(0.7) + np.float32(1.0)), rtol=2e-6)
  # a constant the kernels hold as it is (the + 1.0) with another value: not this plan (the walk's way), right values
  np.testing.assert_allclose((((x * 0.9) + 2.5).exp()).realize().numpy(), np.exp(a * np.float32(0.9) + np.float32(2.5)),
                             rtol=2e-6)

@pytest.mark.parametrize("k", [2.0, -0.0, 0.0, float("nan"), float("inf"), 1e-30], ids=str)
def test_a_skeleton_plan_takes_any_float_value(k):
  a = np.linspace(-2, 2, 33, dtype=np.float32)
  x = Tensor(a).realize()
  for warm in (0.5, 0.25, 0.125): (x * warm + 3.0).sqrt().realize()
  with np.errstate(invalid="ignore"):
    np.testing.assert_array_equal((x * k + 3.0).sqrt().realize().numpy(), np.sqrt(a * np.float32(k) + np.float32(3.0)))

def test_repeated_leaves_and_other_graphs_never_take_each_others_skeleton_plan():
  rng = np.random.default_rng(6)
  a, b = rng.random(64, dtype=np.float32), rng.random(64, dtype=np.float32)
  x, y = Tensor(a).realize(), Tensor(b).realize()
  two = lambda p, q, k: ((p * k) + q).exp2()
  for i in range(6):   # one buffer twice and two buffers: the same skeleton number, leaves repeating otherwise
    k = 0.5 + i / 8
    np.testing.assert_allclose(two(x, y, k).realize().numpy(), np.exp2(a * np.float32(k) + b), rtol=2e-6)
    np.testing.assert_allclose(two(x, x, k).realize().numpy(), np.exp2(a * np.float32(k) + a), rtol=2e-6)
    np.testing.assert_allclose(two(y, x, k).realize().numpy(), np.exp2(b * np.float32(k) + a), rtol=2e-6)
  # other shapes, dtypes and ops over the same kinds of leaves
  for i in range(4):
    k = 1.5 + i
    xs = Tensor(a.reshape(8, 8)).realize()
    np.testing.assert_allclose(((xs * k) + 1.0).exp2().realize().numpy(), np.exp2(a.reshape(8, 8) * np.float32(k) + 1),
                               rtol=2e-6)
    np.testing.assert_allclose(((x * k) + 1.0).log2().realize().numpy(), np.log2(a * np.float32(k) + 1), rtol=2e-6)
    xi = Tensor(np.arange(64, dtype=np.int32)).realize()
    np.testing.assert_array_equal(((xi * (i + 2)) + 1).realize().numpy(), np.arange(64, dtype=np.int32) * (i + 2) + 1)

def test_a_graph_seen_before_over_new_nodes_runs_its_graph_plan_from_its_skeleton(monkeypatch):
  rng = np.random.default_rng(7)
  a = rng.random(100, dtype=np.float32)
  x = Tensor(a).realize()
  y = Tensor(rng.random(100, dtype=np.float32)).realize()
  for _ in range(3): ((x * y) + 0.5).sqrt().realize(), (y + 1.0).realize()
  built = _counting_compiles(monkeypatch)
  hits, graph_hits = P.counters["skeleton_hits"], P.counters["graph_hits"]
  for _ in range(5):
    y = (y + 1.0).realize()   # a new buffer each time: the graph over it is made anew
    np.testing.assert_allclose(((x * y) + 0.5).sqrt().realize().numpy(), np.sqrt(a * y.numpy() + np.float32(0.5)),
                               rtol=2e-6)
  assert not built and P.counters["skeleton_hits"] - hits == 5 and P.counters["graph_hits"] - graph_hits >= 10
  # the constant the graph plan's kernel holds, changed: not that plan
  np.testing.assert_allclose(((x * y) + 0.75).sqrt().realize().numpy(), np.sqrt(a * y.numpy() + np.float32(0.75)),
                             rtol=2e-6)

def test_skeleton_plans_follow_the_settings_and_a_reset():
  import tinyplug
  from tinyplug.helpers import Context
  a = np.linspace(0.5, 4, 40, dtype=np.float32)
  x = Tensor(a).realize()
  for k in (1.1, 1.2, 1.3, 1.4): (x * k + 1.0).exp2().realize()
  with Context(NOOPT=1):   # other settings: their own plans, the same values
    for k in (2.1, 2.2, 2.3, 2.4):
      np.testing.assert_allclose((x * k + 1.0).exp2().realize().numpy(), np.exp2(a * np.float32(k) + 1), rtol=2e-6)
  tinyplug.reset()   # the plans and compiled programs are gone: a shortcut to them must not run
  for k in (3.1, 3.2, 3.3, 3.4):
    np.testing.assert_allclose((x * k + 1.0).exp2().realize().numpy(), np.exp2(a * np.float32(k) + 1), rtol=2e-6)

def test_a_skeleton_is_the_graphs_structure_up_to_its_leaves():
  x, y = Tensor.empty(16).realize(), Tensor.empty(16).realize()
  sx1, lx1 = C.skeleton((x * 1.5 + 2.0).uop)
  sx2, lx2 = C.skeleton((x * 2.5 + 3.0).uop)
  sy, ly = C.skeleton((y * 2.5 + 3.0).uop)
  assert sx1 == sx2 == sy and len(lx1) == len(ly) == 4   # (BUFFER, UNIQUE, CONST, CONST)
  assert lx1[0] is x.uop and ly[0] is y.uop and lx1[2].arg == 1.5 and lx2[2].arg == 2.5
  assert C.skeleton((x * 1.5 + 2).uop)[0] == sx1   # (an int constant into a float tensor: a float constant)
  assert C.skeleton((x * 1.5 - 2.0).uop)[0] == sx1   # (x - c is x + (-c))
  assert C.skeleton((x * 1.5 + y).uop)[0] != sx1 and C.skeleton((x + 1.5 * 2.0).uop)[0] != sx1
  xi = Tensor.empty(16, dtype=dtypes.int32).realize()
  assert C.skeleton((xi * 3 + 1).uop)[0] != C.skeleton((xi * 3 + 2).uop)[0]   # int constants are structure
  assert C.repeats(C.skeleton((x * 1.5 + x).uop)[1]) == (0, 1, 2, 0, 1) and C.repeats(lx1) is None

def test_a_buffer_with_a_skeleton_is_freed_when_let_go_without_the_collector():
  from tinyplug.device import OUTPUT_POOL
  from tinyplug.helpers import GlobalCounters
  a = np.arange(50, dtype=np.float32)
  for k in (1.5, 2.5, 3.5): (Tensor(a).realize() * k + 1.0).exp2().realize()
  x = Tensor(a).realize()
  # earlier tests' cyclic garbage (buffers among it) freed now: a collection between reading mem_used and the last
  # assert would free memory this test never counted
  gc.collect()
  gc.disable()
  try:
    mem = GlobalCounters.mem_used
    y = (x * 4.5 + 1.0).exp2().realize()
    assert C.skeleton((y * 1.5 + 1.0).uop) is not None and C.skeleton((x * 0.5 + 1.0).uop)[1][0] is x.uop
    leaves = C.skeleton((y * 1.5 + 1.0).uop)[1]
    assert [n.op for n in leaves] == [Ops.BUFFER, Ops.UNIQUE, Ops.CONST, Ops.CONST]
    assert all(n not in n._cache["skeleton"][1] for n in leaves)   # no node's kept skeleton refers to the node itself
    unique = y.uop.src[0].arg
    del y, leaves
    # let go by its count alone: its plan hands its node out again (the plan keeps its last OUTPUT_POOL outputs, and
    # gives one out only when nothing else refers to it), with no more memory in use
    again = [(x * 4.5 + 1.0).exp2().realize() for _ in range(OUTPUT_POOL)]
    assert unique in [z.uop.src[0].arg for z in again] and GlobalCounters.mem_used == mem + again[0].uop.arg * 4
  finally: gc.enable()
  with np.errstate(over="ignore"): np.testing.assert_allclose(again[-1].numpy(), np.exp2(a * 4.5 + 1.0), rtol=1e-6)
