"""Hopper's warpgroup MMA (`wgmma.mma_async`, sm_90a only) for fp16/bf16 matmuls with fp32 accumulators: the CUDA C
helpers that emit it as inline PTX, and a whole-kernel generator (`matmul_kernel`) that uses them with cp.async
stages in the 128-byte swizzled layout. Not yet reachable from the optimiser (no TC option or STAGE bit picks it):
benchmarks and the GPU check build it directly (see plugins/cuda/README.md).

What the hardware does (the instruction set's definitions of wgmma):
- `wgmma.mma_async.sync.aligned.m64nNk16.f32.{f16,bf16}.{f16,bf16} d, a-desc, b-desc, scale-d, 1, 1, tA, tB`: one
  warpgroup (4 consecutive warps, 128 threads) computes D(64xN) = A(64x16) * B(16xN) + (scale-d ? D : 0); N is a
  multiple of 8 up to 256. A and B are read from shared memory through 64-bit matrix descriptors; tA/tB = 0 means
  K-major (K contiguous), 1 means MN-major.
- Accumulator layout: thread t of the warpgroup holds N/2 floats; element i is row 16*(t/32) + (t%32)/4 + 8*((i/2)%2),
  column 8*(i/4) + 2*(t%4) + i%2.
- Descriptor: bits 0-13 start address, 16-29 leading dimension byte offset (LBO), 32-45 stride dimension byte offset
  (SBO), each (x & 0x3FFFF) >> 4; bits 49-51 base offset (0 where the tile starts on the swizzle pattern's boundary,
  1024 bytes for 128B); bits 62-63 swizzle: 0 none, 1 128B, 2 64B, 3 32B.
- Canonical layouts for 16-bit elements (T = 8 elements = 16 bytes), with W the swizzle width in bytes:
  K-major, swizzled: row mn at (mn%8)*W + (mn/8)*SBO, element k at 2k within the row (LBO unused);
  MN-major, swizzled: element mn at 2*(mn % (W/2)) + (mn / (W/2))*LBO, row k at (k%8)*W + (k/8)*SBO.
  The swizzle then XORs address bits [4, 4+b) with bits [7, 7+b) (b = 3, 2, 1 for 128B, 64B, 32B) of the shared
  address itself: a tile written with chunk c of row r at chunk c ^ (r % 8) (128-byte rows, 1024-aligned) is the
  128B-swizzled layout, the same XOR STAGE's asynchronous mode uses (tc_async.py).
- `wgmma.fence` before the first wgmma and whenever the accumulators were touched by other instructions;
  `wgmma.commit_group` closes a group of issued wgmmas; `wgmma.wait_group N` waits until at most N groups are
  pending (only then are D and the shared memory they read free). cp.async writes reach the tensor cores' (async)
  proxy after `fence.proxy.async.shared::cta`.

The kernel (`matmul_kernel`): C (MxN, row-major) = A (MxK, row-major: K-major) @ B (KxN, row-major: MN-major), a
block of BM = 64*G rows (G warpgroups, 128*G threads) by BN columns, K steps of 64. Each K step's A tile is BM rows of
128 bytes, B's tile BN/64 blocks of 64 rows x 128 bytes, both 128B-swizzled, in S stages of dynamic shared memory
(aligned to 1024 bytes at run time). Trip k waits for its step's cp.async group, fences the async proxy, syncs the
block, copies step k+L (L = S-1-inflight steps ahead) into the stage step k-1-inflight used, then issues 4 wgmmas
(k16 each) of 64xBN per warpgroup, commits and waits until `inflight` groups (0 or 1) are pending."""
from __future__ import annotations
from dataclasses import dataclass
from tinyplug.uop.dtype import DType, dtypes

class WgmmaError(ValueError):
  """A wgmma kernel that cannot be built: the device, the renderer or the shape (the message says which)."""

_T = {dtypes.float16: ("half", "f16"), dtypes.bfloat16: ("__nv_bfloat16", "bf16")}
SWIZZLE_128B, SWIZZLE_64B, SWIZZLE_32B = 1, 2, 3
BK = 64   # K elements per step: one 128-byte row of 16-bit elements (the 128B swizzle's width)

def check_target(arch: str, renderer: str = "CUDA") -> None:
  """Refuse, with the reason, a target that has no wgmma: anything but sm_90/sm_90a, or the PTX renderer."""
  if renderer != "CUDA":
    raise WgmmaError(f"wgmma is emitted as inline PTX by the CUDA C renderer only; the {renderer} renderer (LLVM NVPTX) "
                     "has no warpgroup MMA: use DEV=CUDA (its CUDA C renderer)")
  digits = "".join(ch for ch in arch.split("_")[-1] if ch.isdigit())
  if digits != "90":
    raise WgmmaError(f"wgmma.mma_async needs an sm_90 GPU (Hopper, compiled for sm_90a); {arch} has none: use the "
                     "mma.sync tensor cores (STAGE bit 16)")

