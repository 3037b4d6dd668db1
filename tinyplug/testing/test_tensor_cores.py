"""Tensor cores (the TC action, `Renderer.tensor_cores`) on every device under test whose renderer advertises some
(skipped elsewhere): fp16 and bf16 matmuls the cores can tile (after padding, where needed) run as WMMAs and match
torch; shapes they cannot tile, and TC=0, run without them and match too. On a GPU (DEV=CUDA) this is the hardware's own check of the fragment
layouts the renderer declares; on MOCK+CUDA, the emulator's."""
from __future__ import annotations
import numpy as np
import pytest
import torch
from tinyplug import Tensor, dtypes, events
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.uop.ops import Ops

pytestmark = pytest.mark.usefixtures("device")

TORCH_DTYPES = {dtypes.half: torch.float16, dtypes.bfloat16: torch.bfloat16}
# (M, N, K): tiles of 16x8x16 (mma.sync m16n8k16) fit these...
FITS = [(16, 8, 16), (64, 32, 48), (128, 64, 64), (48, 40, 80)]
# ...these after padding M, N or K (PADTO) to a multiple of the tile...
PADDED = [(24, 8, 16), (16, 12, 16), (16, 8, 24), (100, 60, 72)]
# ...and not these (padding would more than double an axis): they run without tensor cores
REFUSED = [(7, 5, 3), (16, 8, 6)]

def _cores_or_skip(dtype):
  renderer = Device[Device.DEFAULT].renderer
  if not any(tc.dtype_in == dtype for tc in renderer.tensor_cores if renderer.uses_work_groups):
    pytest.skip(f"{Device.DEFAULT}'s renderer has no {dtype.name} tensor core")
  if dtype not in renderer.supported_dtypes(): pytest.skip(f"{Device.DEFAULT} has no {dtype.name}")

def _run(fn, *arrays: np.ndarray, dtype) -> tuple[np.ndarray, list]:
  """fn(*tensors of `dtype`) realized on the device under test: (result as float32, the WMMAs its kernels ran)."""
  seen: list = []
  def on_kernel(e): seen.extend(u.arg for u in e["uops"] if u.op is Ops.WMMA)
  tensors = [Tensor(a).cast(dtype).realize() for a in arrays]
  events.subscribe("kernel", on_kernel)
  try: out = fn(*tensors).realize()
  finally: events.unsubscribe("kernel", on_kernel)
  return out.float().numpy(), seen

def _reference(fn, *arrays: np.ndarray, dtype) -> np.ndarray:
  """torch on CPU: the inputs rounded to `dtype`, the products summed in float32, the result rounded to `dtype`."""
  ts = [torch.from_numpy(a).to(TORCH_DTYPES[dtype]).float() for a in arrays]
  return fn(*ts).to(TORCH_DTYPES[dtype]).float().numpy()

def _inputs(*shapes, seed=0):
  rng = np.random.default_rng(seed)
  return [rng.standard_normal(s).astype(np.float32) for s in shapes]

def _close(got, ref, dtype):
  # one rounding of the result to half / bfloat16 (and a different order of float32 sums)
  tol = 1e-2 if dtype == dtypes.half else 2e-2
  np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, float(np.abs(ref).max())))

@pytest.mark.parametrize("dtype", [dtypes.half, dtypes.bfloat16], ids=lambda d: d.name)
@pytest.mark.parametrize("m,n,k", FITS, ids=str)
def test_matmul_on_tensor_cores(m, n, k, dtype):
  _cores_or_skip(dtype)
  a, b = _inputs((m, k), (k, n))
  got, wmmas = _run(lambda x, y: x @ y, a, b, dtype=dtype)
  assert wmmas, "the matmul did not run on tensor cores"
  _close(got, _reference(lambda x, y: x @ y, a, b, dtype=dtype), dtype)

@pytest.mark.parametrize("m,n,k", PADDED, ids=str)
def test_padded_matmul_on_tensor_cores(m, n, k):
  _cores_or_skip(dtypes.half)
  a, b = _inputs((m, k), (k, n))
  got, wmmas = _run(lambda x, y: x @ y, a, b, dtype=dtypes.half)
  assert wmmas, "the matmul did not run on tensor cores"
  _close(got, _reference(lambda x, y: x @ y, a, b, dtype=dtypes.half), dtypes.half)

@pytest.mark.parametrize("m,n,k", REFUSED, ids=str)
def test_shapes_the_cores_cannot_tile_run_without_them(m, n, k):
  _cores_or_skip(dtypes.half)
  a, b = _inputs((m, k), (k, n))
  got, wmmas = _run(lambda x, y: x @ y, a, b, dtype=dtypes.half)
  assert not wmmas
  _close(got, _reference(lambda x, y: x @ y, a, b, dtype=dtypes.half), dtypes.half)

def test_batched_matmul_with_an_epilogue():
  """A batch axis stays an output loop; the bias and the relu after the reduction are carried to every element."""
  _cores_or_skip(dtypes.half)
  a, b, bias = _inputs((3, 32, 32), (3, 32, 16), (16,))
  fn = lambda x, y, z: ((x @ y) + z).relu()
  got, wmmas = _run(fn, a, b, bias, dtype=dtypes.half)
  assert wmmas
  _close(got, _reference(fn, a, b, bias, dtype=dtypes.half), dtypes.half)

def test_float32_result():
  _cores_or_skip(dtypes.half)
  a, b = _inputs((32, 64), (64, 16))
  got, wmmas = _run(lambda x, y: x.matmul(y, dtype=dtypes.float), a, b, dtype=dtypes.half)
  assert wmmas
  ref = (torch.from_numpy(a).half().float() @ torch.from_numpy(b).half().float()).numpy()
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)

def test_half_result_and_accumulator():
  """`matmul(dtype=half)` reduces in half: a tensor core with half accumulators where the renderer has one."""
  renderer = Device[Device.DEFAULT].renderer
  if not any(tc.dtype_in == tc.dtype_out == dtypes.half for tc in renderer.tensor_cores):
    pytest.skip(f"{Device.DEFAULT}'s renderer has no tensor core with half accumulators")
  a, b = _inputs((64, 32), (32, 48), seed=2)
  got, wmmas = _run(lambda x, y: x.matmul(y, dtype=dtypes.half), a, b, dtype=dtypes.half)
  assert wmmas
  _close(got, _reference(lambda x, y: x @ y, a, b, dtype=dtypes.half), dtypes.half)

def test_tc_0_turns_them_off():
  _cores_or_skip(dtypes.half)
  a, b = _inputs((32, 16), (16, 32), seed=1)
  with Context(TC=0): got, wmmas = _run(lambda x, y: x @ y, a, b, dtype=dtypes.half)
  assert not wmmas
  _close(got, _reference(lambda x, y: x @ y, a, b, dtype=dtypes.half), dtypes.half)

def test_conv2d_on_tensor_cores():
  """A convolution is a matmul too: output channels x output pixels, reduced over input channels (and the window)."""
  _cores_or_skip(dtypes.half)
  x, w = _inputs((2, 16, 8, 8), (16, 16, 3, 3))
  fn = lambda x, w: x.conv2d(w, padding=1) if isinstance(x, Tensor) else torch.nn.functional.conv2d(x, w, padding=1)
  got, wmmas = _run(fn, x, w, dtype=dtypes.half)
  assert wmmas
  _close(got, _reference(fn, x, w, dtype=dtypes.half), dtypes.half)
