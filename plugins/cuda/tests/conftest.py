"""Shared helpers for the cuda plugin's tests: NVRTC (skip where the wheel is missing), kernels rendered by the CUDA C
renderer through the real codegen pipeline (from graphs on the PYTHON device: nothing runs), the emulator."""
from __future__ import annotations
import pytest
from tinyplug.testing.suite import device_or_skip
from tinyplug.testing.kernels import empty as t, kernel_zoo, render_kernels as zoo_render

ARCHS = ("sm_75", "sm_80", "sm_90")

def nvrtc_or_skip():
  from tinyplug_cuda import nvrtc
  try: nvrtc.library_path()
  except nvrtc.NVRTCError as e: pytest.skip(str(e))
  return nvrtc

@pytest.fixture
def nvrtc():
  return nvrtc_or_skip()

def render_kernels(tensor, renderer=None, opts=None) -> list:
  """The ProgramSpecs of the kernels computing `tensor` (a Tensor on PYTHON), rendered by this plugin (nothing runs)."""
  from tinyplug_cuda.renderer import CUDARenderer
  return zoo_render(tensor, renderer or CUDARenderer(), opts)

@pytest.fixture
def mock_cuda():
  """MOCK+CUDA as the default device for the test (skipped where the emulator is missing or unavailable)."""
  from tinyplug.device import Device
  dev = device_or_skip("MOCK+CUDA")
  with Device.use(dev): yield dev


@pytest.fixture
def render():
  """`render(tensor, renderer=None, opts=None)` -> ProgramSpecs of the kernels computing `tensor`."""
  return render_kernels

@pytest.fixture
def tensor():
  """`tensor(*shape, dtype=float32)`: an empty Tensor on PYTHON to build kernels from."""
  return t

@pytest.fixture
def kernel_table():
  from tinyplug_cuda.renderer import CUDARenderer
  return kernel_zoo(CUDARenderer().supported_dtypes())
