"""Convolutions on a machine with AVX2's 16 vector registers of 32 bytes (session 23, helper conv7): the copies blocked
by channels (tensor_ops/layout.py), Winograd's planes-outer weight transforms and its wider default, and the heuristic's
AVX2 tiles (the row band, a 4x4 window's row of taps, positions by one vector of channels, unpadded cache blocks).
Each decision is checked on a faked AVX2 machine and on a faked AVX-512 one (which keeps its earlier decision), and
the values on the faked AVX2 machine against torch."""
import numpy as np
import pytest
import torch
from tinyplug import schedule
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.schedule.naming import kernel_name
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops.layout import channel_block
from tinyplug.uop import Ops
from machine_fakes import forget_built_graphs

F = torch.nn.functional
RNG = np.random.default_rng(23)
KB, MB = 1 << 10, 1 << 20
MACHINES = {"avx2": ((32 * KB, 512 * KB, 32 * MB), (32, 16)), "avx512": ((32 * KB, 1 * MB, 32 * MB), (64, 32))}

@pytest.fixture
def machine(monkeypatch):
  """machine(name): the CPU renderer describes that machine (caches, 2 threads, vector registers); templates made for
  another one are dropped."""
  r = Device["CPU"].renderer
  def set_to(name: str):
    caches, (nbytes, regs) = MACHINES[name]
    monkeypatch.setattr(r, "cache_bytes", caches)
    monkeypatch.setattr(type(r), "threads", 2)
    monkeypatch.setattr(r, "vector_bytes", nbytes)
    monkeypatch.setattr(r, "vector_registers", regs)
    forget_built_graphs()
    return r
  yield set_to
  forget_built_graphs()

def _step_kernels(make) -> list:
  """The SINK kernels of a conv's forward and both gradients: make() -> (x, w, out)."""
  x, w, out = make()
  items, _ = create_schedule([t.uop for t in (out, *out.square().sum().gradient(x, w))])
  return [it.ast for it in items if it.ast.op.name == "SINK"]

def _conv(bs, cin, cout, hw, stride=1):
  def make():
    x, w = Tensor.empty(bs, cin, hw, hw, requires_grad=True), Tensor.empty(cout, cin, 3, 3, requires_grad=True)
    return x, w, x.conv2d(w, stride=stride, padding=1)
  return make

def _convt(bs=8):
  def make():
    x, w = Tensor.empty(bs, 64, 28, 28, requires_grad=True), Tensor.empty(64, 32, 4, 4, requires_grad=True)
    return x, w, x.conv_transpose2d(w, stride=2, padding=1)
  return make

def _opts_of(asts, name: str) -> list[Opt]:
  ast = next(a for a in asts if kernel_name(a).split("n")[0] == name)
  return heuristic_opts(Kernel(ast, Device["CPU"].renderer))

def _against_torch(x, w, fn, tfn, atol=1e-4):
  xs, ws = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
  out = fn(xs, ws)
  g = RNG.standard_normal(out.shape).astype(np.float32)
  (out * Tensor(g)).sum().backward()
  tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
  tout = tfn(tx, tw)
  (tout * torch.from_numpy(g)).sum().backward()
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=atol)
  np.testing.assert_allclose(xs.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=atol)
  np.testing.assert_allclose(ws.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=4 * atol)

def test_channel_block_follows_the_vector_registers(machine):
  machine("avx2")
  assert channel_block("CPU") == 16
  machine("avx512")
  assert channel_block("CPU") is None

def test_weight_gradient_reads_a_copy_blocked_by_channels_on_avx2(machine):
  # the padded input (2, 32, 12, 12) copied channels-last: in two blocks of 16 channels on AVX2, plain on AVX-512
  machine("avx2")
  names = {kernel_name(a) for a in _step_kernels(_conv(2, 32, 32, 10))}
  assert "E_2_2_12_12_16" in names and "E_2_12_12_32" not in names, names
  machine("avx512")
  names = {kernel_name(a) for a in _step_kernels(_conv(2, 32, 32, 10))}
  assert "E_2_12_12_32" in names and "E_2_2_12_12_16" not in names, names

