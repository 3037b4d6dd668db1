"""GPU-style lowering (tinyplug/codegen/gpu_lowering.py and the LOCAL/GROUP actions) on PYTHON and on CL, against numpy:
work-groups over output axes, reductions shared by a work-group through local memory and a barrier."""
import numpy as np
import pytest
from tinyplug.uop import UOp, Ops, dtypes
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug.device import Device
from tinyplug.engine.realize import buffer_of
from tinyplug.schedule import create_schedule

def buffer(device, arr):
  u = UOp.new_buffer(device, arr.size, dtypes.float)
  buffer_of(u).copyin(arr.astype(np.float32).ravel())
  return u.reshape(arr.shape)

def reduce(x, op, axes): return UOp(Ops.REDUCE_AXIS, dtypes.float, (x,), (op, axes))

def run(device, out, opts):
  """Compile the single kernel computing `out` with exactly `opts`, run it, return (result, program)."""
  (item,), becomes = create_schedule([out])
  dev = Device[device]
  spec = get_program(item.ast, dev.renderer, opts=opts)
  prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
  bufs = [b.ensure_allocated() for b in item.bufs]
  prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
  return bufs[0].numpy().reshape(out.shape), spec

RNG = np.random.default_rng(0)
A = RNG.standard_normal((8, 64)).astype(np.float32)

@pytest.mark.parametrize("opts", [
  [], [Opt(OptOps.LOCAL, 0, 4)], [Opt(OptOps.GROUP, 0, 16)], [Opt(OptOps.GROUPTOP, 0, 16)],
  [Opt(OptOps.GROUPTOP, 0, 64)], [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 16)],
  [Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.GROUPTOP, 0, 8), Opt(OptOps.UNROLL, 0, 2)],
], ids=str)
def test_row_sum(lowering_device, opts):
  res, spec = run(lowering_device, reduce(buffer(lowering_device, A), Ops.ADD, (1,)), opts)
  np.testing.assert_allclose(res, A.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)
  if any(o.op in (OptOps.GROUP, OptOps.GROUPTOP) for o in opts):
    ops = {u.op for u in spec.uops}
    assert Ops.DEFINE_LOCAL in ops and Ops.BARRIER in ops

@pytest.mark.parametrize("opts", [[Opt(OptOps.GROUPTOP, 0, 32)], [Opt(OptOps.GROUP, 0, 16), Opt(OptOps.UNROLL, 0, 4)]],
                         ids=str)
def test_full_max_with_nan_and_negative_values(lowering_device, opts):
  x = -np.abs(RNG.standard_normal(512)).astype(np.float32) - 1
  res, _ = run(lowering_device, reduce(buffer(lowering_device, x), Ops.MAX, (0,)), opts)
  np.testing.assert_array_equal(res, x.max(keepdims=True))
  x[300] = np.nan
  res, _ = run(lowering_device, reduce(buffer(lowering_device, x), Ops.MAX, (0,)), opts)
  assert np.isnan(res).all()

def test_column_sum_grouped_with_local_output(lowering_device):
  x = RNG.standard_normal((128, 16)).astype(np.float32)
  out = reduce(buffer(lowering_device, x), Ops.ADD, (0,))
  res, spec = run(lowering_device, out, [Opt(OptOps.LOCAL, 0, 8), Opt(OptOps.GROUPTOP, 0, 16)])
  assert spec.local_size is not None and np.prod(spec.local_size) == 128
  np.testing.assert_allclose(res, x.sum(0, keepdims=True), rtol=1e-5, atol=1e-5)

def test_matmul_with_locals_and_group(lowering_device):
  a = RNG.standard_normal((16, 32)).astype(np.float32)
  b = RNG.standard_normal((32, 8)).astype(np.float32)
  A_ = UOp(Ops.EXPAND, dtypes.float, (buffer(lowering_device, a).reshape((16, 32, 1)),), (16, 32, 8))
  B_ = UOp(Ops.EXPAND, dtypes.float, (buffer(lowering_device, b).reshape((1, 32, 8)),), (16, 32, 8))
  out = reduce(UOp(Ops.MUL, dtypes.float, (A_, B_)), Ops.ADD, (1,))
  for opts in ([Opt(OptOps.LOCAL, 1, 8), Opt(OptOps.LOCAL, 0, 2)], [Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.GROUPTOP, 0, 8)],
               [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.LOCAL, 1, 8), Opt(OptOps.GROUP, 0, 4), Opt(OptOps.UNROLL, 0, 2)]):
    res, _ = run(lowering_device, out, opts)
    np.testing.assert_allclose(res.reshape(16, 8), a @ b, rtol=1e-4, atol=1e-4, err_msg=str(opts))

def test_two_grouped_reductions_in_one_kernel(lowering_device):
  x = buffer(lowering_device, A)
  out = UOp(Ops.ADD, dtypes.float, (reduce(x, Ops.ADD, (1,)), reduce(x, Ops.MAX, (1,))))
  res, spec = run(lowering_device, out, [Opt(OptOps.GROUP, 0, 8), Opt(OptOps.GROUPTOP, 1, 4)])
  assert sum(u.op is Ops.BARRIER for u in spec.uops) == 2
  np.testing.assert_allclose(res, A.sum(1, keepdims=True) + A.max(1, keepdims=True), rtol=1e-5, atol=1e-5)

def test_default_heuristic_gives_cl_a_work_group(cl):
  x = RNG.standard_normal((4, 256)).astype(np.float32)
  out = UOp(Ops.MUL, dtypes.float, (buffer("CL", x), buffer("CL", x)))
  res, spec = run("CL", out, None)
  np.testing.assert_allclose(res, x * x)
  assert spec.local_size is not None and np.prod(spec.local_size) > 1

def test_local_and_group_actions_then_lowering():
  from tinyplug.codegen.gpu_lowering import lower_group_reduces
  from tinyplug.codegen.kernel import Kernel, KernelOptError
  (item,), _ = create_schedule([reduce(buffer("PYTHON", A), Ops.ADD, (1,))])
  k = Kernel(item.ast, Device["PYTHON"].renderer)
  k.apply_opt(Opt(OptOps.LOCAL, 0, 4))
  k.apply_opt(Opt(OptOps.GROUPTOP, 0, 16))
  kinds = sorted(u.arg[1] for u in k.sink.toposort() if u.op is Ops.RANGE)
  assert kinds == ["group", "local", "loop", "reduce"]
  lowered = lower_group_reduces(k.sink)
  assert lowered.src[0].op is Ops.BARRIER and not any(u.op is Ops.RANGE and u.arg[1] == "group" for u in lowered.toposort())
  with pytest.raises(KernelOptError, match="does not split"): Kernel(item.ast, k.renderer).apply_opt(Opt(OptOps.LOCAL, 0, 3))
