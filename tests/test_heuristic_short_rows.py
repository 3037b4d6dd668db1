"""Many short reductions that no other rule takes (`_short_rows_opts`): four outputs side by side, a second reduce axis
of at most 8 unrolled; row kernels that pass over a row twice, few outputs, long reductions and GPUs left alone.
Decisions on fake machines through the CPU renderer; values against numpy."""
import numpy as np
import pytest
from tinyplug import schedule
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor

RNG = np.random.default_rng(13)

def _reduction(t: Tensor) -> Kernel:
  schedule._templates.clear()
  items, _ = create_schedule([t.uop])
  return [k for k in (Kernel(it.ast, Device["CPU"].renderer) for it in items) if k.reduce_axes][-1]

@pytest.mark.parametrize("machine", [(64, 32), (32, 16), (16, 32)], ids=["avx512", "avx2", "neon"])
def test_short_rows_run_four_outputs_side_by_side(vector_machine, machine):
  vector_machine(*machine)
  # a global average pool's 7x7 windows: 4 outputs, the inner window axis unrolled
  assert heuristic_opts(_reduction(Tensor.empty(32, 512, 7, 7).mean((2, 3)))) == \
    [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 1, 7)]
  assert heuristic_opts(_reduction(Tensor.empty(16384, 49).sum(1))) == [Opt(OptOps.UPCAST, 0, 4)]
  assert heuristic_opts(_reduction(Tensor.empty(4096, 25).max(1))) == [Opt(OptOps.UPCAST, 0, 4)]

def test_what_short_rows_leave_alone(vector_machine):
  vector_machine(64, 32)
  # GPUs' argmax, two passes over each row (the CPU's is one max over int64 keys)
  from tinyplug.tensor_ops import reduce as reduce_ops, template
  keyed = reduce_ops._keyed_argmax
  try:
    reduce_ops._keyed_argmax = lambda device: False
    template._templates.clear(); template._seen.clear()
    assert heuristic_opts(_reduction(Tensor.empty(8192, 10).argmax(1))) == []
  finally:
    reduce_ops._keyed_argmax = keyed
    template._templates.clear(); template._seen.clear()
  assert heuristic_opts(_reduction(Tensor.empty(128, 49).sum(1))) == []       # few outputs: the simple loop
  assert heuristic_opts(_reduction(Tensor.empty(4096, 65).sum(1))) != [Opt(OptOps.UPCAST, 0, 4)]   # not short
  assert heuristic_opts(_reduction(Tensor.empty(4098, 49).sum(1))) == []      # no 4 divides the outputs

@pytest.mark.parametrize("shape,axes", [((32, 512, 7, 7), (2, 3)), ((16384, 49), (1,)), ((4096, 25), (1,)),
                                        ((8, 1024, 3, 5), (2, 3))], ids=str)
def test_values(shape, axes):
  a = RNG.standard_normal(shape).astype(np.float32)
  t = Tensor(a)
  np.testing.assert_allclose(t.mean(axes).numpy(), a.mean(axes), rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(t.max(axes).numpy(), a.max(axes))

@pytest.mark.parametrize("machine,lanes", [((64, 32), 16), ((32, 16), 8)], ids=["avx512", "avx2"])
def test_costly_math_on_short_rows_takes_a_register_of_rows(vector_machine, machine, lanes):
  # a 10-class logsumexp: an exp on every element it sums, over two passes (max, then sum); any count of rows
  vector_machine(*machine)
  for rows in (4096, 128, 2 * lanes):
    assert heuristic_opts(_reduction(Tensor.empty(rows, 10).logsumexp(1))) == [Opt(OptOps.UPCAST, 0, lanes)], rows
  assert heuristic_opts(_reduction(Tensor.empty(100, 10).logsumexp(1))) == []       # no register of rows divides 100
  assert heuristic_opts(_reduction(Tensor.empty(4096, 25).exp().sum(1))) == [Opt(OptOps.UPCAST, 0, lanes)]
  assert heuristic_opts(_reduction((Tensor.empty(4096, 25) * 3).sum(1))) == [Opt(OptOps.UPCAST, 0, 4)]   # cheap

@pytest.mark.parametrize("rows,cols", [(4096, 10), (128, 10), (16, 3), (100, 10), (64, 64), (8, 1)], ids=str)
def test_logsumexp_values(rows, cols):
  # (8, 1): its first row is only -inf
  a = (RNG.standard_normal((rows, cols)) * 20).astype(np.float32)
  a[0, 0], a[1 % rows, -1] = -np.inf, 80.0    # a row with -inf, one whose exp would overflow unshifted
  m = a.max(1, keepdims=True)
  with np.errstate(invalid="ignore"): want = np.log(np.exp(a - m).sum(1)) + m[:, 0]
  want[np.isneginf(a).all(1)] = -np.inf   # torch's: a row of -inf sums to 0 (numpy's shifted form gives nan)
  np.testing.assert_allclose(Tensor(a).logsumexp(1).numpy(), want, rtol=2e-6, atol=2e-6)
  x = Tensor(a, requires_grad=True)
  x.logsumexp(1).sum().backward()
  live = ~np.isneginf(a).all(1)
  np.testing.assert_allclose(x.grad.numpy()[live], np.exp(a - want[:, None])[live], rtol=1e-5, atol=1e-6)
