"""NVRTC through ctypes: found from the wheels, cubins per architecture, readable errors, the sealed disk cache."""
from __future__ import annotations
import os
import pytest
from tinyplug.helpers import Context

GOOD = 'extern "C" __global__ void __launch_bounds__(32) k(float* __restrict__ data0) { data0[threadIdx.x] = 1.0f; }\n'
BAD = ('#include <cuda_fp16.h>\nextern "C" __global__ void k(half* __restrict__ data0) {\n  int i = threadIdx.x;\n'
       '  data0[i] = undefined_thing(i);\n}\n')

def test_found_from_the_wheel_with_headers(nvrtc):
  assert os.path.basename(nvrtc.library_path()).startswith("libnvrtc.so")
  assert nvrtc.version()[0] >= 12
  assert all(a in nvrtc.supported_archs() for a in (75, 80, 90))
  assert nvrtc.include_dirs() and os.path.exists(os.path.join(nvrtc.include_dirs()[0], "cuda_bf16.h"))

def test_cubin_for_the_asked_architecture(nvrtc):
  cubin = nvrtc.compile_cuda(GOOD, "sm_80")
  assert cubin[:4] == b"\x7fELF"
  ptx = nvrtc.compile_cuda(GOOD, "sm_90", ptx=True).decode()
  assert ".target sm_90" in ptx and ".entry k(" in ptx and ".maxntid 32, 1, 1" in ptx

def test_architecture_spelling_and_unsupported_ones(nvrtc):
  assert nvrtc.check_arch("90") == "sm_90" and nvrtc.check_arch("SM_86") == "sm_86" and nvrtc.check_arch("sm_90a") == "sm_90a"
  with pytest.raises(nvrtc.NVRTCError, match="not a GPU architecture"): nvrtc.check_arch("hopper")
  with pytest.raises(nvrtc.NVRTCError, match=r"cannot compile for sm_35; it supports sm_75"): nvrtc.check_arch("sm_35")

def test_compile_error_shows_the_log_and_the_offending_line(nvrtc):
  with pytest.raises(nvrtc.NVRTCError) as e: nvrtc.compile_cuda(BAD, "sm_75")
  msg = str(e.value)
  assert "NVRTC could not compile kernel.cu for sm_75" in msg and '"undefined_thing" is undefined' in msg
  assert ">    4 |   data0[i] = undefined_thing(i);" in msg and "     3 |   int i = threadIdx.x;" in msg

def test_disk_cache_is_keyed_and_sealed(nvrtc, tmp_path, monkeypatch):
  from tinyplug_cuda.compiler import CUDACompiler
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  with Context(CACHELEVEL=1):
    first = CUDACompiler("sm_80")
    before = CUDACompiler.compiles
    binary = first.compile_cached(GOOD)
    assert CUDACompiler.compiles == before + 1
    entries = [os.path.join(r, f) for r, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".cubin")]
    assert len(entries) == 1 and os.path.basename(entries[0]) == first.key(GOOD) + ".cubin"
    assert CUDACompiler("sm_80").compile_cached(GOOD) == binary and CUDACompiler.compiles == before + 1   # from disk
    assert first.key(GOOD) != CUDACompiler("sm_90").key(GOOD) and first.key(GOOD) != first.key(GOOD + " ")
    with open(entries[0], "r+b") as f:   # damage the entry: it is dropped and rebuilt, never handed to the driver
      f.seek(-8, 2)
      f.write(b"XXXXXXXX")
    assert CUDACompiler("sm_80").compile_cached(GOOD) == binary and CUDACompiler.compiles == before + 2

def test_wheel_folders_sort_newest_cuda_first(nvrtc):
  # CUDA 13 wheels install under nvidia/cu13/, CUDA 12 ones under nvidia/<package>/: never mixed by accident
  assert nvrtc.wheel_major("/site/nvidia/cu13/lib") == 13 and nvrtc.wheel_major("/site/nvidia/cuda_nvrtc/lib") == 12
  assert nvrtc.wheel_major(nvrtc.include_dirs()[0]) == nvrtc.wheel_major(nvrtc.library_path())
