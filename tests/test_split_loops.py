"""simplify.split_loops (passes/split_loops.py): a CPU kernel's output loop cut where cat's / pad's gates change, the
pieces run one after another (linearize.run_in_turn). The program's shape (one plain copy per piece, the outer loop
still shared by threads), which kernels it leaves, and values against numpy."""
import numpy as np
import pytest
from tinyplug import schedule
from tinyplug.backend import shareable_loop
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.passes import split_loops
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(24)

def _program(build, *shapes):
  schedule._templates.clear()
  items, _ = create_schedule([build(*[Tensor.empty(*s, device="CPU") for s in shapes]).uop])
  with Context(CACHELEVEL=0):
    return get_program(Kernel(items[-1].ast, Device["CPU"].renderer).sink, Device["CPU"].renderer)

def _stores(uops) -> int:
  return sum(1 for u in uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_GLOBAL)

def _loads_per_input(uops) -> dict[int, int]:
  out: dict[int, int] = {}
  for u in uops:
    if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL:
      out[u.src[0].src[0].arg] = out.get(u.src[0].src[0].arg, 0) + 1
  return out

def _cat4(a, b, c, d): return a.cat(b, c, d, dim=1)

def test_cat_pieces_copy_one_input_each_inside_the_shared_loop():
  spec = _program(_cat4, *[(64, 256)] * 4)
  assert _stores(spec.uops) == 4 and not any(u.op is Ops.WHERE for u in spec.uops)
  assert _loads_per_input(spec.uops) == {1: 1, 2: 1, 3: 1, 4: 1}
  # the row loop is opened once, the four piece loops inside it one after another; threads still share the rows
  loops = [u for u in spec.uops if u.op is Ops.RANGE]
  assert len(loops) == 5 and shareable_loop(spec.uops) is loops[0]
  ends = [i for i, u in enumerate(spec.uops) if u.op is Ops.END]
  opens = [i for i, u in enumerate(spec.uops) if u.op is Ops.RANGE]
  assert all(e < o for e, o in zip(ends, opens[2:]))   # piece j closes before piece j+1 opens

def test_without_the_pass_every_step_reads_every_input(monkeypatch):
  monkeypatch.setattr(split_loops, "MAX_PIECES", 1)
  spec = _program(_cat4, *[(64, 256)] * 4)
  assert _stores(spec.uops) == 1 and any(u.op is Ops.WHERE for u in spec.uops)

def test_kernels_left_alone():
  # cat and stack on the outermost loop (threads share it), a reduction, more pieces than MAX_PIECES, and a pad (its
  # pieces would read its one input as often: more code for no fewer loads)
  assert _stores(_program(lambda a, b: a.cat(b, dim=0), (64, 256), (64, 256)).uops) == 1
  assert _stores(_program(lambda a, b: a.stack(b), (64, 256), (64, 256)).uops) == 1
  assert _stores(_program(lambda a, b: a.cat(b, dim=1).sum(1), (64, 256), (64, 256)).uops) == 1
  many = split_loops.MAX_PIECES + 1
  assert _stores(_program(lambda *ts: ts[0].cat(*ts[1:], dim=1), *[(64, 64)] * many).uops) == 1
  assert _stores(_program(lambda x: x.pad(((0, 0), (1, 1), (1, 1))), (8, 30, 30)).uops) == 1

def test_a_middle_loop_cut_copies_the_loop_inside_it_per_piece():
  spec = _program(lambda a, b, c: a.cat(b, c, dim=1), (4, 8, 64), (4, 16, 64), (4, 8, 64))
  assert _stores(spec.uops) == 3 and _loads_per_input(spec.uops) == {1: 1, 2: 1, 3: 1}
  loops = [u for u in spec.uops if u.op is Ops.RANGE]
  assert len(loops) == 1 + 3 * 2 and len(loops) == len(set(loops))   # each piece's own row loop: each opens once

