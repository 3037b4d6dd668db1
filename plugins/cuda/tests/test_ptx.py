"""The PTX renderer: NVPTX LLVM IR from the core's LLVM IR base, PTX from llvmlite's NVPTX target, cubins from
nvJitLink, for every kernel the tests render and sm_75, sm_80 and sm_90 (no GPU needed)."""
from __future__ import annotations
import pytest
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug.uop import Ops, dtypes
from tinyplug_cuda.ptx import PTXCompiler, PTXRenderer, llvm_to_ptx, nvjitlink, ptx_features, ptx_to_cubin

pytest.importorskip("llvmlite")

@pytest.fixture
def linker():
  if nvjitlink() is None: pytest.skip("nvJitLink not installed (pip install nvidia-nvjitlink)")

def test_group_reduction_uses_shared_memory_barrier_and_thread_ids(render, tensor):
  (spec,) = render(tensor(8, 256).sum(axis=1), renderer=PTXRenderer(), opts=[Opt(OptOps.GROUPTOP, 0, 64)])
  src = spec.src
  assert "define ptx_kernel void @r_8_256(" in src
  assert "@shared0 = internal addrspace(3) global [64 x float] undef, align 16" in src
  assert "addrspacecast ptr addrspace(3) @shared0 to ptr" in src and "call void @llvm.nvvm.barrier0()" in src
  assert "@llvm.nvvm.read.ptx.sreg.tid.x()" in src and "@llvm.nvvm.read.ptx.sreg.ctaid.x()" in src
  ptx = llvm_to_ptx(src, "sm_80")
  assert ".visible .entry r_8_256(" in ptx and "bar.sync" in ptx and ".shared" in ptx and ".target sm_80" in ptx

def test_transcendentals_are_decomposed_not_approximated(render, tensor):
  (spec,) = render(tensor(16).exp() + tensor(16).sin(), renderer=PTXRenderer())
  assert "llvm.exp2" not in spec.src and "llvm.sin" not in spec.src
  assert not any(u.op in (Ops.EXP2, Ops.SIN) for u in spec.uops)
  assert "ex2.approx" not in llvm_to_ptx(spec.src, "sm_75")

def test_ptx_version_per_architecture():
  assert ptx_features("sm_75") == ptx_features("sm_90") == "+ptx80" and ptx_features("sm_100") == "+ptx87"

@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_every_rendered_kernel_assembles_to_a_cubin(linker, arch, render, kernel_table):
  renderer, failed, count = PTXRenderer(arch), [], 0
  for name, build, opts in kernel_table:
    for spec in render(build(), renderer=renderer, opts=opts):
      count += 1
      try:
        cubin = ptx_to_cubin(llvm_to_ptx(spec.src, arch), arch)
        assert cubin[:4] == b"\x7fELF"
      except Exception as e: failed.append(f"{name}: {type(e).__name__}: {str(e)[:600]}")
  assert count >= len(kernel_table) and not failed, "\n\n".join(failed[:3])

def test_compiler_caches_and_reports_link_errors(linker, render, tensor):
  (spec,) = render(tensor(64) * 2, renderer=PTXRenderer("sm_90"))
  compiler = PTXCompiler("sm_90")
  assert compiler.compile_cached(spec.src)[:4] == b"\x7fELF" and compiler.compile_cached(spec.src) is compiler.compile_cached(spec.src)
  with pytest.raises(RuntimeError, match=r"nvJitLink could not link the PTX for sm_90"):
    ptx_to_cubin(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k() { bogus; }\n", "sm_90")
