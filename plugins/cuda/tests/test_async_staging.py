"""STAGE's asynchronous mode (arg bit 16; tinyplug/codegen/tc_async.py): A and B tiles row-major in 2-5 stages of
swizzled shared memory, filled by cp.async, read by ldmatrix. The emulator (its prelude lands each cp.async only at
the wait that covers it, and gathers ldmatrix rows from the other lanes' addresses) matches numpy for each stage count,
with and without the swizzle, transposed operands, every core; NVRTC compiles the 4096 tile for sm_80 and sm_90 with
global memory read only by cp.async; what the mode cannot stage is refused with the reason."""
from __future__ import annotations
import re
import numpy as np
import pytest
from tinyplug import Tensor, dtypes
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tinyplug.device import Device
from tinyplug.schedule import create_schedule
from tinyplug.testing.kernels import run_kernel
from tinyplug_cuda.renderer import CUDARenderer

RNG = np.random.default_rng(1)
TC0 = Opt(OptOps.TC, 0, 0)
def STAGE(arg): return Opt(OptOps.STAGE, None, arg)
TILE = [TC0, Opt(OptOps.UPCAST, 1, 2), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.LOCAL, 1, 2),
        Opt(OptOps.LOCAL, 0, 2)]   # 32x16 per warp, 2x2 warps, K step 32
BIG = [TC0, Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.LOCAL, 1, 2),
       Opt(OptOps.LOCAL, 0, 2)]    # 64x64 per warp, 128x128 block, K step 32

def _run(out: Tensor, opts) -> tuple[np.ndarray, str]:
  return run_kernel(out, "MOCK+CUDA", opts, EMU_ORDER="check")   # every work-item order the emulator has

def _matmul(m, n, k, trans_a=False, trans_b=False, dtype=dtypes.half):
  a = RNG.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
  b = RNG.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
  ta, tb = Tensor(a).cast(dtype).realize(), Tensor(b).cast(dtype).realize()
  ta, tb = ta.T if trans_a else ta, tb.T if trans_b else tb
  return ta.matmul(tb, dtype=dtypes.float), ta.float().numpy() @ tb.float().numpy()

KERNELS = [
  ((128, 128, 128), TILE + [STAGE(16)]),                 # 2 stages, 4 K steps
  ((128, 128, 256), TILE + [STAGE(16 + 32)]),            # 3 stages
  ((64, 64, 256), TILE + [STAGE(16 + 64)]),              # 4 stages
  ((64, 64, 64), TILE + [STAGE(16 + 96)]),               # 5 stages, more than the 2 K steps
  ((128, 128, 128), TILE + [STAGE(16 + 32 + 128)]),      # unswizzled rows
  ((256, 256, 96), BIG + [STAGE(48)]),                   # the 4096 tile, 3 K steps
  ((128, 128, 128), [TC0, Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 4),
                     Opt(OptOps.LOCAL, 1, 2), Opt(OptOps.LOCAL, 0, 2), STAGE(16)]),   # K step 64: 8-chunk rows
  ((32, 32, 32), [TC0, Opt(OptOps.LOCAL, 1, 4), STAGE(16)]),   # fewer A chunks than threads: the copy is gated
  ((16, 8, 16), [TC0, STAGE(48)]),                       # one warp, one K step
  # rows of 3 or 6 chunks (no swizzle: an XOR would leave the row); the other assignment of A and B to the core
  ((64, 48, 64), [TC0, Opt(OptOps.UPCAST, 1, 3), Opt(OptOps.LOCAL, 0, 2), STAGE(48)]),
  ((96, 32, 96), [TC0, Opt(OptOps.UPCAST, 0, 3), Opt(OptOps.UNROLL, 0, 3), Opt(OptOps.LOCAL, 1, 2), STAGE(80)]),
  ((64, 64, 128), [Opt(OptOps.TC, 1, 0), Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.LOCAL, 1, 2), STAGE(48)]),
  ((512, 256, 64), TILE + [STAGE(48 + 256)]),            # blocks in grouped order: 8 block rows a group
  ((128, 512, 64), TILE + [STAGE(16 + 256)]),            # 2 block rows: a group of 2
  ((128, 128, 128), TILE + [STAGE(48 + 3 * 512)]),       # 3 blocks per multiprocessor asked of the compiler
]

