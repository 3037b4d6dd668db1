// CUDA C (and HIP-style C) on the emulator: compiled as C++ by clang with this header included first.
// Thread and block ids come from the runtime; __syncthreads() is the runtime's barrier; __shared__ arrays are static
// thread_local (a work-group runs on one host thread, so each group sees its own copy); half is _Float16, rounded
// after every operation (-ffloat16-excess-precision=none); __nv_bfloat16 is __bf16, likewise. What CUDA's headers and
// built-ins give a kernel (vector types, bit reinterpretation, half/bf16 conversions) is defined here the same way.
#pragma once
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>

extern "C" {
uint64_t tp_local_id(uint32_t d); uint64_t tp_group_id(uint32_t d); uint64_t tp_local_size(uint32_t d);
uint64_t tp_num_groups(uint32_t d);
__attribute__((convergent)) void tp_barrier(void);   // convergent: the optimiser must not duplicate or move it into a branch
__attribute__((noreturn)) void tp_kernel_error(const char* message);   // stops the launch: an EmulatorError("kernel")
uint64_t tp_launch_serial(void);   // changes with every launch: state kept across calls starts afresh with it
}

struct tp_uint3 { unsigned int x, y, z; };
static inline tp_uint3 tp_ids(uint64_t (*f)(uint32_t)) { return tp_uint3{(unsigned)f(0), (unsigned)f(1), (unsigned)f(2)}; }
#define threadIdx tp_ids(tp_local_id)
#define blockIdx tp_ids(tp_group_id)
#define blockDim tp_ids(tp_local_size)
#define gridDim tp_ids(tp_num_groups)
#define __syncthreads() tp_barrier()
#define __global__
#define __device__ static inline
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local
#define __restrict__ __restrict
#define __constant__ static const
#define __align__(n) __attribute__((aligned(n)))

typedef _Float16 half;
typedef _Float16 __half;
typedef __bf16 __nv_bfloat16;
static inline float __half2float(half x) { return (float)x; }
static inline half __float2half(float x) { return (half)x; }
static inline half hexp2(half x) { return (half)exp2f((float)x); }
static inline half hlog2(half x) { return (half)log2f((float)x); }
static inline half hsqrt(half x) { return (half)sqrtf((float)x); }
static inline half hsin(half x) { return (half)sinf((float)x); }
static inline half htrunc(half x) { return (half)truncf((float)x); }
static inline half __hmax(half a, half b) { return a > b ? a : b; }

// float/double -> __bf16 conversions are library calls clang emits; libgcc before GCC 13 lacks them: round to nearest
// even here (double through float rounded to odd, so the result is rounded once)
extern "C" __attribute__((weak, visibility("hidden"))) __bf16 __truncsfbf2(float x) {
  uint32_t u = __builtin_bit_cast(uint32_t, x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __builtin_bit_cast(__bf16, (uint16_t)((u >> 16) | 0x40));
  u += 0x7fffu + ((u >> 16) & 1u);
  return __builtin_bit_cast(__bf16, (uint16_t)(u >> 16));
}
extern "C" __attribute__((weak, visibility("hidden"))) __bf16 __truncdfbf2(double x) {
  float f = (float)x;
  if (f == f && (double)f != x) {
    uint32_t u = __builtin_bit_cast(uint32_t, f);
    if (fabs((double)f) > fabs(x)) u -= 1;
    f = __builtin_bit_cast(float, u | 1u);
  }
  return __truncsfbf2(f);
}
static inline half __double2half(double x) { return (half)x; }
static inline __nv_bfloat16 __double2bfloat16(double x) { return (__nv_bfloat16)x; }
static inline float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
static inline float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }
static inline unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
static inline long long __double_as_longlong(double x) { return __builtin_bit_cast(long long, x); }
static inline double __longlong_as_double(long long x) { return __builtin_bit_cast(double, x); }
static inline unsigned short __half_as_ushort(half x) { return __builtin_bit_cast(unsigned short, x); }
static inline half __ushort_as_half(unsigned short x) { return __builtin_bit_cast(half, x); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 x) { return __builtin_bit_cast(unsigned short, x); }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return __builtin_bit_cast(__nv_bfloat16, x); }

