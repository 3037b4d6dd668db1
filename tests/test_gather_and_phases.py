"""Rules from the CPU op sweep (issue 20): a tensor-indexed read (`x[idx]`, `gather`) becomes one gated load per
element, and a strided transposed convolution runs one stride-1 convolution per output phase. Values against numpy
and torch at odd sizes, and the rules' decisions (what the kernels read) from the schedule."""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops, UOp
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.symbolic import symbolic
from tinyplug.uop.rewrite import graph_rewrite

RNG = np.random.default_rng(20)

def _asts(t: Tensor) -> list[UOp]:
  return [it.ast for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]

def test_arange_digits_fold_into_the_index():
  """The sum of r's place-weighted binary digits (what `arange` builds) simplifies to r; with one digit missing, not."""
  for n in (1, 2, 5, 64, 100, 50000):
    r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(n, dtypes.int32),), (0, "loop"))
    bits = max(1, (n - 1).bit_length())
    digits = [(r // (1 << k) % 2 < 1).logical_not().where(1 << k, 0) for k in range(bits)]
    total = digits[0]
    for d in digits[1:]: total = total + d
    assert graph_rewrite(total + 3, symbolic) is graph_rewrite(r + 3, symbolic), n
    if bits > 1:
      partial = digits[1]
      for d in digits[2:]: partial = partial + d
      assert r not in graph_rewrite(partial, symbolic).src

@pytest.mark.parametrize("rows,cols,n_idx", [(37, 5, 11), (1000, 129, 64), (50000, 8, 300)])
def test_embedding_lookup_matches_numpy_and_reads_each_row_once(rows, cols, n_idx):
  table = RNG.standard_normal((rows, cols)).astype(np.float32)
  idx = RNG.integers(-rows, rows, n_idx).astype(np.int32)   # negative ones count from the end, as numpy
  t, i = Tensor(table).realize(), Tensor(idx).realize()
  out = t[i]
  # no reduction left over the table's rows: each output element is one load
  assert not any(u.op is Ops.REDUCE for ast in _asts(out) for u in ast.toposort())
  np.testing.assert_array_equal(out.numpy(), table[idx])

def test_int64_indices_are_one_read_too():
  table = RNG.standard_normal((301, 7)).astype(np.float32)
  idx = RNG.integers(-301, 301, 50).astype(np.int64)
  out = Tensor(table)[Tensor(idx)]
  assert not any(u.op is Ops.REDUCE for ast in _asts(out) for u in ast.toposort())
  np.testing.assert_array_equal(out.numpy(), table[idx])

def test_gather_and_two_tensor_indices_match_numpy():
  x = RNG.standard_normal((23, 17)).astype(np.float32)
  g0, g1 = RNG.integers(0, 23, (7, 17)).astype(np.int32), RNG.integers(0, 17, (23, 3)).astype(np.int32)
  np.testing.assert_array_equal(Tensor(x).gather(0, Tensor(g0)).numpy(), np.take_along_axis(x, g0, 0))
  np.testing.assert_array_equal(Tensor(x).gather(1, Tensor(g1)).numpy(), np.take_along_axis(x, g1, 1))
  a, b = RNG.integers(0, 23, 9).astype(np.int32), RNG.integers(-17, 17, 9).astype(np.int32)
  np.testing.assert_array_equal(Tensor(x)[Tensor(a), Tensor(b)].numpy(), x[a, b])
  xi = RNG.integers(-1000, 1000, (31, 3)).astype(np.int32)
  ii = RNG.integers(0, 31, (4, 5)).astype(np.int32)
  np.testing.assert_array_equal(Tensor(xi)[Tensor(ii)].numpy(), xi[ii])

def test_out_of_range_index_reads_nothing_and_gives_zero():
  """The range check the mask did is now the load's gate: an index the host cannot see is out of range reads no
  memory outside the table and gives 0 (what the one-hot sum gave)."""
  table = RNG.standard_normal((10, 4)).astype(np.float32)
  idx = Tensor(np.array([3, 9, 0], np.int32)).realize() + Tensor(np.array([0, 1_000_000, 0], np.int32)).realize()
  got = Tensor(table)[idx].numpy()
  np.testing.assert_array_equal(got, np.stack([table[3], np.zeros(4, np.float32), table[0]]))

def test_one_hot_and_arange_keep_their_values():
  np.testing.assert_array_equal(Tensor.arange(70000).numpy(), np.arange(70000))
  y = np.array([4, 0, 2, 4], np.int32)
  np.testing.assert_array_equal(Tensor(y).one_hot(5).numpy(), np.eye(5, dtype=np.int32)[y])

@pytest.mark.parametrize("xs,ws,kw", [
  ((2, 6, 7, 5), (6, 3, 3, 3), dict(stride=2, padding=1, output_padding=1)),
  ((2, 6, 7, 5), (6, 2, 3, 2), dict(stride=(3, 2), padding=(2, 0), groups=2)),
  ((1, 4, 5, 6), (4, 5, 5, 3), dict(stride=3, output_padding=2, dilation=2)),
  ((3, 4, 9, 4), (4, 3, 1, 1), dict(stride=2)),
  ((2, 3, 5, 5), (3, 2, 2, 2), dict(stride=4, padding=1, output_padding=3)),
  ((2, 8, 6, 6), (8, 4, 4, 4), dict(stride=2, padding=1)),
])
def test_strided_conv_transpose_matches_torch(xs, ws, kw):
  import torch
  x, w = RNG.standard_normal(xs).astype(np.float32), RNG.standard_normal(ws).astype(np.float32)
  b = RNG.standard_normal(ws[1] * kw.get("groups", 1)).astype(np.float32)
  want = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), **kw).numpy()
  np.testing.assert_allclose(Tensor(x).conv_transpose2d(Tensor(w), Tensor(b), **kw).numpy(), want, rtol=1e-4, atol=1e-4)