@pytest.mark.parametrize("shape,opts", KERNELS, ids=str)
def test_emulator_runs_async_staging(mock_cuda, shape, opts):
  out, ref = _matmul(*shape)
  got, src = _run(out, opts)
  assert "tp_cp_async16(" in src and "tp_ldmatrix<half8, 4>(" in src and "tp_ldmatrix_trans<half" in src
  assert not re.search(r"data[12]\[", src) and "(*((half8*)(data" not in src   # global memory: cp.async only
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("trans_a,trans_b,a_call,b_call", [
  (False, False, "tp_ldmatrix<half8, 4>(stage0", "tp_ldmatrix_trans<half8, 4>(stage1"),   # row-major A and B
  (True, False, "tp_ldmatrix_trans<half8, 4>(stage0", "tp_ldmatrix_trans<half8, 4>(stage1"),   # A stored K x M
  (False, True, "tp_ldmatrix<half8, 4>(stage0", "tp_ldmatrix<half8, 4>(stage1"),               # B stored N x K
  (True, True, "tp_ldmatrix_trans<half8, 4>(stage0", "tp_ldmatrix<half8, 4>(stage1")])
def test_transposed_operands_pick_the_ldmatrix_variant(mock_cuda, trans_a, trans_b, a_call, b_call):
  """ldmatrix or .trans by where the fragments' element pairs lie; B's 2-register fragments two at a time (x4)."""
  out, ref = _matmul(64, 64, 128, trans_a, trans_b)
  got, src = _run(out, TILE + [STAGE(48)])
  assert a_call in src and b_call in src and ", 2>(" not in src
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("core,dtype,acc", [(1, dtypes.bfloat16, dtypes.float), (2, dtypes.half, dtypes.half)])
def test_other_cores(mock_cuda, nvrtc, core, dtype, acc):
  a, b = RNG.standard_normal((64, 96)).astype(np.float32), RNG.standard_normal((96, 64)).astype(np.float32)
  ta, tb = Tensor(a).cast(dtype).realize(), Tensor(b).cast(dtype).realize()
  got, src = _run(ta.matmul(tb, dtype=acc), [Opt(OptOps.TC, 0, core)] + TILE[1:] + [STAGE(48)])
  assert "tp_ldmatrix" in src and "tp_cp_async16(" in src
  tol = dict(rtol=1e-2, atol=5e-2) if acc == dtypes.half else dict(rtol=1e-4, atol=1e-3)
  np.testing.assert_allclose(got.astype(np.float32), ta.float().numpy() @ tb.float().numpy(), **tol)
  assert nvrtc.compile_cuda(src, "sm_80")[:4] == b"\x7fELF"

def test_the_emulator_catches_a_missing_wait(mock_cuda):
  """The same kernel with its wait loosened by one group reads tiles whose copies have not landed: wrong values."""
  out, ref = _matmul(128, 128, 256)
  (item,), _ = create_schedule([out.uop])
  dev = Device["MOCK+CUDA"]
  spec = get_program(item.ast, dev.renderer, opts=TILE + [STAGE(48)])
  assert spec.src.count("tp_cp_async_wait<1>();") == 1
  bufs = [b.ensure_allocated() for b in item.bufs]
  for src, right in ((spec.src, True), (spec.src.replace("tp_cp_async_wait<1>", "tp_cp_async_wait<2>"), False)):
    prg = dev.make_program(spec, dev.compiler.compile_cached(src))
    prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
    assert np.allclose(bufs[0].numpy().reshape(128, 128), ref, rtol=1e-4, atol=1e-3) == right

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_4096_tile_compiles(nvrtc, render, tensor, arch):
  """128x128x32 in 3 stages (48 KB): per thread 8 cp.async a K step (3 x 8 in all: two steps before the loop), 8
  ldmatrix.x4 (A) and 8 .x4.trans (B, two fragments each) for 64 mma.sync; no other global or shared access, no local
  memory."""
  a, b = tensor(4096, 4096, dtype=dtypes.half), tensor(4096, 4096, dtype=dtypes.half)
  (spec,) = render(a.matmul(b, dtype=dtypes.float), renderer=CUDARenderer(arch), opts=BIG + [STAGE(48)])
  assert "half stage0[12288];" in spec.src and "half stage1[12288];" in spec.src
  ptx = nvrtc.compile_cuda(spec.src, arch, ptx=True).decode()
  count = lambda pattern: len(re.findall(pattern, ptx))
  assert count(r"cp\.async\.cg\.shared\.global") == 24 and count(r"cp\.async\.wait_group 1;") == 1
  assert count(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.shared") == 8
  assert count(r"ldmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared") == 8 and count(r"mma\.sync") == 64
  assert count(r"\bld\.global") == 0 and count(r"\b(ld|st)\.shared") == 0 and count(r"\b(ld|st)\.local") == 0
  assert nvrtc.compile_cuda(spec.src, arch)[:4] == b"\x7fELF"

WIDE = [TC0, Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 2), Opt(OptOps.LOCAL, 1, 4),
        Opt(OptOps.LOCAL, 0, 2)]   # 64x64 per warp, 2x4 warps: a 128x256 block