template <typename T> static inline T max(T a, T b) { return a > b ? a : b; }
template <typename T> static inline T min(T a, T b) { return a < b ? a : b; }

typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef long long longlong;
typedef unsigned long long ulonglong;
// CUDA's vector types: N-byte structs aligned to their size (up to 16), as in vector_types.h
#define TP_VEC2(T, A) struct __attribute__((aligned(A))) T##2 { T x, y; }; \
  static inline T##2 make_##T##2(T x, T y) { return T##2{x, y}; }
#define TP_VEC4(T, A) struct __attribute__((aligned(A))) T##4 { T x, y, z, w; }; \
  static inline T##4 make_##T##4(T x, T y, T z, T w) { return T##4{x, y, z, w}; }
TP_VEC2(char, 2) TP_VEC4(char, 4) TP_VEC2(uchar, 2) TP_VEC4(uchar, 4) TP_VEC2(short, 4) TP_VEC4(short, 8)
TP_VEC2(ushort, 4) TP_VEC4(ushort, 8) TP_VEC2(int, 8) TP_VEC4(int, 16) TP_VEC2(uint, 8) TP_VEC4(uint, 16)
TP_VEC2(float, 8) TP_VEC4(float, 16) TP_VEC2(longlong, 16) TP_VEC2(ulonglong, 16) TP_VEC2(double, 16)
TP_VEC4(double, 16) TP_VEC2(half, 4)

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: D = A (16x16) * B (16x8) + C for one warp, the function the CUDA C
// renderer's WMMA calls (on a GPU its body is the PTX instruction). Each lane writes its fragments to thread-local
// scratch (one work-group runs on one host thread, its work-items as fibers); after a barrier every lane rebuilds its
// warp's A and B from the PTX ISA's fragment layout and computes its four elements of D; a second barrier keeps the
// scratch until all have read it. Products of halves are exact in float; the sum runs in k order.
#define TP_MMA_MAX_ITEMS 1024
static thread_local float tp_mma_a[TP_MMA_MAX_ITEMS][8], tp_mma_b[TP_MMA_MAX_ITEMS][4];
template <typename T>
static inline float4 tp_mma_m16n8k16(const T a[8], const T b[4], const float c[4]) {   // D in float
  uint64_t id = tp_local_id(0) + tp_local_size(0) * (tp_local_id(1) + tp_local_size(1) * tp_local_id(2));
  uint64_t warp = id / 32 * 32, lane = id % 32;
  for (int i = 0; i < 8; i++) tp_mma_a[id][i] = (float)a[i];
  for (int i = 0; i < 4; i++) tp_mma_b[id][i] = (float)b[i];
  tp_barrier();
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; l++) {
    int g = l >> 2, t = l % 4;
    for (int i = 0; i < 8; i++) A[g + 8 * ((i >> 1) & 1)][2 * t + (i & 1) + 8 * (i >> 2)] = tp_mma_a[warp + l][i];
    for (int i = 0; i < 4; i++) B[2 * t + (i & 1) + 8 * (i >> 1)][g] = tp_mma_b[warp + l][i];
  }
  float d[4];
  int g = (int)lane >> 2, t = (int)lane % 4;
  for (int i = 0; i < 4; i++) {
    int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float acc = 0.0f;
    for (int k = 0; k < 16; k++) acc += A[row][k] * B[k][col];
    d[i] = acc + c[i];
  }
  tp_barrier();
  return float4{d[0], d[1], d[2], d[3]};
}
#define TP_MMA_FN(NAME, T) static inline float4 NAME(T a0, T a1, T a2, T a3, T a4, T a5, T a6, T a7, T b0, T b1, T b2, \
    T b3, float c0, float c1, float c2, float c3) { \
  const T a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}, b[4] = {b0, b1, b2, b3}; const float c[4] = {c0, c1, c2, c3}; \
  return tp_mma_m16n8k16<T>(a, b, c); }
