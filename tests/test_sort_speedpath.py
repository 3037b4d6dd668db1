"""sort / argsort / topk (issue 20): the bitonic network runs several steps per kernel on groups of lanes (plain
loads, the lanes upcast by the heuristic), the sorted axis goes first when there are rows enough to fill vectors, and
topk merges sorted runs into the better half instead of sorting everything. Values and indices against torch's
stable sort (ties by index, NaN last ascending and first descending), every layout and path, gradients, and the
structure from the schedule."""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes import heuristic
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops import bitonic
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp

RNG = np.random.default_rng(20)

def _data(shape, dtype, specials: bool = True) -> np.ndarray:
  """Many duplicates (values 0..9, negative too for signed types), and NaN, +-inf and -0.0 for floats."""
  lo = 0 if np.dtype(dtype).kind in "ub" else -5
  a = RNG.integers(lo, 10, shape).astype(dtype)
  if specials and np.dtype(dtype).kind == "f" and a.size >= 16:
    flat = a.reshape(-1)
    spots = RNG.choice(a.size, 12, replace=False)
    flat[spots[:3]], flat[spots[3:5]], flat[spots[5:7]], flat[spots[7:]] = np.nan, np.inf, -np.inf, -0.0
  return a

def _torch_sorted(a: np.ndarray, dim: int, descending: bool):
  v, i = torch.from_numpy(a).sort(dim=dim, descending=descending, stable=True)
  return v.numpy(), i.numpy()

def _same(got: Tensor, want: np.ndarray):
  g = got.numpy()
  assert g.dtype == want.dtype and g.shape == want.shape
  np.testing.assert_array_equal(g, want)
  if want.dtype.kind == "f":   # -0.0 stays -0.0 (assert_array_equal takes it for 0.0)
    np.testing.assert_array_equal(np.signbit(g), np.signbit(want))

SORT_CASES = [   # shape, dim: rows last (few rows) and rows first (many rows), odd and power-of-two lengths
  ((5, 1000), -1), ((3, 1023), 1), ((1023, 3), 0), ((40, 1000), 1), ((1000, 40), 0), ((4, 6, 33), 1),
  ((2, 17, 5), -1), ((64,), 0), ((37,), -1), ((6, 2), 1)]

@pytest.mark.parametrize("shape,dim", SORT_CASES)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_matches_torch_values_and_indices(shape, dim, descending):
  a = _data(shape, np.float32)
  v, i = Tensor(a).sort(dim, descending)
  want_v, want_i = _torch_sorted(a, dim, descending)
  _same(v, want_v)
  np.testing.assert_array_equal(i.numpy(), want_i.astype(np.int32))
  np.testing.assert_array_equal(Tensor(a).argsort(dim, descending).numpy(), want_i.astype(np.int32))

@pytest.mark.parametrize("n", [1, 2, 3, 5, 9, 17, 31, 32, 33, 1000, 1024, 4097])
def test_sort_many_rows_with_ties_zeros_and_nans(n):
  """Rows first (20 rows: the network's lanes are vectors of rows), every kind of merge kernel (a 1024-long row's last
  merge: a 32-lane mirror kernel over elements below its lanes; 4097 padded to 8192), few distinct values (the
  stable order decides), -0.0 beside 0.0 and NaNs: values bit for bit and indices as torch's stable sort."""
  a = RNG.integers(-4, 4, (20, n)).astype(np.float32) / 2
  a[:, ::7] = -0.0
  a[1::3, ::11] = np.nan
  for descending in (False, True):
    v, i = Tensor(a).sort(-1, descending)
    want_v, want_i = _torch_sorted(a, -1, descending)
    _same(v, want_v)
    np.testing.assert_array_equal(i.numpy(), want_i.astype(np.int32))

@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.uint8, np.int64, np.float64, np.int8, np.uint32])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_dtypes(dtype, descending):
  for shape, dim in [((20, 100), -1), ((3, 50), 1)]:
    a = _data(shape, dtype)
    if dtype == np.uint32: a[0, :3] = [0xFFFFFFFF, 0x80000000, 0x7FFFFFFF]   # the top bit counts as a magnitude
    v, i = Tensor(a).sort(dim, descending)
    want_v, want_i = _torch_sorted(a.astype(np.int64) if dtype == np.uint32 else a, dim, descending)
    _same(v, want_v.astype(dtype))
    np.testing.assert_array_equal(i.numpy(), want_i.astype(np.int32))

