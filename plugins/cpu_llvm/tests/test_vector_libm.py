"""log2/sin of vector values (upcast lanes) call glibc's libmvec variant of the same width, not LLVM's vector
intrinsic (which lowers to one scalar libm call per lane); exp2 is the core's polynomial as vector math, whatever the
inputs (libmvec's exp2 took a scalar path for each lane that overflowed, underflowed or was -inf), within 1 ulp;
log2 keeps 0, negatives, denormals, inf and NaN from libmvec (its scalar path again), exact."""
import numpy as np
import pytest
from tinyplug.device import Device
from tinyplug.tensor import Tensor

def _source(t: Tensor) -> str:
  from tinyplug.codegen import get_program
  from tinyplug.schedule import create_schedule
  items, _ = create_schedule([t.uop])
  return get_program(items[-1].ast, Device["CPU"].renderer).src

@pytest.mark.parametrize("fn, ref, name, intrinsic", [(Tensor.log, np.log, "log2f", "log2"), (Tensor.sin, np.sin, "sinf", "sin")])
def test_vector_math_calls_libmvec(fn, ref, name, intrinsic):
  if not Device["CPU"].renderer.vector_isas: pytest.skip("no libmvec on this host")
  a = np.random.default_rng(0).uniform(0.1, 3.0, 4096).astype(np.float32)
  src = _source(fn(Tensor(a, device="CPU")))
  assert f"@llvm.{intrinsic}.v" not in src
  assert "x float> @_ZGV" in src and f"v_{name}(" in src
  np.testing.assert_allclose(fn(Tensor(a, device="CPU")).numpy(), ref(a), rtol=2e-6, atol=1e-6)

@pytest.mark.parametrize("values", ["ordinary", "extremes"])
def test_exp_is_vector_math_without_calls(values):
  rng = np.random.default_rng(1)
  a = rng.uniform(-3.0, 3.0, 4096).astype(np.float32)
  if values == "extremes":   # overflow, underflow into the denormals and to 0, infinities, NaN, a causal mask's -inf
    a[::7], a[1::7], a[2::7], a[3::7] = 120.0, -100.0, -np.inf, np.inf
    a[4::97], a[5::97], a[6::97] = np.nan, -87.0, 88.5
  src = _source(Tensor(a, device="CPU").exp())
  assert "call" not in src and "@llvm.exp2" not in src
  assert "fmul contract <16 x float>" in src or "fmul contract <8 x float>" in src or "fmul contract <4 x float>" in src
  with np.errstate(over="ignore"):
    want = np.exp(a)
  got = Tensor(a, device="CPU").exp().numpy()
  # exp is exp2(x * log2(e)): that product's rounding is relative error |x| * 2^-24 in the result (|x| ~ 100: ~1e-5)
  np.testing.assert_allclose(got, want, rtol=2e-6 if values == "ordinary" else 1.5e-5, atol=0)
  assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))

def _ulp_error(got: np.ndarray, x: np.ndarray, fn, npdt) -> tuple[float, float]:
  """(worst error in ulp of npdt against fn in long double, the x there) over the finite results."""
  with np.errstate(all="ignore"):
    ref = fn(x.astype(np.longdouble))
    rounded = ref.astype(npdt)
  assert np.array_equal(np.isnan(got), np.isnan(rounded)) and np.array_equal(got[np.isinf(rounded)], rounded[np.isinf(rounded)])
  fin = np.isfinite(rounded)
  err = np.abs(got[fin].astype(np.longdouble) - ref[fin]) / np.spacing(np.abs(rounded[fin])).astype(np.longdouble)
  return float(err.max()), x[fin][int(np.argmax(err))]

@pytest.mark.parametrize("npdt", [np.float32, np.float64])
def test_exp2_within_one_ulp(npdt):
  """The polynomial with fma: within 1 ulp of exp2 over the whole range (into the denormals, up to overflow), the
  special inputs exact."""
  fi = np.finfo(npdt)
  rng = np.random.default_rng(4)
  lo, hi = fi.minexp - fi.nmant - 3, fi.maxexp + 1
  special = [0.0, -0.0, fi.smallest_subnormal, -fi.smallest_subnormal, fi.tiny, np.inf, -np.inf, np.nan, fi.max, -fi.max,
             fi.maxexp, np.nextafter(npdt(fi.maxexp), npdt(0)), fi.maxexp - 0.5, fi.minexp, fi.minexp - 0.5,
             fi.minexp - fi.nmant, fi.minexp - fi.nmant - 0.5, fi.minexp - fi.nmant - 1]
  x = np.concatenate([rng.uniform(lo, hi, 1 << 16), rng.uniform(-1, 1, 1 << 14), rng.uniform(lo, fi.minexp, 1 << 13),
                      np.arange(lo, hi) + 0.5, np.arange(lo, hi), special]).astype(npdt)
  got = Tensor(x, device="CPU").exp2().numpy()
  worst, at = _ulp_error(got, x, np.exp2, npdt)
  assert worst <= 1.0, f"{worst:.3f} ulp at x={at!r}"
  ints = (x == np.round(x)) & (x > lo)
  with np.errstate(over="ignore"): want = np.exp2(x[ints].astype(np.longdouble)).astype(npdt)
  np.testing.assert_array_equal(got[ints], want)   # 2**q exactly

