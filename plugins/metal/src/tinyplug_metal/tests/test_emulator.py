"""The Metal renderer's exact kernels on the emulator (MOCK+METAL: clang compiles the MSL as C++ for OpenCL with a
metal_stdlib stand-in, work-items run as fibers, barriers switch between them) against numpy, in all three
work-item orders (EMU_ORDER=check)."""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug import Tensor, dtypes
from tinyplug.backend import ProgramSpec
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.schedule import create_schedule
from tinyplug.uop import UOp, Ops

RNG = np.random.default_rng(0)

def T(a) -> Tensor: return Tensor(a).realize()   # on the device first, so the kernel under test is the only one

def run(out: Tensor, opts, src_edit=None) -> tuple[np.ndarray, str]:
  """Compile the one kernel computing `out` with exactly `opts` (its source edited by `src_edit`), run it on
  MOCK+METAL in all three work-item orders; (result, source)."""
  (item,), _ = create_schedule([out.uop])
  dev = Device["MOCK+METAL"]
  spec = get_program(item.ast, dev.renderer, opts=opts)
  if src_edit is not None: spec = ProgramSpec(spec.name, spec.uops, src_edit(spec.src), spec.global_size, spec.local_size, outs=spec.outs)
  prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
  bufs = [b.ensure_allocated() for b in item.bufs]
  with Context(EMU_ORDER="check"):
    prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
  return bufs[0].numpy().reshape(out.shape), spec.src

@pytest.mark.parametrize("opts", [[Opt(OptOps.GROUPTOP, 0, 64)], [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 32)],
                                  [Opt(OptOps.GROUPTOP, 0, 16), Opt(OptOps.UNROLL, 0, 4)]], ids=str)
def test_reductions_through_threadgroup_memory(mock_metal, opts):
  a = RNG.standard_normal((8, 256)).astype(np.float32)
  got, src = run(T(a).sum(axis=1), opts)
  assert "threadgroup_barrier(mem_flags::mem_threadgroup);" in src and "threadgroup float" in src
  np.testing.assert_allclose(got, a.sum(1), rtol=1e-5, atol=1e-4)

def test_a_missing_barrier_is_caught(mock_metal):
  from tinyplug_emulator.native import EmulatorError
  a = RNG.standard_normal((8, 256)).astype(np.float32)
  drop = lambda src: src.replace("threadgroup_barrier(mem_flags::mem_threadgroup);", "", 1)
  with pytest.raises(EmulatorError, match="different results"): run(T(a).sum(axis=1), [Opt(OptOps.GROUPTOP, 0, 64)], drop)

def test_half_and_bfloat_round_like_torch(mock_metal):
  import torch
  a = RNG.standard_normal(64).astype(np.float16)
  got, src = run(T(a) * T(a) + 1, [Opt(OptOps.UPCAST, 0, 2)])
  assert "device half2*" in src
  np.testing.assert_array_equal(got, a * a + np.float16(1))
  got, _ = run(T(a).exp2().sqrt(), None)
  np.testing.assert_allclose(got.astype(np.float32), np.sqrt(np.exp2(a.astype(np.float32))), rtol=1e-3)
  b = torch.randn(64, dtype=torch.bfloat16)
  tb = T(b.view(torch.int16).numpy()).bitcast(dtypes.bfloat16)
  got, src = run((tb * tb - 2).bitcast(dtypes.int16), [Opt(OptOps.UPCAST, 0, 4)])
  assert "bfloat" in src
  np.testing.assert_array_equal(got, (b * b - 2).view(torch.int16).numpy())

def test_unaligned_vectors_bool_buffers_and_integer_division(mock_metal):
  a = RNG.standard_normal((10, 6)).astype(np.float32)
  got, src = run(T(a)[:, 1:5] * 2, [Opt(OptOps.UPCAST, 1, 4)])
  assert "float4(data1[" in src
  np.testing.assert_array_equal(got, a[:, 1:5] * 2)
  got, src = run(T(a) < 0.5, None)
  assert "device uchar* data0" in src
  np.testing.assert_array_equal(got, a < 0.5)
  x = np.array([7, -7, -2**31, 5, 0, 9], np.int32)
  y = np.array([2, 2, -1, 0, 0, -1], np.int32)
  got, _ = run(T(x) // T(y) + T(x) % T(y), None)
  want = (Tensor(x, device="CPU") // Tensor(y, device="CPU") + Tensor(x, device="CPU") % Tensor(y, device="CPU")).numpy()
  np.testing.assert_array_equal(got, want)   # no trap on x/0 or INT_MIN/-1, and the CPU device's values

def test_matmul_with_upcasts_and_locals(mock_metal):
  a, b = RNG.standard_normal((64, 48)).astype(np.float32), RNG.standard_normal((48, 32)).astype(np.float32)
  got, src = run(T(a) @ T(b), [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 0, 4)])
  assert "float4" in src
  np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)

def test_scalar_arguments_are_constant_references(mock_metal):
  """A DEFINE_VAR becomes `constant int& n [[buffer(k)]]`; its value reaches the kernel."""
  dt = dtypes
  dev = Device[mock_metal]
  out, inp = UOp(Ops.DEFINE_GLOBAL, dt.float.ptr(16), arg=0), UOp(Ops.DEFINE_GLOBAL, dt.float.ptr(16), arg=1)
  n = UOp(Ops.DEFINE_VAR, dt.int, arg=("n", 0, 100))
  lid = UOp(Ops.SPECIAL, dt.int, arg=("lidx0", 16))
  val = UOp(Ops.LOAD, dt.float, (UOp(Ops.INDEX, inp.dtype, (inp, lid)),)) * (lid + n).cast(dt.float)
  uops = [out, inp, n, lid, UOp(Ops.STORE, dt.void, (UOp(Ops.INDEX, out.dtype, (out, lid)), val))]
  src = dev.renderer.render("scaled", uops)
  assert "constant int& n [[buffer(2)]]" in src
  spec = ProgramSpec("scaled", tuple(uops), src, (1, 1, 1), (16, 1, 1), vars=(n,))
  prg = dev.make_program(spec, dev.compiler.compile_cached(src))
  a = RNG.standard_normal(16).astype(np.float32)
  bufs = [dev.allocator.alloc(64), dev.allocator.alloc(64)]
  dev.allocator.copyin(bufs[1], memoryview(a).cast("B"))
  prg(*bufs, global_size=(1, 1, 1), local_size=(16, 1, 1), vals=(5,), wait=True)
  got = np.empty(16, np.float32)
  dev.allocator.copyout(memoryview(got).cast("B"), bufs[0])
  np.testing.assert_allclose(got, a * (np.arange(16) + 5), rtol=1e-6)
