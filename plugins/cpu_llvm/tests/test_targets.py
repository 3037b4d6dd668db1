"""Code for CPUs other than the host (`DEV=CPU:LLVM:<cpu>`): the vector registers of a CPU named without features are
read from LLVM, the calls LLVM emits for instructions the target lacks resolve, a call nothing defines is an error
instead of a crash, and the op suite gives torch's results on an SSE2 baseline and on AVX2, so the optimiser's
narrower register tiles and vectors are checked on this machine whatever its own vector width."""
import platform
import numpy as np
import pytest
from tinyplug import Tensor, dtypes
from tinyplug.device import Device
from tinyplug.testing.suite import run_op_suite
from tinyplug_cpu_llvm.compiler import init_llvm, make_target_machine
from tinyplug_cpu_llvm.elf import undefined_symbols
from tinyplug_cpu_llvm.runtime import vector_math_isas
from tinyplug_cpu_llvm.machine import implied_features, vector_registers

x86 = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 target names")

AVX512 = "+avx512f,+avx2,+avx,+fma,+sse4.2,+sse2"

@x86
@pytest.mark.parametrize("cpu, features, regs", [
  ("x86-64", "+sse2", (16, 16)), ("x86-64-v2", "+sse4.2,+sse2", (16, 16)), ("sandybridge", "+avx,+sse4.2,+sse2", (32, 16)),
  ("haswell", "+avx2,+avx,+fma,+sse4.2,+sse2", (32, 16)), ("x86-64-v3", "+avx2,+avx,+fma,+sse4.2,+sse2", (32, 16)),
  ("x86-64-v4", AVX512, (64, 32)), ("znver4", AVX512, (64, 32))])
def test_a_named_cpu_declares_the_features_llvm_gives_it(cpu, features, regs):
  assert implied_features(make_target_machine(cpu, "")) == features
  dev = Device[f"CPU:LLVM:{cpu}"]
  assert vector_registers(dev.compiler.features) == regs == (dev.renderer.vector_bytes, dev.renderer.vector_registers)
  if vector_math_isas(dev.compiler.features):   # glibc's libmvec is here: its variants follow the features
    assert ("e" in dev.renderer.vector_isas, "d" in dev.renderer.vector_isas) == \
      ("+avx512f" in features, "+avx2" in features)

@x86
def test_half_conversions_without_f16c():
  # x86-64 has no F16C: LLVM calls __truncsfhf2 / __extendhfsf2, which must resolve (they were address 0: a crash)
  a = np.array([1.5, -2.25, 65504.0, 1e-6, 70000.0, -0.0, np.inf, 3.14159], np.float32)
  dev = "CPU:LLVM:x86-64"
  with np.errstate(over="ignore"): want = a.astype(np.float16)   # 70000 is past half's largest: inf
  np.testing.assert_array_equal(Tensor(a, device=dev).cast(dtypes.float16).numpy(), want)
  h = np.array([0.5, -7.25, 65504, 6e-8, -np.inf], np.float16)
  np.testing.assert_array_equal(Tensor(h, device=dev).cast(dtypes.float32).numpy(), h.astype(np.float32))
  small = h[[0, 1, 3]]
  np.testing.assert_allclose(Tensor(small, device=dev).float().exp2().half().numpy(), np.exp2(small), rtol=1e-3)

UNKNOWN_CALL = """define void @calls_nothing_defined(ptr %p) {
  %v = load float, ptr %p
  %w = call float @tinyplug_no_such_function(float %v)
  store float %w, ptr %p
  ret void
}
declare float @tinyplug_no_such_function(float)
"""

def test_a_call_no_library_defines_is_an_error_not_a_crash():
  dev = Device["CPU"]
  obj = make_target_machine(dev.compiler.cpu, dev.compiler.features).emit_object(init_llvm().parse_assembly(UNKNOWN_CALL))
  assert "tinyplug_no_such_function" in undefined_symbols(obj)
  with pytest.raises(RuntimeError, match="tinyplug_no_such_function"): dev.load("calls_nothing_defined", obj)
  np.testing.assert_allclose((Tensor([1.0, 2.0]) * 3).numpy(), [3.0, 6.0])   # the device still works

def test_undefined_symbols_of_what_is_not_an_elf_object():
  assert undefined_symbols(b"") == [] and undefined_symbols(b"\x7fELF" + bytes(100)) == []
  assert undefined_symbols(b"MZ" + bytes(200)) == []

@pytest.mark.slow
@x86
@pytest.mark.parametrize("cpu", ["x86-64", "haswell"])
def test_op_suite_on_narrower_vectors(cpu):
  run_op_suite(f"CPU:LLVM:{cpu}", k="cast or reduce or sum or max or matmul or conv or softmax or pool or cumsum "
                                   "or argmax or gather or index or where or exp or log or sort", at_least=150)
