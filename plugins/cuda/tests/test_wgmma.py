"""Hopper's warpgroup MMA (tinyplug_cuda/wgmma.py): the generated kernels match numpy on the emulator, whose prelude
decodes each wgmma's descriptors as the PTX ISA defines them (so a wrong swizzle, stride or major-ness gives wrong
values or a reported race), runs each wgmma only at the wait_group that covers it and reports a copy into a tile a
pending wgmma still reads; NVRTC (ptxas inside it) compiles every variant for sm_90a; the targets without wgmma are
refused with the reason."""
from __future__ import annotations
import dataclasses
import numpy as np
import pytest
from tinyplug.device import Buffer
from tinyplug.uop.dtype import dtypes
from tinyplug_cuda.wgmma import (SWIZZLE_64B, WgmmaError, arch_for, check_target, descriptor, matmul_kernel,
                                 program)

RNG = np.random.default_rng(16)

def _inputs(m, n, k, dtype):
  a = RNG.standard_normal((m, k)).astype(np.float32)
  b = RNG.standard_normal((k, n)).astype(np.float32)
  if dtype == dtypes.bfloat16:   # inputs exactly representable in bf16: the reference is exact in float
    a, b = ((x.view(np.uint32) & 0xFFFF0000).view(np.float32) for x in (a, b))
    raw = lambda x: (x.view(np.uint32) >> 16).astype(np.uint16)
  else:
    a, b = a.astype(np.float16).astype(np.float32), b.astype(np.float16).astype(np.float32)
    raw = lambda x: x.astype(np.float16)
  return a, b, raw

def _run(kernel, m, n, k, dtype=dtypes.float16, out=dtypes.float32, dev="MOCK+CUDA", **settings):
  from tinyplug.helpers import Context
  a, b, raw = _inputs(m, n, k, dtype)
  A, B = Buffer(dev, m * k, dtype).copyin(raw(a)), Buffer(dev, k * n, dtype).copyin(raw(b))
  C = Buffer(dev, m * n, out)
  with Context(**settings): program(kernel, dev)(C, A, B)
  got = C.numpy().reshape(m, n)
  if out == dtypes.bfloat16: got = (got.astype(np.uint32) << 16).view(np.float32)
  return got.astype(np.float32), a @ b

SHAPES = [
  ((128, 128, 128), {}),                                           # 2 warpgroups, 4 stages, 2 K steps
  ((256, 128, 192), dict(stages=3, inflight=1)),                   # 2 blocks in grouped order, one group in flight
  ((128, 256, 256), dict(bn=256, stages=4)),                       # m64n256k16: 128 accumulators a thread
  ((64, 128, 320), dict(bm=64, bn=64, stages=2)),                  # one warpgroup, 2 stages, 2 column blocks
  ((256, 256, 128), dict(bm=256, bn=64, stages=3, inflight=1)),   # 4 warpgroups, 512 threads
]

@pytest.mark.parametrize("shape,kw", SHAPES, ids=str)
def test_emulator_matches_numpy(mock_cuda, shape, kw):
  got, ref = _run(matmul_kernel(*shape, **kw), *shape, EMU_ORDER="check")   # the same in every work-item order
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)

@pytest.mark.parametrize("dtype,out", [(dtypes.bfloat16, dtypes.float32), (dtypes.float16, dtypes.float16),
                                       (dtypes.bfloat16, dtypes.bfloat16)])
def test_other_dtypes(mock_cuda, dtype, out):
  kernel = matmul_kernel(128, 128, 192, dtype, out, stages=3)
  got, ref = _run(kernel, 128, 128, 192, dtype, out)
  tol = 1e-5 if out == dtypes.float32 else 2 ** -7 if out == dtypes.bfloat16 else 2 ** -10
  np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())

