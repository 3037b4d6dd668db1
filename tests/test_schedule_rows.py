"""Row kernels: on a device that runs loops (CPU), a reduction broadcast back along the axes it reduced (softmax's max
and sum, layernorm's mean and variance) is computed inside the kernel that uses it, once per row."""
import numpy as np
import pytest
from tinyplug import Tensor
from tinyplug.device import Device
from tinyplug.uop import Ops

torch = pytest.importorskip("torch")

@pytest.fixture
def cpu():
  if "CPU" not in Device.available(): pytest.skip("the CPU device is not available")
  with Device.use("CPU"): yield "CPU"

def kernels_of(t: Tensor) -> list:
  return [it for it in t.schedule() if it.ast.op is Ops.SINK]

def rand(*shape: int, seed: int = 0, scale: float = 4.0) -> np.ndarray:
  return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)

@pytest.mark.parametrize("shape", [(64, 1000), (3, 5, 7), (16, 4096), (1, 33)])
def test_softmax_is_one_kernel_and_matches_torch(cpu, shape):
  xn = rand(*shape)
  assert len(kernels_of(Tensor(xn).softmax(-1))) == 1
  got = Tensor(xn).softmax(-1).numpy()
  # exp is exp2(x * log2 e) in float32: its relative error grows with x - max (about 1e-6 at -15); torch itself is
  # 3e-6 from the float64 answer on rows of 4096
  np.testing.assert_allclose(got, torch.tensor(xn).softmax(-1).numpy(), rtol=1e-5, atol=0)
  exact = torch.tensor(xn, dtype=torch.float64).softmax(-1).numpy()
  np.testing.assert_allclose(got, exact, rtol=1e-5, atol=0)

def test_softmax_far_from_the_max(cpu):
  # tiny but nonzero probabilities keep float32 relative accuracy (|x - max| * 2^-24 from rounding x * log2 e)
  xn = np.array([[0.0, -30.0, -60.0, -87.0, -0.5, -np.inf]], np.float32)
  got = Tensor(xn).softmax(-1).numpy()
  exact = torch.tensor(xn, dtype=torch.float64).softmax(-1).numpy()
  np.testing.assert_allclose(got, exact, rtol=1e-5, atol=0)
  assert got[0, -1] == 0 and (got[0, :-1] > 0).all()

def test_log_softmax_and_layernorm_are_one_kernel(cpu):
  xn = rand(32, 300, seed=1)
  ls = Tensor(xn).log_softmax(-1)
  assert len(kernels_of(Tensor(xn).log_softmax(-1))) == 1
  np.testing.assert_allclose(ls.numpy(), torch.tensor(xn).log_softmax(-1).numpy(), rtol=1e-5, atol=1e-5)
  def layernorm(x: Tensor) -> Tensor:
    c = x - x.mean(-1, keepdim=True)
    return c / ((c * c).mean(-1, keepdim=True) + 1e-5).sqrt()
  assert len(kernels_of(layernorm(Tensor(xn)))) == 1
  want = torch.nn.functional.layer_norm(torch.tensor(xn), (300,), eps=1e-5).numpy()
  np.testing.assert_allclose(layernorm(Tensor(xn)).numpy(), want, rtol=1e-4, atol=1e-5)

def test_the_row_is_reduced_once_per_row(cpu):
  """In the linear program, each reduction loop opens inside the row loop only, not inside the loop over the row's
  outputs (which would redo the reduction for every output)."""
  from tinyplug.codegen import get_program
  (item,) = kernels_of(Tensor(rand(8, 512)).softmax(-1))
  uops = get_program(item.ast, Device["CPU"].renderer).uops
  open_loops, reduce_loops = [], 0
  for u in uops:
    if u.op is Ops.RANGE:
      if u.arg[1] == "reduce":
        reduce_loops += 1
        assert [r.arg[1] for r in open_loops] == ["loop"] and open_loops[0].src[0].arg == 8
      open_loops.append(u)
    elif u.op is Ops.END: open_loops.pop()
  assert reduce_loops == 2

def test_softmax_over_a_leading_axis_stays_correct(cpu):
  xn = rand(40, 30, seed=2)
  out = Tensor(xn).softmax(0)
  assert len(kernels_of(Tensor(xn).softmax(0))) == 3   # the row is not innermost: a kernel per reduction
  np.testing.assert_allclose(out.numpy(), torch.tensor(xn).softmax(0).numpy(), rtol=1e-6, atol=1e-7)

def test_an_expensive_row_source_is_computed_once(cpu):
  a, b = rand(16, 24, seed=3, scale=1), rand(24, 32, seed=4, scale=1)
  out = (Tensor(a) @ Tensor(b)).softmax(-1)
  assert len(kernels_of((Tensor(a) @ Tensor(b)).softmax(-1))) == 2   # the matmul, then the row kernel
  np.testing.assert_allclose(out.numpy(), torch.tensor(a @ b).softmax(-1).numpy(), rtol=1e-5, atol=1e-6)

def test_a_row_reduction_used_by_two_outputs(cpu):
  xn = rand(6, 50, seed=5)
  x = Tensor(xn)
  sm, lsm = x.softmax(-1), x.log_softmax(-1)
  sm.realize(lsm)
  np.testing.assert_allclose(sm.numpy(), torch.tensor(xn).softmax(-1).numpy(), rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(lsm.numpy(), torch.tensor(xn).log_softmax(-1).numpy(), rtol=1e-5, atol=1e-5)

def test_softmax_gradient(cpu):
  xn = rand(5, 70, seed=6)
  x = Tensor(xn, requires_grad=True)
  w = rand(5, 70, seed=7, scale=1)
  (x.softmax(-1) * Tensor(w)).sum().backward()
  xt = torch.tensor(xn, requires_grad=True)
  (xt.softmax(-1) * torch.tensor(w)).sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-6)

def test_other_devices_keep_separate_kernels(device):
  xn = rand(7, 9, seed=8)
  out = Tensor(xn).softmax(-1)
  np.testing.assert_allclose(out.numpy(), torch.tensor(xn).softmax(-1).numpy(), rtol=1e-6, atol=1e-7)