def test_strided_conv_transpose_multiplies_no_spread_zeros():
  """k4 s2: each output phase is a 2x2 convolution, so no kernel reduces over all 16 taps."""
  x, w = Tensor(RNG.standard_normal((2, 8, 6, 6)).astype(np.float32)), Tensor(RNG.standard_normal((8, 4, 4, 4)).astype(np.float32))
  sizes = [u.src[0].arg for ast in _asts(x.conv_transpose2d(w, stride=2, padding=1)) for u in ast.toposort()
           if u.op is Ops.RANGE and u.arg[1] == "reduce"]
  assert sizes and 4 not in sizes   # the taps reduced per phase are 2 and 2 (and the 8 input channels)

@pytest.mark.parametrize("xs,ws,kw,rows", [
  ((2, 8, 7, 5), (8, 4, 4, 4), dict(stride=2, padding=1), (7, 5)),                       # 14x10 out: 7x5 per phase
  ((2, 6, 5, 6), (6, 2, 3, 3), dict(stride=2, padding=1, output_padding=1, groups=2), (5, 6)),
  ((1, 4, 5, 4), (4, 3, 5, 5), dict(stride=3, padding=1), (5, 4)),                       # 15x12 out: 5x4 per phase
  ((2, 4, 6, 3), (4, 3, 3, 3), dict(stride=2, padding=1, dilation=2), None),             # 13x7: not a multiple, cut after
])
def test_conv_transpose_phases_compute_only_the_rows_they_keep(xs, ws, kw, rows):
  """Where the padding's cut leaves a multiple of the stride, each phase convolves only the rows it contributes (the
  uncut phase of k4 s2 p1 on 7 rows is 8 long, one of them thrown away); values match torch either way."""
  import torch
  x, w = RNG.standard_normal(xs).astype(np.float32), RNG.standard_normal(ws).astype(np.float32)
  out = phased_conv_transpose(Tensor(x), Tensor(w), **kw)
  convs = [ast for ast in _asts(out) if any(u.op is Ops.RANGE and u.arg[1] == "reduce" for u in ast.toposort())]
  loops = [tuple(u.src[0].arg for u in ast.toposort() if u.op is Ops.RANGE and u.arg[1] != "reduce")[-2:] for ast in convs]
  if rows is not None: assert loops and all(shape == rows for shape in loops), loops
  want = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(w), **kw).numpy()
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)

