"""Row (last-axis) reductions read as vectors (issue 20): values of max/min/sum/prod along rows against numpy for
several dtypes, odd widths and 3-D, and the first-index pass of topk's selection (`where(key == best, countdown, -1)`
maxed over a row), whose upcast rows were grouped into one vector accumulator across rows (each lane's compare a
scalar load and compare) and now keep a vector accumulator per row with vector compares."""
from __future__ import annotations
from collections import Counter
import numpy as np
import pytest
from tinyplug import Tensor
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.passes.vectorize import affine_offset
from tinyplug.schedule import create_schedule
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp

RNG = np.random.default_rng(2026)
SHAPES = [(16, 1000), (9, 1023), (40, 37), (3, 8, 1000), (1024, 1024)]
DTYPES = [np.float32, np.int32, np.int64, np.int8, np.float16]

def _data(shape, dtype) -> np.ndarray:
  if np.dtype(dtype).kind == "f": return (RNG.standard_normal(shape) * 4).astype(dtype)
  info = np.iinfo(dtype)
  return RNG.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)   # sums wrap, as numpy's do

@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_row_reductions_against_numpy(shape, dtype):
  a = _data(shape, dtype)
  t = Tensor(a)
  np.testing.assert_array_equal(t.max(-1).numpy(), a.max(-1))
  np.testing.assert_array_equal(t.min(-1).numpy(), a.min(-1))
  if np.dtype(dtype).kind == "f":
    want = a.astype(np.float64).sum(-1)
    tol = 1e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(t.sum(-1).numpy().astype(np.float64), want, rtol=tol, atol=tol * np.abs(a).sum(-1).max())
  else:
    np.testing.assert_array_equal(t.sum(-1, dtype=t.dtype).numpy(), a.sum(-1, dtype=dtype))   # wraps like numpy
    np.testing.assert_array_equal(t.sum(-1).numpy(), a.sum(-1, dtype=np.int64).astype(t.sum(-1).numpy().dtype))

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_row_prod_against_numpy(dtype):
  """Products along odd rows: small factors (floats near 1, ints -1/1/2 so int8 wraps as numpy's does)."""
  shape = (13, 37)
  a = (1 + RNG.standard_normal(shape) * 0.05).astype(dtype) if np.dtype(dtype).kind == "f" else \
    RNG.choice(np.array([-1, 1, 1, 2], dtype=dtype), shape)
  got = Tensor(a).prod(-1, dtype=Tensor(a).dtype).numpy()
  if np.dtype(dtype).kind == "f": np.testing.assert_allclose(got, a.prod(-1), rtol=1e-2 if dtype == np.float16 else 1e-5)
  else: np.testing.assert_array_equal(got, a.prod(-1, dtype=dtype))

def test_row_max_keeps_nan():
  a = RNG.standard_normal((24, 1000)).astype(np.float32)
  a[3, 17], a[7, 999], a[11, 0] = np.nan, np.nan, np.nan
  got = Tensor(a).max(-1).numpy()
  np.testing.assert_array_equal(np.isnan(got), np.isnan(a.max(-1)))
  np.testing.assert_array_equal(got[~np.isnan(got)], a.max(-1)[~np.isnan(got)])

def _first_index(x: Tensor) -> Tensor:
  """topk's first-index pass along rows: the last index minus the max of the countdown where the row's max is hit."""
  n = x.shape[-1]
  ar = Tensor.arange(n, device=x.device, dtype=dtypes.int32).reshape(1, n)
  best = x.max(-1, keepdim=True).contiguous()
  return (n - 1) - x.eq(best).where(n - 1 - ar, -1).max(-1)

@pytest.mark.parametrize("shape", [(64, 1024), (9, 1023), (40, 37), (16, 1000)], ids=str)
@pytest.mark.parametrize("dtype", [np.int32, np.float32, np.int8])
def test_first_index_of_row_max_against_numpy(shape, dtype):
  a = RNG.integers(-3, 3, shape).astype(dtype)   # many ties: the first index wins
  np.testing.assert_array_equal(_first_index(Tensor(a)).numpy(), np.argmax(a, -1))

def test_topk_rows_against_numpy():
  a = RNG.integers(-50, 50, (32, 1000)).astype(np.int32)
  v, i = Tensor(a).topk(3, dim=-1)
  want_i = np.argsort(-a, axis=-1, kind="stable")[:, :3]
  np.testing.assert_array_equal(i.numpy(), want_i)
  np.testing.assert_array_equal(v.numpy(), np.take_along_axis(a, want_i, -1))

def _vector_ops(opts_and_spec) -> Counter:
  _, spec = opts_and_spec
  return Counter(u.op for u in spec.uops if u.dtype.count > 1)

