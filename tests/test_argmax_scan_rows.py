"""argmax, logsumexp and the scans (issue 20's slow rows): argmax on the CPU is one reduction over int64 keys (order
key, then n-1-index), on GPUs the max then the first index equal to it; logsumexp along the rows runs as one row
kernel (the max, then the sum, over a row while it is in cache: `fuse_rows`); cumsum and cumprod run in
blocks of SCAN_BLOCK along their own axis (block totals, their exclusive scan, each block's triangle plus the blocks
before it in one kernel). Values against numpy and torch at odd sizes and dtypes, NaN, ties, keepdim, gradients; the
kernels they schedule and the heuristic's decision for the scan down the columns on other machines."""
import numpy as np
import pytest
import torch
from tinyplug import Tensor, dtypes, schedule
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor_ops import reduce as reduce_ops, template
from tinyplug.tensor_ops.reduce import SCAN_BLOCK
from tinyplug.passes.vectorize import Vectorizer, has_gather
from tinyplug.uop.ops import Ops, UOp

RNG = np.random.default_rng(12)
SHAPES = [(4097, 5), (7, 1000), (3, 70, 7), (1, 1)]

def _items(t: Tensor) -> list:
  schedule._templates.clear()
  return create_schedule([t.uop])[0]

def _reduces(item) -> list:
  return [u for u in item.ast.toposort() if u.op is Ops.REDUCE]

# ---- argmax ----
@pytest.fixture(params=["keyed", "two_pass"])
def argmax_form(request, monkeypatch):
  """Each argmax test runs the one-pass form (wide CPU vectors) and, on the CPU too, the two-pass form GPUs and AVX2
  get, whatever the host."""
  def forget():   # argmax is a graph template: built anew for each form
    template._templates.clear(); template._seen.clear(); schedule._templates.clear()
  monkeypatch.setattr(reduce_ops, "_keyed_argmax", lambda device, keyed=request.param == "keyed": keyed)
  forget()
  yield request.param
  forget()

@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64, np.int8, np.uint8, np.uint32, np.bool_])
def test_argmax_every_axis_against_numpy(shape, dtype, argmax_form):
  a = RNG.integers(-4, 4, shape).astype(dtype)   # few distinct values: many ties, the first index wins
  for axis in range(len(shape)):
    np.testing.assert_array_equal(Tensor(a).argmax(axis).numpy(), np.argmax(a, axis), err_msg=f"axis {axis}")
    np.testing.assert_array_equal(Tensor(a).argmin(axis).numpy(), np.argmin(a, axis), err_msg=f"axis {axis}")
    kept = Tensor(a).argmax(axis, keepdim=True).numpy()
    np.testing.assert_array_equal(kept, np.expand_dims(np.argmax(a, axis), axis))

def test_argmax_rows_with_nan_and_inf_against_torch(argmax_form):
  a = RNG.standard_normal((9, 1000)).astype(np.float32)
  a[1, 17], a[1, 900] = np.nan, np.nan          # the first NaN is the max
  a[2, 5] = np.inf
  a[3, :] = -np.inf                             # all -inf: index 0
  a[4, 999] = np.nan                            # NaN last
  a[5, 0] = np.nan                              # NaN first
  for axis in (0, 1):
    np.testing.assert_array_equal(Tensor(a).argmax(axis).numpy(), torch.tensor(a).argmax(axis).numpy())
    np.testing.assert_array_equal(Tensor(a).argmax(axis).numpy(), np.argmax(a, axis))

def test_argmax_special_values_and_dim_none(argmax_form):
  """-0.0 and 0.0 are equal (the first of them wins), a NaN of either sign is the max (the first NaN), all-equal
  rows give 0, dim=None is over the flattened tensor; float16 and argmin too."""
  nan, inf = np.nan, np.inf
  a = np.array([[-0.0, 0.0, -1, -0.0], [0.0, -0.0, -0.0, -1], [1, nan, 5, -nan], [-nan, 2, nan, 9], [3, 3, 3, 3],
                [-inf, -inf, -inf, -inf], [inf, 1, inf, -inf], [-1, -3, -3, -2], [5, -nan, 7, nan]], dtype=np.float32)
  a[2, 1] = -a[2, 1]   # a NaN with the sign bit set (-nan above is folded by numpy)
  for dt in (np.float32, np.float16):
    x = a.astype(dt)
    for fn in ("argmax", "argmin"):
      for axis in (0, 1):
        for keepdim in (False, True):
          got = getattr(Tensor(x), fn)(axis, keepdim=keepdim).numpy()
          np.testing.assert_array_equal(got, getattr(np, fn)(x, axis, keepdims=keepdim), err_msg=f"{dt} {fn} {axis}")
        np.testing.assert_array_equal(getattr(Tensor(x), fn)(axis).numpy(), getattr(torch.tensor(x), fn)(axis).numpy())
      assert getattr(Tensor(x), fn)().item() == getattr(np, fn)(x)
      assert getattr(Tensor(x[4:]), fn)().item() == getattr(np, fn)(x[4:])   # no NaN: ties and -inf over all

