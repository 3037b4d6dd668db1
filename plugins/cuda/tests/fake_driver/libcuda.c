// A stand-in for the NVIDIA driver (libcuda.so.1) for the cuda plugin's runtime tests on machines without a GPU:
// one "sm_80" GPU whose memory is host memory. Copies are real; a module must be an ELF cubin; a launch runs no code:
// it writes what it was given (grid, block, the first int parameter after the buffers, then a count of launches so far)
// into the first buffer, so the test sees how the runtime packed the call. Events report 1.5 ms.
// CUDA graphs: kernel nodes with CUDA_KERNEL_NODE_PARAMS laid out as cuda.h declares them (the _v2 entry points and
// struct; built with -DFAKE_GRAPH_V1, the unversioned ones with the v1 struct, as a CUDA 11 driver has), each node must
// depend on exactly the node added before it; a graph launch runs its nodes in order like launches, with the argument
// values copied when the node was added or its parameters set.
#include <stddef.h>
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
    case 16: *v = 4; break; case 75: *v = 8; break; case 76: *v = 0; break; case 97: *v = 166912; break;
    default: *v = 0;
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
// the dynamic shared memory a function may use (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES; 48 KB unless set)
static struct { void *f; int bytes; } shared_limits[64];
static int n_shared_limits = 0;
CUresult cuFuncSetAttribute(void *f, int attr, int value) {
  if (attr != 8 || value > 232448 || n_shared_limits == 64) return 1;   // CUDA_ERROR_INVALID_VALUE
  shared_limits[n_shared_limits].f = f; shared_limits[n_shared_limits++].bytes = value; return 0;
}
static int shared_limit(void *f) {
  for (int i = n_shared_limits - 1; i >= 0; i--) if (shared_limits[i].f == f) return shared_limits[i].bytes;
  return 49152;
}
static uint32_t launches = 0;
static void run(uint32_t *out, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, uint32_t arg1) {
  uint32_t seen[8] = {gx, gy, gz, bx, by, bz, arg1, ++launches};
  size_t words = *(size_t *)((char *)out - 16) / 4;
  for (size_t i = 0; i < 8 && i < words; i++) out[i] = seen[i];
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
  if ((int)shared > shared_limit(f)) return 1;   // more dynamic shared memory than the function was allowed
  // params[1]: a buffer's low bits, or an int
  run(*(uint32_t **)params[0], gx, gy, gz, bx, by, bz, params[1] ? *(uint32_t *)params[1] : 0);
  return 0;
}

