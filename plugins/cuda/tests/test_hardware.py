"""The cuda plugin on a real NVIDIA GPU: skipped where the driver sees none (CI), run wherever one is present.

Values are checked against numpy; the rest of the op suite runs on DEV=CUDA through `tinyplug.testing`
(`TINYPLUG_TEST_DEVICES=CUDA pytest --pyargs tinyplug.testing`, see plugins/cuda/README.md)."""
from __future__ import annotations
import os, subprocess, sys
import numpy as np
import pytest
from tinyplug_cuda.driver import probe_driver

pytestmark = pytest.mark.skipif(not probe_driver()[0], reason=f"no NVIDIA GPU: {probe_driver()[1][:80]}")

@pytest.fixture
def cuda():
  from tinyplug.device import Device
  dev = Device["CUDA"]
  with Device.use("CUDA"): yield dev

def test_opens_the_gpu_for_its_own_architecture(cuda):
  major, minor = cuda.info["cc"]
  assert cuda.arch == f"sm_{major}{minor}" and cuda.info["sms"] > 0 and cuda.info["memory"] > 1 << 30
  assert cuda.info["name"] in cuda.describe() and cuda.arch in cuda.describe()

def test_copies_larger_than_the_staging_buffers_round_trip(cuda):
  from tinyplug_cuda.runtime import STAGING_BYTES
  a = np.random.default_rng(1).integers(0, 255, size=2 * STAGING_BYTES + 12345, dtype=np.uint8)
  h = cuda.allocator.alloc(a.nbytes)
  cuda.allocator.copyin(h, memoryview(a))
  b = np.empty_like(a)
  cuda.allocator.copyout(memoryview(b), h)
  cuda.allocator.free(h, a.nbytes)
  assert np.array_equal(a, b)

def test_elementwise_reduce_matmul_and_half_match_numpy(cuda):
  from tinyplug import Tensor, dtypes
  rng = np.random.default_rng(2)
  x, y = rng.standard_normal((300, 257), dtype=np.float32), rng.standard_normal((257, 129), dtype=np.float32)
  np.testing.assert_allclose((Tensor(x).exp() * 0.5 + 1).numpy(), np.exp(x) * 0.5 + 1, rtol=1e-5)
  np.testing.assert_allclose(Tensor(x).sum(axis=1).numpy(), x.sum(axis=1), rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose((Tensor(x) @ Tensor(y)).numpy(), x @ y, rtol=1e-4, atol=1e-3)
  h = Tensor(x, dtype=dtypes.half)
  np.testing.assert_allclose((h * 2).float().numpy(), x.astype(np.float16).astype(np.float32) * 2, rtol=1e-3)
  big = rng.standard_normal(1 << 24, dtype=np.float32)
  np.testing.assert_allclose(Tensor(big).sum().item(), big.astype(np.float64).sum(), rtol=1e-4, atol=1e-2)

def test_ptx_renderer_matches_cuda_c():
  from tinyplug import Tensor
  x = np.random.default_rng(3).standard_normal((64, 100), dtype=np.float32)
  want = (np.log2(np.abs(x) + 1) * x).max(axis=1)
  for dev in ("CUDA", "CUDA:PTX"):
    np.testing.assert_allclose((Tensor(x, device=dev).abs().add(1).log2() * Tensor(x, device=dev)).max(axis=1).numpy(),
                               want, rtol=1e-5, err_msg=dev)

def test_training_step_and_jit_replay(cuda):
  from tinyplug import Tensor, TinyJit, nn
  Tensor.manual_seed(0)
  model = nn.Linear(32, 4)
  opt = nn.optim.SGD(nn.state.get_parameters(model), lr=0.1)
  x, y = Tensor.randn(64, 32), Tensor.randint(64, high=4)
  @TinyJit
  def step():
    with Tensor.train():
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y).backward()
      opt.step()
    return loss.realize()
  losses = [step().item() for _ in range(6)]
  assert all(np.isfinite(losses)) and losses[-1] < losses[0]

def test_debug_2_times_kernels_with_cuda_events():
  code = "from tinyplug import Tensor\n(Tensor.ones(1 << 20, device='CUDA') * 3).realize().numpy()\n"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "DEBUG": "2"})
  assert out.returncode == 0, out.stderr
  assert any("E_" in line and "us" in line for line in out.stdout.splitlines()), out.stdout

def test_out_of_memory_is_a_clear_error_and_the_device_stays_usable(cuda):
  from tinyplug_cuda.driver import CUDAError
  with pytest.raises(CUDAError, match="cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY"):
    cuda.allocator.alloc(cuda.info["memory"] * 4)
  from tinyplug import Tensor
  assert (Tensor([1.0, 2.0]) + 1).tolist() == [2.0, 3.0]