def test_argmax_dim_none_keepdim_keeps_a_one_per_dim(argmax_form):
  """dim=None with keepdim: the flat index in a shape of ones, one per dim of the input (numpy's and torch's shape;
  it came back 0-d)."""
  for shape in ((7,), (5, 40), (3, 4, 50), ()):
    a = RNG.standard_normal(shape).astype(np.float32)
    if a.size > 9: a.reshape(-1)[9] = np.nan
    for fn in ("argmax", "argmin"):
      got = getattr(Tensor(a), fn)(None, keepdim=True).numpy()
      want = getattr(np, fn)(a, axis=None, keepdims=True)
      assert got.shape == want.shape == getattr(torch.tensor(a), fn)(dim=None, keepdim=True).shape, (shape, fn)
      np.testing.assert_array_equal(got, want)

def test_argmax_is_one_reduction_on_the_cpu_and_two_passes_elsewhere(argmax_form):
  """The CPU's argmax is one int64 max per row; the GPUs' form, the max then the first index equal to it, is one row
  kernel with both passes on the CPU as well (fuse_rows); logsumexp's two passes are one row kernel."""
  x = Tensor.empty(4096, 4096, device="CPU")
  for out in (x.argmax(1), x.argmax(-1, keepdim=True), x.argmin(1)):
    items = _items(out)
    assert len(items) == 1
    reduces = _reduces(items[0])
    assert len(reduces) == (1 if argmax_form == "keyed" else 2)
    if argmax_form == "keyed": assert reduces[0].dtype.scalar() == dtypes.int64
  for out in (x.logsumexp(1), Tensor.empty(128, 10, device="CPU").logsumexp(1)):
    items = _items(out)
    assert len(items) == 1
    assert len(_reduces(items[0])) == 2

@pytest.mark.parametrize("narrow", [False, True])
def test_argmax_form_per_machine(narrow, vector_machine, fresh_templates):
  """AVX-512 (32 registers of 64 bytes) takes the one int64 max; AVX2 (16 of 32 bytes, no 64-bit max) the max then
  the first index equal to it, two reductions in one row kernel; the first index of a tie and of a NaN either way."""
  schedule._templates.clear()
  vector_machine(32, 16) if narrow else vector_machine(64, 32)
  assert reduce_ops._keyed_argmax("CPU") is not narrow
  items = _items(Tensor.empty(4096, 4096, device="CPU").argmax(1))
  assert len(items) == 1 and len(_reduces(items[0])) == (2 if narrow else 1)
  a = RNG.standard_normal((50, 300)).astype(np.float32)
  a[:, 7] = a[:, 200] = a.max(1) + 1
  a[3, 40] = a[3, 9] = np.nan
  np.testing.assert_array_equal(Tensor(a).argmax(1).numpy(), np.argmax(a, 1))
  np.testing.assert_array_equal(Tensor(a).argmax(0).numpy(), np.argmax(a, 0))
  schedule._templates.clear()

def _argmax_opts(x: Tensor, fn: str = "argmax") -> list:
  (item,) = _items(getattr(x, fn)(1))
  return heuristic_opts(Kernel(item.ast, Device["CPU"].renderer))

