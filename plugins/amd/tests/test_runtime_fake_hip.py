"""The runtime's HIP calls, against a stand-in libamdhip64.so (fake_hip/libamdhip64.c, built here with the C
compiler) found through ROCM_PATH: probe, device open (name, gcnArchName -> gfx1100, limits), allocation, copies through
the pinned staging buffer (more than one chunk), a code object from the real compiler loaded, launch geometry and the
kernarg buffer packed as `extra`, event timing, HIP errors by name. No GPU semantics are checked: the fake runs no
kernel code (the emulator does that)."""
from __future__ import annotations
import os, pathlib, shutil, subprocess, sys
import pytest

HERE = pathlib.Path(__file__).parent

@pytest.fixture(scope="module")
def fake_rocm(tmp_path_factory) -> str:
  cc = shutil.which("cc") or shutil.which("clang-19") or shutil.which("clang") or shutil.which("gcc")
  if cc is None: pytest.skip("no C compiler to build the fake HIP runtime")
  root = tmp_path_factory.mktemp("fake_rocm")
  (root / "lib").mkdir()
  subprocess.run([cc, "-shared", "-fPIC", "-O1", str(HERE / "fake_hip" / "libamdhip64.c"), "-o",
                  str(root / "lib" / "libamdhip64.so")], check=True, capture_output=True, timeout=120)
  return str(root)

SCRIPT = r'''
import numpy as np
from tinyplug.device import Device, ProgramSpec
from tinyplug.helpers import Context
dev = Device["AMD"]
print("OPEN", dev.arch, type(dev.renderer).__name__, dev.renderer.local_max, dev.renderer.shared_max, dev.describe())
a = np.random.default_rng(0).integers(0, 255, size=(40 << 20) + 3, dtype=np.uint8)   # three staging chunks
h = dev.allocator.alloc(a.nbytes)
dev.allocator.copyin(h, memoryview(a))
b = np.empty_like(a)
dev.allocator.copyout(memoryview(b), h)
print("ROUNDTRIP", np.array_equal(a, b))
src = ("define amdgpu_kernel void @k(ptr addrspace(1) noalias %data0, i32 %var_n) {\n"
       "  store i32 %var_n, ptr addrspace(1) %data0\n  ret void\n}\n"
       '!llvm.module.flags = !{!0}\n!0 = !{i32 1, !"amdhsa_code_object_version", i32 500}\n')
prg = dev.make_program(ProgramSpec(name="k", uops=(), src=src), dev.compiler.compile_cached(src))
out = dev.allocator.alloc(64)
t = prg(out, global_size=(3, 2, 1), local_size=(32, 1, 1), vals=(7,), wait=True)
got = np.zeros(8, np.uint32)
dev.allocator.copyout(memoryview(got).cast("B"), out)
print("LAUNCH", [int(x) for x in got], t)
try: dev.make_program(ProgramSpec(name="k", uops=(), src=src), b"not a code object")
except RuntimeError as e: print("BADIMAGE", e)
hipdev = Device["AMD:HIP"]
print("HIP", type(hipdev.renderer).__name__, type(hipdev.compiler).__name__, hipdev.compiler.tool, hipdev.compiler.arch)
from tinyplug import Tensor
with Context(DEBUG=2):
  r = (Tensor([1.0, 2.0], device="AMD") + 1).realize()
print("REALIZED", r.device)
'''

def test_runtime_against_a_fake_hip(fake_rocm, lld):
  env = {**os.environ, "ROCM_PATH": fake_rocm}
  for k in ("DEV", "AMD_ARCH", "AMD_DEVICE"): env.pop(k, None)
  out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
  assert out.returncode == 0, out.stdout + out.stderr
  lines = {l.split()[0]: l for l in out.stdout.splitlines() if l.split()}
  assert lines["OPEN"].startswith("OPEN gfx1100 AMDGPURenderer (1024, 1024, 1024) 65536 Fake Radeon (gfx1100, 48 CUs, "
                                  "wave32, 1024 MiB)"), lines["OPEN"]
  assert lines["ROUNDTRIP"] == "ROUNDTRIP True"
  assert lines["LAUNCH"] == "LAUNCH [3, 2, 1, 32, 1, 1, 16, 7] 0.0015"   # grid, block, kernarg bytes (8 + 4, padded), the int, time
  assert "hipModuleLoadData failed: hipErrorInvalidImage: invalid kernel image (kernel k)" in lines["BADIMAGE"]
  assert lines["HIP"] == "HIP HIPRenderer HIPCompiler clang gfx1100"   # no libhiprtc.so in the fake ROCm: clang
  assert "AMD" in lines["REALIZED"] and "E_2" in out.stdout   # DEBUG=2 line of the launched kernel
