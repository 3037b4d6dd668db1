"""Resizes with a short period (a 2x bilinear upsample, an integer downsample, 56 -> 80) are a stencil of a few taps
per output (`_phase_stencil`), computed by elementwise and movement ops in one kernel after an edge-padded copy,
instead of a matmul with the dense (n_out, n_in) weight matrix per dim; the rest keep the matmul. Values against
torch (both align_corners, modes, ratios, odd sizes, gradients), the structure of the schedule, and the heuristic's
vector-wide upcast of such a kernel on machines with other vector registers."""
import numpy as np
import pytest
import torch
from tinyplug.codegen.kernel import Kernel, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops.resample import _interp_matrix, _phase_stencil
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(12)
F = torch.nn.functional

def _torch_resize(x: np.ndarray, size: tuple, mode: str, align: bool) -> np.ndarray:
  tmode = {1: "linear", 2: "bilinear", 3: "trilinear"}[len(size)] if mode == "linear" else mode
  kw = dict(align_corners=align) if mode == "linear" else {}
  return F.interpolate(torch.tensor(x), size=size, mode=tmode, **kw).numpy()

@pytest.mark.parametrize("src, dst, mode, align", [
  ((56, 56), (112, 112), "linear", False), ((9, 7), (18, 14), "linear", False), ((5, 6), (15, 18), "linear", False),
  ((8, 8), (15, 15), "linear", True), ((7, 5), (13, 9), "linear", True),       # align_corners: period (n-1) : (n_out-1)
  ((12, 10), (6, 5), "linear", False), ((12, 9), (4, 3), "linear", False),    # integer downsampling
  ((14, 7), (20, 10), "linear", False), ((7, 10), (10, 4), "linear", False),  # other ratios: 7:10, 5:2
  ((11, 13), (23, 29), "linear", False),                                      # no short period: the matmul
  ((6, 5), (12, 15), "nearest", False), ((9, 6), (4, 4), "nearest", False), ((5, 7), (10, 11), "nearest-exact", False),
  ((1, 6), (3, 12), "linear", False), ((6, 6), (6, 12), "linear", True)])
def test_resize_matches_torch(src, dst, mode, align):
  x = RNG.standard_normal((2, 3, *src)).astype(np.float32)
  got = Tensor(x).interpolate(dst, mode=mode, align_corners=align).numpy()
  np.testing.assert_allclose(got, _torch_resize(x, dst, mode, align), rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize("src, dst, align", [((8,), (16,), False), ((9,), (4,), False), ((4, 5, 6), (8, 10, 12), False),
                                             ((3, 4, 5), (5, 7, 9), True)])
def test_linear_and_trilinear_match_torch(src, dst, align):
  x = RNG.standard_normal((2, 2, *src)).astype(np.float32)
  got = Tensor(x).interpolate(dst, mode="linear", align_corners=align).numpy()
  np.testing.assert_allclose(got, _torch_resize(x, dst, "linear", align), rtol=1e-5, atol=1e-5)

def test_half_and_int_inputs_keep_their_dtype():
  x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float16)
  got = Tensor(x).interpolate((12, 12))
  assert got.dtype == Tensor(x).dtype
  np.testing.assert_allclose(got.numpy().astype(np.float32), _torch_resize(x.astype(np.float32), (12, 12), "linear", False),
                             rtol=1e-2, atol=1e-2)
  xi = RNG.integers(0, 100, (1, 1, 5, 5)).astype(np.int32)
  np.testing.assert_equal(Tensor(xi).interpolate((10, 10), mode="nearest").numpy(),
                          F.interpolate(torch.tensor(xi).float(), size=(10, 10), mode="nearest").numpy().astype(np.int32))

@pytest.mark.parametrize("src, dst, align", [((6, 7), (12, 14), False), ((8, 8), (4, 4), False), ((5, 5), (9, 9), True)])
def test_resize_gradient_matches_torch(src, dst, align):
  x, g = RNG.standard_normal((2, 3, *src)).astype(np.float32), RNG.standard_normal((2, 3, *dst)).astype(np.float32)
  t = Tensor(x, requires_grad=True)
  (t.interpolate(dst, mode="linear", align_corners=align) * Tensor(g)).sum().backward()
  tx = torch.tensor(x, requires_grad=True)
  (F.interpolate(tx, size=dst, mode="bilinear", align_corners=align) * torch.tensor(g)).sum().backward()
  np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)

def test_phase_stencil_of_common_ratios():
  P, Q, taps, w = _phase_stencil(_interp_matrix(56, 112, "linear", False), False)
  assert (P, Q, taps) == (2, 1, [-1, 0, 1])
  np.testing.assert_allclose(w[:, :4], [[0, 0, 0.25, 0], [1, 0.75, 0.75, 0.75], [0, 0.25, 0, 0.25]])  # edge: 1 on x[0]
  assert _phase_stencil(_interp_matrix(112, 56, "linear", False), False)[:3] == (1, 2, [0, 1])
  assert _phase_stencil(_interp_matrix(56, 112, "linear", True), True) is None    # 111 : 55, no short period
  assert _phase_stencil(_interp_matrix(11, 23, "linear", False), False) is None   # 23 phases of 1 output each

def _kernels(t: Tensor) -> list:
  return [it.ast for it in create_schedule([t.uop])[0] if it.ast.op is Ops.SINK]

