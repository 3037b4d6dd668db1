"""The tensor cores the CUDA C renderer advertises (sm_80 and newer): `mma.sync.aligned.m16n8k16.row.col` with f16 or
bf16 inputs and f32 accumulators, and with f16 inputs and f16 accumulators, one warp (32 lanes) per instruction.

The hardware's fragment layout for mma.m16n8k16 with f16/bf16, with g = lane >> 2 and
t = lane % 4: A (16x16) element i of a lane is row g + 8*((i >> 1) & 1), column 2t + (i & 1) + 8*(i >> 2); B (16x8)
element i is row 2t + (i & 1) + 8*(i >> 1), column g; C/D (16x8) element i is row g + 8*(i >> 1), column 2t + (i & 1)
(f32 accumulators: one register each; f16 ones: two per .f16x2 register, the same positions).
`TensorCore` holds that as data: lane bits 0-1 (t) step A's and C's columns by 2 and 4 and B's rows likewise, bits 2-4
(g) step A's and C's rows and B's columns by 1, 2, 4; the element offsets are the lane-0 positions.

The WMMA op renders as a call of a `__device__` function whose body is the inline PTX instruction (each pair of
halves packed low element first into one .b32 register); the emulator's CUDA prelude defines the same function for
the host (its definition here is compiled only where `__CUDA_ARCH__` is defined: NVRTC)."""
from __future__ import annotations
from tinyplug.backend import TensorCore
from tinyplug.uop.dtype import DType, dtypes

_GROUP_ROWS = ((1, 0), (2, 0), (4, 0))       # lane bits 2-4 (g) step rows
_THREAD_COLS = ((0, 2), (0, 4))              # lane bits 0-1 (t) step columns by two elements
_PTX_TYPE = {dtypes.float16: "f16", dtypes.bfloat16: "bf16"}
_TO_BITS = {dtypes.float16: "__half_as_ushort", dtypes.bfloat16: "__bfloat16_as_ushort"}

def mma_m16n8k16(dtype_in: DType, dtype_out: DType = dtypes.float32) -> TensorCore:
  """mma.sync m16n8k16 with `dtype_in` (float16 or bfloat16) inputs and `dtype_out` (float32, or float16 for float16
  inputs) accumulators."""
  out = {dtypes.float32: "f32", dtypes.float16: "f16"}[dtype_out]
  return TensorCore(
    name=f"mma_m16n8k16_{_PTX_TYPE[dtype_in]}_{out}", dims=(16, 8, 16), dtype_in=dtype_in, dtype_out=dtype_out,
    threads=32,
    lane_bits=(_THREAD_COLS + _GROUP_ROWS,
               tuple((c, r) for r, c in _THREAD_COLS) + tuple((c, r) for r, c in _GROUP_ROWS),
               _THREAD_COLS + _GROUP_ROWS),
    element_offsets=(tuple((8 * ((i >> 1) & 1), (i & 1) + 8 * (i >> 2)) for i in range(8)),
                     tuple(((i & 1) + 8 * (i >> 1), 0) for i in range(4)),
                     tuple((8 * (i >> 1), i & 1) for i in range(4))))

MMA_M16N8K16 = (mma_m16n8k16(dtypes.float16), mma_m16n8k16(dtypes.bfloat16),
                mma_m16n8k16(dtypes.float16, dtypes.float16))