CASES = {
  "cat 4 on dim 1": (_cat4, [(64, 256)] * 4),
  "cat uneven": (lambda a, b, c: a.cat(b, c, dim=1), [(16, 24), (16, 40), (16, 64)]),
  "cat odd widths": (lambda a, b: a.cat(b, dim=1), [(9, 3), (9, 5)]),
  "cat middle dim": (lambda a, b, c: a.cat(b, c, dim=1), [(4, 8, 32), (4, 16, 32), (4, 8, 32)]),
  "cat dim 0": (lambda a, b: a.cat(b, dim=0), [(8, 32), (24, 32)]),
  "stack": (lambda a, b, c: a.stack(b, c, dim=1), [(16, 64)] * 3),
  "stack dim 0": (lambda a, b, c: a.stack(b, c), [(16, 64)] * 3),
  "cat outer dim of 3": (lambda a, b: a.cat(b, dim=0), [(2, 8, 32), (3, 8, 32)]),
  "pad 2 dims": (lambda x: x.pad(((0, 0), (1, 2), (3, 1))), [(4, 20, 20)]),
  "pad and add": (lambda x, y: x.pad(((0, 0), (2, 2))) + y, [(16, 60), (16, 64)]),
}
NUMPY = {
  "cat 4 on dim 1": lambda *a: np.concatenate(a, 1), "cat uneven": lambda *a: np.concatenate(a, 1),
  "cat odd widths": lambda *a: np.concatenate(a, 1), "cat middle dim": lambda *a: np.concatenate(a, 1),
  "cat dim 0": lambda *a: np.concatenate(a, 0), "stack": lambda *a: np.stack(a, 1),
  "stack dim 0": lambda *a: np.stack(a, 0), "cat outer dim of 3": lambda *a: np.concatenate(a, 0),
  "pad 2 dims": lambda x: np.pad(x, ((0, 0), (1, 2), (3, 1))),
  "pad and add": lambda x, y: np.pad(x, ((0, 0), (2, 2))) + y,
}

@pytest.mark.parametrize("case", list(CASES))
def test_values_against_numpy(case):
  build, shapes = CASES[case]
  arrays = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
  schedule._templates.clear()
  with Context(CACHELEVEL=0):
    got = build(*[Tensor(a, device="CPU") for a in arrays]).numpy()
  np.testing.assert_array_equal(got, NUMPY[case](*arrays))

def _sibling_sink(order: str):
  """Stores into one buffer: out[r * 8 + p] and out[r * 8 + 4 + q], p and q loops of 4 inside r, in `order`."""
  from tinyplug.uop.dtype import dtypes
  from tinyplug.uop.ops import UOp
  buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(64), arg=0)
  def loop(n, i): return UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, n),), (i, "loop"))
  r, p, q = loop(8, 0), loop(4, 1), loop(4, 2)
  row = r * UOp.const(dtypes.int, 8)
  def store(col, v):
    at = UOp(Ops.INDEX, dtypes.float.ptr(64), (buf, row + col))
    return UOp(Ops.STORE, dtypes.void, (at, UOp.const(dtypes.float, v)))
  stores = {"p": store(p, 1.0), "q": store(q + UOp.const(dtypes.int, 4), 2.0), "P": store(p, 3.0)}
  return UOp(Ops.SINK, dtypes.void, tuple(stores[c] for c in order)), r, p, q

def test_linearizer_runs_sibling_loops_one_after_another():
  from tinyplug.codegen.linearize import linearize
  sink, r, p, q = _sibling_sink("pq")
  uops = linearize(sink)
  shape = [(u.op, u.src[0] if u.op is Ops.END else u) for u in uops if u.op in (Ops.RANGE, Ops.END, Ops.STORE)]
  assert [op for op, _ in shape] == [Ops.RANGE, Ops.RANGE, Ops.STORE, Ops.END, Ops.RANGE, Ops.STORE, Ops.END, Ops.END]
  assert [x for op, x in shape if op is not Ops.STORE] == [r, p, p, q, q, r]
  row = next(u for u in uops if u.op is Ops.MUL and r in u.src)
  assert uops.index(row) < uops.index(p)   # the row's address is worked out once, before both pieces

def test_linearizer_refuses_a_loop_needed_again_after_it_closed():
  from tinyplug.codegen.linearize import linearize
  with pytest.raises(RuntimeError, match="needed again"): linearize(_sibling_sink("pqP")[0])

@pytest.mark.parametrize("dilation", [(2, 3), 2])
def test_a_loop_inside_one_piece_is_not_cut_again(dilation):
  # max_pool2d's gradient with a dilation: the first cut's pieces each hold a gated loop of their own; cutting one
  # of those again repeated the other pieces' stores inside it, and the linearizer met a loop needed after it closed
  import torch
  xn = RNG.standard_normal((3, 2, 17, 14)).astype(np.float32)
  x, xt = Tensor(xn, requires_grad=True), torch.tensor(xn, requires_grad=True)
  y = Tensor.max_pool2d(x, kernel_size=(5, 5), dilation=dilation)
  yt = torch.nn.functional.max_pool2d(xt, kernel_size=(5, 5), dilation=dilation)
  y.sum().backward()
  yt.sum().backward()
  np.testing.assert_allclose(y.numpy(), yt.detach().numpy())
  np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), atol=1e-6)
