"""An fp16 matmul kernel on RDNA3's matrix cores (WMMA, `v_wmma_f32_16x16x16_f16`), as AMDGPU LLVM IR.

Not reachable from Tensor code yet: tinyplug's optimiser has no tensor-core action (`Renderer.tensor_cores` is
declared in the core and unused), so nothing turns a matmul's UOps into WMMA. This module writes one kernel shape by
itself, so the intrinsic, its operand layout and the launch are compiled (gfx1100) and checked on the emulator
(`MOCK+AMD` lowers the intrinsic) until that action exists.

The kernel `C[M, N] = A[M, K] @ B[K, N]` (A and B half, row-major; C float) gives each work-group one wave of 32
work-items and one 16x16 tile of C; it walks K 16 at a time with `llvm.amdgcn.wmma.f32.16x16x16.f16` (wave32).
Operand layout on gfx11 (wave32): lane l holds row `l % 16` of A's 16x16 block and column `l % 16` of B's (lanes
16-31 repeat lanes 0-15); the accumulator's element v in lane l is C[2v + l // 16][l % 16]."""
from __future__ import annotations
from tinyplug_amd.renderer import CODE_OBJECT_VERSION
from tinyplug_amd.targets import arch_info

WMMA = "llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v16f16"
TILE = 16
WAVE = 32

Size3 = tuple[int, int, int]

def wmma_matmul(m: int, n: int, k: int, arch: str = "gfx1100") -> tuple[str, str, Size3, Size3]:
  """(kernel name, LLVM IR, global size in work-groups, local size) of the WMMA matmul for these sizes, each a
  multiple of 16. Buffers: data0 = C (float), data1 = A (half), data2 = B (half)."""
  target = arch_info(arch)
  if not target.wmma or target.wave != WAVE:
    raise ValueError(f"{target.name} ({target.family}) has no wave32 WMMA: the WMMA matmul is for RDNA3 (gfx11)")
  if any(x <= 0 or x % TILE for x in (m, n, k)):
    raise ValueError(f"WMMA matmul sizes must be multiples of 16, not {m}x{n}x{k}")
  name = f"wmma_matmul_{m}_{n}_{k}"
  a_elems = "\n".join(f"  %ap{e} = getelementptr inbounds half, ptr addrspace(1) %data1, i32 %aidx{e}\n"
                      f"  %av{e} = load half, ptr addrspace(1) %ap{e}, align 2\n"
                      f"  %a{e + 1} = insertelement <16 x half> {f'%a{e}' if e else 'poison'}, half %av{e}, i32 {e}" for e in range(TILE))
  b_elems = "\n".join(f"  %bp{e} = getelementptr inbounds half, ptr addrspace(1) %data2, i32 %bidx{e}\n"
                      f"  %bv{e} = load half, ptr addrspace(1) %bp{e}, align 2\n"
                      f"  %b{e + 1} = insertelement <16 x half> {f'%b{e}' if e else 'poison'}, half %bv{e}, i32 {e}" for e in range(TILE))
  # element e of A's fragment: A[row][k0 + e]; of B's: B[k0 + e][col]
  a_index = "\n".join(f"  %aidx{e} = add i32 %arow, {e}" for e in range(TILE))
  b_index = "\n".join(f"  %bidx{e} = add i32 %bcol, {e * n}" for e in range(TILE))
  stores = "\n".join(f"  %cv{v} = extractelement <8 x float> %acc.next, i32 {v}\n"
                     f"  %crow{v} = add i32 %rowbase, {2 * v}\n"
                     f"  %cr{v} = mul i32 %crow{v}, {n}\n"
                     f"  %ci{v} = add i32 %cr{v}, %colidx\n"
                     f"  %cp{v} = getelementptr inbounds float, ptr addrspace(1) %data0, i32 %ci{v}\n"
                     f"  store float %cv{v}, ptr addrspace(1) %cp{v}, align 4" for v in range(8))
  src = f"""define amdgpu_kernel void @{name}(ptr addrspace(1) noalias %data0, ptr addrspace(1) noalias %data1, ptr addrspace(1) noalias %data2) #0 {{
entry:
  %lane = call i32 @llvm.amdgcn.workitem.id.x()
  %tn = call i32 @llvm.amdgcn.workgroup.id.x()
  %tm = call i32 @llvm.amdgcn.workgroup.id.y()
  %r = and i32 %lane, 15
  %hi = lshr i32 %lane, 4
  %row0 = shl i32 %tm, 4
  %row = add i32 %row0, %r
  %col0 = shl i32 %tn, 4
  %colidx = add i32 %col0, %r
  %arowbase = mul i32 %row, {k}
  br label %loop
loop:
  %k0 = phi i32 [0, %entry], [%k1, %loop]
  %acc = phi <8 x float> [zeroinitializer, %entry], [%acc.next, %loop]
  %arow = add i32 %arowbase, %k0
{a_index}
{a_elems}
  %bk = mul i32 %k0, {n}
  %bcol = add i32 %bk, %colidx
{b_index}
{b_elems}
  %acc.next = call <8 x float> @{WMMA}(<16 x half> %a16, <16 x half> %b16, <8 x float> %acc)
  %k1 = add i32 %k0, {TILE}
  %more = icmp slt i32 %k1, {k}
  br i1 %more, label %loop, label %done
done:
  %rowbase = add i32 %row0, %hi
{stores}
  ret void
}}

declare i32 @llvm.amdgcn.workitem.id.x() nounwind readnone speculatable
declare i32 @llvm.amdgcn.workgroup.id.x() nounwind readnone speculatable
declare i32 @llvm.amdgcn.workgroup.id.y() nounwind readnone speculatable
declare <8 x float> @{WMMA}(<16 x half>, <16 x half>, <8 x float>) convergent nounwind readnone
attributes #0 = {{ nounwind "amdgpu-flat-work-group-size"="1,{WAVE}" }}
!llvm.module.flags = !{{!0}}
!0 = !{{i32 1, !"amdhsa_code_object_version", i32 {CODE_OBJECT_VERSION}}}
"""
  return name, src, (n // TILE, m // TILE, 1), (WAVE, 1, 1)