def arch_for(src: str, arch: str) -> str:
  """The architecture NVRTC must compile `src` for: sm_90a where a sm_90 kernel uses wgmma (the `a` features), else
  `arch` unchanged."""
  if "wgmma." in src and arch in ("sm_90", "90", "compute_90"): return "sm_90a"
  return arch

def descriptor(addr: int, lbo: int, sbo: int, swizzle: int, base_offset: int = 0) -> int:
  """The 64-bit matrix descriptor of a shared tile at byte address `addr` (the PTX ISA's encoding)."""
  enc = lambda x: (x & 0x3FFFF) >> 4
  return enc(addr) | enc(lbo) << 16 | enc(sbo) << 32 | (base_offset & 7) << 49 | (swizzle & 3) << 62

# the helpers a wgmma kernel's source starts with: descriptor encoding (the same on the GPU and the emulator), then
# the GPU's inline PTX (the emulator's prelude defines the same names for the host: cuda_prelude.h)
COMMON = r"""__device__ unsigned long long tp_wgmma_desc(unsigned addr, unsigned lbo, unsigned sbo, unsigned swizzle) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16) |
         ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32) | ((unsigned long long)(swizzle & 3) << 62);
}"""

GPU_HELPERS = r"""#ifdef __CUDA_ARCH__
__device__ __forceinline__ unsigned tp_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void tp_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void tp_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void tp_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
__device__ __forceinline__ void tp_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
template <int R> __device__ __forceinline__ void tp_fence_operands(float* d) {
#pragma unroll
  for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i]) :: "memory");
}
template <typename T, int N, int TA, int TB> __device__ void tp_wgmma(float* d, unsigned long long da, unsigned long long db, int scale_d);
#endif"""

# the CUDA C renderer's form (tc_wgmma.py's kernels): D as a struct of N/2 floats through a K chain of wgmmas, the
# first fencing the accumulators, the last committing the chain and waiting for it (tp_f32s: the struct); TA / TB 1
# for an M/N-major A / B
CHAIN_HELPER = r"""template <int R> struct tp_f32s { float v[R]; };
#ifdef __CUDA_ARCH__
template <typename T, int N, int TA, int TB, int FIRST, int LAST, typename S>
__device__ __forceinline__ S tp_wgmma_chain(S d, unsigned long long da, unsigned long long db) {
  if (FIRST) { tp_fence_operands<N / 2>(d.v); tp_wgmma_fence(); }
  tp_wgmma<T, N, TA, TB>(d.v, da, db, 1);
  if (LAST) { tp_wgmma_commit(); tp_wgmma_wait<0>(); tp_fence_operands<N / 2>(d.v); }
  return d;
}
#endif"""

def mma_specialization(dtype: DType, n: int, trans_a: int, trans_b: int) -> str:
  """The GPU's `tp_wgmma<T, n, tA, tB>`: one wgmma.mma_async m64n{n}k16 with f32 accumulators `d[0 .. n/2-1]`."""
  if dtype not in _T: raise WgmmaError(f"wgmma here takes float16 or bfloat16 inputs, not {dtype.name}")
  if n % 8 or not 8 <= n <= 256: raise WgmmaError(f"wgmma's N is a multiple of 8 from 8 to 256, not {n}")
  ctype, ptx = _T[dtype]
  r = n // 2
  regs = ", ".join(f"%{i}" for i in range(r))
  outs = ", ".join(f'"+f"(d[{i}])' for i in range(r))
  asm = (f'"{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{r + 2}, 0;\\n'
         f'wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{regs}}}, %{r}, %{r + 1}, p, 1, 1, {trans_a}, '
         f'{trans_b};\\n}}\\n"')
  return "\n".join(["#ifdef __CUDA_ARCH__",
                    f"template <> __device__ __forceinline__ void tp_wgmma<{ctype}, {n}, {trans_a}, {trans_b}>(float* d, "
                    "unsigned long long da, unsigned long long db, int scale_d) {",
                    f'  asm volatile({asm} : {outs} : "l"(da), "l"(db), "r"(scale_d) : "memory");', "}", "#endif"])

@dataclass(frozen=True)
class WgmmaKernel:
  """A generated kernel: its CUDA C, name, launch (blocks, threads) and dynamic shared memory in bytes."""
  name: str
  src: str
  global_size: tuple[int, int, int]
  local_size: tuple[int, int, int]
  shared: int

