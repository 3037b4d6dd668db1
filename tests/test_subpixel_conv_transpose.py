"""A strided transposed convolution whose kernel is a multiple of the stride (k4 s2) runs as one sub-pixel convolution:
output axes (q, r) per dim, r the output's phase, stored in the final order (no per-phase kernels, no interleave).
Values and gradients against torch; the kernel's shape; which shapes fall back to the per-phase form; the heuristic's
tile for it (`_phase_row_tile`) on fake machines and the values that tile computes."""
import numpy as np
import pytest
import torch
from tinyplug import schedule
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Buffer, Device
from tinyplug.passes.heuristic import _phase_row_tile, heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops.nn import _subpixel_conv_transpose
from tinyplug.uop.ops import Ops

RNG = np.random.default_rng(20)
TORCH = {1: torch.nn.functional.conv_transpose1d, 2: torch.nn.functional.conv_transpose2d,
         3: torch.nn.functional.conv_transpose3d}

def asts(out: Tensor) -> list:
  return [it.ast for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK]

@pytest.mark.parametrize("xs,ws,kw", [
  ((2, 8, 6, 6), (8, 4, 4, 4), dict(stride=2, padding=1)),
  ((2, 8, 7, 5), (8, 3, 4, 4), dict(stride=2, padding=2)),                     # p % s == 0: the phases share a window
  ((2, 6, 5, 7), (6, 2, 4, 6), dict(stride=(2, 3), padding=(1, 3))),
  ((2, 6, 5, 7), (6, 2, 4, 4), dict(stride=2, padding=(0, 3), groups=2)),
  ((1, 4, 5, 6), (4, 3, 6, 2), dict(stride=(3, 2), padding=(3, 1))),
  ((1, 3, 4, 4), (3, 2, 2, 2), dict(stride=2)),                                # T = 1: one tap per phase
  ((2, 3, 9), (3, 4, 4), dict(stride=2, padding=1)),                           # 1-d
  ((1, 2, 3, 4, 3), (2, 3, 4, 2, 4), dict(stride=2, padding=1)),               # 3-d
])
def test_values_and_gradients_match_torch(xs, ws, kw):
  x, w = RNG.standard_normal(xs).astype(np.float32), RNG.standard_normal(ws).astype(np.float32)
  b = RNG.standard_normal(ws[1] * kw.get("groups", 1)).astype(np.float32)
  tx, tw, tb = (Tensor(a, requires_grad=True) for a in (x, w, b))
  px, pw, pb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
  out, want = tx.conv_transpose2d(tw, tb, **kw), TORCH[len(xs) - 2](px, pw, pb, **kw)
  np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-4)
  gy = RNG.standard_normal(want.shape).astype(np.float32)
  (out * Tensor(gy)).sum().backward()
  (want * torch.tensor(gy)).sum().backward()
  for got, ref in ((tx, px), (tw, pw), (tb, pb)):
    np.testing.assert_allclose(got.grad.numpy(), ref.grad.numpy(), rtol=1e-4, atol=1e-3)

def test_k4_s2_is_one_kernel_in_output_order():
  """b8 64->32 28x28 k4 s2 p1: the padded input, the channel-innermost weight and one convolution of 2x2 taps over
  64 channels whose loops are (b, cout, q, r, q, r): no interleave kernel, no division of an output index."""
  out = Tensor.empty(8, 64, 28, 28).conv_transpose2d(Tensor.empty(64, 32, 4, 4), stride=2, padding=1)
  assert out.shape == (8, 32, 56, 56)
  ks = asts(out)
  convs = [a for a in ks if any(u.op is Ops.RANGE and u.arg[1] == "reduce" for u in a.toposort())]
  assert len(ks) == 3 and len(convs) == 1, [len(ks), len(convs)]
  ranges = [u for u in convs[0].toposort() if u.op is Ops.RANGE]
  assert [u.src[0].arg for u in ranges if u.arg[1] != "reduce"] == [8, 32, 28, 2, 28, 2]
  assert sorted(u.src[0].arg for u in ranges if u.arg[1] == "reduce") == [2, 2, 64]
  assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in convs[0].toposort())