TP_MMA_FN(tp_mma_m16n8k16_f16_f32, half)
TP_MMA_FN(tp_mma_m16n8k16_bf16_f32, __nv_bfloat16)
// f16 accumulators (.f16.f16.f16.f16): the sum in float, D rounded to half once. The result type is the kernel's
// half4 (its prelude defines the struct after this header): a template instantiated where the kernel calls it.
template <typename H4>
static inline H4 tp_mma_m16n8k16_f16acc(half a0, half a1, half a2, half a3, half a4, half a5, half a6, half a7, half b0,
                                         half b1, half b2, half b3, half c0, half c1, half c2, half c3) {
  const half a[8] = {a0, a1, a2, a3, a4, a5, a6, a7}, b[4] = {b0, b1, b2, b3};
  const float c[4] = {(float)c0, (float)c1, (float)c2, (float)c3};
  float4 d = tp_mma_m16n8k16<half>(a, b, c);
  return H4{(half)d.x, (half)d.y, (half)d.z, (half)d.w};
}
#define tp_mma_m16n8k16_f16_f16(...) tp_mma_m16n8k16_f16acc<half4>(__VA_ARGS__)

// STAGE's asynchronous mode (the CUDA C renderer's tp_cp_async16 / tp_cp_async_commit / tp_cp_async_wait<N> /
// tp_ldmatrix[_trans]<V, R>; on a GPU: cp.async.cg, cp.async.commit_group, cp.async.wait_group, ldmatrix).
// A copy is queued per work-item and lands only when a wait leaves its group no longer pending (as on the GPU, where
// nothing guarantees it earlier), so a kernel that reads a tile before waiting for it reads stale data here too.
#define TP_ASYNC_MAX 256
struct tp_async_copy { void* dst; const void* src; int group; };
static thread_local tp_async_copy (*tp_async_pool)[TP_ASYNC_MAX];   // [work-item][copy], allocated on first use
static thread_local int tp_async_count[TP_MMA_MAX_ITEMS], tp_async_group[TP_MMA_MAX_ITEMS];
static inline uint64_t tp_item_id() {
  return tp_local_id(0) + tp_local_size(0) * (tp_local_id(1) + tp_local_size(1) * tp_local_id(2));
}
static inline void tp_wgmma_write_check(const void* dst, uint32_t bytes);   // below: a wgmma still reading there
static thread_local uint64_t tp_async_serial;
static inline void tp_async_fresh() {   // what a previous launch left queued (it stopped on an error) is dropped
  uint64_t now = tp_launch_serial();
  if (now == tp_async_serial) return;
  tp_async_serial = now;
  __builtin_memset(tp_async_count, 0, sizeof tp_async_count);
  __builtin_memset(tp_async_group, 0, sizeof tp_async_group);
}
static inline void tp_cp_async16(void* dst, const void* src) {
  tp_async_fresh();
  uint64_t id = tp_item_id();
  tp_wgmma_write_check(dst, 16);
  if (!tp_async_pool) tp_async_pool = (tp_async_copy (*)[TP_ASYNC_MAX])calloc(TP_MMA_MAX_ITEMS, sizeof(*tp_async_pool));
  if (!tp_async_pool || tp_async_count[id] == TP_ASYNC_MAX) __builtin_trap();   // more copies in flight than kept here
  tp_async_pool[id][tp_async_count[id]++] = tp_async_copy{dst, src, tp_async_group[id]};
}
static inline void tp_cp_async_commit() { tp_async_fresh(); tp_async_group[tp_item_id()]++; }
template <int N> static inline void tp_cp_async_wait() {   // copies of all but the N newest committed groups land
  tp_async_fresh();
  uint64_t id = tp_item_id();
  int keep = 0, limit = tp_async_group[id] - N;
  for (int i = 0; i < tp_async_count[id]; i++) {
    tp_async_copy c = tp_async_pool[id][i];
    if (c.group < limit) __builtin_memcpy(c.dst, c.src, 16);
    else tp_async_pool[id][keep++] = c;
  }
  tp_async_count[id] = keep;
}
// ldmatrix.m8n8.xR(.trans).b16: lane 8i + r names row r of matrix i (16 bytes); without .trans lane l receives
// elements 2(l%4), 2(l%4)+1 of row l/4 of each matrix, with .trans those of column l/4 from rows 2(l%4), 2(l%4)+1.
// Lanes publish their addresses through scratch between two barriers, as the mma above does.
static thread_local const unsigned short* tp_ldsm_rows[TP_MMA_MAX_ITEMS];
template <typename V, int R> static inline V tp_ldmatrix_any(const void* p, bool trans) {
  uint64_t id = tp_item_id(), warp = id / 32 * 32, lane = id % 32;
  tp_ldsm_rows[id] = (const unsigned short*)p;
  tp_barrier();
  unsigned short out[8];
  for (int i = 0; i < R; i++) {
    for (int h = 0; h < 2; h++) {
      const unsigned short* row = trans ? tp_ldsm_rows[warp + 8 * i + 2 * (lane % 4) + h] : tp_ldsm_rows[warp + 8 * i + lane / 4];
      out[2 * i + h] = trans ? row[lane / 4] : row[2 * (lane % 4) + h];
    }
  }
  tp_barrier();
  V v;
  static_assert(sizeof(V) == 4 * R, "ldmatrix fills R 4-byte registers");
  __builtin_memcpy(&v, out, sizeof(V));
  return v;
}
template <typename V, int R> static inline V tp_ldmatrix(const void* p) { return tp_ldmatrix_any<V, R>(p, false); }
template <typename V, int R> static inline V tp_ldmatrix_trans(const void* p) { return tp_ldmatrix_any<V, R>(p, true); }

