"""A padded copy's row that no AVX2 vector divides (58: 56 padded by one on each side) is upcast whole on renderers
with narrow vectors (`heuristic._whole_padded_row`): LLVM then stores the row as full vectors shifted by the pad
instead of 2 + 4 + 2 lanes per vector. AVX-512 keeps its padded vectors. Decisions on faked machines; values on the
faked AVX2 machine against numpy and torch (pads of odd widths, asymmetric and negative, and the stride-2
convolutions whose input is such a copy)."""
import numpy as np
import pytest
import torch
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops
from machine_fakes import forget_built_graphs

RNG = np.random.default_rng(13)

@pytest.fixture
def avx2(vector_machine):
  """The CPU renderer describes an AVX2 machine (16 registers of 32 bytes); no template made for another one is used."""
  forget_built_graphs()
  yield vector_machine(32, 16)
  forget_built_graphs()

def pad_kernel(shape: tuple[int, ...], pads: tuple[int, ...]) -> Kernel:
  forget_built_graphs()
  out = Tensor.empty(*shape).pad(pads).contiguous()
  return Kernel([it.ast for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK][-1], Device["CPU"].renderer)

def row_upcasts(k: Kernel) -> list[Opt]:
  last = len(k.loop_axes) - 1
  return [o for o in heuristic_opts(k) if o.axis == last and o.op in (OptOps.UPCAST, OptOps.PADTO)]

@pytest.mark.parametrize("side, pads, row", [(56, (1, 1, 1, 1), 58), (112, (1, 1, 1, 1), 114), (56, (2, 2, 2, 2), 60),
                                             (57, (1, 1, 1, 1), 59), (56, (0, 1, 1, 1), 57)])
def test_a_padded_row_is_upcast_whole_on_avx2(avx2, side, pads, row):
  assert row_upcasts(pad_kernel((8, 64, side, side), pads)) == [Opt(OptOps.UPCAST, 3, row)]

def test_avx512_keeps_padded_vectors(avx512_machine):
  assert row_upcasts(pad_kernel((8, 64, 56, 56), (1, 1, 1, 1))) == [Opt(OptOps.PADTO, 3, 16), Opt(OptOps.UPCAST, 3, 16)]

def test_only_short_unaligned_padded_rows_are_upcast_whole(avx2):
  # a row of 226 is over WHOLE_PAD_ROW_MAX (the padded vectors as before); 64 is whole vectors; a crop has no gate
  assert row_upcasts(pad_kernel((8, 64, 224, 224), (1, 1, 1, 1))) == [Opt(OptOps.PADTO, 3, 8), Opt(OptOps.UPCAST, 3, 8)]
  assert Opt(OptOps.UPCAST, 3, 64) not in row_upcasts(pad_kernel((8, 64, 56, 56), (4, 4, 1, 1)))
  assert Opt(OptOps.UPCAST, 3, 54) not in row_upcasts(pad_kernel((8, 64, 56, 56), (-1, -1, 1, 1)))

@pytest.mark.parametrize("side", [3, 7, 57, 58, 59])
@pytest.mark.parametrize("pads", [(1, 1, 1, 1), (0, 2, 1, 0), (3, 1, 0, 2), (-1, 2, 1, -1)])
def test_padded_copies_give_numpy_values_on_avx2(avx2, side, pads):
  x = RNG.standard_normal((4, 48, side, side)).astype(np.float32)
  want = np.pad(x, ((0, 0), (0, 0), (max(pads[2], 0), max(pads[3], 0)), (max(pads[0], 0), max(pads[1], 0))))
  want = want[:, :, max(-pads[2], 0):want.shape[2] - max(-pads[3], 0), max(-pads[0], 0):want.shape[3] - max(-pads[1], 0)]
  np.testing.assert_array_equal(Tensor(x).pad(pads).contiguous().numpy(), want)

@pytest.mark.parametrize("side", [27, 28, 56, 57])
def test_strided_convs_over_padded_copies_give_torch_values_on_avx2(avx2, side):
  x, w = RNG.standard_normal((2, 16, side, side)).astype(np.float32), RNG.standard_normal((32, 16, 3, 3)).astype(np.float32)
  got = Tensor(x).conv2d(Tensor(w), stride=2, padding=1).numpy()
  want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=2, padding=1).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
