"""Random valid optimisation actions never change what a kernel computes.

For kernels of many shapes (elementwise with broadcasts, reductions, odd matmuls, a convolution and its gradients, a
pooling backward, a softmax row kernel, gathers), random sequences of the actions the search may try (the same
candidate list BEAM draws from) are applied where the Kernel accepts them; every accepted sequence must compile and
give the unoptimised kernel's values. BEAM treats a candidate that fails to compile as merely slow, so this is where
an action that makes invalid code shows up."""
from __future__ import annotations
import random
import numpy as np
import pytest
from tinyplug.codegen.kernel import Kernel, KernelOptError, Opt
from tinyplug.device import Device
from tinyplug.engine.realize import run_item
from tinyplug.schedule import create_schedule
from tinyplug.search.runner import candidate_actions
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops
from test_opts import run_kernel

TRIALS = {"CPU": 25, "PYTHON": 25, "CL": 4}   # random action sequences per kernel (PoCL compiles slowly)
MAX_ACTIONS = 4    # actions per sequence

def _data(*shape: int, seed: int = 0) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def _conv_grads(device: str) -> list[Tensor]:
  x = Tensor(_data(2, 3, 9, 9), device=device, requires_grad=True)
  w = Tensor(_data(4, 3, 3, 3, seed=1), device=device, requires_grad=True)
  x.conv2d(w, padding=1).relu().sum().backward()
  return [x.grad, w.grad]

def _pool_backward(device: str) -> list[Tensor]:
  x = Tensor(_data(2, 4, 11, 11), device=device, requires_grad=True)
  (x.relu().max_pool2d(2) * Tensor(_data(2, 4, 5, 5, seed=1), device=device)).sum().backward()
  return [x.grad]

# name -> device -> the tensors whose kernels are fuzzed (each tensor's last kernel)
GRAPHS = {
  "broadcast_chain": lambda d: [((Tensor(_data(37, 1), device=d) * Tensor(_data(1, 24, seed=1), device=d)) + 1).relu()],
  "row_sum": lambda d: [Tensor(_data(13, 50), device=d).sum(1)],
  "col_max": lambda d: [Tensor(_data(50, 13), device=d).max(0)],
  "matmul_odd": lambda d: [Tensor(_data(27, 5), device=d) @ Tensor(_data(5, 7, seed=1), device=d)],
  "matmul_mid": lambda d: [Tensor(_data(33, 64), device=d) @ Tensor(_data(64, 48, seed=1), device=d)],
  "conv_forward": lambda d: [Tensor(_data(2, 3, 9, 9), device=d).conv2d(Tensor(_data(4, 3, 3, 3, seed=1), device=d))],
  "conv_gradients": _conv_grads,
  "pool_backward": _pool_backward,
  "softmax": lambda d: [Tensor(_data(8, 40), device=d).softmax(-1)],
  "gather_where": lambda d: [(lambda x: (x > 0.3).where(x[::-1, ::2].pad(((0, 0), (0, 6))), -x))(Tensor(_data(12, 12), device=d))],
}

def _kernels(device: str, name: str):
  """(schedule item, its buffers) for the last kernel of each tensor, earlier kernels already run."""
  out = []
  for t in GRAPHS[name](device):
    items, _ = create_schedule([t.uop])
    for it in items[:-1]: run_item(it)
    if items and items[-1].ast.op is Ops.SINK: out.append(items[-1])
  return out

def _run(device: str, item, opts: list[Opt]) -> np.ndarray: return run_kernel(device, item, opts)[0]

def _random_actions(k: Kernel, rng: random.Random) -> list[Opt]:
  for _ in range(rng.randint(1, MAX_ACTIONS)):
    acts = candidate_actions(k)
    rng.shuffle(acts)
    for a in acts[:40]:
      try: k.apply_opt(a)
      except KernelOptError: continue
      break
  return list(k.applied_opts)

@pytest.mark.parametrize("device", list(TRIALS))
@pytest.mark.parametrize("name", list(GRAPHS))
def test_random_actions_keep_values(device, name):
  if device not in Device.available(): pytest.skip(f"{device} is not available")
  rng = random.Random(f"{name}-{device}")
  for item in _kernels(device, name):
    want = _run(device, item, [])
    tried = set()
    for _ in range(TRIALS[device]):
      opts = _random_actions(Kernel(item.ast, Device[device].renderer), rng)
      if not opts or tuple(opts) in tried: continue
      tried.add(tuple(opts))
      got = _run(device, item, opts)
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} on {device} with {opts}")
