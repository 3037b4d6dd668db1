// Device-side stand-in for HIP's hip_runtime.h, for compiling the HIP renderer's kernels with a plain clang (>= 19,
// -nogpuinc -nogpulib: no ROCm installed). It gives exactly what the renderer's kernels use, from clang's AMDGPU
// built-ins: the kernel/shared/device attributes, __launch_bounds__, threadIdx/blockIdx/blockDim/gridDim and
// __syncthreads() (a work-group-scope release fence, s_barrier, an acquire fence, as HIP's own). With ROCm, hiprtc
// supplies the real header instead.
#pragma once
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __launch_bounds__(n) __attribute__((amdgpu_flat_work_group_size(1, n)))

#define TP_ID3(name, fx, fy, fz) \
  struct tp_##name##_t { \
    __device__ unsigned int __get_x() const { return fx; } \
    __device__ unsigned int __get_y() const { return fy; } \
    __device__ unsigned int __get_z() const { return fz; } \
    __declspec(property(get = __get_x)) unsigned int x; \
    __declspec(property(get = __get_y)) unsigned int y; \
    __declspec(property(get = __get_z)) unsigned int z; \
  }; \
  static constexpr __device__ tp_##name##_t name{};

TP_ID3(threadIdx, __builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(), __builtin_amdgcn_workitem_id_z())
TP_ID3(blockIdx, __builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(), __builtin_amdgcn_workgroup_id_z())
#undef TP_ID3

__device__ inline void __syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