@pytest.mark.parametrize("opts,shared", [(BIG + [STAGE(80)], 65536), (WIDE + [STAGE(48)], 73728)], ids=["4 stages", "wide"])
def test_more_than_48_kb_is_dynamic_shared_memory(mock_cuda, nvrtc, render, tensor, opts, shared):
  """Past 48 KB the tiles are carved out of one `extern __shared__` array (the runtime raises the kernel's limit and
  passes the size at launch: test_runtime_fake_driver); the emulator runs it, NVRTC compiles it for sm_80 and sm_90."""
  from tinyplug_cuda.renderer import dynamic_shared_bytes
  a, b = tensor(4096, 4096, dtype=dtypes.half), tensor(4096, 4096, dtype=dtypes.half)
  for arch in ("sm_80", "sm_90"):
    (spec,) = render(a.matmul(b, dtype=dtypes.float), renderer=CUDARenderer(arch), opts=opts)
    assert dynamic_shared_bytes(spec.uops) == shared and "extern __shared__ __align__(16) unsigned char tp_smem[];" in spec.src
    assert f"half* stage1 = (half*)(tp_smem+{shared // 2 if opts[4].arg == 2 else shared // 3});" in spec.src
    assert nvrtc.compile_cuda(spec.src, arch)[:4] == b"\x7fELF"
  out, ref = _matmul(256, 256, 128)
  got, src = _run(out, opts)
  assert "tp_smem" in src
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)

@pytest.mark.parametrize("blocks", [0, 2, 3])
def test_blocks_per_multiprocessor(nvrtc, render, tensor, blocks):
  """STAGE bits 512/1024 put a minimum of work-groups per multiprocessor into __launch_bounds__; ptxas fits the 4096
  tile (64x64 a warp) into fewer registers for it."""
  a, b = tensor(4096, 4096, dtype=dtypes.half), tensor(4096, 4096, dtype=dtypes.half)
  (spec,) = render(a.matmul(b, dtype=dtypes.float), renderer=CUDARenderer("sm_90"), opts=BIG + [STAGE(48 + 512 * blocks)])
  assert f"__launch_bounds__(128{f', {blocks}' if blocks else ''})" in spec.src
  assert nvrtc.compile_cuda(spec.src, "sm_90")[:4] == b"\x7fELF"

def _kernel(out, renderer, opts):
  from tinyplug.codegen import KernelContext, run_pipeline
  (item,), _ = create_schedule([out.uop])
  k = Kernel(run_pipeline(item.ast, renderer, KernelContext(renderer), until="opt"), renderer)
  for o in opts: k.apply_opt(o)
  return k.finished_sink()