def matmul_kernel(m: int, n: int, k: int, dtype: DType = dtypes.float16, out: DType = dtypes.float32, *, bm: int = 128,
                  bn: int = 128, stages: int = 4, inflight: int = 0, grouped: bool = True, arch: str = "sm_90",
                  renderer: str = "CUDA", shared_max: int = 232448) -> WgmmaKernel:
  """C = A @ B with A (m x k) and B (k x n) row-major `dtype` (float16 or bfloat16), C row-major `out` (float32 or
  `dtype`), by wgmma (see the module docstring); refused (WgmmaError) where the target or the shape does not fit."""
  check_target(arch, renderer)
  if dtype not in _T: raise WgmmaError(f"wgmma here takes float16 or bfloat16 inputs, not {dtype.name}")
  if out not in (dtypes.float32, dtype): raise WgmmaError(f"the result is float32 or {dtype.name}, not {out.name}")
  if bm % 64 or not 64 <= bm <= 256: raise WgmmaError(f"the block's rows are 64 per warpgroup (64 to 256), not {bm}")
  if bn % 64 or not 64 <= bn <= 256: raise WgmmaError(f"the block's columns are a multiple of 64 up to 256, not {bn}")
  if inflight not in (0, 1): raise WgmmaError(f"inflight is 0 or 1 wgmma groups left pending, not {inflight}")
  ahead = stages - 1 - inflight
  if ahead < 1: raise WgmmaError(f"{stages} stages leave no step to copy ahead with {inflight} group(s) in flight")
  for name, size, tile in (("M", m, bm), ("N", n, bn), ("K", k, BK)):
    if size % tile: raise WgmmaError(f"{name} = {size} is not a multiple of the block's {tile} (no partial tiles)")
  ctype, ptx = _T[dtype]
  octype = "float" if out == dtypes.float32 else ctype
  groups, threads = bm // 64, bm * 2
  a_bytes, stage_bytes = bm * 128, (bm + bn) * 128
  shared = stages * stage_bytes + 1024   # + the run-time alignment of the stages to 1024 bytes
  if shared > shared_max: raise WgmmaError(f"{stages} stages of {bm}x{bn} need {shared} bytes of shared memory; the "
                                           f"device has {shared_max}")
  mb, nb, kt = m // bm, n // bn, k // BK
  g = next((g for g in (8, 4, 2) if grouped and mb % g == 0), 1)
  name = f"wgmma_{ptx}_{'f32' if out == dtypes.float32 else ptx}_{m}_{n}_{k}_{bm}x{bn}_s{stages}_f{inflight}{'_g' if g > 1 else ''}"
  a_chunks, b_chunks = bm * 8, BK * bn // 8
  lines = [
    f'extern "C" __global__ void __launch_bounds__({threads}, 1) {name}({octype}* __restrict__ c, '
    f'const {ctype}* __restrict__ a, const {ctype}* __restrict__ b) {{',
    "#ifdef __CUDA_ARCH__",
    "  extern __shared__ __align__(1024) unsigned char tp_smem[];",
    "#else",
    f"  __shared__ __align__(1024) unsigned char tp_smem[{shared}];",
    "  tp_shared_window(tp_smem);",
    "#endif",
    "  unsigned char* smem = tp_smem + ((1024u - (tp_smem_addr(tp_smem) & 1023u)) & 1023u);",
    "  const unsigned sbase = tp_smem_addr(smem);",
    "  const int tid = threadIdx.x, wg = tid / 128, t = tid % 128;",
    f"  const int l = blockIdx.x, within = l % {g * nb};",
    f"  const int bm = (l / {g * nb}) * {g} + within % {g}, bn = within / {g};",
    f"  const {ctype}* ga = a + (long long)bm * {bm * k};",
    f"  const {ctype}* gb = b + bn * {bn};",
    f"  float acc[{bn // 2}];",
    "#pragma unroll",
    f"  for (int i = 0; i < {bn // 2}; i++) acc[i] = 0.0f;",
    # one K step's copies into a stage: A rows of 8 chunks, B blocks of 64 rows x 8 chunks, chunk c of row r at c ^ r%8
    "  auto fill = [&](int step, int stage) {",
    "    unsigned char* s = smem + stage * %d;" % stage_bytes,
    "#pragma unroll",
    f"    for (int j = 0; j < {-(-a_chunks // threads)}; j++) {{",
    f"      int x = tid + {threads} * j;",
    *([f"      if (x < {a_chunks}) {{"] if a_chunks % threads else ["      {"]),
    "        int r = x >> 3, ch = x & 7;",
    f"        tp_cp_async16(s + r * 128 + ((ch ^ (r & 7)) << 4), ga + r * {k} + step * {BK} + ch * 8);",
    "      }",
    "    }",
    "#pragma unroll",
    f"    for (int j = 0; j < {-(-b_chunks // threads)}; j++) {{",
    f"      int x = tid + {threads} * j;",
    *([f"      if (x < {b_chunks}) {{"] if b_chunks % threads else ["      {"]),
    f"        int r = x / {bn // 8}, ch = x % {bn // 8};",
    f"        tp_cp_async16(s + {a_bytes} + (ch >> 3) * {BK * 128} + r * 128 + (((ch & 7) ^ (r & 7)) << 4), "
    f"gb + (long long)(step * {BK} + r) * {n} + ch * 8);",
    "      }",
    "    }",
    "  };",
  ]
  for s in range(ahead):   # the prologue: steps 0 .. ahead-1, one commit group each (empty past the last step)
    lines.append(f"  {'' if s < kt else '// '}fill({s}, {s});")
    lines.append("  tp_cp_async_commit();")
  lines += [
    f"  for (int kt = 0; kt < {kt}; kt++) {{",
    f"    tp_cp_async_wait<{ahead - 1}>();",
    "    tp_fence_proxy_async();",
    "    __syncthreads();",
    f"    if (kt + {ahead} < {kt}) fill(kt + {ahead}, (kt + {ahead}) % {stages});",
    "    tp_cp_async_commit();",
    f"    const unsigned st = sbase + (kt % {stages}) * {stage_bytes};",
    f"    tp_fence_operands<{bn // 2}>(acc);",
    "    tp_wgmma_fence();",
    "#pragma unroll",
    "    for (int kk = 0; kk < 4; kk++) {",
    # A: K-major, this warpgroup's 64 rows, 16 columns at 32 bytes a k16; B: N-major, rows 16 kk .. 16 kk + 15
    f"      unsigned long long da = tp_wgmma_desc(st + wg * {64 * 128} + kk * 32, 16, 1024, {SWIZZLE_128B});",
    f"      unsigned long long db = tp_wgmma_desc(st + {a_bytes} + kk * {16 * 128}, {BK * 128}, 1024, {SWIZZLE_128B});",
    f"      tp_wgmma<{ctype}, {bn}, 0, 1>(acc, da, db, 1);",
    "    }",
    "    tp_wgmma_commit();",
    f"    tp_wgmma_wait<{inflight}>();",
    *([f"    tp_fence_operands<{bn // 2}>(acc);"] if not inflight else []),
    "  }",
    "  tp_wgmma_wait<0>();",
    f"  tp_fence_operands<{bn // 2}>(acc);",
    # the accumulators: element i of thread t is row 16(t/32) + (t%32)/4 + 8((i/2)%2), column 8(i/4) + 2(t%4) + i%2
    f"  const int row0 = bm * {bm} + wg * 64 + 16 * (t / 32) + (t % 32) / 4, col0 = bn * {bn} + 2 * (t % 4);",
    "#pragma unroll",
    f"  for (int i = 0; i < {bn // 2}; i += 2) {{",
    f"    long long at = (long long)(row0 + 8 * ((i >> 1) & 1)) * {n} + col0 + 8 * (i >> 2);",
    f"    c[at] = ({octype})acc[i]; c[at + 1] = ({octype})acc[i + 1];",
    "  }",
    "}",
  ]
  from tinyplug_cuda.tensor_cores import ASYNC_HELPERS
  head = []
  if dtype == dtypes.float16 or out == dtypes.float16: head.append("#include <cuda_fp16.h>")
  if dtype == dtypes.bfloat16 or out == dtypes.bfloat16: head.append("#include <cuda_bf16.h>")
  src = "\n".join([*head, ASYNC_HELPERS, COMMON, GPU_HELPERS, mma_specialization(dtype, bn, 0, 1), *lines]) + "\n"
  return WgmmaKernel(name, src, (mb * nb, 1, 1), (threads, 1, 1), shared)

def program(kernel: WgmmaKernel, device: str):
  """`kernel` compiled and loaded on `device` (CUDA, or the emulator MOCK+CUDA): `prg(c, a, b, wait=True)` takes
  Buffers and launches it with its grid, block and dynamic shared memory."""
  from tinyplug.backend import ProgramSpec
  from tinyplug.device import Device
  dev = Device[device]
  binary = dev.compiler.compile_cached(kernel.src)
  from tinyplug_cuda.runtime import CUDADevice, CUDAProgram
  if isinstance(dev, CUDADevice): prg = CUDAProgram(dev, kernel.name, binary, (), kernel.shared)
  else: prg = dev.make_program(ProgramSpec(kernel.name, (), kernel.src, kernel.global_size, kernel.local_size,
                                           outs=(0,), ins=(1, 2)), binary)
  def run(c, a, b, wait: bool = True):
    return prg(c.handle, a.handle, b.handle, global_size=kernel.global_size, local_size=kernel.local_size, wait=wait)
  return run