@pytest.mark.parametrize("ws,kw", [
  ((4, 3, 3, 3), dict(stride=2, padding=1)),                  # 3 taps over 2 phases: 2 and 1
  ((4, 3, 6, 6), dict(stride=3, padding=1)),                  # a shift of 1 mod 3 wraps a phase round
  ((4, 3, 4, 4), dict(stride=2, padding=1, dilation=2)),
  ((4, 3, 4, 4), dict(stride=2, padding=1, output_padding=1)),
])
def test_other_shapes_fall_back_to_phases_and_match_torch(ws, kw):
  x, w = RNG.standard_normal((2, 4, 5, 6)).astype(np.float32), RNG.standard_normal(ws).astype(np.float32)
  full = {k: (v, v) for k, v in kw.items()}
  args = [full.get(k, (d, d)) for k, d in (("stride", 1), ("dilation", 1), ("padding", 0), ("output_padding", 0))]
  assert _subpixel_conv_transpose(Tensor(x), Tensor(w), 1, *args) is None
  want = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(w), **kw).numpy()
  np.testing.assert_allclose(Tensor(x).conv_transpose2d(Tensor(w), **kw).numpy(), want, rtol=1e-4, atol=1e-4)

def subpixel_ast(side: int, cin: int = 64, cout: int = 32):
  schedule._templates.clear()   # no schedule made under another fake machine
  out = Tensor.empty(8, cin, side, side).conv_transpose2d(Tensor.empty(cin, cout, 4, 4), stride=2, padding=1)
  return asts(out)[-1]

def subpixel_kernel(side: int, cin: int = 64, cout: int = 32) -> Kernel:
  return Kernel(subpixel_ast(side, cin, cout), Device["CPU"].renderer)

def test_phase_row_tile(vector_machine):
  """AVX-512: the phase whole (2); the widest odd divisor of the row within 16 / 2 accumulators (7 of 28, 3 of 24)
  by as many vectors of channels as fit (one for 2 x 7, two for 2 x 3); a row no odd divisor fits (16, 32) takes a
  vector's lanes of it by 8 channels."""
  vector_machine(64, 32)
  U = lambda axis, amt: Opt(OptOps.UPCAST, axis, amt)
  assert heuristic_opts(subpixel_kernel(28)) == [U(5, 2), U(4, 7), U(1, 16)]
  assert heuristic_opts(subpixel_kernel(24)) == [U(5, 2), U(4, 3), U(1, 32)]
  assert heuristic_opts(subpixel_kernel(32)) == [U(5, 2), U(4, 16), U(1, 8)]
  assert _phase_row_tile(subpixel_kernel(16)) == [U(5, 2), U(4, 16), U(1, 8)]

def test_phase_row_tile_with_avx2_registers(vector_machine):
  """16 registers: the phase left alone, the largest divisor of the row within 8 positions by one vector of channels
  (8 accumulators)."""
  vector_machine(32, 16)
  U = lambda axis, amt: Opt(OptOps.UPCAST, axis, amt)
  for side, positions in ((28, 7), (24, 8), (32, 8), (16, 8)):
    assert _phase_row_tile(subpixel_kernel(side)) == [U(4, positions), U(1, 8)]

def test_phase_row_tile_leaves_other_kernels_alone():
  schedule._templates.clear()
  x = Tensor.empty(8, 64, 28, 28)
  plain = x.conv2d(Tensor.empty(32, 64, 3, 3), padding=1)            # innermost axis 28: not a phase
  strided = x.conv2d(Tensor.empty(32, 64, 3, 3), stride=2, padding=1)
  for out in (plain, strided):
    assert _phase_row_tile(Kernel(asts(out)[-1], Device["CPU"].renderer)) is None

@pytest.mark.parametrize("side", [14, 16])   # an odd count of positions by channel vectors; the row's lanes
def test_phase_row_tile_computes_the_same_values(side):
  """The tile's program against the untiled one on this machine's CPU (random inputs in every buffer)."""
  ast = subpixel_ast(side, cin=16, cout=16)
  dev = Device["CPU"]
  k = Kernel(ast, dev.renderer)
  gl = sorted((u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
  bufs = [Buffer("CPU", g.dtype.size, g.dtype.base).ensure_allocated() for g in gl]
  for b in bufs[1:]: b.copyin(RNG.standard_normal(b.size).astype(np.float32))
  outs = []
  for opts in ([], heuristic_opts(k)):
    spec = get_program(ast, dev.renderer, opts=[o for o in opts if o.op is not OptOps.THREAD])
    prg = dev.make_program(spec, dev.compiler.compile_program(spec))
    prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, vals=(), wait=True)
    outs.append(bufs[0].numpy().copy())
  assert heuristic_opts(k) and np.abs(outs[0]).max() > 0
  np.testing.assert_allclose(outs[1], outs[0], rtol=1e-5, atol=1e-4)