# text edits of a correct kernel that break it: each must give wrong values or a reported race on the emulator
BROKEN = {
  "A's swizzle 64B": ("kk * 32, 16, 1024, 1)", "kk * 32, 16, 1024, 2)"),
  "A unswizzled": ("kk * 32, 16, 1024, 1)", "kk * 32, 16, 1024, 0)"),
  "A's SBO 2048": ("kk * 32, 16, 1024, 1)", "kk * 32, 16, 2048, 1)"),
  "B's LBO 4096": ("kk * 2048, 8192, 1024, 1)", "kk * 2048, 4096, 1024, 1)"),
  "B's SBO 512": ("kk * 2048, 8192, 1024, 1)", "kk * 2048, 8192, 512, 1)"),
  "B's k16 step 1024": ("kk * 2048, 8192", "kk * 1024, 8192"),
  "B read K-major": (", 0, 1>(acc", ", 0, 0>(acc"),
  "A read M-major": (", 0, 1>(acc", ", 1, 1>(acc"),
  "copies unswizzled": ("((ch ^ (r & 7)) << 4)", "(ch << 4)"),
  "no final wait": ("  tp_wgmma_wait<0>();\n", "\n"),
  "a stage refilled while its wgmma may run": ("tp_wgmma_wait<1>();", "tp_wgmma_wait<2>();"),
}

@pytest.mark.parametrize("what", list(BROKEN))
def test_wrong_descriptors_and_waits_fail(mock_cuda, what):
  from tinyplug_emulator.native import EmulatorError
  kernel = matmul_kernel(128, 128, 384, stages=3, inflight=1)
  got, ref = _run(kernel, 128, 128, 384)
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)   # the kernel as generated is right
  old, new = BROKEN[what]
  assert old in kernel.src
  broken = dataclasses.replace(kernel, src=kernel.src.replace(old, new), name=kernel.name)
  try: got, ref = _run(broken, 128, 128, 384)
  except EmulatorError as e:
    assert e.kind == "kernel" and "race" in str(e)
    return
  assert not np.allclose(got, ref, rtol=1e-3, atol=1e-2), f"{what}: the emulator did not notice"

def test_emulator_reports_the_race_by_name(mock_cuda):
  from tinyplug_emulator.native import EmulatorError
  kernel = matmul_kernel(128, 128, 384, stages=3, inflight=1)
  broken = dataclasses.replace(kernel, src=kernel.src.replace("tp_wgmma_wait<1>();", "tp_wgmma_wait<2>();"))
  with pytest.raises(EmulatorError, match="overwrites operand A of a wgmma .* not yet waited for"):
    _run(broken, 128, 128, 384)

VARIANTS = [dict(), dict(bn=256, stages=4), dict(bn=256, stages=3, inflight=1), dict(bm=64, bn=64, stages=2),
            dict(bm=256, bn=128, stages=3), dict(stages=3, inflight=1, grouped=False),
            dict(dtype=dtypes.bfloat16), dict(out=dtypes.float16), dict(dtype=dtypes.bfloat16, out=dtypes.bfloat16)]

@pytest.mark.parametrize("kw", VARIANTS, ids=str)
def test_nvrtc_compiles_for_sm90a(nvrtc, kw):
  kernel = matmul_kernel(4096, 4096, 4096, **kw)
  assert "wgmma.mma_async.sync.aligned.m64n" in kernel.src and arch_for(kernel.src, "sm_90") == "sm_90a"
  assert nvrtc.compile_cuda(kernel.src, "sm_90a")[:4] == b"\x7fELF"
  with pytest.raises(nvrtc.NVRTCError, match="sm_90a|wgmma"):   # plain sm_90 has no wgmma: ptxas refuses it
    nvrtc.compile_cuda(kernel.src, "sm_90")

def test_compiler_picks_sm90a_only_for_wgmma(nvrtc):
  from tinyplug_cuda.compiler import CUDACompiler
  comp = CUDACompiler("sm_90")
  kernel = matmul_kernel(128, 128, 128)
  plain = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] += 1.0f; }'
  assert comp.arch_for(kernel.src) == "sm_90a" and comp.arch_for(plain) == "sm_90"
  assert CUDACompiler("sm_80").arch_for(kernel.src) == "sm_80"   # no sm_80a: the generator refuses sm_80 anyway
  assert comp.compile(kernel.src)[:4] == b"\x7fELF" and comp.compile(plain)[:4] == b"\x7fELF"
  assert comp.key(kernel.src) != CUDACompiler("sm_90a").key(plain)

