"""Causal attention by blocks of queries (tensor_ops/nn.py `_causal_attention_blocks`): each block's scores reach only
the keys up to its last row, so the part above the diagonal blocks is never computed. Values and gradients against
torch; the work of the scheduled kernels against the whole-matrix form."""
import math
import numpy as np
import pytest
from tinyplug import dtypes, schedule
from tinyplug.codegen.kernel import Kernel
from tinyplug.device import Device
from tinyplug.tensor_ops.graph import ShapeError
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops.nn import _causal_query_blocks

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(26)

def _attend(shapes, dtype=np.float32) -> tuple[list[np.ndarray], list[np.ndarray]]:
  """Ours and torch's output and gradients of q, k, v for sum(out**2), computed in float32 by torch."""
  data = [RNG.standard_normal(s).astype(dtype) for s in shapes]
  ts = [Tensor(a, requires_grad=True) for a in data]
  out = ts[0].scaled_dot_product_attention(ts[1], ts[2], is_causal=True)
  out.float().square().sum().backward()
  ps = [torch.tensor(a.astype(np.float32), requires_grad=True) for a in data]
  ref = torch.nn.functional.scaled_dot_product_attention(*ps, is_causal=True)
  ref.square().sum().backward()
  ours = [out.numpy()] + [t.grad.numpy() for t in ts]
  theirs = [ref.detach().numpy()] + [p.grad.numpy() for p in ps]
  return [o.astype(np.float32) for o in ours], theirs

@pytest.mark.parametrize("shapes", [
  [(2, 2, 128, 16)] * 3,                                  # two blocks of 64
  [(1, 2, 200, 8)] * 3,                                   # a last block shorter than the others
  [(1, 1, 300, 8)] * 3,                                   # blocks of 128 and a short one
  [(2, 1, 130, 8), (1, 3, 130, 8), (1, 3, 130, 8)],       # batch and heads broadcast
  [(2, 160, 8), (2, 100, 8), (2, 100, 8)],                # more queries than keys: the last rows see every key
  [(2, 100, 8), (2, 160, 8), (2, 160, 8)],                # fewer queries than keys (one block)
  [(3, 1, 8), (3, 5, 8), (3, 5, 8)],                      # T = 1
])
def test_values_and_gradients_match_torch(shapes):
  ours, theirs = _attend(shapes)
  for name, o, t in zip(("out", "dq", "dk", "dv"), ours, theirs):
    np.testing.assert_allclose(o, t, rtol=2e-4, atol=2e-4, err_msg=name)

def test_float16_matches_torch():
  ours, theirs = _attend([(1, 2, 256, 16)] * 3, np.float16)
  for name, o, t in zip(("out", "dq", "dk", "dv"), ours, theirs):
    np.testing.assert_allclose(o, t, rtol=3e-2, atol=3e-2, err_msg=name)

def test_is_causal_with_a_mask_raises():
  q = Tensor.empty(1, 2, 128, 8)
  with pytest.raises(ShapeError):
    q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(128, 128, dtype=dtypes.bool), is_causal=True)

@pytest.mark.parametrize("t,blocks", [(1, [(0, 1)]), (127, [(0, 127)]), (128, [(0, 64), (64, 128)]),
                                      (200, [(0, 112), (112, 200)]), (256, [(0, 128), (128, 256)]),
                                      (1024, [(a, a + 128) for a in range(0, 1024, 128)])])
def test_query_blocks(t, blocks):
  assert _causal_query_blocks(t) == blocks

def _work(t: Tensor) -> int:
  """The iterations of every scheduled kernel's loops (outputs times reduction), summed."""
  schedule._templates.clear()
  total = 0
  for it in create_schedule([t.uop])[0]:
    k = Kernel(it.ast, Device["CPU"].renderer)
    total += math.prod(r.src[0].arg for r in k.loop_axes + k.reduce_axes)
  return total

@pytest.mark.parametrize("t,most", [(128, 0.8), (512, 0.65)])
def test_the_masked_half_is_not_computed(t, most):
  # the whole matrix (as before, for is_causal too): q @ k^T, softmax and weights @ v over every key; by n blocks,
  # block i reaches the keys up to its end: (n+1)/2n of that work (3/4 at 128, 5/8 at 512)
  q, k, v = (Tensor.empty(2, 4, t, 64, device="CPU") for _ in range(3))
  whole, causal = _work(q.scaled_dot_product_attention(k, v)), _work(q.scaled_dot_product_attention(k, v, is_causal=True))
  assert causal < whole * most, (causal, whole)
