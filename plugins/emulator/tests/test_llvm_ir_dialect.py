"""LLVM IR written for AMDGPU and NVPTX on the emulator (hand-written kernels: no AMD/NVPTX renderer exists yet)."""
from __future__ import annotations
import numpy as np
import pytest
from tinyplug.helpers import Context
from tinyplug_emulator.dialects import LLVM_IR, DialectError
from tinyplug_emulator.native import EmulatorError

AMDGPU = """target datalayout = "e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9"
target triple = "amdgcn-amd-amdhsa"

@temp0 = internal unnamed_addr addrspace(3) global [64 x float] undef, align 16

define amdgpu_kernel void @r_lds_sum(ptr addrspace(1) noalias %data0, ptr addrspace(1) noalias %data1) #0 {
entry:
  %lid = call i32 @llvm.amdgcn.workitem.id.x()
  %gid = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %gid, 64
  %idx = add i32 %base, %lid
  %idx64 = sext i32 %idx to i64
  %p = getelementptr inbounds float, ptr addrspace(1) %data1, i64 %idx64
  %v = load float, ptr addrspace(1) %p, align 4
  %lid64 = zext i32 %lid to i64
  %lp = getelementptr inbounds [64 x float], ptr addrspace(3) @temp0, i64 0, i64 %lid64
  store float %v, ptr addrspace(3) %lp, align 4
  call void @llvm.amdgcn.s.barrier()
  br label %loop
loop:
  %s = phi i32 [32, %entry], [%s2, %latch]
  %c = icmp ult i32 %lid, %s
  br i1 %c, label %add, label %latch
add:
  %o = add i32 %lid, %s
  %o64 = zext i32 %o to i64
  %op = getelementptr inbounds [64 x float], ptr addrspace(3) @temp0, i64 0, i64 %o64
  %a = load float, ptr addrspace(3) %op, align 4
  %b = load float, ptr addrspace(3) %lp, align 4
  %sum = fadd float %a, %b
  store float %sum, ptr addrspace(3) %lp, align 4
  br label %latch
latch:
  call void @llvm.amdgcn.s.barrier()
  %s2 = lshr i32 %s, 1
  %done = icmp eq i32 %s2, 0
  br i1 %done, label %exit, label %loop
exit:
  %z = icmp eq i32 %lid, 0
  br i1 %z, label %w, label %end
w:
  %r = load float, ptr addrspace(3) @temp0, align 16
  %gid64 = zext i32 %gid to i64
  %outp = getelementptr inbounds float, ptr addrspace(1) %data0, i64 %gid64
  store float %r, ptr addrspace(1) %outp, align 4
  br label %end
end:
  ret void
}

declare i32 @llvm.amdgcn.workitem.id.x() #1
declare i32 @llvm.amdgcn.workgroup.id.x() #1
declare void @llvm.amdgcn.s.barrier() #2

attributes #0 = { "amdgpu-flat-work-group-size"="1,64" "target-cpu"="gfx1100" }
attributes #1 = { nounwind readnone speculatable }
attributes #2 = { convergent nounwind }
"""

def inputs(groups: int = 6):
  x = np.random.default_rng(0).integers(-50, 50, size=groups * 64).astype(np.float32)
  return [np.zeros(groups, np.float32), x], x.reshape(groups, 64).sum(axis=1)

@pytest.mark.parametrize("order", ["forward", "reverse", "shuffle"])
def test_amdgpu_lds_reduction(run_dialect_kernel, order):
  arrays, want = inputs()
  with Context(EMU_ORDER=order, EMU_THREADS=2):
    got = run_dialect_kernel(LLVM_IR, AMDGPU, arrays, (6, 1, 1), (64, 1, 1))[0]
  np.testing.assert_array_equal(got, want)

def test_amdgpu_missing_barrier_is_caught(run_dialect_kernel):
  broken = AMDGPU.replace("  store float %v, ptr addrspace(3) %lp, align 4\n  call void @llvm.amdgcn.s.barrier()\n",
                          "  store float %v, ptr addrspace(3) %lp, align 4\n")
  assert broken != AMDGPU
  arrays, _ = inputs()
  with Context(EMU_ORDER="check"), pytest.raises(EmulatorError, match="r_lds_sum writes different results"):
    run_dialect_kernel(LLVM_IR, broken, arrays, (6, 1, 1), (64, 1, 1))