def _lower_first_index(rows: int, n: int, opts: list | None = None):
  x = Tensor.empty(rows, n, dtype=dtypes.int32, device="CPU")
  item = create_schedule([_first_index(x).uop])[0][-1]
  r = Device["CPU"].renderer
  if opts is None: opts = heuristic_opts(Kernel(item.ast, r))
  return opts, get_program(item.ast, r, opts=opts)

def test_first_index_rows_keep_a_vector_accumulator_each(vector_machine):
  """On an AVX-512-like machine each upcast row gets its own vector accumulator and its compares are vector compares
  (before: one accumulator across the upcast rows, every lane's compare a scalar load and compare)."""
  vector_machine(64, 32)
  # the rows side by side as the streams rule once upcast them (the heuristic now leaves a stream of maxima plain)
  opts, spec = _lower_first_index(64, 1024, [Opt(OptOps.UPCAST, 0, 8), Opt(OptOps.UNROLL, 0, 8)])
  rows = int(np.prod([o.arg for o in opts if o.op is OptOps.UPCAST]))
  assert rows > 1 and any(o.op is OptOps.UNROLL for o in opts), opts
  accs = [u for u in spec.uops if u.op is Ops.DEFINE_REG and u.dtype.count > 1]
  assert len(accs) == rows, (opts, [u.dtype for u in accs])
  assert _vector_ops((opts, spec))[Ops.CMPEQ] >= rows

def test_affine_offset_reads_differences():
  """A countdown's lanes as the simplifier writes them (`1023 - (8r + 1)`, `-(8r) + 1023`) are one term plus constants."""
  r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 128),), (0, "reduce"))
  a = UOp.const(dtypes.int32, 1023) - (r * 8 + 1)
  b = -(r * 8) + 1023
  assert affine_offset(a) == (frozenset({(r, -8)}), 1022)
  assert affine_offset(b) == (frozenset({(r, -8)}), 1023)

def test_a_stream_of_maxima_keeps_plain_loops(vector_machine):
  """A long row's max (and argmax's int64 keys, one max per row) is left to LLVM's loop vectorizer; a row sum is
  unrolled into a vector accumulator (STREAM_UNROLLS)."""
  from tinyplug.passes.heuristic import STREAM_UNROLLS
  vector_machine(64, 32)
  r = Device["CPU"].renderer
  for t in (Tensor.empty(1024, 1024, device="CPU").max(1), Tensor.empty(1024, 1024, device="CPU").argmax(1),
            _first_index(Tensor.empty(64, 1024, dtype=dtypes.int32, device="CPU"))):
    assert heuristic_opts(Kernel(create_schedule([t.uop])[0][-1].ast, r)) == []
  t = Tensor.empty(1024, 1024, device="CPU").sum(1)
  assert heuristic_opts(Kernel(create_schedule([t.uop])[0][-1].ast, r)) == [Opt(OptOps.UNROLL, 0, STREAM_UNROLLS[0])]
  a = RNG.standard_normal((64, 1024)).astype(np.float32)
  np.testing.assert_array_equal(Tensor(a).max(1).numpy(), a.max(1))
  np.testing.assert_array_equal(Tensor(a).argmax(1).numpy(), a.argmax(1))

def test_row_max_reduction_may_ignore_zero_signs_only():
  """A max reduction's update carries nsz (LLVM's loop vectorizer then takes it: max(1) of 512x1000 171 -> 84 us one
  thread), an elementwise maximum does not; NaN still wins, -inf rows and signed zeros keep their values."""
  a = RNG.standard_normal((64, 1000)).astype(np.float32)
  a[5, 500], a[9, :] = np.nan, -np.inf
  a[12, :] = -0.0
  a[13, :], a[13, 3] = -0.0, 0.0
  got, want = Tensor(a).max(-1).numpy(), a.max(-1)
  np.testing.assert_array_equal(got, want)   # (NaN equal to NaN here; -0.0 == 0.0)
  assert np.signbit(got[12]) and not np.isnan(got[13]) and got[13] == 0
  with np.errstate(invalid="ignore", over="ignore"):
    sm = Tensor(a).softmax(-1).numpy()
    e = np.exp(a - a.max(-1, keepdims=True))
  np.testing.assert_allclose(sm, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)
  np.testing.assert_array_equal(Tensor(np.float32([-0.0, 3.0])).maximum(Tensor(np.float32([0.0, -1.0]))).numpy(),
                                np.float32([0.0, 3.0]))
  x = Tensor.empty(64, 1000, device="CPU")
  srcs = {name: [it.ast for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK] for name, t in
          (("max", x.max(-1)), ("maximum", x.maximum(x * 2)))}
  renderer = Device["CPU"].renderer
  calls = {name: [ln for ast in asts for ln in get_program(ast, renderer).src.splitlines() if "@llvm.maximum" in ln
                  and "call" in ln] for name, asts in srcs.items()}
  assert any("nsz" in ln for ln in calls["max"])   # (the accumulator update; the lanes combined after need none)
  assert calls["maximum"] and not any("nsz" in ln for ln in calls["maximum"])