def test_narrow_vectors_read_argmax_rows_side_by_side(vector_machine, fresh_templates):
  """AVX2's two-pass argmax along rows of at least 4 vectors, and a stream of row maxima, read 8 rows side by side
  (half its 16 registers: an accumulator per row in each pass); short rows, logsumexp's passes (a sum among them),
  a row sum, and AVX-512's one int64 max and row maxima keep their loops."""
  from tinyplug.passes.heuristic import STREAM_UNROLLS
  vector_machine(32, 16)
  schedule._templates.clear()
  for fn in ("argmax", "argmin", "max", "min"):
    assert _argmax_opts(Tensor.empty(4096, 4096, device="CPU"), fn) == [Opt(OptOps.UPCAST, 0, 8)], fn
  assert _argmax_opts(Tensor.empty(4096, 4096, device="CPU"), "sum") == [Opt(OptOps.UNROLL, 0, STREAM_UNROLLS[0])]
  assert _argmax_opts(Tensor.empty(64, 1000, device="CPU")) == [Opt(OptOps.UPCAST, 0, 8)]
  assert _argmax_opts(Tensor.empty(8192, 10, device="CPU")) == []      # rows of 10: under 4 vectors
  assert _argmax_opts(Tensor.empty(4100, 4096, device="CPU")) == []    # 4100 rows: 8 does not divide them
  (item,) = _items(Tensor.empty(4096, 4096, device="CPU").logsumexp(1))
  assert heuristic_opts(Kernel(item.ast, Device["CPU"].renderer)) == []
  vector_machine(64, 32)
  schedule._templates.clear()
  for fn in ("argmax", "max"): assert _argmax_opts(Tensor.empty(4096, 4096, device="CPU"), fn) == [], fn
  # float64 takes the two passes on every machine; AVX-512 keeps them plain loops
  assert _argmax_opts(Tensor.empty(4096, 4096, dtype=dtypes.float64, device="CPU")) == []
  schedule._templates.clear()

@pytest.mark.parametrize("shape", [(16, 1001), (24, 33), (8, 257), (32, 1), (16, 33000)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_narrow_argmax_rows_side_by_side_against_numpy(shape, dtype, vector_machine, fresh_templates):
  """The 8 rows side by side (AVX2's two passes) on rows no vector divides, rows of one and rows too long for one row
  kernel (the max and the index pass each a stream of maxima): ties, -0 and +0, NaNs of either sign in the first and
  last lanes, the first of them winning, as numpy."""
  vector_machine(32, 16)
  schedule._templates.clear()
  a = RNG.integers(-3, 3, shape).astype(dtype)   # few distinct values: ties everywhere
  if dtype != np.int32:
    n = shape[1]
    a[0, 0] = a[1, n - 1] = np.nan
    a[2, n // 2] = -np.nan
    a[2, n - 1] = np.nan
    a[3, :] = -0.0
    a[3, n - 1] = 0.0
    a[4, :] = np.inf if n == 1 else -np.inf
  for fn in ("argmax", "argmin"):
    np.testing.assert_array_equal(getattr(Tensor(a), fn)(1).numpy(), getattr(np, fn)(a, 1), err_msg=fn)
  schedule._templates.clear()

@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8])
def test_narrow_row_maxima_side_by_side_against_numpy(dtype, vector_machine, fresh_templates):
  """A stream of row maxima, 8 rows side by side (AVX2): NaNs first and last in a row, -0 and +0, all -inf."""
  vector_machine(32, 16)
  a = RNG.integers(-100, 100, (16, 4104)).astype(dtype)
  if dtype != np.int8:
    a[0, 0] = a[1, -1] = np.nan
    a[2, :] = -0.0
    a[2, 7] = 0.0
    a[3, :] = -np.inf
  for fn in ("max", "min"):
    np.testing.assert_array_equal(getattr(Tensor(a), fn)(1).numpy(), getattr(np, fn)(a, 1), err_msg=fn)

def test_narrow_vectors_read_shorter_rows_of_maxima_side_by_side(vector_machine, fresh_templates):
  """AVX2: a row max over rows shorter than a stream's (1000, 512) reads 8 rows side by side too, where the vector-wide
  unroll ran each row as one chain of vector maxima; rows of 256 keep the unroll, and AVX-512 keeps it for all."""
  vector_machine(32, 16)
  schedule._templates.clear()
  for shape in ((64, 1000), (256, 1000), (4096, 512)):
    for fn in ("max", "min"):
      assert _argmax_opts(Tensor.empty(*shape, device="CPU"), fn) == [Opt(OptOps.UPCAST, 0, 8)], (shape, fn)
  assert _argmax_opts(Tensor.empty(1024, 256, device="CPU"), "max") == [Opt(OptOps.UNROLL, 0, 8)]
  a = RNG.standard_normal((64, 1000)).astype(np.float32)
  a[0, 0] = a[1, -1] = a[2, 500] = np.nan
  a[3, :] = -np.inf
  a[4, :] = -0.0
  for fn in ("max", "min"):
    np.testing.assert_array_equal(getattr(Tensor(a), fn)(1).numpy(), getattr(np, fn)(a, 1), err_msg=fn)
  vector_machine(64, 32)
  schedule._templates.clear()
  assert _argmax_opts(Tensor.empty(64, 1000, device="CPU"), "max") == [Opt(OptOps.UNROLL, 0, 8)]
  schedule._templates.clear()

def test_passes_over_a_row_keep_plain_loops():
  """A row kernel's passes stay loops that LLVM vectorises (unrolled, the max was one chain of vector maxima)."""
  items = _items(Tensor.empty(4096, 4096, device="CPU").logsumexp(1))
  assert heuristic_opts(Kernel(items[0].ast, Device["CPU"].renderer)) == []

# ---- logsumexp ----
@pytest.mark.parametrize("shape", SHAPES)
def test_logsumexp_every_axis_against_torch(shape):
  a = (RNG.standard_normal(shape) * 10).astype(np.float32)
  for axis in range(len(shape)):
    for keepdim in (False, True):
      want = torch.tensor(a).logsumexp(axis, keepdim=keepdim).numpy()
      np.testing.assert_allclose(Tensor(a).logsumexp(axis, keepdim=keepdim).numpy(), want, rtol=1e-5, atol=1e-5)

def test_logsumexp_gradient_against_torch():
  a = RNG.standard_normal((128, 10)).astype(np.float32)
  x = Tensor(a, requires_grad=True)
  x.logsumexp(1).sum().backward()
  xt = torch.tensor(a, requires_grad=True)
  xt.logsumexp(1).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)