def test_blocked_copies_give_torch_values_on_avx2(machine):
  machine("avx2")
  x = RNG.standard_normal((2, 48, 10, 10)).astype(np.float32)
  w = (RNG.standard_normal((32, 48, 3, 3)) / 12).astype(np.float32)
  with Context(WINO=0):
    _against_torch(x, w, lambda a, b: a.conv2d(b, padding=1), lambda a, b: F.conv2d(a, b, padding=1))
    # the stride-2 weight gradient's output-gradient copy (32 channels: two blocks)
    _against_torch(x, w, lambda a, b: a.conv2d(b, stride=2, padding=1), lambda a, b: F.conv2d(a, b, stride=2, padding=1))

@pytest.mark.parametrize("name,planes_first", [("avx2", True), ("avx512", False)])
def test_winograd_tile_rows_transforms_planes_outermost_on_avx2(machine, name, planes_first):
  """The tiles-as-rows matmuls read U^T (16, cin, cout) and U (16, cout, cin) with each plane contiguous on AVX2 (the
  input gradient's a copy of its own), from (cin, 16, cout) and (cout, 16, cin) views elsewhere."""
  machine(name)
  cin, cout = 32, 24
  with Context(WINO=1):
    names = {kernel_name(a).split("n")[0] for a in _step_kernels(_conv(2, cin, cout, 12))}
  assert (f"E_16_{cin}_{cout}" in names) == planes_first and (f"E_16_{cout}_{cin}" in names) == planes_first, names
  assert (f"E_{cin}_16_{cout}" in names) != planes_first, names

def test_winograd_planes_outermost_give_torch_values_on_avx2(machine):
  machine("avx2")
  x = RNG.standard_normal((2, 32, 12, 12)).astype(np.float32)
  w = (RNG.standard_normal((24, 32, 3, 3)) / 17).astype(np.float32)
  with Context(WINO=1):
    _against_torch(x, w, lambda a, b: a.conv2d(b, padding=1), lambda a, b: F.conv2d(a, b, padding=1))

@pytest.mark.parametrize("name,rows", [("avx2", True), ("avx512", False)])
def test_winograd_tiles_as_rows_beyond_one_vector_of_tiles_on_avx2(machine, name, rows):
  """A 16x16 output (64 tiles an image): AVX2 takes the tiles as the matmul's rows (r_16_<tiles>_<cout>_<cin>) and
  stores the output transform channels-last, (bs, ty, 2, tx, 2, cout); AVX-512 keeps the tiles innermost."""
  machine(name)
  cin, cout = 16, 24
  with Context(WINO=1):
    names = {kernel_name(a).split("n")[0] for a in _step_kernels(_conv(2, cin, cout, 16))}
  assert (f"r_16_128_{cout}_{cin}" in names) == rows and (f"r_16_{cout}_128_{cin}" in names) != rows, names
  assert (f"r_2_8_2_8_2_{cout}_16" in names) == rows, names

@pytest.mark.parametrize("bs,cin,cout,h,w,padding", [
  (2, 8, 16, 56, 56, 1), (1, 16, 8, 55, 57, 0), (2, 8, 8, 16, 16, 1), (1, 8, 8, 7, 9, 1)])
def test_winograd_tile_rows_channels_last_give_torch_values_on_avx2(machine, bs, cin, cout, h, w, padding):
  machine("avx2")
  x = RNG.standard_normal((bs, cin, h, w)).astype(np.float32)
  wt = (RNG.standard_normal((cout, cin, 3, 3)) / 9).astype(np.float32)
  with Context(WINO=1):
    _against_torch(x, wt, lambda a, b: a.conv2d(b, padding=padding), lambda a, b: F.conv2d(a, b, padding=padding))

