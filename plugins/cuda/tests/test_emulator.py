"""The CUDA C renderer's exact kernels run on the emulator (MOCK+CUDA: clang compiles them for the host, work-items
as fibers, barriers as switches) against numpy, in all three work-item orders (EMU_ORDER=check)."""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug import Tensor, dtypes
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.schedule import create_schedule
from tinyplug.testing.kernels import run_kernel

RNG = np.random.default_rng(0)

def T(a) -> Tensor: return Tensor(a).realize()   # on the device first, so the kernel under test is the only one

def run(out: Tensor, opts, device: str = "MOCK+CUDA") -> tuple[np.ndarray, str]:
  """Compile the one kernel computing `out` with exactly `opts`, run it on `device` in all three work-item orders."""
  return run_kernel(out, device, opts, EMU_ORDER="check")

@pytest.mark.parametrize("opts", [[Opt(OptOps.GROUPTOP, 0, 64)], [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 32)],
                                  [Opt(OptOps.GROUPTOP, 0, 16), Opt(OptOps.UNROLL, 0, 4)]], ids=str)
def test_group_reductions_through_shared_memory(mock_cuda, opts):
  a = RNG.standard_normal((8, 256)).astype(np.float32)
  got, src = run(T(a).sum(axis=1), opts)
  assert "__syncthreads();" in src and "__shared__" in src
  np.testing.assert_allclose(got, a.sum(1), rtol=1e-5, atol=1e-4)

@pytest.mark.parametrize("opts", [[Opt(OptOps.GROUPTOP, 0, 64)], [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 32)]], ids=str)
def test_ptx_renderer_on_the_emulator(mock_cuda, opts):
  """MOCK+CUDA:PTX: the PTX renderer's NVPTX LLVM IR, its ids and barrier lowered to the emulator's runtime."""
  a = RNG.standard_normal((8, 256)).astype(np.float32)
  got, src = run(T(a).sum(axis=1), opts, "MOCK+CUDA:PTX")
  assert "call void @llvm.nvvm.barrier0()" in src and "addrspace(3)" in src
  np.testing.assert_allclose(got, a.sum(1), rtol=1e-5, atol=1e-4)
  got, _ = run(T(a).exp2().max(axis=1), opts, "MOCK+CUDA:PTX")
  np.testing.assert_allclose(got, np.exp2(a).max(1), rtol=1e-6)

def test_half_and_bf16_math_round_like_numpy_and_torch(mock_cuda):
  import torch
  a = RNG.standard_normal(64).astype(np.float16)
  got, src = run(T(a) * T(a) + 1, [Opt(OptOps.UPCAST, 0, 2)])
  assert "half2" in src
  np.testing.assert_array_equal(got, a * a + np.float16(1))
  b = torch.randn(64, dtype=torch.bfloat16)
  tb = T(b.view(torch.int16).numpy()).bitcast(dtypes.bfloat16)
  got, _ = run((tb * tb - 2).bitcast(dtypes.int16), [Opt(OptOps.UPCAST, 0, 4)])
  np.testing.assert_array_equal(got, (b * b - 2).view(torch.int16).numpy())

def test_unaligned_vector_loads_and_integer_division(mock_cuda):
  a = RNG.standard_normal((10, 6)).astype(np.float32)
  got, src = run(T(a)[:, 1:5] * 2, [Opt(OptOps.UPCAST, 1, 4)])
  assert "make_float4(data1[" in src
  np.testing.assert_array_equal(got, a[:, 1:5] * 2)
  x = np.array([7, -7, -2**31, 5, 0, 9], np.int32)
  y = np.array([2, 2, -1, 0, 0, -1], np.int32)
  got, _ = run(T(x) // T(y) + T(x) % T(y), None)
  want = (Tensor(x, device="CPU") // Tensor(y, device="CPU") + Tensor(x, device="CPU") % Tensor(y, device="CPU")).numpy()
  np.testing.assert_array_equal(got, want)   # no trap on x/0 or INT_MIN/-1, and the CPU device's values

def test_matmul_with_upcasts_and_locals(mock_cuda):
  a, b = RNG.standard_normal((64, 48)).astype(np.float32), RNG.standard_normal((48, 32)).astype(np.float32)
  got, src = run(T(a) @ T(b), [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 4)])
  assert "float4" in src
  np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