// Hopper's warpgroup MMA (the cuda plugin's wgmma.py: tp_wgmma<T, N, tA, tB>, tp_wgmma_fence / _commit / _wait<N>,
// tp_smem_addr, tp_fence_proxy_async; on a GPU: wgmma.mma_async m64nNk16 .f32, its fence, commit_group, wait_group).
// Shared addresses are offsets from the kernel's one shared array (it names it with tp_shared_window), as the GPU's
// are offsets in the block's shared window. A wgmma is queued per work-item and runs only at the wait_group that
// covers it, reading shared memory then through its descriptors (start, LBO, SBO, swizzle decoded as the PTX ISA
// defines them, the swizzle applied to the address bits), so a wrong descriptor, a stage overwritten before its wgmma
// was waited for, or accumulators read early give wrong values here too.
static thread_local unsigned char* tp_smem_origin;
static thread_local uint32_t tp_smem_size;
static inline void tp_shared_window(unsigned char* p, uint32_t size) { tp_smem_origin = p; tp_smem_size = size; }
#define tp_shared_window(p) tp_shared_window(p, (uint32_t)sizeof(p))
static inline unsigned tp_smem_addr(const void* p) {
  if (!tp_smem_origin) tp_kernel_error("tp_smem_addr: the kernel named no shared window (tp_shared_window)");
  return (unsigned)((const unsigned char*)p - tp_smem_origin);
}
static inline void tp_fence_proxy_async() {}
static inline void tp_wgmma_fence() {}
template <int R> static inline void tp_fence_operands(float*) {}
struct tp_wgmma_op { float* d; unsigned long long da, db; int scale_d, n, trans_a, trans_b, bf16, group;
                     uint32_t lo[2], hi[2]; };   // the shared bytes A's and B's elements lie in (first lane only)