@pytest.mark.parametrize("shape,avx2,avx512", [
  ((8, 64, 64, 28), True, False), ((8, 128, 128, 14), True, False), ((8, 256, 256, 14), True, True),
  ((8, 64, 64, 56), True, False), ((1, 64, 64, 56), True, False), ((8, 64, 64, 58), False, False),
  ((8, 32, 32, 28), False, False), ((8, 256, 256, 7), False, False)])
def test_winograd_default_from_64_channels_on_avx2(machine, shape, avx2, avx512):
  bs, cin, cout, hw = shape
  for name, wino in (("avx2", avx2), ("avx512", avx512)):
    machine(name)
    kernels = _step_kernels(_conv(bs, cin, cout, hw))
    assert any(kernel_name(a).startswith("r_16_") for a in kernels) == wino, (name, shape)

def test_cache_blocks_leave_rows_unpadded_on_avx2(machine):
  # a 520-row matmul: 130 AVX2 tile rows of 4 (no block of 4, 8 or 16 divides them) or 65 AVX-512 rows of 8
  def opts() -> list[Opt]:
    schedule._templates.clear()
    items, _ = create_schedule([(Tensor.empty(520, 1024) @ Tensor.empty(1024, 1024)).uop])
    return heuristic_opts(Kernel(items[-1].ast, Device["CPU"].renderer))
  machine("avx2")
  assert not any(o.op is OptOps.PADTO for o in opts())
  machine("avx512")
  assert any(o.op is OptOps.PADTO for o in opts())

# one vector of the row by 4 rows by 2 channels, the window's rows unrolled, the channels' loop inside the rows'
BAND = [Opt(OptOps.UPCAST, 3, 8), Opt(OptOps.UPCAST, 2, 4), Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UNROLL, 1, 3),
        Opt(OptOps.SWAP, 1, 2)]

def test_row_band_tile_on_avx2_only(machine):
  # (the direct form: AVX2 takes this shape as Winograd's by default)
  machine("avx2")
  with Context(WINO=0):
    assert _opts_of(_step_kernels(_conv(8, 64, 64, 56)), "r_8_64_56_56_64_3_3")[:5] == BAND
  machine("avx512")
  assert _opts_of(_step_kernels(_conv(8, 64, 64, 56)), "r_8_64_56_56_64_3_3")[:2] == \
    [Opt(OptOps.UPCAST, 3, 56), Opt(OptOps.UPCAST, 1, 4)]

def test_row_band_tile_gives_torch_values(machine):
  machine("avx2")
  assert _opts_of(_step_kernels(_conv(2, 8, 8, 56)), "r_2_8_56_56_8_3_3")[:5] == BAND
  x = RNG.standard_normal((2, 8, 56, 56)).astype(np.float32)
  w = (RNG.standard_normal((8, 8, 3, 3)) / 9).astype(np.float32)
  _against_torch(x, w, lambda a, b: a.conv2d(b, padding=1), lambda a, b: F.conv2d(a, b, padding=1))

def test_four_by_four_window_weight_gradient_is_one_row_of_taps_on_avx2(machine):
  # conv_transpose2d k4 s2's weight gradient: 4x4 taps by 16 channels spilled AVX2's registers, and so did 4 taps by
  # 32 channels (16 accumulators): 4 x 16, accumulators in half the registers
  machine("avx2")
  assert _opts_of(_step_kernels(_convt()), "r_64_32_4_4_8_28_28") == [Opt(OptOps.UPCAST, 3, 4), Opt(OptOps.UPCAST, 0, 16)]
  machine("avx512")
  assert _opts_of(_step_kernels(_convt()), "r_64_32_4_4_8_28_28") == [Opt(OptOps.UPCAST, 3, 4), Opt(OptOps.UPCAST, 0, 64)]

def _masked_reads(ast) -> int:
  return sum(1 for u in ast.toposort() if u.op is Ops.WHERE)