def test_what_async_staging_refuses(tensor):
  h, r = dtypes.half, CUDARenderer("sm_80")
  mm = tensor(64, 64, dtype=h) @ tensor(64, 64, dtype=h)
  with pytest.raises(KernelOptError, match="arg is 0"): _kernel(mm, r, [TC0, STAGE(4096)])
  with pytest.raises(KernelOptError, match="bits 2, 4 and 8"): _kernel(mm, r, [TC0, STAGE(16 + 2)])
  with pytest.raises(KernelOptError, match="belong to bit 16"): _kernel(mm, r, [TC0, STAGE(32 + 1)])
  with pytest.raises(KernelOptError, match="belong to bit 16"): _kernel(mm, r, [TC0, STAGE(256 + 15)])
  # PADTO's gates: cp.async copies whole chunks
  with pytest.raises(KernelOptError, match="through a gate"):
    _kernel(tensor(48, 24, dtype=h) @ tensor(24, 32, dtype=h), r, [Opt(OptOps.PADTO, 2, 32), TC0, STAGE(16)])
  with pytest.raises(KernelOptError, match="no group of 2, 4 or 8 block rows divides 1"):
    _kernel(tensor(64, 64, dtype=h) @ tensor(64, 256, dtype=h), r, TILE + [STAGE(16 + 256)])
  # A's rows 52 halves (104 bytes) apart: not whole 16-byte chunks
  with pytest.raises(KernelOptError, match="not whole, aligned 16-byte chunks"):
    _kernel(tensor(64, 52, dtype=h)[:, :48] @ tensor(48, 64, dtype=h), r, TILE[:1] + [STAGE(16)])
  with pytest.raises(KernelOptError, match=r"5 stages need 30720 bytes of shared memory; the device has 16384"):
    _kernel(mm, CUDARenderer("sm_80", shared_max=16384), TILE + [STAGE(16 + 96)])

def test_renderers_without_async_copies_refuse_it(tensor):
  """Only a renderer that declares `async_copy` gets the mode (the PTX renderer has no tensor cores at all)."""
  class NoAsync(CUDARenderer):
    async_copy = False
  mm = tensor(64, 64, dtype=dtypes.half) @ tensor(64, 64, dtype=dtypes.half)
  with pytest.raises(KernelOptError, match="no asynchronous copies"): _kernel(mm, NoAsync("sm_80"), TILE + [STAGE(16)])
  _kernel(mm, NoAsync("sm_80"), TILE + [STAGE(15)])   # the other modes stay

@pytest.mark.parametrize("shape,opts", KERNELS + [((512, 512, 512), BIG + [STAGE(80)]), ((512, 512, 512), WIDE + [STAGE(48)])],
                         ids=str)
def test_gpu_runs_async_staging(shape, opts):
  """On a real GPU (skipped without one): cp.async, the waits, ldmatrix and the swizzle agree with numpy."""
  from tinyplug_cuda.driver import probe_driver
  if not probe_driver()[0]: pytest.skip(f"no NVIDIA GPU: {probe_driver()[1][:80]}")
  if not Device["CUDA"].renderer.async_copy: pytest.skip(f"{Device['CUDA'].renderer.arch} has no cp.async/ldmatrix")
  m, n, k = shape
  a, b = RNG.standard_normal((m, k)).astype(np.float16), RNG.standard_normal((k, n)).astype(np.float16)
  out = Tensor(a, device="CUDA").realize().matmul(Tensor(b, device="CUDA").realize(), dtype=dtypes.float)
  got, src = run_kernel(out, "CUDA", opts)
  assert "tp_ldmatrix" in src
  np.testing.assert_allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-2)

def test_beam_offers_the_async_modes(tensor):
  """After TC, BEAM's candidates include STAGE in 2, 3 and 4 stages where the renderer has async copies, else not."""
  from tinyplug.codegen import KernelContext, run_pipeline
  from tinyplug.search.runner import apply_all, candidate_actions
  class NoAsync(CUDARenderer):
    async_copy = False
  mm = tensor(128, 128, dtype=dtypes.half) @ tensor(128, 128, dtype=dtypes.half)
  (item,), _ = create_schedule([mm.uop])
  for r, expected in ((CUDARenderer("sm_80"), True), (NoAsync("sm_80"), False)):
    k = apply_all(Kernel(run_pipeline(item.ast, r, KernelContext(r), until="opt"), r), [TC0])
    stages = {a.arg for a in candidate_actions(k) if a.op is OptOps.STAGE}
    assert ({16, 48, 80} <= stages) == expected and {None, 1, 11, 15} <= stages