NVPTX = """target triple = "nvptx64-nvidia-cuda"

define ptx_kernel void @e_scale(ptr addrspace(1) %data0, ptr addrspace(1) %data1, i32 %n) {
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %cta = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %m = mul i32 %cta, %ntid
  %i = add i32 %m, %tid
  %i64 = sext i32 %i to i64
  %src = getelementptr inbounds i32, ptr addrspace(1) %data1, i64 %i64
  %x = load i32, ptr addrspace(1) %src, align 4
  %q = sdiv i32 %x, %n
  %dst = getelementptr inbounds i32, ptr addrspace(1) %data0, i64 %i64
  store i32 %q, ptr addrspace(1) %dst, align 4
  ret void
}

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
"""

def test_nvptx_ids_and_division_by_a_zero_argument(run_dialect_kernel):
  x = np.arange(-8, 8, dtype=np.int32) * 3
  got = run_dialect_kernel(LLVM_IR, NVPTX, [np.zeros(16, np.int32), x], (4, 1, 1), (4, 1, 1), vals=(3,))[0]
  np.testing.assert_array_equal(got, x // 3)
  got = run_dialect_kernel(LLVM_IR, NVPTX, [np.zeros(16, np.int32), x], (4, 1, 1), (4, 1, 1), vals=(0,))[0]
  assert (got == -1).all()     # every lane divided by zero, completed without a trap

def test_unknown_intrinsic_is_a_clear_error():
  src = NVPTX.replace("@llvm.nvvm.read.ptx.sreg.ntid.x()", "@llvm.nvvm.read.ptx.sreg.laneid()")
  with pytest.raises(DialectError, match=r"no lowering for the GPU intrinsic\(s\) llvm.nvvm.read.ptx.sreg.laneid"):
    LLVM_IR.with_entry(src)

WMMA_CALL = """define amdgpu_kernel void @k(ptr addrspace(1) %data0) {
  %d = call <8 x float> @llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v16f16(<16 x half> zeroinitializer, <16 x half> zeroinitializer, <8 x float> zeroinitializer)
  store <8 x float> %d, ptr addrspace(1) %data0
  ret void
}
declare <8 x float> @llvm.amdgcn.wmma.f32.16x16x16.f16.v8f32.v16f16(<16 x half>, <16 x half>, <8 x float>)
"""

def test_wmma_is_lowered_to_the_wave_builtin_through_memory():
  out = LLVM_IR.with_entry(WMMA_CALL)
  assert "call <8 x float> @tp.llvm.amdgcn.wmma.f32.16x16x16.f16(" in out and "declare <8 x float> @llvm.amdgcn" not in out
  assert "declare void @tp_wmma_f32_16x16x16_f16(ptr, ptr, ptr, ptr) convergent nounwind" in out
  assert LLVM_IR.uses_barrier(WMMA_CALL)   # its lanes exchange data at barriers: the work-items run as fibers

FOREIGN_HANDLER = """
import os, signal, sys
import numpy as np
sys.path.insert(0, os.path.dirname(sys.argv[1]))
from conftest import _run_dialect_kernel
from test_llvm_ir_dialect import NVPTX
from tinyplug_emulator.dialects import LLVM_IR
x = np.arange(-8, 8, dtype=np.int32) * 3
print(_run_dialect_kernel(LLVM_IR, NVPTX, [np.zeros(16, np.int32), x], (4, 1, 1), (4, 1, 1), vals=(3,))[0].tolist())
signal.signal(signal.SIGFPE, lambda *a: None)   # another library's handler, put in place after the emulator's
print(_run_dialect_kernel(LLVM_IR, NVPTX, [np.zeros(16, np.int32), x], (4, 1, 1), (4, 1, 1), vals=(0,))[0].tolist())
"""

def test_division_by_zero_after_another_library_took_the_signal(run_dialect_kernel):
  # an OpenCL runtime loaded later (PoCL) installs its own SIGFPE handler, which left the dividend as the quotient;
  # a handler that returns (Python's) re-runs the division forever. Each launch puts the emulator's back first.
  import json, subprocess, sys
  r = subprocess.run([sys.executable, "-c", FOREIGN_HANDLER, __file__], capture_output=True, text=True, timeout=60)
  assert r.returncode == 0, r.stderr[-2000:]
  first, second = (json.loads(line) for line in r.stdout.split("\n")[:2])
  assert first == (np.arange(-8, 8) * 3 // 3).tolist() and second == [-1] * 16