def _gated_reads(sink) -> int:
  """Loads of an optimized kernel whose index carries a gate that is not the constant True."""
  return sum(1 for u in sink.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and len(u.src[0].src) > 2
             and u.src[0].src[2].op is not Ops.CONST)

def test_conv_transpose_weight_gradient_reads_a_padded_copy_on_avx2(machine):
  # its output gradient read through the padding: a masked broadcast per tap on AVX-512 as before, a padded copy
  # (shared with the input gradient) on AVX2
  machine("avx2")
  asts = _step_kernels(_convt())
  assert _masked_reads(next(a for a in asts if kernel_name(a).startswith("r_64_32_4_4_8_28_28"))) == 0
  assert sum(1 for a in asts if kernel_name(a).startswith("E_8_32_58_58")) == 1
  machine("avx512")
  assert _masked_reads(next(a for a in _step_kernels(_convt()) if kernel_name(a).startswith("r_64_32_4_4_8_28_28"))) > 0

def test_conv_transpose_padded_copy_gives_torch_values(machine):
  machine("avx2")
  x = RNG.standard_normal((2, 32, 9, 9)).astype(np.float32)
  w = (RNG.standard_normal((32, 16, 4, 4)) / 16).astype(np.float32)
  _against_torch(x, w, lambda a, b: a.conv_transpose2d(b, stride=2, padding=1),
                 lambda a, b: F.conv_transpose2d(a, b, stride=2, padding=1))

def _phases_14(kernels) -> list:
  """conv 64->128 28x28 s2's four input-gradient phases (1x1, 2x1, 1x2, 2x2 taps over rows of 14)."""
  return [a for a in kernels if kernel_name(a).startswith("r_8_14_14_64_128")]

def test_fourteen_wide_phase_rows_pad_to_five_positions_by_two_vectors_on_avx2(machine):
  # no divisor of 14 from 4 to AVX2's 6 positions by two vectors: the row padded to 15 for 5 positions by two vectors
  # (was 7 x one vector), its padded reads inside the phases' copy of g (a spare row below it: no load gated);
  # AVX-512 keeps 7 x 32
  machine("avx2")
  phases = _phases_14(_step_kernels(_conv(8, 64, 128, 28, 2)))
  assert len(phases) == 4
  for ast in phases:
    k = Kernel(ast, Device["CPU"].renderer)
    assert (opts := heuristic_opts(k)) == [Opt(OptOps.PADTO, 2, 5), Opt(OptOps.UPCAST, 2, 5), Opt(OptOps.UPCAST, 3, 16)]
    for o in opts: k.apply_opt(o)
    assert _gated_reads(k.sink) == 0
  machine("avx512")
  for ast in _phases_14(_step_kernels(_conv(8, 64, 128, 28, 2))):
    assert heuristic_opts(Kernel(ast, Device["CPU"].renderer)) == [Opt(OptOps.UPCAST, 2, 7), Opt(OptOps.UPCAST, 3, 32)]

@pytest.mark.parametrize("name,copy", [("avx2", "E_8_128_17_16"), ("avx512", "E_8_128_16_16")])
def test_phases_copy_of_g_has_a_spare_row_on_avx2(machine, name, copy):
  machine(name)
  assert copy in [kernel_name(a) for a in _step_kernels(_conv(8, 64, 128, 28, 2))]

def test_blocked_channels_of_a_3x3_weight_gradient_take_one_vector_on_avx2(machine):
  # a strided weight gradient's output-gradient copy in blocks of 16 channels: 3x3 taps by one vector (AVX-512: 16)
  machine("avx2")
  assert _opts_of(_step_kernels(_conv(8, 64, 128, 28, 2)), "r_128_64_3_3_8_14_14") == \
    [Opt(OptOps.UPCAST, 3, 3), Opt(OptOps.UPCAST, 2, 3), Opt(OptOps.UPCAST, 0, 8)]
  machine("avx512")
  assert _opts_of(_step_kernels(_conv(8, 64, 128, 28, 2)), "r_128_64_3_3_8_14_14")[:3] == \
    [Opt(OptOps.UPCAST, 3, 3), Opt(OptOps.UPCAST, 2, 3), Opt(OptOps.UPCAST, 0, 16)]

