"""BEAM on CUDA: the tensor-core kernels it tries as whole steps, the tiles it refuses before building them, and its
compile workers building CUDA candidates through NVRTC with no GPU (a worker never opens a device)."""
import pickle
import pytest
from tinyplug import Tensor
from tinyplug.codegen import KernelContext, pipeline_key, run_pipeline
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.helpers import Context, ContextVar
from tinyplug.schedule import create_schedule
from tinyplug.search import runner
from tinyplug.uop.dtype import dtypes
from tinyplug_cuda.renderer import CUDARenderer

def _matmul_kernel(n: int, r) -> Kernel:
  a, b = Tensor.empty(n, n, dtype=dtypes.half, device="CPU"), Tensor.empty(n, n, dtype=dtypes.half, device="CPU")
  (item,), _ = create_schedule([(a @ b).uop])
  return Kernel(run_pipeline(item.ast, r, KernelContext(r), until="opt"), r)

HEURISTIC = [Opt(OptOps.TC, 0, 0), Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 2),
             Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.STAGE, None, 304)]

def test_too_many_accumulators_are_refused_before_building():
  r = CUDARenderer("sm_80")
  k = _matmul_kernel(256, r)
  tc = Opt(OptOps.TC, 0, 0)
  fits = [tc, Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4)]        # 8x4 WMMAs, 4 floats each: 128 registers
  spills = [tc, Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 8)]      # 256
  assert runner.accumulator_registers(runner.apply_all(k, fits)) == 128 and runner.refusal(k, fits) is None
  assert "256 registers" in runner.refusal(k, spills)
  assert "does not split" in runner.refusal(k, [Opt(OptOps.UPCAST, 0, 7)])
  plain = [Opt(OptOps.UPCAST, 0, 16), Opt(OptOps.UPCAST, 1, 16)]           # no tensor cores: 256 float accumulators
  assert runner.accumulator_registers(runner.apply_all(k, plain)) == 256 and runner.refusal(k, plain)

def test_whole_tensor_core_kernels_are_search_starts():
  r = CUDARenderer("sm_80")
  k = _matmul_kernel(512, r)
  tiles = runner.tensor_core_kernels(k)
  assert tiles and all(s[0].op is OptOps.TC and runner.apply_all(k, list(s)) is not None for s in tiles)
  stages = {s[-1].arg for s in tiles if s[-1].op is OptOps.STAGE}
  # sm_80 has cp.async and ldmatrix: the asynchronous STAGE modes too
  assert stages == set(runner.TC_SEARCH["stage"] + runner.TC_SEARCH["async_stage"])
  assert any(s[-1].op is not OptOps.STAGE for s in tiles)
  assert tuple(HEURISTIC) in tiles
  assert not runner.tensor_core_kernels(runner.apply_all(k, HEURISTIC[:1]))   # from the plain kernel only
  with Context(TC=0): assert not runner.tensor_core_kernels(k)

def test_a_worker_builds_cuda_candidates_with_nvrtc_and_no_gpu(nvrtc):
  from tinyplug_cuda.compiler import CUDACompiler
  from tinyplug.search.pool import compile_pool
  r = CUDARenderer("sm_80")
  k = _matmul_kernel(1024, r)
  settings = {name: var.value for name, var in ContextVar.registry.items()}
  job = pickle.dumps((r, CUDACompiler("sm_80"), k.sink, settings, pipeline_key()))
  pool = compile_pool(2)
  staged = pool.submit("cuda-test", job, HEURISTIC)
  # a 256x256 block with a K step of 64 in 5 stages: 320 KB of shared memory (sm_80 has 163 KB)
  too_big = pool.submit("cuda-test", job, HEURISTIC[:3] + [Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.LOCAL, 1, 4),
                                                           Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.STAGE, None, 16 + 96)])
  spec, cubin = staged.result(timeout=300)
  assert cubin[:4] == b"\x7fELF" and list(spec.applied_opts) == HEURISTIC and "__shared__" in spec.src
  with pytest.raises(RuntimeError, match="shared memory"): too_big.result(timeout=300)

def test_beam_finds_a_tensor_core_tile_faster_than_the_heuristics():
  """Given timings where one table tile (64x32 per warp, 4x2 warps, STAGE:11) beats the heuristic's kernel and
  nothing improves on it, BEAM=2 picks it (the strategy with a plain timer function: no device)."""
  from tinyplug.search.strategies import BeamSearch
  r = CUDARenderer("sm_80")
  k = _matmul_kernel(1024, r)
  target = [Opt(OptOps.TC, 0, 0), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 2),
            Opt(OptOps.LOCAL, 1, 4), Opt(OptOps.LOCAL, 0, 2), Opt(OptOps.STAGE, None, 11)]
  timed = []
  def timer(opts):
    timed.append(list(opts))
    if opts == HEURISTIC: return 0.8
    return 0.5 + 0.01 * (len(opts) - len(target)) if opts[:len(target)] == target else 1.0
  assert BeamSearch().search(k, timer, 2, lambda text: None) == target
  assert timed[0] == HEURISTIC and target in timed

@pytest.mark.slow
def test_emulator_parallel_beam_times_tensor_core_kernels_and_matches_numpy(mock_cuda):
  """BEAM=1 with PARALLEL=2 on MOCK+CUDA: the workers build the candidates (tensor-core kernels among them) with the
  emulator's compiler, the parent times them, and the kernel picked computes the product."""
  import numpy as np
  from tinyplug import events
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((64, 32)).astype(np.float16), rng.standard_normal((32, 32)).astype(np.float16)
  ta, tb = Tensor(a, device=mock_cuda).realize(), Tensor(b, device=mock_cuda).realize()
  searches, kernels = [], []
  events.subscribe("search", searches.append)
  events.subscribe("kernel", kernels.append)
  try:
    with Context(BEAM=1, PARALLEL=2, IGNORE_BEAM_CACHE=1): got = (ta @ tb).numpy()
  finally:
    events.unsubscribe("search", searches.append)
    events.unsubscribe("kernel", kernels.append)
  assert len(searches) == 1 and searches[0]["built_in_workers"] > 0
  assert any(len(e["opts"]) > 2 and e["opts"][0].op is OptOps.TC for e in kernels)   # whole tensor-core kernels timed
  np.testing.assert_allclose(got.astype(np.float32), a.astype(np.float32) @ b.astype(np.float32), rtol=2e-2, atol=0.1)
