"""The AMDGPU renderer's exact IR runs on the emulator (MOCK+AMD): its ids, barrier and fences, LDS and private
address spaces lowered to the host and compiled by clang, work-items as fibers, in all three work-item orders
(EMU_ORDER=check), against numpy."""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug import Tensor, dtypes
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.schedule import create_schedule

RNG = np.random.default_rng(0)

def T(a) -> Tensor: return Tensor(a).realize()   # on the device first, so the kernel under test is the only one

def run(out: Tensor, opts, src_edit=None) -> tuple[np.ndarray, str]:
  """Compile the one kernel computing `out` with exactly `opts` (its IR optionally edited), run it on MOCK+AMD in all
  three orders; (result, source)."""
  (item,), _ = create_schedule([out.uop])
  dev = Device["MOCK+AMD"]
  spec = get_program(item.ast, dev.renderer, opts=opts)
  src = src_edit(spec.src) if src_edit else spec.src
  prg = dev.make_program(spec, dev.compiler.compile_cached(src))
  bufs = [b.ensure_allocated() for b in item.bufs]
  with Context(EMU_ORDER="check"):
    prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
  return bufs[0].numpy().reshape(out.shape), src

def test_mock_amd_uses_the_amdgpu_renderer(mock_amd):
  from tinyplug_amd.renderer import AMDGPURenderer
  assert isinstance(Device["MOCK+AMD"].renderer, AMDGPURenderer)

@pytest.mark.parametrize("opts", [[Opt(OptOps.GROUPTOP, 0, 64)], [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 32)],
                                  [Opt(OptOps.GROUPTOP, 0, 16), Opt(OptOps.UNROLL, 0, 4)]], ids=str)
def test_group_reductions_through_lds(mock_amd, opts):
  a = RNG.standard_normal((8, 256)).astype(np.float32)
  got, src = run(T(a).sum(axis=1), opts)
  assert "@llvm.amdgcn.s.barrier()" in src and "addrspace(3)" in src
  np.testing.assert_allclose(got, a.sum(1), rtol=1e-5, atol=1e-4)

def test_a_missing_barrier_is_caught(mock_amd):
  from tinyplug_emulator.native import EmulatorError
  a = RNG.standard_normal((8, 256)).astype(np.float32)
  drop = lambda src: src.replace("  call void @llvm.amdgcn.s.barrier()\n", "", 1)
  with pytest.raises(EmulatorError, match="writes different results"):
    run(T(a).sum(axis=1), [Opt(OptOps.GROUPTOP, 0, 64)], drop)

def test_matmul_with_upcasts_locals_and_private_accumulators(mock_amd):
  a, b = RNG.standard_normal((64, 48)).astype(np.float32), RNG.standard_normal((48, 32)).astype(np.float32)
  got, src = run(T(a) @ T(b), [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 4)])
  assert "<4 x float>" in src
  np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)

def test_half_bf16_and_integer_division(mock_amd):
  import torch
  a = RNG.standard_normal(64).astype(np.float16)
  got, _ = run(T(a) * T(a) + 1, [Opt(OptOps.UPCAST, 0, 2)])
  np.testing.assert_array_equal(got, a * a + np.float16(1))
  b = torch.randn(64, dtype=torch.bfloat16)
  tb = T(b.view(torch.int16).numpy()).bitcast(dtypes.bfloat16)
  got, _ = run((tb * tb - 2).bitcast(dtypes.int16), [Opt(OptOps.UPCAST, 0, 4)])
  np.testing.assert_array_equal(got, (b * b - 2).view(torch.int16).numpy())
  x = np.array([7, -7, -2**31, 5, 0, 9], np.int32)
  y = np.array([2, 2, -1, 0, 0, -1], np.int32)
  got, _ = run(T(x) // T(y) + T(x) % T(y), None)
  want = (Tensor(x, device="CPU") // Tensor(y, device="CPU") + Tensor(x, device="CPU") % Tensor(y, device="CPU")).numpy()
  np.testing.assert_array_equal(got, want)   # no trap on x/0 or INT_MIN/-1, and the CPU device's values

def test_tensor_code_runs_on_mock_amd(mock_amd):
  a = RNG.standard_normal((16, 33)).astype(np.float32)
  x = Tensor(a)
  np.testing.assert_allclose(x.softmax(axis=1).numpy(), np.exp(a) / np.exp(a).sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose((x.exp() @ x.T).numpy(), np.exp(a) @ a.T, rtol=1e-4, atol=1e-3)