TOPK_CASES = [((5, 1000), -1), ((3, 1023), 1), ((1023, 3), 0), ((40, 1000), 1), ((4, 6, 33), 1), ((37,), 0)]

@pytest.mark.parametrize("shape,dim", TOPK_CASES)
@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k", [1, 16, "all"])
def test_topk_matches_torch_sort_prefix(shape, dim, largest, k):
  a = _data(shape, np.float32)
  k = shape[dim] if k == "all" else min(k, shape[dim])
  v, i = Tensor(a).topk(k, dim, largest)
  want_v, want_i = _torch_sorted(a, dim, largest)
  _same(v, np.take(want_v, range(k), axis=dim))
  np.testing.assert_array_equal(i.numpy(), np.take(want_i, range(k), axis=dim).astype(np.int32))

@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.uint8, np.int8, np.uint32, np.int64, np.float64, np.bool_])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_dtypes(dtype, largest):
  a = _data((30, 101), dtype) if dtype != np.bool_ else RNG.random((30, 101)) < 0.5
  if dtype == np.uint32: a[0, :3] = [0xFFFFFFFF, 0x80000000, 0x7FFFFFFF]
  if dtype == np.int32: a[1, :2] = [np.iinfo(np.int32).min, np.iinfo(np.int32).max]
  v, i = Tensor(a).topk(7, -1, largest)
  want_v, want_i = _torch_sorted(a.astype(np.int64) if dtype == np.uint32 else a, -1, largest)
  _same(v, want_v[:, :7].astype(a.dtype))
  np.testing.assert_array_equal(i.numpy(), want_i[:, :7].astype(np.int32))

def test_topk_edge_cases():
  a = _data((4, 9), np.float32)
  assert Tensor(a).topk(0)[0].shape == (4, 0) and Tensor(a).topk(0)[1].shape == (4, 0)
  allnan = np.full((3, 8), np.nan, np.float32)
  v, i = Tensor(allnan).topk(3, largest=False)
  assert np.isnan(v.numpy()).all()
  np.testing.assert_array_equal(i.numpy(), np.tile(np.arange(3, dtype=np.int32), (3, 1)))
  with pytest.raises(ValueError, match="out of range"): Tensor(a).topk(10)
  with pytest.raises(ValueError, match="out of range"): Tensor(a).topk(-1)

@pytest.mark.parametrize("shape,dim", [((6, 50), -1), ((50, 20), 0)])
def test_sort_and_topk_gradients_match_torch(shape, dim):
  a = RNG.standard_normal(shape).astype(np.float32)
  w = RNG.standard_normal(shape).astype(np.float32)
  k = 5
  wk = np.take(w, range(k), axis=dim)
  x = Tensor(a, requires_grad=True)
  (x.sort(dim, descending=True)[0] * Tensor(w)).sum().backward()
  tx = torch.from_numpy(a).requires_grad_()
  (tx.sort(dim=dim, descending=True)[0] * torch.from_numpy(w)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)
  x, tx = Tensor(a, requires_grad=True), torch.from_numpy(a).requires_grad_()
  (x.topk(k, dim, largest=False)[0] * Tensor(wk)).sum().backward()
  (tx.topk(k, dim=dim, largest=False)[0] * torch.from_numpy(wk)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)

@pytest.mark.parametrize("shape,dim", [((40, 1000), 1), ((3, 1023), 1), ((1000, 20), 0)])
@pytest.mark.parametrize("k", [5, 17, 100])
def test_topk_merges_of_runs_match_torch(shape, dim, k):
  """k not a power of two, runs of 8, 32 and 128 merged level by level (128: two kernels a level, the first one
  mirroring the elements under its lanes), rows first and last."""
  a = _data(shape, np.float32)
  for largest in (True, False):
    v, i = Tensor(a).topk(k, dim, largest)
    want_v, want_i = _torch_sorted(a, dim, largest)
    _same(v, np.take(want_v, range(k), axis=dim))
    np.testing.assert_array_equal(i.numpy(), np.take(want_i, range(k), axis=dim).astype(np.int32))