// ---- graphs ----
typedef struct {   // cuda.h: CUDA_KERNEL_NODE_PARAMS_v1
  void *func; unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  void **kernelParams; void **extra;
} CUDA_KERNEL_NODE_PARAMS_v1;
typedef struct {   // cuda.h: CUDA_KERNEL_NODE_PARAMS_v2 (CUDA 12+)
  void *func; unsigned int gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes;
  void **kernelParams; void **extra; void *kern; void *ctx;
} CUDA_KERNEL_NODE_PARAMS_v2;
#ifdef FAKE_GRAPH_V1
typedef CUDA_KERNEL_NODE_PARAMS_v1 NODE_PARAMS;
#else
typedef CUDA_KERNEL_NODE_PARAMS_v2 NODE_PARAMS;
#endif
// the C compiler's layout of both structs, for the test that checks the plugin's ctypes structs against it
void fake_kernel_node_params_layout(size_t *out) {
  size_t v[] = {offsetof(CUDA_KERNEL_NODE_PARAMS_v2, func), offsetof(CUDA_KERNEL_NODE_PARAMS_v2, gridDimX),
    offsetof(CUDA_KERNEL_NODE_PARAMS_v2, gridDimY), offsetof(CUDA_KERNEL_NODE_PARAMS_v2, gridDimZ),
    offsetof(CUDA_KERNEL_NODE_PARAMS_v2, blockDimX), offsetof(CUDA_KERNEL_NODE_PARAMS_v2, blockDimY),
    offsetof(CUDA_KERNEL_NODE_PARAMS_v2, blockDimZ), offsetof(CUDA_KERNEL_NODE_PARAMS_v2, sharedMemBytes),
    offsetof(CUDA_KERNEL_NODE_PARAMS_v2, kernelParams), offsetof(CUDA_KERNEL_NODE_PARAMS_v2, extra),
    offsetof(CUDA_KERNEL_NODE_PARAMS_v2, kern), offsetof(CUDA_KERNEL_NODE_PARAMS_v2, ctx),
    sizeof(CUDA_KERNEL_NODE_PARAMS_v2), sizeof(CUDA_KERNEL_NODE_PARAMS_v1)};
  memcpy(out, v, sizeof v);
}
typedef struct { unsigned grid[3], block[3]; uint64_t buf0; uint32_t arg1; int index; } Node;
typedef struct { Node nodes[4096]; int n; } Graph;
int graph_launches = 0, graph_param_sets = 0;
static CUresult fill(Node *node, const NODE_PARAMS *p) {
  if (!p->func || !p->kernelParams || p->extra || (int)p->sharedMemBytes > shared_limit(p->func)) return 1;
#ifndef FAKE_GRAPH_V1
  if (p->kern || p->ctx) return 1;
#endif
  unsigned g[6] = {p->gridDimX, p->gridDimY, p->gridDimZ, p->blockDimX, p->blockDimY, p->blockDimZ};
  memcpy(node->grid, g, sizeof node->grid); memcpy(node->block, g + 3, sizeof node->block);
  node->buf0 = *(uint64_t *)p->kernelParams[0];   // the driver copies the values the pointers point at
  node->arg1 = p->kernelParams[1] ? *(uint32_t *)p->kernelParams[1] : 0;
  return 0;
}
CUresult cuGraphCreate(void **g, unsigned flags) { Graph *gr = calloc(1, sizeof(Graph)); *g = gr; return gr ? 0 : 2; }
#ifdef FAKE_GRAPH_V1
CUresult cuGraphAddKernelNode(Node **node, Graph *g, Node **deps, size_t ndeps, const NODE_PARAMS *p) {
#else
CUresult cuGraphAddKernelNode_v2(Node **node, Graph *g, Node **deps, size_t ndeps, const NODE_PARAMS *p) {
#endif
  if (g->n == 4096) return 2;
  if (g->n == 0 ? ndeps != 0 : (ndeps != 1 || deps[0] != &g->nodes[g->n - 1])) return 1;   // a chain, in order
  Node *nd = &g->nodes[g->n];
  CUresult r = fill(nd, p);
  if (r) return r;
  nd->index = g->n++; *node = nd; return 0;
}
CUresult cuGraphInstantiateWithFlags(Graph **exec, Graph *g, unsigned long long flags) {
  if (flags) return 1;
  Graph *e = malloc(sizeof(Graph)); memcpy(e, g, sizeof(Graph)); *exec = e; return 0;
}
#ifdef FAKE_GRAPH_V1
CUresult cuGraphExecKernelNodeSetParams(Graph *exec, Node *node, const NODE_PARAMS *p) {
#else
CUresult cuGraphExecKernelNodeSetParams_v2(Graph *exec, Node *node, const NODE_PARAMS *p) {
#endif
  graph_param_sets++;
  return fill(&exec->nodes[node->index], p);
}
CUresult cuGraphLaunch(Graph *exec, void *stream) {
  graph_launches++;
  for (int i = 0; i < exec->n; i++) {
    Node *nd = &exec->nodes[i];
    run((uint32_t *)nd->buf0, nd->grid[0], nd->grid[1], nd->grid[2], nd->block[0], nd->block[1], nd->block[2], nd->arg1);
  }
  return 0;
}
CUresult cuGraphExecDestroy(Graph *exec) { free(exec); return 0; }
CUresult cuGraphDestroy(Graph *g) { free(g); return 0; }
CUresult cuEventCreate(void **e, unsigned flags) { *e = malloc(1); return 0; }
CUresult cuEventRecord(void *e, void *s) { return 0; }
CUresult cuEventSynchronize(void *e) { return 0; }
CUresult cuEventElapsedTime(float *ms, void *a, void *b) { *ms = 1.5f; return 0; }
CUresult cuEventDestroy_v2(void *e) { free(e); return 0; }
// NVRTC looks for the driver too and asks it for its private export tables: there are none here
CUresult cuGetExportTable(const void **table, const void *id) { *table = 0; return 500; }   // CUDA_ERROR_NOT_FOUND
CUresult cuGetErrorName(CUresult c, const char **s) { *s = c == 200 ? "CUDA_ERROR_INVALID_IMAGE" : "CUDA_ERROR_FAKE"; return 0; }
CUresult cuGetErrorString(CUresult c, const char **s) { *s = c == 200 ? "device kernel image is invalid" : "fake"; return 0; }