def test_bilinear_upsample_is_one_stencil_kernel_with_no_reduction():
  """The edge-padded copy and one elementwise kernel: no reduction over the input's rows (the matmul per dim was
  two reductions over 56 taps each)."""
  asts = _kernels(Tensor.empty(8, 64, 56, 56, device="CPU").interpolate((112, 112)))
  assert len(asts) == 2
  assert not any(u.op is Ops.REDUCE for ast in asts for u in ast.toposort())
  loads = [u for u in asts[-1].toposort() if u.op is Ops.LOAD]
  assert len([u for u in loads if u.src[0].src[0].arg == 1]) == 9   # 3 x 3 taps of the padded copy, none gated
  assert not any(len(u.src[0].src) > 2 for u in loads)

@pytest.mark.parametrize("vector_bytes, lanes", [(64, 16), (32, 8), (16, 4)])
def test_upsample_row_is_upcast_one_vector_wide(vector_machine, vector_bytes, lanes):
  vector_machine(vector_bytes, 32)
  ast = _kernels(Tensor.empty(2, 4, 56, 56, device="CPU").interpolate((112, 112)))[-1]
  opts = heuristic_opts(Kernel(ast, Device["CPU"].renderer))
  assert [(o.op, o.arg) for o in opts] == [(OptOps.UPCAST, lanes)]

def test_resize_runs_on_the_upcast_kernel():
  x = RNG.standard_normal((2, 3, 16, 48)).astype(np.float32)
  np.testing.assert_allclose(Tensor(x).interpolate((32, 96)).numpy(), _torch_resize(x, (32, 96), "linear", False),
                             rtol=1e-5, atol=1e-5)

def _opts(t: Tensor, pick=lambda asts: asts[-1]) -> list[tuple]:
  opts = heuristic_opts(Kernel(pick(_kernels(t)), Device["CPU"].renderer))
  return [(o.op, o.arg) for o in opts]

@pytest.mark.parametrize("vector_bytes, lanes", [(64, 16), (32, 8)])
def test_padded_copy_row_is_one_vector_wide(vector_machine, vector_bytes, lanes):
  """A 56-wide row padded by one each side is 58 wide: no divisor fills half a vector, so the row is padded to a
  multiple of the vector's lanes and upcast by them (the divisor rule took 2). A 26-wide row keeps its 13."""
  vector_machine(vector_bytes, 32)
  assert _opts(Tensor.empty(2, 8, 56, 56, device="CPU").pad((1, 1, 1, 1)).contiguous()) == \
    [(OptOps.PADTO, lanes), (OptOps.UPCAST, lanes)]
  assert (OptOps.PADTO, lanes) not in _opts(Tensor.empty(64, 26, device="CPU").pad((0, 0, 0, 0)) + 1)

@pytest.mark.parametrize("shape, pads, value", [((2, 5, 56, 56), (1, 1, 1, 1), 0.0), ((3, 7, 30), (2, 0), 1.5),
                                                ((2, 3, 9, 58), (1, 2, 0, 3), -2.0)])
def test_pad_matches_torch(shape, pads, value):
  x = RNG.standard_normal(shape).astype(np.float32)
  np.testing.assert_equal(Tensor(x).pad(pads, value=value).contiguous().numpy(),
                          F.pad(torch.tensor(x), pads, value=value).numpy())

@pytest.mark.parametrize("vector_bytes, row", [(64, 8), (32, 8)])
def test_depthwise_row_is_not_padded(vector_machine, vector_bytes, row):
  """A depthwise 3x3 sums 9 products per output: with AVX-512 its 56-wide row is upcast by half the tile width (8),
  which divides it, not padded to the tile width (64) with masked lanes; with AVX2 the tile width (8) divides it."""
  vector_machine(vector_bytes, 32)
  x, w = Tensor.empty(2, 16, 56, 56, device="CPU"), Tensor.empty(16, 1, 3, 3, device="CPU")
  opts = _opts(x.conv2d(w, groups=16, padding=1))
  assert opts[0] == (OptOps.UPCAST, row) and not any(op is OptOps.PADTO for op, _ in opts)
  # a long reduction (64 channels x 9 taps) still pads its row to the tile
  big = _opts(Tensor.empty(2, 64, 56, 56, device="CPU").conv2d(Tensor.empty(64, 64, 3, 3, device="CPU"), padding=1))
  assert (OptOps.UPCAST, row) not in big[:1]

@pytest.mark.parametrize("shape, k, kw", [((2, 16, 56, 56), 3, dict(padding=1)), ((2, 8, 13, 11), 3, dict(padding=1)),
                                          ((1, 6, 20, 24), 5, dict(padding=2)), ((2, 4, 16, 16), 3, dict(stride=2, padding=1))])
def test_depthwise_conv_and_gradients_match_torch(shape, k, kw):
  c = shape[1]
  x, w = RNG.standard_normal(shape).astype(np.float32), RNG.standard_normal((c, 1, k, k)).astype(np.float32)
  tx, tw = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  out = tx.conv2d(tw, groups=c, **kw)
  g = RNG.standard_normal(out.shape).astype(np.float32)
  (out * Tensor(g)).sum().backward()
  rx, rw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  ref = F.conv2d(rx, rw, groups=c, **kw)
  (ref * torch.tensor(g)).sum().backward()
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(tx.grad.numpy(), rx.grad.numpy(), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(tw.grad.numpy(), rw.grad.numpy(), rtol=1e-3, atol=1e-3)