def test_sort_long_rows_and_int_extremes():
  """4096-long rows (merges of three kernels each, the top one's lanes 512 apart) and int32 keys at both ends."""
  a = _data((16, 4096), np.float32)
  v, i = Tensor(a).sort(-1, descending=True)
  want_v, want_i = _torch_sorted(a, -1, True)
  _same(v, want_v)
  np.testing.assert_array_equal(i.numpy(), want_i.astype(np.int32))
  b = RNG.integers(-2**31, 2**31, (20, 300), dtype=np.int64).astype(np.int32)
  b[:, :4] = [-2**31, 2**31 - 1, -2**31, 2**31 - 1]
  for desc in (False, True):
    v, i = Tensor(b).sort(-1, desc)
    want_v, want_i = _torch_sorted(b, -1, desc)
    _same(v, want_v)
    np.testing.assert_array_equal(i.numpy(), want_i.astype(np.int32))

# ---- structure: what the kernels read, how many there are, what the heuristic makes of them ----
def _asts(t: Tensor) -> list[UOp]:
  return [it.ast for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]

def _network(asts: list[UOp]) -> list[UOp]:
  """The network's kernels: the ones that read or store int64 keys (float64 where vectors are narrow; the last one
  stores the int32 indices)."""
  def keys(a: UOp) -> bool:
    return any(u.op is Ops.DEFINE_GLOBAL and u.dtype.base in (dtypes.int64, dtypes.float64) for u in a.toposort())
  return [a for a in asts if keys(a)]

@pytest.mark.parametrize("shape", [(4, 64), (64, 64)])   # rows last and rows first
def test_sort_runs_several_network_steps_per_kernel(shape):
  """64 elements: the 21 steps of the network in 3 kernels (the first 15 steps, runs of 32, in one, then the last
  merge in two), not 42 (a kernel a step for the keys and one for the indices). Each reads its lanes with plain loads
  (no gate, at most 32: 32 lanes, or 16 where the mirror reads each lane flipped too), and the heuristic upcasts its
  lanes (`_lane_select`)."""
  assert (bitonic.FIRST_BITS, bitonic.LANE_BITS, bitonic.MIRROR_BITS) == (5, 5, 4)   # the counts below are for these
  asts = _asts(Tensor(RNG.random(shape, dtype=np.float32)).realize().sort(-1)[1])
  net = _network(asts)
  assert len(net) == 3 and len(asts) <= 6
  renderer = Device["CPU"].renderer
  for ast in net:
    loads = [u for u in ast.toposort() if u.op is Ops.LOAD]
    assert len(loads) <= 32
    assert all(len(u.src) == 2 for u in ast.toposort() if u.op is Ops.INDEX)   # buffer and index: no gate
    k = Kernel(ast, renderer)
    axis, q, m = heuristic._lane_select(k)
    assert m in (4, 8, 16, 32)
    assert Opt(OptOps.UPCAST, axis, m) in heuristic.heuristic_opts(k)

def test_sort_kernels_stay_small():
  """Codegen cost grows with a kernel's size: the kernels of a 1024-long sort stay a few hundred UOps once lowered
  (the lanes share the network; the rows stay a loop for LLVM's vectorizer), the first (32 lanes, 15 steps) ~1,400."""
  x = Tensor.empty(64, 1024)
  renderer = Device["CPU"].renderer
  sizes = [len(get_program(ast, renderer, opts=heuristic.heuristic_opts(Kernel(ast, renderer))).uops)
           for ast in _network(_asts(x.sort(-1)[1]))]
  assert len(sizes) == 12 and sizes[0] < 1600 and max(sizes[1:]) < 1000, sizes

