"""Matmul tiles on Apple's matrix hardware: MSL's `simdgroup_matrix` (MSL 2.3; Apple GPU family 7 and later, M1 on).

A SIMD-group (32 threads) holds an 8x8 tile collectively; `simdgroup_load` / `simdgroup_store` move a tile between
memory and the group with a row stride, `simdgroup_multiply_accumulate(d, a, b, c)` computes d = a*b + c. The
types are `simdgroup_float8x8`, `simdgroup_half8x8` and (MSL 3.1) `simdgroup_bfloat8x8`; half or bfloat inputs may
accumulate into float.

`render_matmul` writes a complete kernel for C[M,N] = A[M,K] @ B[K,N] (row-major, contiguous), one SIMD-group per
threadgroup computing a block of `tiles` 8x8 output tiles. This is not wired into the kernel optimiser: the core's
`Renderer.tensor_cores` is declared but nothing reads it yet, so `Tensor.matmul` never produces these kernels; the
function is the MSL a tensor-core path would emit, checked (tinyplug_metal.check) and run on MOCK+METAL by the tests."""
from __future__ import annotations
from tinyplug.backend import ProgramSpec
from tinyplug.uop.dtype import DType, dtypes

TILE = 8           # simdgroup matrices are 8x8
SIMD_WIDTH = 32    # threads of a SIMD-group on every Apple GPU
_NAMES = {dtypes.float32: "float", dtypes.float16: "half", dtypes.bfloat16: "bfloat"}
# (input, accumulator) pairs the hardware multiplies
COMBINATIONS = ((dtypes.float32, dtypes.float32), (dtypes.float16, dtypes.float32), (dtypes.float16, dtypes.float16),
                (dtypes.bfloat16, dtypes.float32), (dtypes.bfloat16, dtypes.bfloat16))

def render_matmul(M: int, N: int, K: int, dtype_in: DType = dtypes.float16, dtype_acc: DType = dtypes.float32,
                  tiles: tuple[int, int] = (2, 2), name: str | None = None) -> ProgramSpec:
  """The kernel for C[M,N] (dtype_acc) = A[M,K] @ B[K,N] (dtype_in) with `tiles` = (rows, cols) of 8x8 tiles per
  threadgroup; buffers are data0 = C, data1 = A, data2 = B. M must divide by 8*rows, N by 8*cols, K by 8."""
  if (dtype_in, dtype_acc) not in COMBINATIONS:
    raise ValueError(f"simdgroup matrices multiply {dtype_in!r} into {dtype_acc!r} on no Apple GPU "
                     f"(supported: {', '.join(f'{a.name}->{c.name}' for a, c in COMBINATIONS)})")
  tm, tn = tiles
  if tm < 1 or tn < 1 or M % (TILE * tm) or N % (TILE * tn) or K % TILE or min(M, N, K) <= 0:
    raise ValueError(f"a {M}x{K} @ {K}x{N} matmul does not split into {tm}x{tn} blocks of {TILE}x{TILE} tiles "
                     f"(M must divide by {TILE * tm}, N by {TILE * tn}, K by {TILE})")
  tin, tacc = _NAMES[dtype_in], _NAMES[dtype_acc]
  name = name or f"simd_mm_{tin}_{tacc}_{M}_{N}_{K}"
  accs = [(i, j) for i in range(tm) for j in range(tn)]
  lines = ["#include <metal_stdlib>", "using namespace metal;",
           f"kernel void {name}(device {tacc}* data0 [[buffer(0)]], device {tin}* data1 [[buffer(1)]], "
           f"device {tin}* data2 [[buffer(2)]], uint3 gid [[threadgroup_position_in_grid]]) {{",
           f"  int row = gid.y*{TILE * tm};",
           f"  int col = gid.x*{TILE * tn};"]
  lines += [f"  simdgroup_{tacc}8x8 acc{i}_{j} = make_filled_simdgroup_matrix<{tacc}, 8, 8>(({tacc})0.0f);" for i, j in accs]
  lines += [f"  simdgroup_{tin}8x8 " + ", ".join([f"a{i}" for i in range(tm)] + [f"b{j}" for j in range(tn)]) + ";",
            f"  for (int k = 0; k < {K}; k += 8) {{"]
  lines += [f"    simdgroup_load(a{i}, data1+(row+{TILE * i})*{K}+k, {K});" for i in range(tm)]
  lines += [f"    simdgroup_load(b{j}, data2+k*{N}+col+{TILE * j}, {N});" for j in range(tn)]
  lines += [f"    simdgroup_multiply_accumulate(acc{i}_{j}, a{i}, b{j}, acc{i}_{j});" for i, j in accs]
  lines += ["  }"]
  lines += [f"  simdgroup_store(acc{i}_{j}, data0+(row+{TILE * i})*{N}+col+{TILE * j}, {N});" for i, j in accs]
  lines += ["}"]
  return ProgramSpec(name, (), "\n".join(lines) + "\n", global_size=(N // (TILE * tn), M // (TILE * tm), 1),
                     local_size=(SIMD_WIDTH, 1, 1), outs=(0,), ins=(1, 2))