def test_avx2_strided_and_transposed_convolutions_give_torch_values(machine):
  machine("avx2")
  x = RNG.standard_normal((1, 64, 28, 28)).astype(np.float32)
  w = (RNG.standard_normal((64, 32, 4, 4)) / 32).astype(np.float32)
  _against_torch(x, w, lambda a, b: a.conv_transpose2d(b, stride=2, padding=1),
                 lambda a, b: F.conv_transpose2d(a, b, stride=2, padding=1), atol=2e-4)
  w2 = (RNG.standard_normal((128, 64, 3, 3)) / 24).astype(np.float32)
  _against_torch(x, w2, lambda a, b: a.conv2d(b, stride=2, padding=1),
                 lambda a, b: F.conv2d(a, b, stride=2, padding=1), atol=2e-4)

# AVX2's strided rows (heuristic._gather_row_channel_pairs): 6 positions by 2 vectors of output channels, the row padded
# to a multiple of 6 where that adds at most an eighth of it, the channels' loop moved innermost
def _pairs(row_axis: int, chan_axis: int, pad: bool) -> list[Opt]:
  return ([Opt(OptOps.PADTO, row_axis, 6)] if pad else []) + \
    [Opt(OptOps.UPCAST, row_axis, 6), Opt(OptOps.UPCAST, chan_axis, 16)] + \
    [Opt(OptOps.SWAP, a, a + 1) for a in range(chan_axis, row_axis)]

def _forward_opts(make) -> list[Opt]:
  x, w, out = make()
  items, _ = create_schedule([out.uop])
  return heuristic_opts(Kernel([it.ast for it in items if it.ast.op.name == "SINK"][-1], Device["CPU"].renderer))

def _strided(bs, cin, cout, hw, padding=1, groups=1):
  def make():
    x, w = Tensor.empty(bs, cin, hw, hw), Tensor.empty(cout, cin // groups, 3, 3)
    return x, w, x.conv2d(w, stride=2, padding=padding, groups=groups)
  return make

@pytest.mark.parametrize("shape, avx2, avx512", [
  ((8, 64, 128, 56), _pairs(3, 1, True), [Opt(OptOps.UPCAST, 3, 14), Opt(OptOps.UPCAST, 1, 16)]),
  ((1, 64, 128, 56), _pairs(2, 0, True), [Opt(OptOps.UPCAST, 2, 14), Opt(OptOps.UPCAST, 0, 16)]),
  # the strided CNN's 32->64 26x26 (288 products, a 12-wide row: no padding); AVX2 took AVX-512's two rows of 4 x 16
  ((64, 32, 64, 26, 0), _pairs(3, 1, False),
   [Opt(OptOps.UPCAST, 3, 4), Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 2, 2)]),
  # a 14-wide row would be padded by 4: the 14 positions by one vector stay
  ((8, 64, 128, 28), [Opt(OptOps.UPCAST, 3, 14), Opt(OptOps.UPCAST, 1, 8)],
   [Opt(OptOps.UPCAST, 3, 14), Opt(OptOps.UPCAST, 1, 16)]),
])
def test_strided_rows_take_six_positions_by_two_vectors_on_avx2(machine, shape, avx2, avx512):
  machine("avx2")
  assert _forward_opts(_strided(*shape)) == avx2
  machine("avx512")
  assert _forward_opts(_strided(*shape)) == avx512

def test_strided_row_pairs_only_pad_reads_that_stay_inside(machine):
  # conv_transpose2d k4 s2's input gradient: a 4-wide window over the 58-wide padded row, whose padded positions would
  # read past the buffer's end (gated broadcasts, 2x slower): it keeps 14 positions by one vector
  machine("avx2")
  assert _opts_of(_step_kernels(_convt()), "r_8_64_28_28_32_4_4") == [Opt(OptOps.UPCAST, 3, 14), Opt(OptOps.UPCAST, 1, 8)]