def test_mirror_kernels_of_32_lanes_are_vector_loops(monkeypatch):
  """A merge's top kernel over elements below its lanes, 32 lanes wide, reads each lane flipped too (64 loads an
  element). LLVM left it a scalar loop ("too many memory checks": the shared loop's start was clamped below only, so
  the counter's range wrapped and no index could be shown not to overflow), 10 ms against ~1 for the others; with
  both ends of the start clamped (llvmir.render_range) its rows loop vectorizes."""
  from tinyplug.caches import BoundedCache
  from tinyplug.tensor_ops import template
  monkeypatch.setattr(bitonic, "MIRROR_BITS", 5)
  for name in ("_templates", "_seen"):   # fresh template caches for this test: no network built with the other width
    monkeypatch.setattr(template, name, BoundedCache(getattr(template, name).name, getattr(template, name).maxsize))
  x = Tensor(RNG.random((64, 1024), dtype=np.float32)).realize()
  dev = Device["CPU"]
  mirrors = []
  for ast in _network(_asts(x.sort(-1)[1])):
    loads = [u for u in ast.toposort() if u.op is Ops.LOAD]
    if len(loads) == 64: mirrors.append(ast)
  assert mirrors, "no 32-lane mirror kernel left: pick another kernel with many loads"
  for ast in mirrors:
    spec = get_program(ast, dev.renderer, opts=heuristic.heuristic_opts(Kernel(ast, dev.renderer)))
    ir = dev.compiler.optimized_ir(spec.src)
    assert any(f"load <{w} x {t}>" in ir for w in (4, 8) for t in ("i64", "double")), spec.name   # (float64 keys on AVX2)
  v, i = x.sort(-1)
  want_v, want_i = _torch_sorted(x.numpy(), -1, False)
  np.testing.assert_array_equal(v.numpy(), want_v)
  np.testing.assert_array_equal(i.numpy(), want_i.astype(np.int32))

@pytest.mark.parametrize("n", [9, 12, 16, 18, 31, 32])
def test_short_padded_rows_sort_in_one_small_kernel(n):
  """A row the first network kernel sorts whole (up to 32, padded to a power of two) stores its indices from that
  kernel. Its padded lanes simplify apart from the others, and the vectorize pass then built new vectors for every
  permutation the network's levels ask for: a 16-long row's kernel was 4.6 MB of LLVM IR and a 32-long one never
  finished compiling. The pass has a budget now; the lowered kernel stays the size of the network."""
  renderer = Device["CPU"].renderer
  row = RNG.random((1, n), dtype=np.float32)
  sizes = [len(get_program(ast, renderer, opts=heuristic.heuristic_opts(Kernel(ast, renderer))).uops)
           for ast in _asts(Tensor(row).sort(-1)[1])]
  assert max(sizes) < 3000, sizes
  for rows in (1, 4):
    x = np.repeat(row, rows, 0) + np.arange(rows, dtype=np.float32)[:, None]
    x[:, ::3] = 0.5   # ties go by index
    for desc in (False, True):
      v, i = Tensor(x).sort(-1, desc)
      want_v, want_i = _torch_sorted(x, -1, desc)
      _same(v, want_v)
      np.testing.assert_array_equal(i.numpy(), want_i.astype(np.int32))

def _stored(asts: list[UOp]) -> list[int]:
  return [math.prod(r.src[0].arg for r in Kernel(ast, Device["CPU"].renderer).loop_axes) for ast in asts]

def _value_network(asts: list[UOp]) -> list[UOp]:
  """The values' network kernels: the ones that read or store int32 codes (the first reads the values, the last
  stores them)."""
  def codes(a: UOp) -> bool:
    return any(u.op is Ops.DEFINE_GLOBAL and u.dtype.base == dtypes.int32 for u in a.toposort())
  return [a for a in asts if codes(a)]

@pytest.fixture
def fresh_templates(monkeypatch):
  """Fresh graph-template caches: no network built for another machine is reused."""
  from tinyplug.caches import BoundedCache
  from tinyplug.tensor_ops import template
  for name in ("_templates", "_seen"):
    monkeypatch.setattr(template, name, BoundedCache(getattr(template, name).name, getattr(template, name).maxsize))

