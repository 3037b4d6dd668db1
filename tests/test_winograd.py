"""Winograd F(2x2,3x3) convolutions (tensor_ops/winograd.py, WINO=1): values and the input, weight and bias gradients
against torch for shapes that do not tile evenly, every padding the gradient treats differently, batch 1 and channel
counts that fill no vector; WINO switches the form (the schedule's reductions tell which one ran), and convolutions
outside its reach stay direct."""
import numpy as np
import pytest
import torch
from tinyplug.helpers import Context
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops
from machine_fakes import forget_built_graphs

F = torch.nn.functional
RNG = np.random.default_rng(20)
RTOL, ATOL = 1e-4, 1e-5   # tests/test_nn.py's

def _conv_against_torch(bs: int, cin: int, cout: int, h: int, w: int, padding, bias: bool, wino: int) -> None:
  x = RNG.standard_normal((bs, cin, h, w)).astype(np.float32)
  wt = (RNG.standard_normal((cout, cin, 3, 3)) / np.sqrt(9 * cin)).astype(np.float32)
  b = RNG.standard_normal(cout).astype(np.float32) if bias else None
  with Context(WINO=wino):
    xs, ws = Tensor(x, requires_grad=True), Tensor(wt, requires_grad=True)
    bs_ = Tensor(b, requires_grad=True) if bias else None
    out = xs.conv2d(ws, bs_, padding=padding)
    g = RNG.standard_normal(out.shape).astype(np.float32)
    (out * Tensor(g)).sum().backward()
  tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(wt, requires_grad=True)
  tb = torch.tensor(b, requires_grad=True) if bias else None
  tout = F.conv2d(tx, tw, tb, padding=padding)
  (tout * torch.from_numpy(g)).sum().backward()
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(xs.grad.numpy(), tx.grad.numpy(), rtol=RTOL, atol=ATOL)
  np.testing.assert_allclose(ws.grad.numpy(), tw.grad.numpy(), rtol=RTOL, atol=4 * ATOL)
  if bias: np.testing.assert_allclose(bs_.grad.numpy(), tb.grad.numpy(), rtol=RTOL, atol=4 * ATOL)

@pytest.mark.parametrize("bs,cin,cout,h,w,padding,bias", [
  (2, 3, 5, 7, 9, 1, True),      # odd sizes: a part tile on both edges
  (1, 5, 7, 6, 7, 0, False),     # no padding, batch 1
  (2, 6, 4, 9, 8, 2, True),      # padding beyond the 3x3 kernel's reach on every side
  (1, 4, 3, 3, 3, 0, True),      # one output: a single part tile
  (2, 17, 33, 12, 10, 1, False),
  (1, 4, 6, 8, 11, (1, 0), True),   # a padding per dim
  (3, 16, 24, 7, 7, 1, True),      # 16 tiles an image: the one-kernel transforms, a 7x7 output's part tiles
  (2, 9, 5, 10, 10, 0, False),     # the same unpadded (an 8x8 output), channel counts that fill no vector
])
def test_winograd_matches_torch(bs, cin, cout, h, w, padding, bias):
  for _ in range(3):   # the first calls build the graph, later ones come from its template
    _conv_against_torch(bs, cin, cout, h, w, padding, bias, wino=1)

def test_winograd_switch_both_ways_in_one_process():
  for wino in (1, 0, 1, 0, 1):
    _conv_against_torch(2, 6, 5, 10, 9, 1, True, wino=wino)

def _reductions(out: Tensor) -> list:
  """The kernels of the schedule of `out` that reduce."""
  return [it.ast for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK
          and any(u.op is Ops.REDUCE for u in it.ast.toposort())]

