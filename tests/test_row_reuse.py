"""fuse_rows.reuse (passes/row_reuse.py): a CPU row kernel's output pass loads the exp its reduce pass computed and
stored in the output row, instead of computing it again. The rewritten program against the one without the rewrite
(bit for bit) and against torch; which kernels it takes and which it leaves."""
import numpy as np
import pytest
import torch
from tinyplug import schedule
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.engine.realize import run_schedule
from tinyplug.helpers import Context
from tinyplug.passes import row_reuse
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(23)
ROUND = 12582912.0   # the exp's rounding constant (1.5 * 2^23): one use per exp in the program

def _program(build, *shape, opts=()):
  schedule._templates.clear()
  items, _ = create_schedule([build(Tensor.empty(*shape, device="CPU")).uop])
  with Context(CACHELEVEL=0):   # (None: the heuristic's actions; () none)
    return get_program(Kernel(items[-1].ast, Device["CPU"].renderer).sink, Device["CPU"].renderer,
                       opts=None if opts is None else list(opts))

def _exps(uops) -> int: return sum(1 for u in uops if u.op is Ops.ADD and any(s.op is Ops.CONST and s.arg == ROUND for s in u.src))

def _output_stores(uops) -> list[tuple[int, bool]]:
  """(position, inside a reduce loop) of each store into buffer 0."""
  open_reduce, out = [], []
  for i, u in enumerate(uops):
    if u.op is Ops.RANGE and u.arg[1] == "reduce": open_reduce.append(u)
    elif u.op is Ops.END and open_reduce and u.src[0] is open_reduce[-1]: open_reduce.pop()
    elif u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_GLOBAL and u.src[0].src[0].arg == 0:
      out.append((i, bool(open_reduce)))
  return out

@pytest.mark.parametrize("cols", [1000, 33])
def test_softmax_rows_compute_each_exp_once(cols, monkeypatch):
  spec = _program(lambda t: t.softmax(-1), 64, cols)
  assert _exps(spec.uops) == 1
  assert [inside for _, inside in _output_stores(spec.uops)] == [True, False]   # the sum pass stores, then the write
  monkeypatch.setattr(row_reuse, "MIN_SAVED", 1 << 30)
  before = _program(lambda t: t.softmax(-1), 64, cols)
  assert _exps(before.uops) == 2 and [inside for _, inside in _output_stores(before.uops)] == [False]

def test_cheap_shared_math_and_upcast_rows_are_left_alone():
  # layernorm's write shares only `x - mean` with its variance pass: not worth a store and a load
  assert [inside for _, inside in _output_stores(_program(lambda t: t.layernorm(), 64, 1000).uops)] == [False]
  # a row upcast 16 lanes a step (vector values): not rewritten
  upcast = _program(lambda t: t.softmax(-1), 64, 1024, opts=[Opt(OptOps.UPCAST, 1, 16)])
  assert [inside for _, inside in _output_stores(upcast.uops)] == [False] and _exps(upcast.uops) == 2
  # one value per row (logsumexp): the store is outside any loop over the row
  assert all(not inside for _, inside in _output_stores(_program(lambda t: t.logsumexp(-1), 64, 1000).uops))

def _run_last(items, monkeypatch, reuse: bool) -> np.ndarray:
  if not reuse: monkeypatch.setattr(row_reuse, "MIN_SAVED", 1 << 30)
  dev = Device["CPU"]
  with Context(CACHELEVEL=0):
    spec = get_program(Kernel(items[-1].ast, dev.renderer).sink, dev.renderer, opts=[])
  assert (_exps(spec.uops) == 1) == reuse
  bufs = [b.ensure_allocated() for b in items[-1].bufs]
  dev.make_program(spec, dev.compiler.compile_cached(spec.src))(*[b.handle for b in bufs], vals=(), wait=True)
  monkeypatch.undo()
  return items[-1].bufs[0].numpy().copy()

@pytest.mark.parametrize("shape", [(512, 1000), (7, 33), (3, 5000)], ids=str)
def test_cross_entropy_gradient_equals_the_program_without_reuse_and_torch(shape, monkeypatch):
  xd = (RNG.standard_normal(shape) * 6).astype(np.float32)
  xd[0, :3] = [80.0, -90.0, 0.0]   # exp of large gaps: zeros and ones in the row
  labels = RNG.integers(0, shape[1], shape[0])
  labels[-1] = labels[0]
  x = Tensor(xd, requires_grad=True).realize()
  x.sparse_categorical_crossentropy(Tensor(labels.astype(np.int32))).backward()
  items = create_schedule([x.grad.uop])[0]
  run_schedule(items[:-1])
  with_reuse = _run_last(items, monkeypatch, reuse=True)
  np.testing.assert_array_equal(with_reuse, _run_last(items, monkeypatch, reuse=False))
  xt = torch.tensor(xd, requires_grad=True)
  torch.nn.functional.cross_entropy(xt, torch.tensor(labels)).backward()
  np.testing.assert_allclose(with_reuse.reshape(shape), xt.grad.numpy(), rtol=1e-5, atol=1e-8)

@pytest.mark.parametrize("shape", [(64, 1000), (5, 3)], ids=str)
def test_softmax_and_its_gradient_against_torch(shape):
  xd = (RNG.standard_normal(shape) * 4).astype(np.float32)
  x = Tensor(xd, requires_grad=True)
  y = x.softmax(-1)
  (y * x).sum().backward()
  xt = torch.tensor(xd, requires_grad=True)
  yt = xt.softmax(-1)
  (yt * xt).sum().backward()
  np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)

@pytest.mark.parametrize("rows,cols", [(4, 3), (64, 33), (128, 100)])
def test_an_output_view_whose_index_math_follows_the_reduce_loop(rows, cols):
  # the output row of a padded, permuted view: part of its index is computed after the reduce loop closes, where the
  # stored value's address cannot be made yet (the pass then leaves the kernel as it is)
  xn = RNG.standard_normal((rows, cols)).astype(np.float32)
  v = Tensor(xn).permute(1, 0)[1:, :].pad(((0, 1), (1, 0)))
  vn = np.pad(xn.T[1:, :], ((0, 1), (1, 0)))
  with Context(CACHELEVEL=0): got = (v - v.max(1, keepdim=True)).exp().numpy()
  np.testing.assert_allclose(got, np.exp(vn - vn.max(1, keepdims=True)), rtol=1e-6)