def test_topk_halves_the_axis_a_kernel_at_a_time(avx512_machine, fresh_templates):
  """topk(16) of 1024 x 1024: runs of 16 sorted in one kernel, then six merges of two runs into the better one, each
  kernel half the size of the last, no sort and no selection passes: the indices' network (int64 keys) and the
  values' own (int32 codes, no int64 key anywhere)."""
  x = Tensor.empty(1024, 1024)
  for net in (_network(_asts(x.topk(16)[1])), _value_network(values := _asts(x.topk(16)[0]))):
    assert len(net) == 7 and _stored(net) == [1024 * 1024 >> i for i in range(7)]
  assert len(values) <= 10 and not _network(values)

@pytest.mark.parametrize("narrow", [False, True])
def test_values_network_lanes_per_machine(narrow, vector_machine, fresh_templates):
  """The values' network on int32 codes takes 8 lanes a kernel (3 bits, 3 under a mirror) where vectors are narrow
  (AVX2's 16 registers: fewer spills), bitonic's 32 and 16 (5 and 4) on AVX-512, as the int64 keys do; values bit
  for bit either way (ties, -0.0 beside 0.0, NaN of either sign)."""
  from tinyplug.tensor_ops import sorting
  from tinyplug import schedule
  schedule._templates.clear()
  vector_machine(32, 16) if narrow else vector_machine(64, 32)
  bits = sorting._value_bits("CPU")
  assert bits == ((3, 3) if narrow else None)
  x = Tensor.empty(64, 1024)
  sort_net = _value_network(_asts(x.sort(-1)[0]))
  topk_net = _value_network(_asts(x.topk(16)[0]))
  # 1024-long rows: runs of 32, then merges of 2^6 .. 2^10 in kernels of up to 3 (5) bits, the mirror's 3 (4)
  assert len(sort_net) == (16 if narrow else 12) and len(_network(_asts(x.sort(-1)[1]))) == 12
  assert _stored(topk_net) == ([64 * 1024] + [64 * 1024 >> i for i in range(1, 7) for _ in (0, 1)] if narrow else
                               [64 * 1024 >> i for i in range(7)])
  schedule._templates.clear()
  a = _data((40, 300), np.float32)
  a[::3, ::5] = -np.nan
  for desc in (False, True):
    _same(Tensor(a).sort(1, desc)[0], _torch_sorted(a, 1, desc)[0])
    _same(Tensor(a).topk(5, 1, desc)[0], np.take(_torch_sorted(a, 1, desc)[0], range(5), axis=1))
  schedule._templates.clear()

def test_lane_select_is_not_a_cat_or_a_pad():
  """The lane rule keeps off kernels whose gates are a cat's, a stack's or a pad's (their opts are not its)."""
  a, b, c, d = (Tensor.empty(64, 256) for _ in range(4))
  renderer = Device["CPU"].renderer
  for out in (a.cat(b, c, d, dim=1), a.stack(b, c, d), a.pad((1, 1, 1, 1)).contiguous(),
              Tensor.empty(8, 16, 30, 30).pad((1, 1, 1, 1)) * 2):
    for ast in _asts(out):
      assert heuristic._lane_select(Kernel(ast, renderer)) is None

def test_repeated_calls_through_the_graph_template():
  """The network's indices are a graph template: the first call builds the graph, the second the template, later ones
  rebuild it over their input (or run it from a plan when the indices are realized alone). Every call, new data."""
  for i in range(4):
    a = _data((20, 130), np.float32)
    want_v, want_i = _torch_sorted(a, 1, i % 2 == 1)
    v, ix = Tensor(a).sort(1, descending=i % 2 == 1)
    if i % 2: np.testing.assert_array_equal(ix.numpy(), want_i.astype(np.int32))   # the indices realized alone
    _same(v, want_v)
    np.testing.assert_array_equal(ix.numpy(), want_i.astype(np.int32))
    b = _data((30, 200), np.float32)
    tv, ti = _torch_sorted(b, 0, True)
    v, ix = Tensor(b).topk(6, 0)
    np.testing.assert_array_equal(ix.numpy(), ti[:6].astype(np.int32))
    _same(v, tv[:6])