def phased_conv_transpose(x: Tensor, w: Tensor, stride=1, padding=0, output_padding=0, groups=1, dilation=1) -> Tensor:
  """The per-phase form (what conv_transpose2d falls back to where the sub-pixel form does not apply; a strided
  convolution's input gradient), for any shapes."""
  from tinyplug.tensor_ops.nn import _phased_conv_transpose
  s, p, o, d = ((v, v) if isinstance(v, int) else tuple(v) for v in (stride, padding, output_padding, dilation))
  out = _phased_conv_transpose(x, w, groups, s, d, p, o)
  assert out is not None
  return out

def test_conv_transpose_gradient_matches_torch():
  import torch
  x, w = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32), RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
  tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  tx.conv_transpose2d(tw, stride=2, padding=1, output_padding=1).square().sum().backward()
  px, pw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  torch.nn.functional.conv_transpose2d(px, pw, stride=2, padding=1, output_padding=1).square().sum().backward()
  np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(tw.grad.numpy(), pw.grad.numpy(), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("rows,classes,ignore", [(7, 5, -1), (512, 1000, -1), (33, 10, 3)])
def test_cross_entropy_gradient_reads_its_one_hot_row_once(rows, classes, ignore):
  """The softmax cross-entropy gradient sums its one-hot row (-(g + (y == c ? h : 0)) over the classes c): split into
  g * n and the one-hot sum, that collapses into one read, so no reduction is left over a one-hot mask; values as
  torch's (labels out of range give 0 rows, as the mask did)."""
  import torch
  x = RNG.standard_normal((rows, classes)).astype(np.float32)
  y = RNG.integers(0, classes, rows).astype(np.int32)
  y[::4] = ignore if ignore >= 0 else y[::4]
  t = Tensor(x, requires_grad=True).realize()
  t.sparse_categorical_crossentropy(Tensor(y), ignore_index=ignore).backward()
  for ast in _asts(t.grad):
    for u in ast.toposort():
      if u.op is Ops.REDUCE and u.arg is Ops.ADD:
        assert not any(v.op is Ops.CMPEQ and any(s in v.src for s in u.src[1:]) for v in u.src[0].toposort())
  tx = torch.tensor(x, requires_grad=True)
  torch.nn.functional.cross_entropy(tx, torch.tensor(y).long(), ignore_index=ignore).backward()
  np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-7)

def test_one_hot_sum_split_keeps_its_value():
  """sum over r of -(a + (e == r ? v : 0)) with `a` not depending on r: -(a * n + (0 <= e < n ? v : 0)); a term
  that depends on r stays in the sum."""
  from tinyplug.uop.symbolic import split_onehot_reduce
  n = 10
  r = UOp(Ops.RANGE, dtypes.int32, (UOp.const(n, dtypes.int32),), (0, "loop"))
  e = UOp.variable("e", -3, 20)
  a, v = UOp.variable("a", 0, 5).cast(dtypes.float32), UOp.variable("v", 0, 5).cast(dtypes.float32)
  onehot = (e.eq(r)).where(v, UOp.const(0.0, dtypes.float32))
  red = UOp(Ops.REDUCE, dtypes.float32, (-(a + onehot), r), Ops.ADD)
  got = graph_rewrite(red, symbolic)
  assert r not in got.toposort()
  for ev, av, vv in ((4, 2, 3), (-1, 1, 5), (10, 3, 2), (0, 0, 1)):
    sub = {e: UOp.const(ev, dtypes.int32), UOp.variable("a", 0, 5): UOp.const(av, dtypes.int32),
           UOp.variable("v", 0, 5): UOp.const(vv, dtypes.int32)}
    assert graph_rewrite(got.substitute(sub), symbolic).arg == -(av * n + (vv if 0 <= ev < n else 0))
  with_r = UOp(Ops.REDUCE, dtypes.float32, (r.cast(dtypes.float32) + onehot, r), Ops.ADD)
  assert split_onehot_reduce(with_r) is None