@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_89", "sm_100"])
def test_refused_without_sm90(arch):
  with pytest.raises(WgmmaError, match=f"sm_90 GPU.*{arch} has none"): matmul_kernel(128, 128, 128, arch=arch)

def test_refused_on_the_ptx_renderer():
  with pytest.raises(WgmmaError, match="CUDA C renderer only; the PTX renderer"): check_target("sm_90", "PTX")
  check_target("sm_90a")   # sm_90a is sm_90

@pytest.mark.parametrize("args,kw,why", [
  ((100, 128, 128), {}, "M = 100 is not a multiple of the block's 128"),
  ((128, 120, 128), {}, "N = 120"),
  ((128, 128, 96), {}, "K = 96 is not a multiple of the block's 64"),
  ((128, 128, 128), dict(bn=96), "multiple of 64 up to 256"),
  ((128, 128, 128), dict(bm=96), "64 per warpgroup"),
  ((128, 128, 128), dict(stages=2, inflight=1), "no step to copy ahead"),
  ((128, 128, 128), dict(dtype=dtypes.float32), "float16 or bfloat16"),
  ((128, 128, 128), dict(out=dtypes.int32), "the result is float32 or half, not int"),
  ((256, 256, 256), dict(bm=256, bn=256, stages=4), "need 263168 bytes of shared memory"),
])
def test_refused_shapes(args, kw, why):
  with pytest.raises(WgmmaError, match=why): matmul_kernel(*args, **kw)

def test_descriptor_encoding():
  # a known encoding: MN-major, 64B swizzle, bf16: LBO 256 elements (encoded 32), SBO 512 elements (encoded 64)
  d = descriptor(0x400, 256 * 2, 512 * 2, SWIZZLE_64B)
  assert d == (0x400 >> 4) | 32 << 16 | 64 << 32 | 2 << 62
  assert descriptor(0x40000 + 16, 0, 0, 0) == 1   # addresses are taken modulo 256 KB, in 16-byte units

def _sm90_or_skip():
  from tinyplug_cuda.driver import probe_driver
  if not probe_driver()[0]: pytest.skip(f"no NVIDIA GPU: {probe_driver()[1][:80]}")
  from tinyplug.device import Device
  if Device["CUDA"].arch != "sm_90": pytest.skip(f"wgmma needs sm_90, the GPU is {Device['CUDA'].arch}")

@pytest.mark.parametrize("shape,kw", SHAPES + [((4096, 4096, 4096), dict(bn=256, stages=4)),
                                              ((1024, 512, 2048), dict(stages=3, inflight=1, out=dtypes.float16))], ids=str)
def test_gpu_matches_numpy(shape, kw):
  """On an H100/H200 (skipped elsewhere): the kernels the emulator checked give the same values on the hardware."""
  _sm90_or_skip()
  out = kw.get("out", dtypes.float32)
  got, ref = _run(matmul_kernel(*shape, **kw), *shape, out=out, dev="CUDA")
  tol = 1e-5 if out == dtypes.float32 else 2 ** -10
  np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max() + 1e-4 * np.sqrt(shape[2]))

