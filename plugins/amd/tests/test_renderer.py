"""The AMDGPU renderer's IR: what each AMDGPU-specific part looks like in the text (the compile tests prove LLVM and
ld.lld accept it, the emulator tests that it computes the right values)."""
from __future__ import annotations
import pytest
from tinyplug import Tensor, dtypes
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug_amd.renderer import AMDGPURenderer
from tinyplug_amd.targets import TESTED, arch_info

def t(*shape, dtype=dtypes.float32) -> Tensor: return Tensor.empty(*shape, dtype=dtype, device="PYTHON")

def test_group_reduction_ir(render):
  (spec,) = render(t(8, 256).sum(axis=1), renderer=AMDGPURenderer("gfx942"), opts=[Opt(OptOps.GROUPTOP, 0, 64)])
  src = spec.src
  assert "define amdgpu_kernel void @r_8_256(ptr addrspace(1) noalias %data0, ptr addrspace(1) noalias %data1) #0" in src
  assert "%data1.flat = addrspacecast ptr addrspace(1) %data1 to ptr" in src
  assert "@lds0 = internal addrspace(3) global [64 x float] undef, align 16" in src
  assert "call i32 @llvm.amdgcn.workitem.id.x()" in src and "call i32 @llvm.amdgcn.workgroup.id.x()" in src
  # the barrier orders LDS memory at work-group scope on both sides
  assert ('fence syncscope("workgroup") release\n  call void @llvm.amdgcn.s.barrier()\n'
          '  fence syncscope("workgroup") acquire') in src
  assert '"amdgpu-flat-work-group-size"="1,64"' in src
  assert '!{i32 1, !"amdhsa_code_object_version", i32 500}' in src
  assert "addrspace(5)" in src   # the accumulators: private allocas

def test_work_group_size_is_the_product_of_local_ids(render):
  (spec,) = render(t(16, 128).max(axis=1), opts=[Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 32)])
  assert spec.local_size[0] * spec.local_size[1] * spec.local_size[2] == 128
  assert '"amdgpu-flat-work-group-size"="1,128"' in spec.src
  (spec,) = render(t(64) + 1, opts=[])
  assert '"amdgpu-flat-work-group-size"="1,1"' in spec.src and "s.barrier" not in spec.src

def test_transcendentals_are_decomposed(render):
  (spec,) = render(t(16).exp() + t(16, dtype=dtypes.float64).sin().float())
  assert "llvm.exp2" not in spec.src and "llvm.sin" not in spec.src and "llvm.log2" not in spec.src

def test_targets_and_arch_choice(monkeypatch):
  assert [TESTED[a].wave for a in ("gfx1100", "gfx942", "gfx1201")] == [32, 64, 32]
  assert TESTED["gfx1100"].wmma and not TESTED["gfx942"].wmma
  assert arch_info("gfx90a:sramecc+:xnack-").name == "gfx90a" and arch_info("gfx90a").wave == 64
  assert arch_info("gfx1030").wave == 32 and arch_info("gfx1030").family == "RDNA1/2"
  monkeypatch.setenv("AMD_ARCH", "gfx942")
  assert AMDGPURenderer().arch == "gfx942" and AMDGPURenderer("gfx1201").arch == "gfx1201"
  monkeypatch.setenv("AMD_ARCH", "sm_80")
  with pytest.raises(ValueError, match=r"'sm_80' is not an AMD GPU processor name.*gfx1100"): AMDGPURenderer()
  with pytest.raises(ValueError, match="before gfx9"): arch_info("gfx803")

def test_limits_come_from_the_target_or_the_device():
  r = AMDGPURenderer("gfx1100")
  assert r.shared_max == 65536 and max(r.local_max) == 1024 and not r.vector_alu
  r = AMDGPURenderer("gfx942", local_max=(1024, 1024, 1024), max_threads=256, shared_max=32768)
  assert r.local_max == (256, 256, 256) and r.shared_max == 32768