# ---- scans ----
@pytest.mark.parametrize("shape", SHAPES + [(1024, 1024), (65,), (300, 3)])
def test_cumsum_every_axis_against_numpy(shape):
  a = RNG.standard_normal(shape).astype(np.float32)
  for axis in range(len(shape)):
    want = np.cumsum(a.astype(np.float64), axis)
    np.testing.assert_allclose(Tensor(a).cumsum(axis).numpy(), want, rtol=1e-4, atol=2e-3, err_msg=f"axis {axis}")

@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float16])
def test_cumsum_dtypes_against_torch(dtype):
  a = RNG.integers(-3, 4, (70, 129)).astype(dtype)
  for axis in (0, 1):
    want = torch.tensor(a).cumsum(axis).numpy()
    got = Tensor(a).cumsum(axis).numpy()
    if dtype == np.float16: np.testing.assert_allclose(got, want, atol=0.5)
    else: np.testing.assert_array_equal(got, want)

def test_cumprod_against_torch():
  a = (1 + RNG.standard_normal((9, 300)) * 0.01).astype(np.float32)
  a[2, 150] = 0.0                                # a zero in the middle of a block
  for axis in (0, 1):
    np.testing.assert_allclose(Tensor(a).cumprod(axis).numpy(), torch.tensor(a).cumprod(axis).numpy(), rtol=1e-4)

@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_scan_gradients_against_torch(op):
  a = (1 + RNG.standard_normal((70, 97)) * 0.01).astype(np.float32)
  w = RNG.standard_normal((70, 97)).astype(np.float32)
  for axis in (0, 1):
    x = Tensor(a, requires_grad=True)
    (getattr(x, op)(axis) * Tensor(w)).sum().backward()
    xt = torch.tensor(a, requires_grad=True)
    (getattr(xt, op)(axis) * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)

@pytest.fixture
def fresh_templates(monkeypatch):
  """Fresh graph-template caches: no scan built for another machine is reused."""
  from tinyplug.caches import BoundedCache
  from tinyplug.tensor_ops import template
  for name in ("_templates", "_seen"):
    monkeypatch.setattr(template, name, BoundedCache(getattr(template, name).name, getattr(template, name).maxsize))

@pytest.mark.parametrize("axis", [0, 1])
def test_a_long_scan_is_totals_then_one_block_kernel(axis, avx512_machine, fresh_templates):
  """Three kernels: the block totals, their scan, and the blocks' triangles plus the blocks before them (old: a
  triangle of sqrt(n) realized, the totals' scan, then an elementwise kernel adding them)."""
  items = _items(Tensor.empty(1024, 1024, device="CPU").cumsum(axis))
  assert len(items) == 3
  last = _reduces(items[-1])
  assert len(last) == 1 and all(r.src[0].arg == SCAN_BLOCK for r in last[0].src[1:])