@pytest.mark.slow
def test_gpu_check_script_dry_run(mock_cuda):
  """The device session's one call, run here on the emulator (numpy references, no timing claims): it must not break
  before it reaches a GPU."""
  import os, subprocess, sys
  script = os.path.join(os.path.dirname(__file__), "..", "gpu_check_wgmma.py")
  out = subprocess.run([sys.executable, script, "--device", "MOCK+CUDA", "--n", "256", "--reps", "1", "--quick"],
                       capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  assert "0 failed check(s)" in out.stdout and "heuristic (wgmma on)" in out.stdout and "[TC0:3 UNROLL0:4" in out.stdout

# one warpgroup, one m64n64k16 from a 64x16 A and a 16x64 B in shared memory (unswizzled K-major A: 8x8 core matrices
# of 16-byte rows, LBO 128, SBO 256; N-major B likewise), then a copy into A's tile: after the wait where `bad` is 0,
# before it (a race the emulator reports) where it is not
RACE_KERNEL = r"""#include <cuda_fp16.h>
%s
extern "C" __global__ void race(float* out, const half* a, const half* b, int bad) {
  __shared__ __align__(1024) unsigned char smem[4096];
  tp_shared_window(smem);
  half* sa = (half*)smem; half* sb = (half*)(smem + 2048);
  int t = threadIdx.x;
  for (int i = t; i < 64 * 16; i += 128) {   // A[m][k] at (m%%8)*8 + (m/8)*128 + k%%8 + (k/8)*64 elements
    int m = i / 16, k = i %% 16;
    sa[(m %% 8) * 8 + (m / 8) * 128 + k %% 8 + (k / 8) * 64] = a[i];
    int kb = i / 64, n = i %% 64;          // B[k][n] N-major: n%%8 + (n/8)*128 + (k%%8)*8 + (k/8)*64
    sb[n %% 8 + (n / 8) * 128 + (kb %% 8) * 8 + (kb / 8) * 64] = b[i];
  }
  __syncthreads();
  float d[32];
  for (int i = 0; i < 32; i++) d[i] = 0.0f;
  unsigned long long da = tp_wgmma_desc(tp_smem_addr(sa), 128, 256, 0), db = tp_wgmma_desc(tp_smem_addr(sb), 128, 256, 0);
  tp_wgmma_fence();
  tp_wgmma<half, 64, 0, 1>(d, da, db, 1);
  tp_wgmma_commit();
  if (!bad) tp_wgmma_wait<0>();
  if (t == 0) { tp_cp_async16(sa, a); tp_cp_async_commit(); tp_cp_async_wait<0>(); }
  tp_wgmma_wait<0>();
  for (int i = 0; i < 32; i++)
    out[(16 * (t / 32) + (t %% 32) / 4 + 8 * ((i >> 1) & 1)) * 64 + 8 * (i >> 2) + 2 * (t %% 4) + (i & 1)] = d[i];
}
"""

def test_a_stopped_launch_leaves_nothing_queued(mock_cuda):
  """A launch stopped by the race report leaves its wgmma queued; the next launch of the same kernel starts afresh
  (the runtime's launch serial) and neither runs it nor reports it."""
  from tinyplug.backend import ProgramSpec
  from tinyplug.device import Device
  from tinyplug_cuda.tensor_cores import ASYNC_HELPERS
  from tinyplug_cuda.wgmma import COMMON
  from tinyplug_emulator.native import EmulatorError
  src = RACE_KERNEL % (ASYNC_HELPERS + "\n" + COMMON)
  dev = Device["MOCK+CUDA"]
  prg = dev.make_program(ProgramSpec("race", (), src, (1, 1, 1), (128, 1, 1), outs=(0,), ins=(1, 2)),
                         dev.compiler.compile_cached(src))
  a, b = RNG.standard_normal((64, 16)).astype(np.float16), RNG.standard_normal((16, 64)).astype(np.float16)
  A, B = Buffer("MOCK+CUDA", a.size, dtypes.half).copyin(a), Buffer("MOCK+CUDA", b.size, dtypes.half).copyin(b)
  C = Buffer("MOCK+CUDA", 64 * 64, dtypes.float)
  run = lambda bad: prg(C.handle, A.handle, B.handle, global_size=(1, 1, 1), local_size=(128, 1, 1), vals=(bad,))
  for _ in range(2):
    with pytest.raises(EmulatorError, match="overwrites operand A of a wgmma"): run(1)
    run(0)
    np.testing.assert_allclose(C.numpy().reshape(64, 64), a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5,
                               atol=1e-5)