def test_topk_and_sort_values_over_a_buffer_run_from_a_plan():
  """The values (network and gather) are one template, so over a realized buffer the third and later calls run the
  kernels from a plan: no graph rebuilt, none walked by the scheduler (when the indices are kept too, the realize goes
  the usual way: the plan cannot tell whether their graph holds its nodes). Values and indices realized in either
  order or together stay right (each template runs the network on its own)."""
  from tinyplug.engine import plan
  hits = plan.counters["hits"]
  for i in range(4):
    a = _data((64, 300), np.float32)
    x = Tensor(a).realize()
    tv, ti = _torch_sorted(a, 1, True)
    v = x.topk(16)[0]
    if i >= 2: assert v._defer is not None
    _same(v.realize(), tv[:, :16])
  assert plan.counters["hits"] - hits == 2
  for i in range(6):
    a = _data((64, 300), np.float32)
    x = Tensor(a).realize()
    tv, ti = _torch_sorted(a, 1, True)
    v, ix = x.topk(16)
    if i % 3 == 0: v.realize(); ix.realize()
    elif i % 3 == 1: ix.realize(); v.realize()
    else: Tensor.realize(v, ix)
    _same(v, tv[:, :16])
    np.testing.assert_array_equal(ix.numpy(), ti[:, :16].astype(np.int32))
    sv, si = x.sort(1)
    want_v, want_i = _torch_sorted(a, 1, False)
    if i % 2: _same(sv, want_v)
    np.testing.assert_array_equal(si.numpy(), want_i.astype(np.int32))
    _same(sv, want_v)

@pytest.mark.parametrize("narrow", [False, True])
def test_network_rows_padded_off_4k_strides_where_vectors_are_narrow(narrow, vector_machine, fresh_templates):
  """Rows first with 1024 rows (the lanes 4 KB apart for int32 codes, 8 KB for int64 keys): where vectors are narrow
  the transposing copy pads each row by ALIAS_PAD, so every network kernel stores 1024 + ALIAS_PAD per element of
  the sorted axis; wide vectors keep the rows as they are. Values and indices against torch either way."""
  from tinyplug.tensor_ops import sorting
  from tinyplug import schedule
  schedule._templates.clear()
  vector_machine(32, 16) if narrow else vector_machine(64, 32)
  rows = 1024 + (sorting.ALIAS_PAD if narrow else 0)
  x = Tensor.empty(1024, 64)
  assert set(_stored(_value_network(_asts(x.sort(-1)[0])))) == {64 * rows}
  assert set(_stored(_network(_asts(x.topk(8)[1])))) == {64 * rows >> i for i in range(4)}
  assert set(_stored(_network(_asts(Tensor.empty(512, 64).sort(-1)[1])))) == \
    {64 * (512 + (sorting.ALIAS_PAD if narrow else 0))}   # int64 keys: 512 rows are 4 KB
  assert set(_stored(_value_network(_asts(Tensor.empty(512, 64).sort(-1)[0])))) == {64 * 512}   # int32: 2 KB
  schedule._templates.clear()
  a = _data((1024, 60), np.float32)
  a[::7, ::5] = -np.nan
  desc = narrow   # (one order each: every network here is a cold build)
  v, i = _torch_sorted(a, 1, desc)
  got = Tensor(a).sort(1, desc)
  _same(got[0], v)
  _same(got[1], i.astype(np.int32))
  tv, ti = Tensor(a).topk(5, 1, desc)
  _same(tv, v[:, :5])
  _same(ti, i[:, :5].astype(np.int32))
  schedule._templates.clear()


def _topk_data(shape, dim) -> np.ndarray:
  """Ties (values 0..9), NaN of either sign, +-inf, -0.0 beside 0.0, and int32-sized extremes' neighbours."""
  a = _data(shape, np.float32)
  a[tuple(slice(None, None, 5) if i == dim else slice(1, None, 3) for i in range(len(shape)))] = -np.nan
  a[tuple(slice(2, None, 7) if i == dim else slice(None, None, 2) for i in range(len(shape)))] = -0.0
  return a

