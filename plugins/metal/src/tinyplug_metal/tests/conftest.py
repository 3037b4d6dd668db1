"""Shared helpers for the metal plugin's tests: kernels rendered by the Metal renderer through the real codegen
pipeline (from graphs on the PYTHON device: nothing runs there), the MSL check, the emulator and, on a Mac, Metal."""
from __future__ import annotations
import pytest
from tinyplug.testing.suite import device_or_skip
from tinyplug.testing.kernels import empty as t, kernel_zoo, render_kernels as zoo_render

def pytest_configure(config) -> None:
  # outside the repository (`pytest --pyargs tinyplug_metal.tests`) its pyproject's marker list is not read
  config.addinivalue_line("markers", "slow: takes seconds (runs the op suite in a subprocess)")

def render_kernels(tensor, renderer=None, opts=None) -> list:
  """The ProgramSpecs of the kernels computing `tensor` (a Tensor on PYTHON), rendered by this plugin (nothing runs)."""
  from tinyplug_metal.renderer import MetalRenderer
  return zoo_render(tensor, renderer or MetalRenderer(), opts)

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
  from tinyplug_metal.renderer import MetalRenderer
  return kernel_zoo(MetalRenderer().supported_dtypes())

@pytest.fixture
def msl_check():
  """`msl_check(src, name)`: the clang C++-for-OpenCL check with the metal_stdlib stand-in (skipped without clang)."""
  from tinyplug_metal.check import check_msl, find_clang
  path, why = find_clang()
  if path is None: pytest.skip(why)
  return check_msl


@pytest.fixture
def mock_metal():
  """MOCK+METAL as the default device for the test (skipped without the emulator or clang)."""
  from tinyplug.device import Device
  dev = device_or_skip("MOCK+METAL")
  with Device.use(dev): yield dev

@pytest.fixture
def metal():
  """METAL (a Mac's GPU) as the default device for the test; skipped elsewhere."""
  from tinyplug.device import Device
  dev = device_or_skip("METAL")
  with Device.use(dev): yield dev