@pytest.mark.parametrize("bs, cin, cout, hw, padding, groups, pairs", [
  (2, 32, 16, 56, 1, 1, True),    # a 28-wide row padded to 30
  (1, 32, 32, 54, 1, 1, True),    # 27 padded to 30, batch 1
  (2, 32, 16, 25, 0, 1, True),    # 12 wide: no padding, no zero border
  (1, 64, 32, 57, 0, 2, False),   # two groups (their channels are not one contiguous axis: the tile is not taken)
])
def test_strided_row_pairs_give_torch_values(machine, bs, cin, cout, hw, padding, groups, pairs):
  machine("avx2")
  assert any(o.op is OptOps.SWAP for o in _forward_opts(_strided(bs, cin, cout, hw, padding, groups))) == pairs
  x = RNG.standard_normal((bs, cin, hw, hw)).astype(np.float32)
  w = (RNG.standard_normal((cout, cin // groups, 3, 3)) / 16).astype(np.float32)
  _against_torch(x, w, lambda a, b: a.conv2d(b, stride=2, padding=padding, groups=groups),
                 lambda a, b: F.conv2d(a, b, stride=2, padding=padding, groups=groups), atol=2e-4)

def _padded_phases(bs, cin, cout, hw, k, padding, groups) -> int:
  """How many of a stride-2 conv's step kernels take `_padded_row_positions`' tile (a PADTO then 5 x 16)."""
  def make():
    x = Tensor.empty(bs, cin, hw, hw, requires_grad=True)
    w = Tensor.empty(cout, cin // groups, k, k, requires_grad=True)
    return x, w, x.conv2d(w, stride=2, padding=padding, groups=groups)
  def tile(a: int) -> list[Opt]: return [Opt(OptOps.PADTO, a, 5), Opt(OptOps.UPCAST, a, 5), Opt(OptOps.UPCAST, a + 1, 16)]
  opts = [heuristic_opts(Kernel(a, Device["CPU"].renderer)) for a in _step_kernels(make)]
  return sum(1 for o in opts if o[:1] and o == tile(o[0].axis))

@pytest.mark.parametrize("bs, cin, cout, hw, k, padding, groups, padded", [
  (2, 64, 64, 28, 3, 1, 1, 4),    # phase rows of 14 -> 15
  (2, 64, 64, 28, 3, 0, 1, 4),    # padding 0
  (2, 64, 64, 27, 3, 0, 1, 4),    # 27 wide, padding 0: phases of 14 (the last row and column cut)
  (2, 64, 64, 29, 3, 1, 1, 0),    # rows of 15: 5 divides them, no padding
  (2, 64, 64, 56, 3, 1, 1, 0),    # rows of 28: 4 x 16 as before
  (1, 64, 64, 57, 3, 1, 1, 0),    # rows of 30: 6 x 16
  (2, 64, 64, 28, 5, 2, 1, 0),    # k5: phases of 3x3, 3x2, 2x3, 2x2 taps, another tile
  (2, 64, 64, 28, 3, 1, 2, 0),    # two groups: phases stored channels-outermost, not this tile
])
def test_stride_two_gradients_give_torch_values_on_avx2(machine, bs, cin, cout, hw, k, padding, groups, padded):
  machine("avx2")
  assert _padded_phases(bs, cin, cout, hw, k, padding, groups) == padded
  x = RNG.standard_normal((bs, cin, hw, hw)).astype(np.float32)
  w = (RNG.standard_normal((cout, cin // groups, k, k)) / (4 * k)).astype(np.float32)
  _against_torch(x, w, lambda a, b: a.conv2d(b, stride=2, padding=padding, groups=groups),
                 lambda a, b: F.conv2d(a, b, stride=2, padding=padding, groups=groups), atol=2e-4)