def _conv_reductions(wino: int, **kwargs) -> list:
  with Context(WINO=wino):
    x, w = Tensor.empty(2, 16, 12, 12), Tensor.empty(16, 16 // kwargs.get("groups", 1), kwargs.pop("k", 3), 3)
    return _reductions(x.conv2d(w, **kwargs))

# Winograd's reductions in either form: the weight's transform, the input's, the 16 tile positions' matmuls as one
# kernel, the output's
def _pin(vector_machine, nbytes: int, count: int) -> None:
  """The CPU renderer as a machine with these vector registers, no graph template made for another one kept."""
  vector_machine(nbytes, count)
  forget_built_graphs()

WINO_REDUCTIONS = 4

def _wino_reductions(out_hw: int) -> int: return WINO_REDUCTIONS

def _matmul_names(out: Tensor) -> set[str]:
  from tinyplug.schedule.naming import kernel_name
  return {kernel_name(ast) for ast in _reductions(out)}

def test_wino_switch_picks_the_form():
  # direct: one reduction over (cin, 3, 3) per output
  assert len(_conv_reductions(0, padding=1)) == 1
  with Context(WINO=1):
    # 12x12: 36 tiles an image, the tiles the matmul's rows: (16 planes, 2 * 36 tiles, 24) over 16 input channels (a
    # kernel per tile position was 17 reductions, 72 kernels a step at 256->256 14x14)
    names = _matmul_names(Tensor.empty(2, 16, 12, 12).conv2d(Tensor.empty(24, 16, 3, 3), padding=1))
    assert len(names) == WINO_REDUCTIONS and "r_16_72_24_16" in names, names
    for hw in (7, 8):                                                             # 16 tiles an image: innermost
      names = _matmul_names(Tensor.empty(2, 16, hw, hw).conv2d(Tensor.empty(24, 16, 3, 3), padding=1))
      assert len(names) == WINO_REDUCTIONS and "r_16_24_32_16" in names, names

@pytest.mark.parametrize("kwargs", [dict(stride=2, padding=1), dict(dilation=2, padding=2), dict(groups=2, padding=1),
                                    dict(k=5, padding=2)])
def test_wino_leaves_other_convolutions_direct(kwargs):
  assert len(_conv_reductions(1, **kwargs)) == len(_conv_reductions(0, **kwargs)) == 1

@pytest.mark.parametrize("shape,expected", [
  ((8, 256, 256, 7), 1), ((8, 256, 256, 14), WINO_REDUCTIONS), ((8, 512, 512, 7), WINO_REDUCTIONS),
  ((8, 64, 64, 28), 1), ((8, 128, 128, 14), 1), ((8, 256, 256, 28), WINO_REDUCTIONS),
  ((8, 256, 256, 56), 1), ((1, 256, 256, 14), 1), ((2, 256, 256, 7), 1)])
def test_wino_default_takes_the_shapes_where_it_measured_faster(shape, expected, vector_machine):
  # on AVX-512 (AVX2 takes Winograd from 64 channels: tests/test_conv_avx2.py)
  _pin(vector_machine, 64, 32)
  bs, cin, cout, hw = shape
  for wino, reductions in ((-1, expected), (0, 1), (1, _wino_reductions(hw))):
    with Context(WINO=wino):
      out = Tensor.empty(bs, cin, hw, hw).conv2d(Tensor.empty(cout, cin, 3, 3), padding=1)
      assert len(_reductions(out)) == reductions, (wino, shape)

def test_wino_leaves_half_precision_direct():
  with Context(WINO=1):
    out = Tensor.empty(2, 16, 12, 12, dtype="half").conv2d(Tensor.empty(16, 16, 3, 3, dtype="half"), padding=1)
    assert len(_reductions(out)) == 1

@pytest.mark.parametrize("hw", [10, 8])
def test_winograd_input_gradient_is_winograd_too(hw):
  x = Tensor(RNG.standard_normal((2, 8, hw, hw)).astype(np.float32), requires_grad=True)
  w = Tensor(RNG.standard_normal((8, 8, 3, 3)).astype(np.float32), requires_grad=True)
  counts = {}
  for wino in (0, 1):
    with Context(WINO=wino):
      x.grad = None
      x.conv2d(w, padding=1).square().sum().backward()
      counts[wino] = len(_reductions(x.grad))
  # the forward product (square's gradient reads it) and the input gradient's: one reduction each, or Winograd's
  # each, the input gradient's weight transform the forward's (transposed)
  assert counts[0] == 2 and counts[1] == 2 * WINO_REDUCTIONS - 1

@pytest.mark.parametrize("hw", [8, 12])
def test_winograd_weight_transform_per_channel_and_transposed_for_one_matmul(hw, vector_machine):
  """U is a kernel over the rows of a (cout, 16 planes, cin) buffer, the output channels the loop the threads share
  (planes outermost gave 16 threads two rows), and one of the two matmuls reads it transposed into (cin, 16, cout):
  with the tiles innermost (8x8) the input gradient's, with the tiles as rows (12x12) the forward's, each matmul's
  weight operand then with its own axis contiguous (U's planes read transposed: 40% slower). On AVX-512 (AVX2 copies
  the tiles-as-rows transforms planes outermost: tests/test_conv_avx2.py)."""
  _pin(vector_machine, 64, 32)
  from tinyplug.schedule.naming import kernel_name
  cin, cout = 16, 24
  x = Tensor(RNG.standard_normal((2, cin, hw, hw)).astype(np.float32), requires_grad=True)
  w = Tensor(RNG.standard_normal((cout, cin, 3, 3)).astype(np.float32), requires_grad=True)
  with Context(WINO=1):
    x.conv2d(w, padding=1).square().sum().backward()
    names = {kernel_name(it.ast).split("n")[0] for it in create_schedule([x.grad.uop])[0] if it.ast.op is Ops.SINK}
  assert {f"r_{cout}_16_{cin}_9", f"E_{cin}_16_{cout}"} <= names, names

def test_winograd_4x4_tiles_match_torch_more_loosely():
  """F(4x4,3x3), kept for experiments (conv2d uses F(2x2)): the same values, with its larger rounding."""
  from tinyplug.tensor_ops.winograd import winograd_conv3x3
  x = RNG.standard_normal((2, 5, 11, 14)).astype(np.float32)
  w = (RNG.standard_normal((6, 5, 3, 3)) / np.sqrt(45)).astype(np.float32)
  out = winograd_conv3x3(Tensor(x), Tensor(w), m=4)
  np.testing.assert_allclose(out.numpy(), F.conv2d(torch.tensor(x), torch.tensor(w)).numpy(), rtol=1e-3, atol=1e-4)

@pytest.mark.parametrize("m,hw", [(2, 10), (2, 12), (4, 10)])
def test_winograd_flipped_transpose_matches_torch(m, hw):
  """An input gradient's convolution, with the weight (cin, cout, 3, 3) flipped and its channels swapped: from the
  weight's own transform with its planes reordered (m=2, both forms: 8x8 and 10x10 outputs), or from the flipped view
  where no reordering exists (m=4)."""
  from tinyplug.tensor_ops.winograd import winograd_conv3x3
  x = RNG.standard_normal((2, 6, hw, hw)).astype(np.float32)
  w = (RNG.standard_normal((6, 5, 3, 3)) / np.sqrt(54)).astype(np.float32)    # (cout of the forward, cin, 3, 3)
  out = winograd_conv3x3(Tensor(x), Tensor(w), m=m, flipped_transpose=True)
  ref = F.conv2d(torch.tensor(x), torch.tensor(w).transpose(0, 1).flip((2, 3))).numpy()
  tol = (RTOL, ATOL) if m == 2 else (1e-3, 1e-4)
  np.testing.assert_allclose(out.numpy(), ref, rtol=tol[0], atol=tol[1])
