"""Shared helpers for the amd plugin's tests: kernels rendered by the AMDGPU renderer through the real codegen pipeline
(from graphs on the PYTHON device: nothing runs), the toolchain (skip with the reason where ld.lld >= 19 or
llvm-readelf is missing), and MOCK+AMD for running the renderer's exact IR on the emulator."""
from __future__ import annotations
import shutil
import pytest
from tinyplug.testing.suite import device_or_skip
from tinyplug.testing.kernels import kernel_zoo, render_kernels as zoo_render

def linker_or_skip() -> str:
  from tinyplug_amd.compiler import LinkerNotFound, find_linker
  try: return find_linker()
  except LinkerNotFound as e: pytest.skip(str(e))

@pytest.fixture
def lld() -> str:
  return linker_or_skip()

@pytest.fixture
def readelf() -> str:
  found = next((p for p in (shutil.which(f"llvm-readelf-{v}") for v in range(30, 18, -1)) if p), None) or \
    shutil.which("llvm-readelf")
  if found is None: pytest.skip("llvm-readelf not found (Debian/Ubuntu: apt install llvm-19)")
  return found

def render_kernels(tensor, renderer=None, opts=None) -> list:
  """The ProgramSpecs of the kernels computing `tensor` (a Tensor on PYTHON), rendered by this plugin (nothing runs)."""
  from tinyplug_amd.renderer import AMDGPURenderer
  return zoo_render(tensor, renderer or AMDGPURenderer(), opts)

@pytest.fixture
def render():
  """`render(tensor, renderer=None, opts=None)` -> ProgramSpecs of the kernels computing `tensor`."""
  return render_kernels


@pytest.fixture
def mock_amd():
  """MOCK+AMD as the default device for the test (skipped where the emulator or clang is missing)."""
  from tinyplug.device import Device
  dev = device_or_skip("MOCK+AMD")
  with Device.use(dev): yield dev

@pytest.fixture
def kernel_table():
  from tinyplug_amd.renderer import AMDGPURenderer
  return kernel_zoo(AMDGPURenderer().supported_dtypes())
