"""Differential tests: the same Tensor programs on CPU and on the PYTHON reference device, in many dtypes."""
import numpy as np
import pytest
from tinyplug.uop import dtypes

DTYPES = [dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64, dtypes.int32, dtypes.int8, dtypes.uint8,
          dtypes.int64, dtypes.uint32, dtypes.bool]

PROGRAMS = {
  "add_mul": lambda a, b: (a + b) * a,
  "max_where": lambda a, b: a.maximum(b) + (a < b).where(a, b),
  "sum_rows": lambda a, b: a.sum(1),
  "max_rows": lambda a, b: a.max(0),
  "cmp": lambda a, b: (a != b) | (a == b * 2),
  "permute_pad": lambda a, b: a.permute(1, 0).pad(((1, 2), (0, 1))),
  "cast_chain": lambda a, b: a.cast(dtypes.float32).cast(dtypes.int32) + b.cast(dtypes.int32),
}

def _data(dt, seed):
  rng = np.random.default_rng(seed)
  if dt == dtypes.bool: return rng.random((7, 33)) > 0.5
  if dtypes.is_float(dt): return (rng.standard_normal((7, 33)) * 3).astype(np.float32)
  lo, hi = (0, 50) if dtypes.is_unsigned(dt) else (-50, 50)
  return rng.integers(lo, hi, (7, 33))

@pytest.mark.parametrize("prog", list(PROGRAMS))
@pytest.mark.parametrize("dt", DTYPES, ids=[d.name for d in DTYPES])
def test_cpu_matches_python_device(prog, dt):
  from tinyplug.tensor import Tensor
  outs = []
  for dev in ("CPU", "PYTHON"):
    a = Tensor(_data(dt, 0), device=dev).cast(dt)
    b = Tensor(_data(dt, 1), device=dev).cast(dt)
    try: outs.append(PROGRAMS[prog](a, b).numpy())
    except (TypeError, ValueError, NotImplementedError) as e: pytest.skip(f"frontend: {type(e).__name__}: {e}")
  cpu, ref = outs
  assert cpu.dtype == ref.dtype and cpu.shape == ref.shape
  if dtypes.is_float(dt) and dt != dtypes.bfloat16:
    np.testing.assert_allclose(cpu.astype(np.float64), ref.astype(np.float64), rtol=1e-3 if dt == dtypes.float16 else 1e-6)
  else:
    np.testing.assert_array_equal(cpu, ref)

FLOAT_PROGRAMS = {
  "softmax": lambda a: a.softmax(-1),
  "exp_log_sin": lambda a: a.exp() + (a.abs() + 1).log() - a.sin(),
  "sqrt_recip": lambda a: (a * a + 1).sqrt().reciprocal(),
  "matmul": lambda a: a @ a.permute(1, 0),
}

@pytest.mark.parametrize("prog", list(FLOAT_PROGRAMS))
@pytest.mark.parametrize("dt", [dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64],
                         ids=["float32", "float16", "bfloat16", "float64"])
def test_cpu_matches_python_device_float_math(prog, dt):
  from tinyplug.tensor import Tensor
  if dt == dtypes.bfloat16 and prog == "sqrt_recip":
    # the PYTHON device takes the reciprocal of bfloat16's raw uint16 bits (np.reciprocal on ints): compare with numpy
    x = (np.random.default_rng(2).standard_normal((9, 70)) * 2).astype(np.float32)
    got = FLOAT_PROGRAMS[prog](Tensor(x, device="CPU").cast(dt)).cast(dtypes.float64).numpy()
    np.testing.assert_allclose(got, 1 / np.sqrt(x.astype(np.float64) ** 2 + 1), rtol=2e-2)
    return
  x = (np.random.default_rng(2).standard_normal((9, 70)) * 2).astype(np.float32)
  outs = [FLOAT_PROGRAMS[prog](Tensor(x, device=dev).cast(dt)).cast(dtypes.float64).numpy() for dev in ("CPU", "PYTHON")]
  tol = {dtypes.float32: 1e-5, dtypes.float16: 2e-2, dtypes.bfloat16: 5e-2, dtypes.float64: 1e-12}[dt]
  np.testing.assert_allclose(outs[0], outs[1], rtol=tol, atol=tol)