@pytest.mark.parametrize("narrow", [True, False])
def test_topk_outputs_realized_together_come_from_one_network(narrow, vector_machine, fresh_templates):
  """`v.realize(i)` of topk's outputs over a buffer runs one network for both where vectors are narrow (its keys
  carry the value's code with the index; `plan.pair`): fewer kernels than the two networks, values and indices bit
  for bit those of torch's stable sort (ties by index, NaN first when the largest go first, -0.0 kept), rows first
  and last, dim 0, odd lengths, k = 1, largest or smallest. Wide vectors keep a network each."""
  from tinyplug import schedule
  from tinyplug.engine import plan
  from tinyplug.helpers import GlobalCounters
  schedule._templates.clear()
  vector_machine(32, 16) if narrow else vector_machine(64, 32)
  for shape, dim, k, largest in [((64, 301), 1, 16, True), ((301, 40), 0, 5, False), ((3, 1000), -1, 1, True),
                                 ((40, 129), 1, 7, False)]:
    a = _topk_data(shape, dim % len(shape))
    x = Tensor(a).realize()
    want_v, want_i = _torch_sorted(a, dim, largest)
    for call in range(4):   # the templates are built on the second call, deferred (and paired) from the third
      v, i = x.topk(k, dim, largest)
      hits, kernels = plan.counters["joint_hits"], GlobalCounters.kernel_count
      v.realize(i)
      if call == 3:
        assert plan.counters["joint_hits"] - hits == (1 if narrow else 0)
        ran = GlobalCounters.kernel_count - kernels
        x.topk(k, dim, largest)[0].realize()   # the values' network alone
        x.topk(k, dim, largest)[1].realize()
      _same(v, np.take(want_v, range(k), axis=dim))
      np.testing.assert_array_equal(i.numpy(), np.take(want_i, range(k), axis=dim).astype(np.int32))
    apart = GlobalCounters.kernel_count - kernels - ran
    assert (ran < apart) == narrow, (ran, apart)
  schedule._templates.clear()

@pytest.mark.parametrize("narrow", [True, False])
def test_index_network_keys_are_float64_where_vectors_are_narrow(narrow, vector_machine, fresh_templates):
  """The indices' network packs (rank, index) as a float64 rank * FLOAT_KEY_SPAN + index where vectors are narrow (no
  64-bit integer min or max on AVX2), an int64 on AVX-512: exact either way for every int32 rank (int32 extremes,
  floats' largest and smallest magnitudes, NaN, -0.0 and 0.0 tied by index)."""
  from tinyplug import schedule
  from tinyplug.tensor_ops import sorting
  schedule._templates.clear()
  vector_machine(32, 16) if narrow else vector_machine(64, 32)
  assert sorting._float_keys(1 << 21, "CPU") == narrow and not sorting._float_keys((1 << 21) + 1, "CPU")
  keys = {u.dtype.base for a in _network(_asts(Tensor.empty(64, 1000).sort(-1)[1])) for u in a.toposort()
          if u.op is Ops.DEFINE_GLOBAL and u.dtype.base in (dtypes.int64, dtypes.float64)}
  assert keys == {dtypes.float64 if narrow else dtypes.int64}
  ints = RNG.integers(-3, 3, (40, 333)).astype(np.int32)
  ints[:, :4] = [np.iinfo(np.int32).min, np.iinfo(np.int32).max, np.iinfo(np.int32).min + 1, np.iinfo(np.int32).max - 1]
  floats = _topk_data((40, 333), 1)
  floats[::2, 5:9] = [np.finfo(np.float32).max, -np.finfo(np.float32).max, np.finfo(np.float32).tiny, -1e-45]
  for a in (ints, floats):
    for desc in (False, True):
      want_v, want_i = _torch_sorted(a, 1, desc)
      np.testing.assert_array_equal(Tensor(a).argsort(1, desc).numpy(), want_i.astype(np.int32))
      np.testing.assert_array_equal(Tensor(a).topk(9, 1, desc)[1].numpy(), want_i[:, :9].astype(np.int32))
  schedule._templates.clear()
