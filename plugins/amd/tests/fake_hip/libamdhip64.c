// A stand-in for ROCm's HIP runtime (libamdhip64.so) for the amd plugin's runtime tests on machines without ROCm:
// one "gfx1100" GPU whose memory is host memory. Copies are real; a module must be an AMDGPU ELF (e_machine 224); a
// launch runs no code: kernel `k` writes what it was given (grid, block, the kernarg buffer's size and the int after the
// first pointer) into the buffer the first kernel argument points at, so the test sees how the runtime packed the
// call. Events report 1.5 ms. Offsets are those of hipDeviceProp_tR0600 (ROCm 6).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int hipError_t;
static int initialised = 0;
hipError_t hipInit(unsigned flags) { initialised = 1; return 0; }
hipError_t hipDriverGetVersion(int *v) { *v = 60400000; return 0; }
hipError_t hipRuntimeGetVersion(int *v) { *v = 60400000; return 0; }
hipError_t hipGetDeviceCount(int *n) { if (!initialised) return 3; *n = 1; return 0; }
hipError_t hipSetDevice(int d) { return d == 0 ? 0 : 101; }
hipError_t hipDeviceSynchronize(void) { return 0; }
hipError_t hipGetDevicePropertiesR0600(unsigned char *p, int d) {
  if (d != 0) return 101;
  memset(p, 0, 1472);
  strcpy((char *)p, "Fake Radeon");
  *(uint64_t *)(p + 288) = (uint64_t)1 << 30;   // totalGlobalMem
  *(uint64_t *)(p + 296) = 65536;               // sharedMemPerBlock
  *(int *)(p + 308) = 32;                       // warpSize
  *(int *)(p + 320) = 1024;                     // maxThreadsPerBlock
  int dims[6] = {1024, 1024, 1024, 2147483647, 65536, 65536};
  memcpy(p + 324, dims, sizeof dims);           // maxThreadsDim, maxGridSize
  *(int *)(p + 388) = 48;                       // multiProcessorCount
  strcpy((char *)p + 1160, "gfx1100:sramecc-:xnack-");
  return 0;
}
hipError_t hipMalloc(void **p, size_t n) { *p = malloc(n); return *p ? 0 : 2; }
hipError_t hipFree(void *p) { free(p); return 0; }
hipError_t hipHostMalloc(void **p, size_t n, unsigned flags) { *p = malloc(n); return *p ? 0 : 2; }
hipError_t hipHostFree(void *p) { free(p); return 0; }
hipError_t hipMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream) {
  if (kind < 1 || kind > 3) return 21;
  memcpy(dst, src, n);
  return 0;
}
hipError_t hipStreamCreate(void **s) { *s = (void *)0x2; return 0; }
hipError_t hipStreamSynchronize(void *s) { return 0; }
hipError_t hipModuleLoadData(void **m, const unsigned char *image) {
  if (memcmp(image, "\x7f" "ELF", 4) != 0 || *(const uint16_t *)(image + 18) != 224) return 200;   // hipErrorInvalidImage
  *m = (void *)0x3;
  return 0;
}
hipError_t hipModuleUnload(void *m) { return 0; }
// only the test's kernel `k` (its buffer has room) gets the record; other kernels launch as no-ops
hipError_t hipModuleGetFunction(void **f, void *m, const char *name) { *f = (void *)(strcmp(name, "k") ? 0x6 : 0x4); return 0; }
hipError_t hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                 unsigned shared, void *stream, void **params, void **extra) {
  if (params != NULL || extra == NULL) return 1;
  if ((uintptr_t)extra[0] != 1 || (uintptr_t)extra[2] != 2 || (uintptr_t)extra[4] != 3) return 1;
  const unsigned char *args = extra[1];
  size_t size = *(size_t *)extra[3];
  if ((uintptr_t)f != 0x4) return 0;
  uint32_t *out = *(uint32_t **)args;
  uint32_t got[8] = {gx, gy, gz, bx, by, bz, (uint32_t)size, size >= 12 ? *(const uint32_t *)(args + 8) : 0};
  memcpy(out, got, sizeof got);
  return 0;
}
hipError_t hipEventCreate(void **e) { *e = (void *)0x5; return 0; }
hipError_t hipEventRecord(void *e, void *s) { return 0; }
hipError_t hipEventSynchronize(void *e) { return 0; }
hipError_t hipEventElapsedTime(float *ms, void *a, void *b) { *ms = 1.5f; return 0; }
hipError_t hipEventDestroy(void *e) { return 0; }
const char *hipGetErrorName(hipError_t e) { return e == 200 ? "hipErrorInvalidImage" : "hipErrorUnknown"; }
const char *hipGetErrorString(hipError_t e) { return e == 200 ? "invalid kernel image" : "unknown error"; }