def test_a_kernel_that_faults_names_the_kernel():
  # an illegal address poisons the context: run it in a subprocess
  code = ("from tinyplug.device import Device, ProgramSpec\n"
          "dev = Device['CUDA']\n"
          "src = 'extern \"C\" __global__ void bad(float* p) { p[(1ull << 40) + threadIdx.x] = 1.0f; }'\n"
          "prg = dev.make_program(ProgramSpec(name='bad', uops=(), src=src), dev.compiler.compile_cached(src))\n"
          "import ctypes\n"
          "try:\n"
          "  prg(ctypes.c_uint64(0), global_size=(1, 1, 1), local_size=(32, 1, 1), wait=True)\n"
          "except RuntimeError as e: print('ERR', e)\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
  assert "ERR" in out.stdout and "CUDA_ERROR_ILLEGAL_ADDRESS" in out.stdout and "kernel bad" in out.stdout, out.stdout + out.stderr

# ---------------- TinyJit through CUDA graphs (graph.py) ----------------

def _numpy_sgd(w, b, batches, lr):
  """Linear + mean softmax cross-entropy + SGD, in float64 numpy: the losses and the final weights."""
  w, b, losses = w.astype(np.float64), b.astype(np.float64), []
  for x, y in batches:
    logits = x @ w.T + b
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    losses.append(float(-np.log(p[np.arange(len(y)), y]).mean()))
    g = p.copy()
    g[np.arange(len(y)), y] -= 1
    g /= len(y)
    w, b = w - lr * (g.T @ x), b - lr * g.sum(axis=0)
  return losses, w, b

def jit_training(device: str, graph: bool, steps: int = 6):
  """A jitted SGD step on a new batch each call (the argument buffers change between replays), with JIT_GRAPH on or
  off: (losses, weight, bias, numpy's losses/weight/bias, whether a device graph replayed the kernels)."""
  from tinyplug import Context, Tensor, TinyJit, nn
  from tinyplug.engine.jit import _Segment
  rng = np.random.default_rng(7)
  batches = [(rng.standard_normal((64, 32)).astype(np.float32), rng.integers(0, 4, 64).astype(np.int32))
             for _ in range(steps)]
  with Context(JIT_GRAPH=int(graph)):
    Tensor.manual_seed(0)
    model = nn.Linear(32, 4)
    for p in (model.weight, model.bias): p.replace(p.to(device)).realize()
    w0, b0 = model.weight.numpy(), model.bias.numpy()
    opt = nn.optim.SGD([model.weight, model.bias], lr=0.5)
    @TinyJit
    def step(x, y):
      with Tensor.train():
        opt.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y).backward().realize()   # before the step changes the weights
        opt.step()
      return loss
    losses = [step(Tensor(x, device=device), Tensor(y, device=device)).item() for x, y in batches]
    used = any(type(s) is _Segment and s.graph is not None for s in (step.captured._plan or []))
    return losses, model.weight.numpy(), model.bias.numpy(), _numpy_sgd(w0, b0, batches, 0.5), used

def test_jit_training_with_cuda_graphs_matches_without_and_numpy(cuda):
  on, off = jit_training("CUDA", True), jit_training("CUDA", False)
  assert on[4] and not off[4], "JIT_GRAPH=1 replays through a CUDA graph, JIT_GRAPH=0 does not"
  for run in (on, off):
    np.testing.assert_allclose(run[0], run[3][0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run[1], run[3][1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(run[2], run[3][2], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(on[0], off[0], rtol=1e-6)
  np.testing.assert_allclose(on[1], off[1], rtol=1e-6, atol=1e-7)

def test_cuda_graph_replay_with_bound_variables(cuda):
  from tinyplug import Tensor, TinyJit, Variable
  from tinyplug.engine.jit import _Segment
  x = np.random.default_rng(8).standard_normal((3, 10)).astype(np.float32)
  jf = TinyJit(lambda a: ((a + 1).contiguous() * 2).realize())
  for n in (2, 5, 3, 7, 1, 10):
    out = jf(Tensor(x)[:, :Variable("i", 1, 10).bind(n)])
    np.testing.assert_allclose(out[:3, :n].numpy(), (x[:, :n] + 1) * 2, rtol=1e-6)
  assert any(type(s) is _Segment and s.graph is not None for s in jf.captured._plan)

def test_cuda_graph_debug_2_times_the_graph():
  code = ("from tinyplug import Tensor, TinyJit\n"
          "f = TinyJit(lambda a: ((a + 1).contiguous() * 2).realize())\n"
          "for i in range(4): f(Tensor.full((1 << 20,), float(i), device='CUDA').realize()).numpy()\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "DEBUG": "2"})
  assert out.returncode == 0, out.stderr
  lines = [l for l in out.stdout.splitlines() if "graph 2 kernels" in l]
  assert len(lines) == 2 and all(" tm " in l and "tm      0.00us" not in l for l in lines), out.stdout

def test_from_blob_uses_another_librarys_device_memory_in_place(cuda):
  torch = pytest.importorskip("torch")
  if not torch.cuda.is_available(): pytest.skip("torch here has no CUDA")
  from tinyplug import Tensor, dtypes
  owner = torch.arange(6, dtype=torch.float32, device="cuda")   # the same primary context as the driver API's
  torch.cuda.synchronize()
  t = Tensor.from_blob(owner.data_ptr(), (2, 3), dtype=dtypes.float32, device="CUDA")
  np.testing.assert_equal((t * 2).numpy(), np.arange(6).reshape(2, 3) * 2)
  t.assign(t + 10).realize()
  cuda.synchronize()
  np.testing.assert_equal(owner.cpu().numpy(), np.arange(6) + 10)