@pytest.mark.parametrize("axis", [0, 1])
def test_narrow_vectors_scan_in_blocks_of_one_register(axis, vector_machine, fresh_templates):
  """AVX2 (16 registers of 32 bytes): blocks of 8, one vector of float32 outputs (half the triangle); the 128 block
  totals' scan is then blocked too (five kernels). Values as numpy's, cummax's indices as torch's."""
  from tinyplug import schedule
  from tinyplug.tensor_ops.reduce import NARROW_SCAN_BLOCK
  schedule._templates.clear()
  vector_machine(32, 16)
  items = _items(Tensor.empty(1024, 1024, device="CPU").cumsum(axis))
  assert NARROW_SCAN_BLOCK == 8 and len(items) == 5
  last = _reduces(items[-1])
  assert len(last) == 1 and all(r.src[0].arg == NARROW_SCAN_BLOCK for r in last[0].src[1:])
  a = RNG.standard_normal((300, 200)).astype(np.float32)
  np.testing.assert_allclose(Tensor(a).cumsum(axis).numpy(), np.cumsum(a, axis), rtol=1e-4, atol=1e-4)
  a[:, ::5] = a[:, 1::5]   # ties: torch reports the last place the running max was reached
  v, i = Tensor(a).cummax(axis)
  tv, ti = torch.from_numpy(a).cummax(axis)
  np.testing.assert_array_equal(v.numpy(), tv.numpy())
  np.testing.assert_array_equal(i.numpy(), ti.numpy().astype(np.int32))
  schedule._templates.clear()

def test_a_realized_scan_is_a_view_of_its_block_kernel_output():
  """realize() of the scan leaves the blocks' buffer seen whole, not a copy of it."""
  x = Tensor(RNG.standard_normal((64, 64)).astype(np.float32)).realize()
  y = x.cumsum(1).realize()
  assert y.uop.op is Ops.RESHAPE and y.uop.src[0].op is Ops.BUFFER
  np.testing.assert_allclose(y.numpy(), np.cumsum(x.numpy(), 1), rtol=1e-5, atol=1e-5)

def _range(n: int) -> UOp: return UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, n),), (0, "reduce"))

def test_mask_lanes_folded_by_the_range_are_one_vector_compare():
  """A scan's mask lanes `j < i + 1` over j in [0, 4): the last lane folds to True; all four are still one vector
  compare of j (before: each lane compared on its own and put together)."""
  j = _range(4)
  lanes = tuple(UOp(Ops.CMPLT, dtypes.bool, (j, UOp.const(dtypes.int, c))) for c in (1, 2, 3))
  lanes += (UOp.const(dtypes.bool, True),)
  v = Vectorizer(Device["CPU"].renderer).vec(lanes)
  assert v.op is Ops.CMPLT and v.src[1].op is Ops.VCONST and v.src[1].arg == (1, 2, 3, 4)

def test_integer_lanes_written_differently_are_a_broadcast_plus_steps():
  """argmax's countdown per unrolled lane: lane 0 folded to `r * -8 + n`, the others `(r * 8 + k) * -1 + n`; one
  vector add of the first lane and the steps (before: a gather of scalar lanes, and no vector accumulator)."""
  r, n = _range(512), UOp.const(dtypes.int, 4096)
  first = r * -8 + n
  rest = [((r * 8) + UOp.const(dtypes.int, k)) * -1 + n for k in range(1, 8)]
  v = Vectorizer(Device["CPU"].renderer).vec((first, *rest))
  assert any(u.op is Ops.VCONST and u.arg == tuple(-k for k in range(8)) for u in v.toposort())
  assert not has_gather(v)

@pytest.mark.parametrize("nbytes,regs,lanes", [(64, 32, 64), (32, 16, 64), (16, 16, 64)])
def test_a_scan_down_the_columns_reuses_each_row_vector_for_four_outputs(vector_machine, nbytes, regs, lanes):
  """256 bytes of a row x 4 block rows, whatever the registers: AVX-512's 4 vectors, AVX2's 8, SSE's 16."""
  vector_machine(nbytes, regs)
  items = _items(Tensor.empty(1024, 1024, device="CPU").cumsum(0))
  k = Kernel(items[-1].ast, Device["CPU"].renderer)
  assert heuristic_opts(k) == [Opt(OptOps.UPCAST, 2, lanes), Opt(OptOps.UPCAST, 1, 4)]

def test_int_argmax_dtype_is_int32():
  assert Tensor(np.arange(10, dtype=np.int64)).argmax().dtype == dtypes.int32

def test_a_long_scan_beside_a_variable_dim():
  """The blocks' reshape keeps a variable-bound dim before or after the scanned axis."""
  from tinyplug import Variable
  a = RNG.standard_normal((10, 100)).astype(np.float32)
  v = Variable("rows", 1, 10).bind(7)
  got = Tensor(a)[:v].cumsum(1).contiguous().realize()[:7].numpy()
  np.testing.assert_allclose(got, np.cumsum(a[:7], 1), rtol=1e-5, atol=1e-5)
  got = Tensor(a.T.copy())[:, :v].cumsum(0).contiguous().realize()[:, :7].numpy()
  np.testing.assert_allclose(got, np.cumsum(a.T[:, :7], 0), rtol=1e-5, atol=1e-5)
