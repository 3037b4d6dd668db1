"""A Python scalar that changes every step (a learning-rate schedule, `x * lr`) compiled a new kernel each step and
kept it. Now a float32 constant that changes between runs of an otherwise equal graph becomes a kernel argument from
its second value on: two builds, then none, whatever the number of steps (SCALAR_ARGS=0 bakes every value)."""
import math
import numpy as np
import pytest
import tinyplug.codegen
from tinyplug import Tensor
from tinyplug.helpers import Context

@pytest.fixture
def builds(monkeypatch):
  """How many kernels codegen has built since the test started."""
  count = [0]
  real = tinyplug.codegen.get_program
  def counting(*args, **kwargs):
    count[0] += 1
    return real(*args, **kwargs)
  monkeypatch.setattr(tinyplug.codegen, "get_program", counting)
  return lambda: count[0]

def _data(n: int = 37) -> np.ndarray: return np.linspace(-3, 3, n, dtype=np.float32)

def test_a_learning_rate_schedule_compiles_once(device, builds):
  x = Tensor(_data(), device=device).contiguous().realize()
  seen = []
  for step in range(12):
    lr = 0.1 * 0.9 ** step
    out = (x * lr - lr / 2).numpy()
    np.testing.assert_allclose(out, _data() * np.float32(lr) - np.float32(lr / 2), rtol=1e-6, atol=1e-7)
    seen.append(builds())
  assert seen[1] > seen[0] and seen[-1] == seen[1], seen   # step 1 builds the kernel with arguments; then nothing

def test_scalar_args_off_bakes_every_value(device, builds):
  x = Tensor(_data(), device=device).contiguous().realize()
  with Context(SCALAR_ARGS=0):
    start = builds()
    for step in range(4):
      np.testing.assert_allclose((x * (2.0 + step / 8)).numpy(), _data() * np.float32(2.0 + step / 8), rtol=1e-6)
    assert builds() - start == 4

@pytest.mark.parametrize("values", [[1.5, -0.0, math.inf, -math.inf, math.nan, 1e39, 1e-45, 3.0]])
def test_special_values_pass_through_as_their_bits(device, values):
  x = Tensor(_data(8), device=device).contiguous().realize()
  for v in values:
    with np.errstate(all="ignore"):
      want = _data(8) * np.float32(v)
      got = (x * v).numpy()
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)

def test_a_changing_scalar_in_a_training_step(device, builds):
  """A loss scale set from Python each step: gradients right, and the step stops compiling after the third (the first
  copies w and x in, which then hold device buffers: another graph; the second sees the scale's second value, which
  becomes an argument)."""
  rng = np.random.default_rng(0)
  w0, xs = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
  w = Tensor(w0, device=device, requires_grad=True)
  xt = Tensor(xs, device=device)
  seen = []
  for step in range(5):
    scale = 1.5 + step * 0.25   # (a scale of exactly 1 is skipped when the graph is built: another graph)
    loss = ((xt @ w).relu().sum() * scale)
    (g,) = loss.gradient(w)
    want = xs.T @ ((xs @ w0) > 0).astype(np.float32) * np.float32(scale)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-5, atol=1e-5)
    seen.append(builds())
  assert seen[-1] == seen[2], seen

def test_schedules_carry_the_values(device):
  """Tensor.schedule() hands out items whose var_vals hold the current values: running them later is right."""
  from tinyplug.engine.realize import run_schedule
  x = Tensor(_data(), device=device).contiguous().realize()
  (x * 2.5).realize()
  y = x * 4.25                               # second value: the kernel takes the scalar as an argument
  items = y.schedule()
  assert any(it.var_vals for it in items)
  run_schedule(items)
  np.testing.assert_allclose(y.numpy(), _data() * np.float32(4.25), rtol=1e-6)
