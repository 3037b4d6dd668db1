"""The pack pass (passes/pack.py) packs a B cut to its first N columns as the whole uncut B, then reads its first
N // W panels, where that copy costs at most 1 / PACK_SHARED_COPY_SHARE of the matmul's work: causal attention by
blocks of queries (each block's `q @ k[:keys].T`) then copies k into panels once instead of once per block. Fake
machines are fed through the CPU renderer; values are checked against torch and numpy."""
import numpy as np
import pytest
import torch
from tinyplug import schedule
from tinyplug.passes.pack import PACK_SHARED_COPY_SHARE
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor

RNG = np.random.default_rng(41)
AVX2, AVX512 = (32, 16), (64, 32)

@pytest.fixture
def machine(vector_machine):
  def set_to(regs: tuple[int, int]):
    schedule._templates.clear()   # the pack pass decides by the machine: no schedule made for another fake one
    return vector_machine(*regs)
  yield set_to
  schedule._templates.clear()

def _copies_of(t: Tensor, x: Tensor) -> list[int]:
  """The sizes of the buffers that kernels of `t`'s schedule copy `x` into (a kernel reading `x` alone)."""
  items, _ = create_schedule([t.uop])
  return [it.bufs[0].size for it in items if len(it.bufs) == 2 and it.bufs[1] is x.uop.buffer]

def _realized(*shape) -> tuple[Tensor, np.ndarray]:
  a = RNG.standard_normal(shape).astype(np.float32)
  return Tensor(a).realize(), a

@pytest.mark.parametrize("regs", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_causal_blocks_pack_the_keys_once(machine, regs):
  machine(regs)
  (q, qn), (k, kn), (v, vn) = (_realized(1, 8, 512, 64) for _ in range(3))
  out = q.scaled_dot_product_attention(k, v, is_causal=True)
  assert _copies_of(out, k) == [8 * 512 * 64]   # blocks of 256, 384 and 512 keys read one copy of all 512
  want = torch.nn.functional.scaled_dot_product_attention(*(torch.tensor(a) for a in (qn, kn, vn)), is_causal=True)
  np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("keys,copied", [(1024, 1024), (8192, 256)])
def test_a_lone_prefix_packs_the_whole_only_where_the_copy_is_cheap(machine, keys, copied):
  machine(AVX2)
  (q, qn), (k, kn) = _realized(8, 128, 64), _realized(8, keys, 64)
  assert PACK_SHARED_COPY_SHARE * 1024 <= 128 * 256 < PACK_SHARED_COPY_SHARE * 8192
  t = q @ k[:, :256].transpose(-2, -1)
  assert _copies_of(t, k) == [8 * copied * 64]
  np.testing.assert_allclose(t.numpy(), qn @ kn[:, :256].transpose(0, 2, 1), rtol=1e-4, atol=1e-3)

def test_keys_cut_at_an_odd_column_pack_their_own_panels(machine):
  machine(AVX2)
  (q, qn), (k, kn) = _realized(8, 128, 64), _realized(8, 1024, 64)
  t = q @ k[:, :250].transpose(-2, -1)   # not whole panels: padded, as before
  assert all(size != 8 * 1024 * 64 for size in _copies_of(t, k))
  np.testing.assert_allclose(t.numpy(), qn @ kn[:, :250].transpose(0, 2, 1), rtol=1e-4, atol=1e-3)
