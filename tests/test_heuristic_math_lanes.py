"""Elementwise kernels with costly math (exp2, log2, sin, sqrt, reciprocals, divisions) on CPUs: the row is upcast by
the lanes of one vector register (`Renderer.vector_bytes`), so each libm-style call or division works on a whole
register; cheap elementwise kernels keep the 4-lane rule. Decisions for fake machines fed through the CPU renderer;
values against torch, odd sizes included."""
import numpy as np
import pytest
import torch
from tinyplug import schedule
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import heuristic_opts, math_lanes
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(5)

def last_kernel(build, *shape) -> Kernel:
  schedule._templates.clear()   # no schedule made under another fake machine
  items, _ = create_schedule([build(Tensor.empty(*shape, device="CPU")).uop])
  return Kernel(items[-1].ast, Device["CPU"].renderer)

COSTLY = {"tanh": lambda t: t.tanh(), "exp": lambda t: t.exp(), "sigmoid": lambda t: t.sigmoid(),
          "sqrt": lambda t: t.abs().sqrt(), "log": lambda t: (t.abs() + 1).log(), "div": lambda t: 1 / (t.abs() + 1),
          "sin": lambda t: t.sin(), "silu": lambda t: t.silu(), "gelu": lambda t: t.gelu()}

@pytest.mark.parametrize("name", sorted(COSTLY))
@pytest.mark.parametrize("regs,lanes", [((64, 32), 16), ((32, 16), 8)], ids=["avx512", "avx2"])
def test_costly_math_is_upcast_one_register_wide(vector_machine, name, regs, lanes):
  vector_machine(*regs)
  k = last_kernel(COSTLY[name], 1 << 20)
  assert math_lanes(k) == lanes
  assert heuristic_opts(k)[-1] == Opt(OptOps.UPCAST, 0, lanes)

@pytest.mark.parametrize("regs", [(64, 32), (32, 16), (16, 32)], ids=["avx512", "avx2", "neon"])
def test_cheap_math_and_narrow_vectors_keep_four_lanes(vector_machine, regs):
  vector_machine(*regs)
  chain = last_kernel(lambda t: (t * 2 + 1).relu() * 0.5, 1 << 20)
  assert math_lanes(chain) == 0 and heuristic_opts(chain) == [Opt(OptOps.UPCAST, 0, 4)]
  if regs[0] == 16:   # NEON: a register holds 4 floats, the rule's own width
    tanh = last_kernel(lambda t: t.tanh(), 1 << 20)
    assert math_lanes(tanh) == 4 and heuristic_opts(tanh) == [Opt(OptOps.UPCAST, 0, 4)]

def test_rows_the_register_does_not_divide_take_half_or_the_usual_rule(vector_machine):
  vector_machine(64, 32)
  assert heuristic_opts(last_kernel(lambda t: t.exp(), 4096, 24))[-1] == Opt(OptOps.UPCAST, 1, 8)
  assert heuristic_opts(last_kernel(lambda t: t.exp(), 4096, 20))[-1] == Opt(OptOps.UPCAST, 1, 4)

def test_reductions_and_tiny_kernels_are_left_alone(vector_machine):
  vector_machine(64, 32)
  assert math_lanes(last_kernel(lambda t: t.exp().sum(1), 512, 512)) == 0
  assert Opt(OptOps.UPCAST, 0, 16) not in heuristic_opts(last_kernel(lambda t: t.exp(), 1024))   # under 4096 elements

TORCH = {"tanh": torch.tanh, "exp": torch.exp, "sigmoid": torch.sigmoid, "sqrt": lambda t: t.abs().sqrt(),
         "log": lambda t: (t.abs() + 1).log(), "div": lambda t: 1 / (t.abs() + 1), "sin": torch.sin,
         "silu": torch.nn.functional.silu, "gelu": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}

@pytest.mark.parametrize("name", sorted(COSTLY))
@pytest.mark.parametrize("shape", [(1 << 16,), (1000, 48), (37, 1000), (3, 5, 4099)], ids=str)
def test_values_match_torch(name, shape):
  x = (RNG.standard_normal(shape) * 4).astype(np.float32)
  x.flat[:7] = [0.0, -0.0, 1e-8, -30.0, 30.0, 88.0, -88.0]
  got = COSTLY[name](Tensor(x, device="CPU")).numpy()
  want = TORCH[name](torch.from_numpy(x)).numpy()
  np.testing.assert_allclose(got, want, rtol=3e-6, atol=1e-6)

def test_tanh_saturates_without_overflowing_exp2():
  # beyond |x| = 9.02 tanh is +-1.0f; it is a rational function of the clamped input with no exp2 that could overflow
  # (a vector exp2 takes a slow scalar path per overflowing lane); values within the fit's ~5 float32 ulps, NaN,
  # infinities, signed zeros and gradients as torch's
  import torch
  v = np.array([np.nan, -np.inf, np.inf, -1e30, -100, -10.5, -10, -9, -3, -0.3, -0.2, -0.0, 0.0, 1e-8, 0.2, 3, 9, 10,
                10.5, 100, 1e30], dtype=np.float32)
  got = Tensor(v).tanh().numpy()
  np.testing.assert_allclose(got, np.tanh(v), rtol=0, atol=3.6e-7)
  assert got[[3, 4, 5, 6, 17, 18, 19, 20]].tolist() == [-1, -1, -1, -1, 1, 1, 1, 1]
  assert np.isnan(got[0]) and np.signbit(got[11]) and not np.signbit(got[12])
  t, tt = Tensor(v[1:], requires_grad=True), torch.tensor(v[1:], requires_grad=True)
  t.tanh().sum().backward(); tt.tanh().sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=0, atol=2e-7)
  assert not any(n.op is Ops.EXP2 for n in Tensor.empty(64).tanh().uop.toposort())
