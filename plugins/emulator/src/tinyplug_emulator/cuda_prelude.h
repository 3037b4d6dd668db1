// CUDA C (and HIP-style C) on the emulator: compiled as C++ by clang with this header included first.
// Thread and block ids come from the runtime; __syncthreads() is the runtime's barrier; __shared__ arrays are static
// thread_local (a work-group runs on one host thread, so each group sees its own copy); half is _Float16, rounded
// after every operation (-ffloat16-excess-precision=none).
#pragma once
#include <stdint.h>
#include <math.h>

extern "C" {
uint64_t tp_local_id(uint32_t d); uint64_t tp_group_id(uint32_t d); uint64_t tp_local_size(uint32_t d);
uint64_t tp_num_groups(uint32_t d);
__attribute__((convergent)) void tp_barrier(void);   // convergent: the optimiser must not duplicate or move it into a branch
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

typedef _Float16 half;
typedef _Float16 __half;
static inline float __half2float(half x) { return (float)x; }
static inline half __float2half(float x) { return (half)x; }
static inline half hexp2(half x) { return (half)exp2f((float)x); }
static inline half hlog2(half x) { return (half)log2f((float)x); }
static inline half hsqrt(half x) { return (half)sqrtf((float)x); }
static inline half hsin(half x) { return (half)sinf((float)x); }
static inline half htrunc(half x) { return (half)truncf((float)x); }
static inline half __hmax(half a, half b) { return a > b ? a : b; }

template <typename T> static inline T max(T a, T b) { return a > b ? a : b; }
template <typename T> static inline T min(T a, T b) { return a < b ? a : b; }

#define TP_VEC2(T) struct T##2 { T x, y; }; static inline T##2 make_##T##2(T x, T y) { return T##2{x, y}; }
#define TP_VEC4(T) struct T##4 { T x, y, z, w; }; \
  static inline T##4 make_##T##4(T x, T y, T z, T w) { return T##4{x, y, z, w}; }
TP_VEC2(float) TP_VEC4(float) TP_VEC2(int) TP_VEC4(int) TP_VEC2(double) TP_VEC4(double)
typedef unsigned char uchar;
typedef unsigned int uint;