def test_exp2_of_half_and_bfloat16():
  """float16 and bfloat16 compute in float32 and round once more: within 1 ulp of their own format."""
  rng = np.random.default_rng(5)
  x = np.concatenate([rng.uniform(-26, 17, 4000), [0.0, -np.inf, np.inf, np.nan, 15.99, 16.0, -24.0, -25.0]]).astype(np.float16)
  got = Tensor(x, device="CPU").exp2().numpy()
  worst, at = _ulp_error(got, x, np.exp2, np.float16)
  assert worst <= 1.0, f"float16: {worst:.3f} ulp at x={at!r}"
  from tinyplug.uop.dtype import dtypes
  xb = Tensor(rng.uniform(-140, 130, 4000).astype(np.float32), device="CPU").cast(dtypes.bfloat16)
  xf = xb.cast(dtypes.float32).numpy()
  got = xb.exp2().cast(dtypes.float32).numpy()
  with np.errstate(over="ignore"): ref = np.exp2(xf.astype(np.float64))
  assert np.array_equal(np.isinf(got), ref >= 2.0 ** 128 * (1 - 2.0 ** -9))   # bfloat16's overflow threshold
  fin = np.isfinite(got) & (ref >= 2.0 ** -126)
  np.testing.assert_allclose(got[fin], ref[fin], rtol=2.0 ** -8, atol=0)

def _log_inputs(npdt, rng) -> np.ndarray:
  """Ordinary values with 0, -0, negatives, denormals, inf, -inf and NaN scattered into some vectors."""
  fi = np.finfo(npdt)
  x = rng.uniform(0.01, 100.0, 1 << 14).astype(npdt)
  special = np.array([0.0, -0.0, -1.0, -fi.smallest_subnormal, fi.smallest_subnormal, fi.tiny / 3, fi.tiny, fi.max,
                      np.inf, -np.inf, np.nan, 1.0], npdt)
  x[rng.choice(len(x), 600, replace=False)] = rng.choice(special, 600)
  x[:len(special)] = special
  return x

@pytest.mark.parametrize("npdt", [np.float32, np.float64])
def test_log2_special_lanes_exact(npdt):
  """Vectors with a 0, negative, denormal, inf or NaN lane take the guarded libmvec call: those lanes exact as C's
  log2 has them (denormals within libmvec's accuracy), the ordinary lanes as libmvec gives them."""
  if not Device["CPU"].renderer.vector_isas: pytest.skip("no libmvec on this host")
  x = _log_inputs(npdt, np.random.default_rng(6))
  src = _source(Tensor(x, device="CPU").log2())
  assert "_guarded:" in src and "@_ZGV" in src
  got = Tensor(x, device="CPU").log2().numpy()
  worst, at = _ulp_error(got, x, np.log2, npdt)
  assert worst <= 4.0, f"{worst:.3f} ulp at x={at!r}"
  with np.errstate(all="ignore"): want = np.log2(x.astype(np.float64)).astype(npdt)
  special = ~(x >= np.finfo(npdt).tiny) | np.isinf(x)
  np.testing.assert_array_equal(got[special & ~(x > 0)], want[special & ~(x > 0)])
  np.testing.assert_array_equal(got[np.isinf(x)], want[np.isinf(x)])

def test_log2_special_values_of_a_scalar_call():
  """A log2 LLVM's loop vectoriser widens (of a row's sum here) keeps the special lanes from libmvec by selects."""
  if not Device["CPU"].renderer.vector_isas: pytest.skip("no libmvec on this host")
  tiny = np.finfo(np.float32).smallest_subnormal
  rows = np.array([[0, 0], [-1, 0], [np.inf, 1], [np.nan, 1], [tiny, 0], [tiny * 5, tiny], [1, 3], [-np.inf, 2],
                   [0.5, 0.25], [-0.0, -0.0], [3e38, 0], [1e-30, 0]] * 4, np.float32)
  t = Tensor(rows, device="CPU").sum(1).log2()
  src = _source(t)
  assert "call float @log2f" in src and "0x43F0000000000000" in src    # the guard's 2**64 for denormals
  got = t.numpy()
  with np.errstate(all="ignore"): want = np.log2(rows.astype(np.float64).sum(1)).astype(np.float32)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  ok = ~np.isnan(want)
  np.testing.assert_allclose(got[ok], want[ok], rtol=1e-6, atol=0)
