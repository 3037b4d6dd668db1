"""RDNA3's matrix cores: the WMMA fp16 matmul kernel (tinyplug_amd.wmma) compiles for gfx1100 to a
`v_wmma_f32_16x16x16_f16` loop, is refused for targets without wave32 WMMA, and computes A @ B on the emulator, whose
lowering of the intrinsic models the gfx11 operand layout (so a kernel with the wrong layout gives wrong numbers).
Not reachable from Tensor code: the optimiser has no tensor-core action yet."""
from __future__ import annotations
import re, subprocess
import numpy as np
import pytest
from tinyplug.device import Device, ProgramSpec
from tinyplug.helpers import Context
from tinyplug_amd.compiler import link, llvm_to_assembly, llvm_to_object
from tinyplug_amd.wmma import wmma_matmul

def test_compiles_to_wmma_instructions_for_gfx1100(lld, readelf, tmp_path):
  name, src, groups, local = wmma_matmul(32, 48, 64)
  assert groups == (3, 2, 1) and local == (32, 1, 1)
  asm = llvm_to_assembly(src, "gfx1100")
  assert re.search(r"^\s*v_wmma_f32_16x16x16_f16 v\[\d+:\d+\], v\[\d+:\d+\], v\[\d+:\d+\], v\[\d+:\d+\]", asm, re.M)
  (tmp_path / "k.hsaco").write_bytes(link(llvm_to_object(src, "gfx1100"), lld))
  notes = subprocess.run([readelf, "--notes", str(tmp_path / "k.hsaco")], capture_output=True, text=True).stdout
  assert re.search(rf"^    \.name:\s+{name}$", notes, re.M) and "amdhsa.target:   amdgcn-amd-amdhsa--gfx1100" in notes
  assert re.search(r"^    \.wavefront_size: 32$", notes, re.M)

def test_refused_without_wave32_wmma_and_for_bad_sizes():
  with pytest.raises(ValueError, match="gfx942 .CDNA3. has no wave32 WMMA"): wmma_matmul(16, 16, 16, "gfx942")
  with pytest.raises(ValueError, match="gfx1201 .RDNA4. has no wave32 WMMA"): wmma_matmul(16, 16, 16, "gfx1201")
  with pytest.raises(ValueError, match="multiples of 16, not 16x20x16"): wmma_matmul(16, 20, 16)

def run_on_emulator(src: str, name: str, groups, local, m: int, n: int, k: int, seed: int = 0):
  dev = Device["MOCK+AMD"]
  rng = np.random.default_rng(seed)
  a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
  arrays = [np.zeros((m, n), np.float32), a, b]
  handles = [dev.allocator.alloc(x.nbytes) for x in arrays]
  for h, x in zip(handles, arrays): dev.allocator.copyin(h, memoryview(np.ascontiguousarray(x)).cast("B"))
  spec = ProgramSpec(name=name, uops=(), src=src, global_size=groups, local_size=local, outs=(0,))
  prg = dev.make_program(spec, dev.compiler.compile_cached(src))
  with Context(EMU_ORDER="check"): prg(*handles, global_size=groups, local_size=local)
  out = np.empty((m, n), np.float32)
  dev.allocator.copyout(memoryview(out).cast("B"), handles[0])
  return out, a.astype(np.float32) @ b.astype(np.float32)

@pytest.mark.parametrize("m,n,k", [(16, 16, 16), (32, 48, 64), (64, 16, 32)])
def test_matmul_on_the_emulator(mock_amd, m, n, k):
  name, src, groups, local = wmma_matmul(m, n, k)
  got, want = run_on_emulator(src, name, groups, local, m, n, k)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)

def test_a_wrong_accumulator_layout_gives_wrong_numbers(mock_amd):
  """Rows 2v + l/16 are where gfx11 keeps the accumulator; storing as if lanes 16-31 held rows 8-15 is a bug the
  emulator's model of the instruction shows."""
  name, src, groups, local = wmma_matmul(16, 16, 16)
  wrong = src.replace("  %rowbase = add i32 %row0, %hi\n", "  %hi8 = shl i32 %hi, 3\n  %rowbase = add i32 %row0, %hi8\n")
  wrong = re.sub(r"%crow(\d) = add i32 %rowbase, (\d+)", lambda mt: f"%crow{mt.group(1)} = add i32 %rowbase, {int(mt.group(2)) // 2}", wrong)
  assert wrong != src
  got, want = run_on_emulator(wrong, name, groups, local, 16, 16, 16)
  assert not np.allclose(got, want, rtol=1e-3, atol=1e-3)
