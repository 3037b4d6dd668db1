// AMDGPU operations that span a wave, for LLVM IR written for AMDGPU on the emulator (the llvm-ir dialect lowers the
// intrinsics to calls of these). A work-group runs on one host thread with its work-items as fibers, so a wave's
// lanes exchange data through thread-local scratch, with a barrier after writing and another after reading: the
// kernel must reach these calls with the whole work-group, as a wave reaches them together on the GPU.
#include <stdint.h>
#include <string.h>

uint64_t tp_local_id(uint32_t d);
uint64_t tp_local_size(uint32_t d);
__attribute__((convergent)) void tp_barrier(void);

#define TP_MAX_ITEMS 1024
#define TP_WAVE32 32
static _Thread_local _Float16 wmma_a[TP_MAX_ITEMS][16], wmma_b[TP_MAX_ITEMS][16];

// llvm.amdgcn.wmma.f32.16x16x16.f16 on gfx11, wave32: D = A * B + C for one 16x16x16 block per wave. Lane l brings
// row l%16 of A and column l%16 of B (lanes 16-31 repeat lanes 0-15; the first 16 are read); element v of D and C
// in lane l is row 2v + l/16, column l%16. Products of halves are exact in float; the sum runs in k order.
void tp_wmma_f32_16x16x16_f16(const _Float16 *a, const _Float16 *b, const float *c, float *d) {
  uint64_t id = tp_local_id(0) + tp_local_size(0) * (tp_local_id(1) + tp_local_size(1) * tp_local_id(2));
  uint64_t wave = id / TP_WAVE32 * TP_WAVE32, lane = id % TP_WAVE32;
  if (id < TP_MAX_ITEMS) { memcpy(wmma_a[id], a, sizeof wmma_a[id]); memcpy(wmma_b[id], b, sizeof wmma_b[id]); }
  tp_barrier();
  for (int v = 0; v < 8; v++) {
    uint64_t row = 2 * v + lane / 16, col = lane % 16;
    float acc = c[v];
    for (int e = 0; e < 16; e++) acc += (float)wmma_a[wave + row][e] * (float)wmma_b[wave + col][e];
    d[v] = acc;
  }
  tp_barrier();
}