def wgmma_m64nk16(dtype_in: DType, n: int = 128) -> TensorCore:
  """Hopper's `wgmma.mma_async` m64n{n}k16 with f32 accumulators, one warpgroup (128 threads). Its A and B come from
  shared memory through descriptors (wgmma.py): such a WMMA runs only once STAGE's wgmma mode (bit 2048,
  codegen/tc_wgmma.py) has staged its operands; the fragments below say which elements each thread's loads name
  before that (A: the register layout of the PTX ISA, warp w's rows 16w..16w+15 as mma.m16n8k16's A; B: a layout of
  ours, any even cover would do). C/D: thread t (warp w = t/32, g = (t%32)/4, c = t%4) holds element i at row
  16w + g + 8((i/2)%2), column 8(i/4) + 2c + i%2, which for each 8 columns is mma.m16n8k16's C of warp w."""
  thread_cols, group_rows, warp_rows = ((0, 2), (0, 4)), ((1, 0), (2, 0), (4, 0)), ((16, 0), (32, 0))
  return TensorCore(
    name=f"wgmma_m64n{n}k16_{_PTX_TYPE[dtype_in]}_f32", dims=(64, n, 16), dtype_in=dtype_in, dtype_out=dtypes.float32,
    threads=128,
    lane_bits=(thread_cols + group_rows + warp_rows,
               ((2, 0), (4, 0), (0, 1), (0, 2), (0, 4), (8, 0), (0, 8)),
               thread_cols + group_rows + warp_rows),
    element_offsets=(tuple((8 * ((i >> 1) & 1), (i & 1) + 8 * (i >> 2)) for i in range(8)),
                     tuple((i & 1, 16 * (i >> 1)) for i in range(n // 8)),
                     tuple((8 * ((i >> 1) & 1), (i & 1) + 8 * (i >> 2)) for i in range(n // 2))))

WGMMA = (wgmma_m64nk16(dtypes.float16), wgmma_m64nk16(dtypes.bfloat16))

def tensor_cores_for(arch: str, wgmma: bool = False) -> tuple[TensorCore, ...]:
  """The tensor cores of GPU architecture `arch` ("sm_80"): the m16n8k16 ones from sm_80 (Ampere) on, then with
  `wgmma` on sm_90 (Hopper: sm_90a) the wgmma ones, after them so the mma.sync cores keep their TC numbers."""
  try: sm = int("".join(ch for ch in arch.split("_")[-1] if ch.isdigit()))
  except ValueError: return ()
  return MMA_M16N8K16 + (WGMMA if sm == 90 and wgmma else ()) if sm >= 80 else ()

def mma_function(tc: TensorCore) -> str:
  """The `__device__` function a WMMA of `tc` calls: this thread's 8 A, 4 B and 4 C elements in, its 4 of D out (a
  float4, or a half4 for f16 accumulators: the struct the renderer's prelude defines)."""
  t, f = {dtypes.float16: "half", dtypes.bfloat16: "__nv_bfloat16"}[tc.dtype_in], _TO_BITS[tc.dtype_in]
  ptx, half_acc = _PTX_TYPE[tc.dtype_in], tc.dtype_out == dtypes.float16
  ct = "half" if half_acc else "float"
  params = ", ".join([f"{t} a{i}" for i in range(8)] + [f"{t} b{i}" for i in range(4)] +
                     [f"{ct} c{i}" for i in range(4)])
  pack = lambda x, i, f=f: f"unsigned {x}{i}{i+1} = (unsigned){f}({x}{i}) | ((unsigned){f}({x}{i+1}) << 16);"
  packs = [pack("a", i) for i in (0, 2, 4, 6)] + [pack("b", i) for i in (0, 2)]
  ab = '"r"(a01), "r"(a23), "r"(a45), "r"(a67), "r"(b01), "r"(b23)'
  if half_acc:   # C and D as two .f16x2 registers, the lower-numbered element in the low half
    packs += [pack("c", i, "__half_as_ushort") for i in (0, 2)] + ["unsigned d01, d23;"]
    asm = (f'asm("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {{%0, %1}}, {{%2, %3, %4, %5}}, {{%6, %7}}, '
           f'{{%8, %9}};" : "=r"(d01), "=r"(d23) : {ab}, "r"(c01), "r"(c23));')
    lanes = [f"__ushort_as_half((unsigned short)({r}{shift}))" for r in ("d01", "d23") for shift in ("", " >> 16")]
    ret = f"return make_half4({', '.join(lanes)});"
  else:
    packs.append("float4 d;")
    asm = (f'asm("mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, '
           f'{{%8, %9}}, {{%10, %11, %12, %13}};" : "=f"(d.x), "=f"(d.y), "=f"(d.z), "=f"(d.w) : {ab}, '
           f'"f"(c0), "f"(c1), "f"(c2), "f"(c3));')
    ret = "return d;"
  return "\n".join(["#ifdef __CUDA_ARCH__", f"__device__ {ct}4 tp_{tc.name}({params}) {{", f"  {' '.join(packs)}",
                    f"  {asm}", f"  {ret}", "}", "#endif"])

# STAGE's asynchronous mode (tinyplug/codegen/tc_async.py) on the GPU: 16-byte copies from global to shared memory
# without registers (cp.async.cg, L2 only), their commit groups and waits, and ldmatrix (x1/x2/x4, optionally .trans)
# into a fragment vector; `asm volatile` keeps them in program order relative to each other (the compiler may not reorder them around the waits). The
# emulator's CUDA prelude defines the same functions for the host.
ASYNC_HELPERS = r"""#ifdef __CUDA_ARCH__
__device__ __forceinline__ void tp_cp_async16(void* dst, const void* src) {
  unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(s), "l"(src));
}
__device__ __forceinline__ void tp_cp_async_commit() { asm volatile("cp.async.commit_group;" ::); }
template <int N> __device__ __forceinline__ void tp_cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N)); }
template <typename V, int R> __device__ __forceinline__ V tp_ldmatrix_any(const void* p, bool trans) {
  unsigned a = (unsigned)__cvta_generic_to_shared(p), r[4];
  if (R == 4 && !trans) asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
  if (R == 4 && trans) asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
  if (R == 2 && !trans) asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  if (R == 2 && trans) asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  if (R == 1 && !trans) asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(a));
  if (R == 1 && trans) asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(a));
  V v;
  memcpy(&v, r, sizeof(V));
  return v;
}
template <typename V, int R> __device__ __forceinline__ V tp_ldmatrix(const void* p) { return tp_ldmatrix_any<V, R>(p, false); }
template <typename V, int R> __device__ __forceinline__ V tp_ldmatrix_trans(const void* p) { return tp_ldmatrix_any<V, R>(p, true); }
#endif"""
