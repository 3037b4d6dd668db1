"""The HIP C renderer (`DEV=AMD:HIP`): plain HIP that clang >= 19 compiles into code objects for the three targets
without ROCm (the plugin's device-side stand-in header; hiprtc where ROCm is installed), and that the emulator runs
(`MOCK+AMD:HIP`) against numpy in all three work-item orders."""
from __future__ import annotations
import re, subprocess
import numpy as np
import pytest
from tinyplug import Tensor, dtypes
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Opt, OptOps
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.schedule import create_schedule
from tinyplug_amd.compiler import AMDCompileError
from tinyplug_amd.hip_renderer import HIPRenderer

ARCHS = ("gfx1100", "gfx942", "gfx1201")
RNG = np.random.default_rng(1)

def t(*shape, dtype=dtypes.float32) -> Tensor: return Tensor.empty(*shape, dtype=dtype, device="PYTHON")

@pytest.fixture
def clang() -> str:
  from tinyplug_amd.hiprtc import find_clang
  try: return find_clang()
  except AMDCompileError as e: pytest.skip(str(e))

def test_registered_after_the_llvm_renderer():
  from tinyplug.plugins import get_plugin_manager
  assert [spec.name for spec, _ in get_plugin_manager().renderers_for("AMD")] == ["LLVM", "HIP"]

def test_group_reduction_source(render):
  (spec,) = render(t(8, 256).sum(axis=1), renderer=HIPRenderer("gfx942"), opts=[Opt(OptOps.GROUPTOP, 0, 64)])
  src = spec.src
  assert src.startswith("#include <hip/hip_runtime.h>\n")
  assert 'extern "C" __global__ void __launch_bounds__(64) r_8_256(float* __restrict__ data0, ' in src
  assert re.search(r"__shared__ __attribute__\(\(aligned\(16\)\)\) float \w+\[64\];", src)
  assert "__syncthreads();" in src and "threadIdx.x" in src and "blockIdx.x" in src
  (spec,) = render(t(16, dtype=dtypes.half) * 2 + t(16, dtype=dtypes.bfloat16).cast(dtypes.half), renderer=HIPRenderer())
  assert "_Float16" in spec.src and "__bf16" in spec.src

@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_every_rendered_kernel_compiles_with_clang(clang, arch, render, kernel_table):
  from tinyplug_amd.hiprtc import compile_clang
  renderer, failed, count = HIPRenderer(arch), [], 0
  for name, build, opts in kernel_table:
    for spec in render(build(), renderer=renderer, opts=opts):
      count += 1
      try:
        co = compile_clang(spec.src, arch)
        assert co[:4] == b"\x7fELF" and co[18] == 224   # e_machine EM_AMDGPU
      except Exception as e: failed.append(f"{name}: {type(e).__name__}: {str(e)[:600]}")
  assert count >= len(kernel_table) and not failed, "\n\n".join(failed[:3])

def test_code_object_notes(clang, readelf, tmp_path, render):
  from tinyplug_amd.hiprtc import HIPCompiler
  (spec,) = render(t(8, 256).sum(axis=1), renderer=HIPRenderer("gfx1201"), opts=[Opt(OptOps.GROUPTOP, 0, 64)])
  compiler = HIPCompiler("gfx1201")
  co = compiler.compile_cached(spec.src)
  assert compiler.compile_cached(spec.src) is co and compiler.key(spec.src) != HIPCompiler("gfx942").key(spec.src)
  (tmp_path / "k.hsaco").write_bytes(co)
  text = subprocess.run([readelf, "--notes", str(tmp_path / "k.hsaco")], capture_output=True, text=True).stdout
  assert re.search(r"^    \.name:\s+r_8_256$", text, re.M) and "amdhsa.target:   amdgcn-amd-amdhsa--gfx1201" in text
  assert re.search(r"^    \.group_segment_fixed_size: 512$", text, re.M)   # two rounds: two arrays of 64 floats
  assert re.search(r"^    \.max_flat_workgroup_size: 64$", text, re.M)

def test_compile_errors_carry_clangs_words(clang):
  from tinyplug_amd.hiprtc import compile_clang
  with pytest.raises(AMDCompileError, match=r"(?s)could not compile the HIP kernel for gfx1100:.*undeclared identifier 'nope'"):
    compile_clang('#include <hip/hip_runtime.h>\nextern "C" __global__ void k(float* a) { a[0] = nope; }\n', "gfx1100")

def run(out: Tensor, opts, src_edit=None) -> tuple[np.ndarray, str]:
  (item,), _ = create_schedule([out.uop])
  dev = Device["MOCK+AMD:HIP"]
  spec = get_program(item.ast, dev.renderer, opts=opts)
  src = src_edit(spec.src) if src_edit else spec.src
  prg = dev.make_program(spec, dev.compiler.compile_cached(src))
  bufs = [b.ensure_allocated() for b in item.bufs]
  with Context(EMU_ORDER="check"):
    prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
  return bufs[0].numpy().reshape(out.shape), src

@pytest.mark.parametrize("opts", [[Opt(OptOps.GROUPTOP, 0, 64)], [Opt(OptOps.LOCAL, 0, 4), Opt(OptOps.GROUP, 0, 32)]], ids=str)
def test_group_reductions_on_the_emulator(mock_amd, opts):
  from tinyplug_emulator.native import EmulatorError
  a = RNG.standard_normal((8, 256)).astype(np.float32)
  with Device.use("MOCK+AMD:HIP"):
    x = Tensor(a).realize()
    got, src = run(x.sum(axis=1), opts)
    assert "__syncthreads();" in src
    np.testing.assert_allclose(got, a.sum(1), rtol=1e-5, atol=1e-4)
    # other values than the run above: local memory persists per host thread, and a kernel that reads it too early
    # would find that run's right partial sums there (the emulator's forward-first check order relies on stale data
    # being someone else's)
    y = Tensor(RNG.standard_normal((8, 256)).astype(np.float32)).realize()
    with pytest.raises(EmulatorError, match="writes different results"):
      run(y.sum(axis=1), opts, lambda s: s.replace("__syncthreads();", "", 1))

def test_half_bf16_and_division_on_the_emulator(mock_amd):
  import torch
  with Device.use("MOCK+AMD:HIP"):
    a = RNG.standard_normal(64).astype(np.float16)
    got, _ = run(Tensor(a).realize() * Tensor(a).realize() + 1, None)
    np.testing.assert_array_equal(got, a * a + np.float16(1))
    b = torch.randn(64, dtype=torch.bfloat16)
    tb = Tensor(b.view(torch.int16).numpy()).realize().bitcast(dtypes.bfloat16)
    got, _ = run((tb * tb - 2).maximum(tb).bitcast(dtypes.int16), None)
    np.testing.assert_array_equal(got, (b * b - 2).maximum(b).view(torch.int16).numpy())
    x, y = np.array([7, -7, -2**31, 5, 0, 9], np.int32), np.array([2, 2, -1, 0, 0, -1], np.int32)
    got, _ = run(Tensor(x).realize() // Tensor(y).realize() + Tensor(x).realize() % Tensor(y).realize(), None)
    cpu = lambda v: Tensor(v, device="CPU")
    np.testing.assert_array_equal(got, (cpu(x) // cpu(y) + cpu(x) % cpu(y)).numpy())
