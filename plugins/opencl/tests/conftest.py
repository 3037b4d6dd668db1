"""Fixtures for the opencl plugin's tests: `cl` (the opened CL device; the test is skipped where none is available)
and `lowering_device` (each device that runs GPU-style programs: PYTHON always, CL where available)."""
from __future__ import annotations
import pytest

def cl_available() -> bool:
  from tinyplug.device import Device
  try: return "CL" in Device.available()
  except Exception: return False

def run_cl_source(src: str, name: str, arrays: list, global_size=(1, 1, 1), local_size=(1, 1, 1), vals=()) -> list:
  """Build `src` on CL, run kernel `name` on copies of the numpy `arrays`; returns the arrays read back."""
  import numpy as np
  from tinyplug.device import Device
  dev = Device["CL"]
  prg = dev.make_program(_Spec(name), dev.compiler.compile_cached(src))
  handles = []
  for a in arrays:
    h = dev.allocator.alloc(a.nbytes)
    dev.allocator.copyin(h, memoryview(np.ascontiguousarray(a)).cast("B"))
    handles.append(h)
  prg(*handles, global_size=global_size, local_size=local_size, vals=vals, wait=True)
  out = []
  for a, h in zip(arrays, handles):
    res = np.empty_like(a)
    dev.allocator.copyout(memoryview(res).cast("B"), h)
    dev.allocator.free(h, a.nbytes)
    out.append(res)
  return out

class _Spec:
  def __init__(self, name: str): self.name = name

@pytest.fixture
def cl():
  if not cl_available(): pytest.skip("no OpenCL device (install pocl-opencl-icd ocl-icd-libopencl1)")
  from tinyplug.device import Device
  return Device["CL"]

@pytest.fixture(params=["PYTHON", "CL"])
def lowering_device(request):
  if request.param == "CL" and not cl_available(): pytest.skip("no OpenCL device")
  return request.param

@pytest.fixture
def run_source():
  return run_cl_source
