"""Every kernel the tests render becomes a code object for gfx1100 (RDNA3, wave32), gfx942 (CDNA3, wave64) and
gfx1201 (RDNA4) through the real toolchain (llvmlite's AMDGPU target, ld.lld), and llvm-readelf reads back what a
driver would: the kernel descriptor, the target and the LDS size. No AMD GPU is needed."""
from __future__ import annotations
import os, re, subprocess
import pytest
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug_amd.compiler import AMDCompileError, AMDCompiler, LinkerNotFound, find_linker, link, llvm_to_object
from tinyplug_amd.renderer import AMDGPURenderer
from tinyplug import Tensor

ARCHS = ("gfx1100", "gfx942", "gfx1201")

def t(*shape) -> Tensor: return Tensor.empty(*shape, device="PYTHON")

def notes(readelf: str, code_object: bytes, tmp_path) -> str:
  path = tmp_path / "kernel.hsaco"
  path.write_bytes(code_object)
  out = subprocess.run([readelf, "--notes", str(path)], capture_output=True, text=True, timeout=60)
  assert out.returncode == 0, out.stderr
  return out.stdout

def note_field(text: str, field: str) -> str:
  """A field of the kernel's metadata map (indented 4 in the notes; arguments are deeper), or a top-level one."""
  m = re.search(rf"^(?:    )?{re.escape(field)}:\s+(\S+)", text, re.M)
  assert m, f"{field} not in the notes:\n{text}"
  return m.group(1)

@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_every_rendered_kernel_compiles_and_links(lld, arch, render, kernel_table):
  renderer, failed, count = AMDGPURenderer(arch), [], 0
  for name, build, opts in kernel_table:
    for spec in render(build(), renderer=renderer, opts=opts):
      count += 1
      try:
        co = link(llvm_to_object(spec.src, arch), lld)
        assert co[:4] == b"\x7fELF" and co[18] == 224   # e_machine EM_AMDGPU
      except Exception as e: failed.append(f"{name}: {type(e).__name__}: {str(e)[:600]}")
  assert count >= len(kernel_table) and not failed, "\n\n".join(failed[:3])

@pytest.mark.parametrize("arch,wave", [("gfx1100", 32), ("gfx942", 64), ("gfx1201", 32)])
def test_code_object_notes_show_descriptor_target_and_lds(lld, readelf, tmp_path, render, arch, wave):
  """A group reduction through two arrays of 64 floats of LDS: the descriptor names the kernel, the target is the one asked for,
  group_segment_fixed_size is the LDS the kernel declared, the work-group bound is the launch's."""
  (spec,) = render(t(8, 256).sum(axis=1), renderer=AMDGPURenderer(arch), opts=[Opt(OptOps.GROUPTOP, 0, 64)])
  lds = sum(u.dtype.size * 4 for u in spec.uops if u.op.name == "DEFINE_LOCAL")
  assert lds == 512   # a group of 64 combines in two rounds: two local arrays of 64 floats
  text = notes(readelf, link(llvm_to_object(spec.src, arch), lld), tmp_path)
  assert note_field(text, ".name") == spec.name == "r_8_256"
  assert note_field(text, ".symbol") == "r_8_256.kd"
  assert note_field(text, "amdhsa.target") == f"amdgcn-amd-amdhsa--{arch}"
  assert int(note_field(text, ".group_segment_fixed_size")) == lds
  assert int(note_field(text, ".max_flat_workgroup_size")) == 64
  assert int(note_field(text, ".wavefront_size")) == wave
  assert int(note_field(text, ".kernarg_segment_size")) >= 16 and ".value_kind:     global_buffer" in text

def test_elementwise_kernel_has_no_lds(lld, readelf, tmp_path, render):
  (spec,) = render(t(64) + t(64), renderer=AMDGPURenderer("gfx942"))
  text = notes(readelf, link(llvm_to_object(spec.src, "gfx942"), lld), tmp_path)
  assert int(note_field(text, ".group_segment_fixed_size")) == 0

def test_missing_linker_is_a_clear_error_naming_the_package(tmp_path, monkeypatch):
  monkeypatch.delenv("AMD_LLD", raising=False)
  with pytest.raises(LinkerNotFound, match=r"apt install lld-19"):
    find_linker(path=str(tmp_path), rocm=str(tmp_path))
  old = tmp_path / "ld.lld"   # an ld.lld too old for code object v5 is named, not used
  old.write_text("#!/bin/sh\necho 'Ubuntu LLD 14.0.0 (compatible with GNU linkers)'\n")
  old.chmod(0o755)
  with pytest.raises(LinkerNotFound, match=r"ld.lld is LLD 14.*lld-19"):
    find_linker(path=str(tmp_path), rocm=str(tmp_path))

def test_linker_is_found_rocm_first(tmp_path, lld, monkeypatch):
  monkeypatch.delenv("AMD_LLD", raising=False)
  rocm_lld = tmp_path / "llvm" / "bin" / "ld.lld"
  rocm_lld.parent.mkdir(parents=True)
  os.symlink(lld, rocm_lld)
  assert find_linker(path="", rocm=str(tmp_path)) == str(rocm_lld)
  assert os.path.basename(find_linker(path=os.path.dirname(lld), rocm=str(tmp_path / "none"))).startswith("ld.lld")

def test_bad_ir_and_link_errors_say_what_failed(lld):
  with pytest.raises(AMDCompileError, match="could not parse the AMDGPU IR"):
    llvm_to_object("define amdgpu_kernel void @k( {", "gfx1100")
  undefined = ("declare float @missing(float)\ndefine amdgpu_kernel void @k(ptr addrspace(1) %p) {\n"
               "  %v = call float @missing(float 1.0)\n  store float %v, ptr addrspace(1) %p\n  ret void\n}\n"
               '!llvm.module.flags = !{!0}\n!0 = !{i32 1, !"amdhsa_code_object_version", i32 500}\n')
  with pytest.raises(AMDCompileError, match=r"could not link the kernel.*missing"):
    link(llvm_to_object(undefined, "gfx1100"), lld)

def test_compiler_caches_by_llvm_linker_target_and_source(lld, render):
  (spec,) = render(t(64) * 2, renderer=AMDGPURenderer("gfx1201"))
  a, b = AMDCompiler("gfx1201"), AMDCompiler("gfx942")
  assert "llvm" in a.cachekey and "LLD" in a.cachekey and a.cachekey.endswith("gfx1201")
  assert a.key(spec.src) != b.key(spec.src) and a.key(spec.src) != a.key(spec.src + " ")
  first = a.compile_cached(spec.src)
  assert first[:4] == b"\x7fELF" and a.compile_cached(spec.src) is first