#define TP_WGMMA_MAX 64
static thread_local tp_wgmma_op (*tp_wgmma_pool)[TP_WGMMA_MAX];
static thread_local int tp_wgmma_count[TP_MMA_MAX_ITEMS], tp_wgmma_group[TP_MMA_MAX_ITEMS];
static thread_local uint64_t tp_wgmma_serial;
static inline void tp_wgmma_fresh() {   // as tp_async_fresh: nothing pending carries over from another launch
  uint64_t now = tp_launch_serial();
  if (now == tp_wgmma_serial) return;
  tp_wgmma_serial = now;
  __builtin_memset(tp_wgmma_count, 0, sizeof tp_wgmma_count);
  __builtin_memset(tp_wgmma_group, 0, sizeof tp_wgmma_group);
}
// the shared byte address of element (mn, k) of a 16-bit operand: the canonical layouts of the PTX ISA (T = 8 elements)
static inline uint32_t tp_wgmma_address(unsigned long long desc, int mn, int k, bool mn_major) {
  uint32_t start = (uint32_t)(desc & 0x3FFF) << 4, lbo = (uint32_t)((desc >> 16) & 0x3FFF) << 4;
  uint32_t sbo = (uint32_t)((desc >> 32) & 0x3FFF) << 4, mode = (uint32_t)(desc >> 62) & 3;
  if ((desc >> 49) & 7) tp_kernel_error("a wgmma descriptor with a base offset: the emulator models tiles that start on the swizzle pattern's boundary only");
  uint32_t off;
  if (mode == 0) {   // interleaved: 8x8 core matrices of 16-byte rows
    off = mn_major ? (mn % 8) * 2 + (mn / 8) * sbo + (k % 8) * 16 + (k / 8) * lbo
                   : (mn % 8) * 16 + (mn / 8) * sbo + (k % 8) * 2 + (k / 8) * lbo;
  } else {
    uint32_t w = mode == 1 ? 128 : mode == 2 ? 64 : 32;   // swizzle width in bytes
    off = mn_major ? (mn % (w / 2)) * 2 + (mn / (w / 2)) * lbo + (k % 8) * w + (k / 8) * sbo
                   : (mn % 8) * w + (mn / 8) * sbo + k * 2;
  }
  uint32_t addr = start + off, bits = mode == 1 ? 3 : mode == 2 ? 2 : mode == 3 ? 1 : 0;
  addr ^= ((addr >> 7) & ((1u << bits) - 1)) << 4;   // Swizzle<bits, 4, 3>: address bits 4.. ^= bits 7..
  if (addr + 2 > tp_smem_size) tp_kernel_error("a wgmma descriptor points outside the kernel's shared memory");
  return addr;
}
static inline float tp_wgmma_element(unsigned long long desc, int mn, int k, bool mn_major, bool bf16) {
  unsigned short bits;
  __builtin_memcpy(&bits, tp_smem_origin + tp_wgmma_address(desc, mn, k, mn_major), 2);
  return bf16 ? (float)__builtin_bit_cast(__bf16, bits) : (float)__builtin_bit_cast(_Float16, bits);
}
static inline void tp_wgmma_run(uint64_t id, const tp_wgmma_op& op) {   // this work-item's N/2 elements of D
  int t = (int)(id % 128);
  for (int i = 0; i < op.n / 2; i++) {
    int row = 16 * (t / 32) + (t % 32) / 4 + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * (t % 4) + (i & 1);
    float acc = 0.0f;
    for (int k = 0; k < 16; k++)
      acc += tp_wgmma_element(op.da, row, k, op.trans_a, op.bf16) * tp_wgmma_element(op.db, col, k, op.trans_b, op.bf16);
    op.d[i] = (op.scale_d ? op.d[i] : 0.0f) + acc;
  }
}
template <typename T, int N, int TA, int TB>
static inline void tp_wgmma(float* d, unsigned long long da, unsigned long long db, int scale_d) {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma's N is a multiple of 8 from 8 to 256");
  tp_wgmma_fresh();
  uint64_t id = tp_item_id();
  if (!tp_wgmma_pool) tp_wgmma_pool = (tp_wgmma_op (*)[TP_WGMMA_MAX])calloc(TP_MMA_MAX_ITEMS, sizeof(*tp_wgmma_pool));
  if (!tp_wgmma_pool || tp_wgmma_count[id] == TP_WGMMA_MAX) tp_kernel_error("more wgmma operations pending than the emulator keeps (64 per thread)");
  tp_wgmma_op op{d, da, db, scale_d, N, TA, TB, (int)__is_same(T, __nv_bfloat16), tp_wgmma_group[id],
                 {0xffffffffu, 0xffffffffu}, {0, 0}};
  if (id % 128 == 0) {   // the warpgroup's first lane keeps where the operands lie (every lane passes the same ones)
    for (int k = 0; k < 16; k++) {
      for (int mn = 0; mn < 64 || mn < N; mn++) {
        for (int o = 0; o < 2; o++) {
          if (mn >= (o ? N : 64)) continue;
          uint32_t at = tp_wgmma_address(o ? db : da, mn, k, o ? TB : TA);
          op.lo[o] = at < op.lo[o] ? at : op.lo[o];
          op.hi[o] = at + 2 > op.hi[o] ? at + 2 : op.hi[o];
        }
      }
    }
  }
  tp_wgmma_pool[id][tp_wgmma_count[id]++] = op;
}
// a copy into shared bytes that a wgmma of the work-group has not been waited for reads: a race on the GPU
static inline void tp_wgmma_write_check(const void* dst, uint32_t bytes) {
  if (!tp_wgmma_pool || !tp_smem_origin) return;
  tp_wgmma_fresh();
  uint32_t at = (uint32_t)((const unsigned char*)dst - tp_smem_origin);
  uint64_t items = tp_local_size(0) * tp_local_size(1) * tp_local_size(2);
  for (uint64_t w = 0; w < items; w += 128) {
    for (int i = 0; i < tp_wgmma_count[w]; i++) {
      const tp_wgmma_op& op = tp_wgmma_pool[w][i];
      for (int o = 0; o < 2; o++) {
        if (at < op.hi[o] && at + bytes > op.lo[o]) {
          char message[256];
          snprintf(message, sizeof message, "a copy into shared bytes %u..%u overwrites operand %c of a wgmma (group %d "
                   "of warpgroup %d) not yet waited for (wgmma.wait_group): a race on the GPU", at, at + bytes,
                   o ? 'B' : 'A', op.group, (int)(w / 128));
          tp_kernel_error(message);
        }
      }
    }
  }
}
static inline void tp_wgmma_commit() { tp_wgmma_fresh(); tp_wgmma_group[tp_item_id()]++; }
template <int N> static inline void tp_wgmma_wait() {   // the wgmmas of all but the N newest committed groups run
  tp_wgmma_fresh();
  uint64_t id = tp_item_id();
  int keep = 0, limit = tp_wgmma_group[id] - N;
  for (int i = 0; i < tp_wgmma_count[id]; i++) {
    tp_wgmma_op op = tp_wgmma_pool[id][i];
    if (op.group < limit) tp_wgmma_run(id, op);
    else tp_wgmma_pool[id][keep++] = op;
  }
  tp_wgmma_count[id] = keep;
}
// the CUDA C renderer's K chains (wgmma.py's CHAIN_HELPER): here each link runs at once (commit and wait), its D a copy
template <typename T, int N, int TA, int TB, int FIRST, int LAST, typename S>
static inline S tp_wgmma_chain(S d, unsigned long long da, unsigned long long db) {
  tp_wgmma<T, N, TA, TB>(d.v, da, db, 1);
  tp_wgmma_commit();
  tp_wgmma_wait<0>();
  return d;
}
