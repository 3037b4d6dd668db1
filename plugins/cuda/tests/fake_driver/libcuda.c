// A stand-in for the NVIDIA driver (libcuda.so.1) for the cuda plugin's runtime tests on machines without a GPU:
// one "sm_80" GPU whose memory is host memory. Copies are real; a module must be an ELF cubin; a launch runs no code:
// it writes what it was given (grid, block, the first int parameter after the buffers) into the first buffer, so the
// test sees how the runtime packed the call. Events report 1.5 ms.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
static int initialised = 0;
CUresult cuInit(unsigned flags) { initialised = 1; return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *n) { if (!initialised) return 3; *n = 1; return 0; }
CUresult cuDeviceGet(int *d, int ordinal) { if (ordinal != 0) return 101; *d = 0; return 0; }
CUresult cuDeviceGetName(char *name, int len, int d) { strncpy(name, "Fake GPU", len); return 0; }
CUresult cuDeviceGetAttribute(int *v, int attr, int d) {
  switch (attr) {
    case 1: *v = 1024; break; case 2: case 3: *v = 1024; break; case 4: *v = 64; break;
    case 5: *v = 2147483647; break; case 6: case 7: *v = 65535; break; case 8: *v = 49152; break;
    case 16: *v = 4; break; case 75: *v = 8; break; case 76: *v = 0; break; default: *v = 0;
  }
  return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, int d) { *bytes = (size_t)1 << 30; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int d) { *ctx = (void *)0x1; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int d) { return 0; }
CUresult cuCtxSetCurrent(void *ctx) { return ctx ? 0 : 201; }
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuStreamCreate(void **s, unsigned flags) { *s = (void *)0x2; return 0; }
CUresult cuStreamSynchronize(void *s) { return 0; }
// device memory: host memory with its size in a 16-byte header (a launch writes no more than the buffer holds)
CUresult cuMemAlloc_v2(uint64_t *p, size_t n) {
  char *m = calloc(1, n + 16); if (!m) return 2;
  *(size_t *)m = n; *p = (uint64_t)(m + 16); return 0;
}
CUresult cuMemFree_v2(uint64_t p) { free((char *)p - 16); return 0; }
int pinned_allocs = 0;
CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) { *p = malloc(n); pinned_allocs++; return *p ? 0 : 2; }
CUresult cuMemFreeHost(void *p) { free(p); return 0; }
CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t n, void *s) { memcpy((void *)dst, src, n); return 0; }
CUresult cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t n, void *s) { memcpy(dst, (void *)src, n); return 0; }
CUresult cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t n, void *s) { memcpy((void *)dst, (void *)src, n); return 0; }
CUresult cuModuleLoadData(void **m, const void *image) {
  if (memcmp(image, "\x7f" "ELF", 4) != 0) return 200;   // CUDA_ERROR_INVALID_IMAGE
  *m = (void *)0x3; return 0;
}
CUresult cuModuleUnload(void *m) { return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *name) { *f = (void *)strdup(name); return 0; }
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
  uint32_t *out = *(uint32_t **)params[0];
  uint32_t seen[7] = {gx, gy, gz, bx, by, bz, params[1] ? *(uint32_t *)params[1] : 0};   // (a buffer's low bits, or an int)
  size_t words = *(size_t *)((char *)out - 16) / 4;
  for (size_t i = 0; i < 7 && i < words; i++) out[i] = seen[i];
  return 0;
}
CUresult cuEventCreate(void **e, unsigned flags) { *e = malloc(1); return 0; }
CUresult cuEventRecord(void *e, void *s) { return 0; }
CUresult cuEventSynchronize(void *e) { return 0; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { *ms = 1.5f; return 0; }
CUresult cuEventDestroy_v2(void *e) { free(e); return 0; }
// NVRTC looks for the driver too and asks it for its private export tables: there are none here
CUresult cuGetExportTable(const void **table, const void *id) { *table = 0; return 500; }   // CUDA_ERROR_NOT_FOUND
CUresult cuGetErrorName(CUresult c, const char **s) { *s = c == 200 ? "CUDA_ERROR_INVALID_IMAGE" : "CUDA_ERROR_FAKE"; return 0; }
CUresult cuGetErrorString(CUresult c, const char **s) { *s = c == 200 ? "device kernel image is invalid" : "fake"; return 0; }
