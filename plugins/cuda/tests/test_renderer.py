"""The CUDA C renderer: what it writes (hand-built programs and kernels from the real pipeline), and that NVRTC compiles
every kernel these tests render for sm_75, sm_80 and sm_90 (no GPU needed)."""
from __future__ import annotations
import math
from concurrent.futures import ThreadPoolExecutor
import pytest
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug.uop import UOp, Ops, dtypes
from tinyplug_cuda import CUDARenderer
from tinyplug_cuda.renderer import known_divisor

ARCHS = ("sm_75", "sm_80", "sm_90")

def g(i, dt=dtypes.float, n=16): return UOp(Ops.DEFINE_GLOBAL, dt.ptr(n), arg=i)
def c(v, dt=dtypes.int): return UOp.const(dt, v)
def store(buf, idx, val): return UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, buf.dtype, (buf, idx)), val))
def load(buf, idx, dt=dtypes.float): return UOp(Ops.LOAD, dt, (UOp(Ops.INDEX, buf.dtype, (buf, idx)),))

def test_signature_ids_and_launch_bounds():
  uops = [g(0), UOp(Ops.DEFINE_VAR, dtypes.int, arg=("n", 0, 9)), UOp(Ops.SPECIAL, dtypes.int, arg=("gidx0", 16)),
          UOp(Ops.SPECIAL, dtypes.int, arg=("lidx0", 8)), UOp(Ops.SPECIAL, dtypes.int, arg=("lidx1", 4)),
          UOp(Ops.SPECIAL, dtypes.int, arg=("idx2", 2))]
  src = CUDARenderer().render("k", uops)
  assert 'extern "C" __global__ void __launch_bounds__(32) k(float* __restrict__ data0, int n) {' in src
  for text in ("int gidx0 = blockIdx.x;", "int lidx0 = threadIdx.x;", "int lidx1 = threadIdx.y;",
               "int idx2 = (blockIdx.z*blockDim.z+threadIdx.z);"):
    assert text in src

def test_shared_memory_and_barrier_from_a_group_reduction(render, tensor):
  (spec,) = render(tensor(8, 256).sum(axis=1), opts=[Opt(OptOps.GROUPTOP, 0, 64)])
  assert "__shared__ __align__(16) float" in spec.src and "__syncthreads();" in spec.src
  assert "__launch_bounds__(64)" in spec.src and spec.local_size == (64, 1, 1)

def test_half_and_bf16_include_their_headers_and_round_through_float(render, tensor):
  (spec,) = render(tensor(16, dtype=dtypes.half).exp2() + tensor(16, dtype=dtypes.bfloat16).cast(dtypes.half))
  assert "#include <cuda_fp16.h>" in spec.src and "#include <cuda_bf16.h>" in spec.src
  assert "exp2f((float)(" in spec.src and "__nv_bfloat16* __restrict__" in spec.src
  (spec,) = render(tensor(16, dtype=dtypes.float).cast(dtypes.half))
  assert "cuda_bf16.h" not in spec.src

def test_vector_loads_only_where_aligned(render, tensor):
  (spec,) = render(tensor(64) * 2, opts=[Opt(OptOps.UPCAST, 0, 4)])
  assert "(*((float4*)(data1+" in spec.src and "*((float4*)(data0+" in spec.src
  # rows of 6 read from column 1: those 4-wide loads are not 16-byte aligned, so they are put together lane by lane
  # (the output, rows of 4, is stored whole)
  (spec,) = render(tensor(10, 6)[:, 1:5] * 2, opts=[Opt(OptOps.UPCAST, 1, 4)])
  assert "(float4*)(data1" not in spec.src and "make_float4(data1[" in spec.src and "*((float4*)(data0+" in spec.src
  x = UOp(Ops.SPECIAL, dtypes.int, arg=("gidx0", 4))
  assert known_divisor(x * 8 + 4) == 4 and known_divisor((x + 1) * 4) == 4 and known_divisor(x * 4 + 2) == 2 and known_divisor(c(0)) == 0

def test_no_vector_math_reaches_the_renderer(render, tensor):
  (spec,) = render(tensor(64, 64) @ tensor(64, 64), opts=[Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UPCAST, 0, 4)])
  assert "float4 val" in spec.src                                        # vector loads ...
  assert not any(o.op in (Ops.ADD, Ops.MUL, Ops.MULACC) and o.dtype.count > 1 for o in spec.uops)   # ... scalar math
  r = CUDARenderer()
  v = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(16), arg=0)
  vec = UOp(Ops.LOAD, dtypes.float.vec(4), (UOp(Ops.INDEX, dtypes.float.ptr(16).vec(4), (v, c(0))),))
  with pytest.raises(NotImplementedError, match="per lane"): r.render("k", [v, vec, vec + vec])

def test_half_vectors_use_cuda_half2_and_a_half4_struct(render, tensor):
  (spec,) = render(tensor(64, dtype=dtypes.half) * 3, opts=[Opt(OptOps.UPCAST, 0, 2)])
  assert "half2" in spec.src and "struct" not in spec.src          # half2/make_half2 come with cuda_fp16.h
  (spec,) = render(tensor(64, dtype=dtypes.bfloat16) + 1, opts=[Opt(OptOps.UPCAST, 0, 4)])
  assert "struct __align__(8) bf16x4 { __nv_bfloat16 x, y, z, w; };" in spec.src

def test_literals_and_int_division():
  r = CUDARenderer()
  assert r.render_const(math.inf, dtypes.float) == "__int_as_float(0x7f800000)"
  assert r.render_const(-math.inf, dtypes.half) == "((half)(-__int_as_float(0x7f800000)))"
  assert r.render_const(1.5, dtypes.bfloat16) == "((__nv_bfloat16)1.5f)"
  assert r.render_const(-2**63, dtypes.long) == "(-9223372036854775807ll-1)"
  a, b = g(0, dtypes.int), g(1, dtypes.int)
  x, y = load(a, c(0), dtypes.int), load(b, c(0), dtypes.int)
  src = r.render("k", [a, b, c(0), x, y, UOp(Ops.IDIV, dtypes.int, (x, y)), store(a, c(1), UOp(Ops.IDIV, dtypes.int, (x, y)))])
  assert "==-1)?((int)((unsigned int)0-(unsigned int)(val0)))" in src   # INT_MIN/-1 wraps, x/0 is x: no trap

@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_every_rendered_kernel_compiles_with_nvrtc(nvrtc, arch, render, kernel_table):
  sources = []
  from tinyplug_cuda.renderer import CUDARenderer
  for name, build, opts in kernel_table:   # rendered for `arch`: from sm_80 on, a half matmul runs on tensor cores
    sources += [(name, spec.src) for spec in render(build(), renderer=CUDARenderer(arch), opts=opts)]
  assert len(sources) >= len(kernel_table)
  def compile_one(item):
    name, src = item
    try: return name, nvrtc.compile_cuda(src, arch)
    except nvrtc.NVRTCError as e: return name, e
  with ThreadPoolExecutor(2) as pool: results = list(pool.map(compile_one, sources))   # NVRTC runs without the GIL
  failed = [f"{name}: {err}" for name, err in results if isinstance(err, Exception)]
  assert not failed, "\n\n".join(failed[:3])
  assert all(out[:4] == b"\x7fELF" for _, out in results)   # cubins are ELF files
