"""Shared helpers for the emulator's tests: skip when the emulator is unavailable (no clang), run a hand-written kernel."""
from __future__ import annotations
import numpy as np
import pytest

def emulator_available() -> tuple[bool, str]:
  from tinyplug.plugins import get_plugin_manager
  pm = get_plugin_manager(check=False)
  if pm.resolve_device("MOCK+CL") is None: return False, "the emulator plugin is not active"
  return pm.device_available("MOCK+CL")

@pytest.fixture
def emu():
  ok, reason = emulator_available()
  if not ok: pytest.skip(f"MOCK+CL unavailable: {reason}")
  from tinyplug.device import Device
  return Device["MOCK+CL"]

def _run_kernel(dev, src: str, arrays: list[np.ndarray], groups, local, vals=()) -> list[np.ndarray]:
  """Run OpenCL C `src` on `dev` with `arrays` as its buffers (copied in); returns the buffers' contents afterwards."""
  from tinyplug.device import ProgramSpec
  handles = [dev.allocator.alloc(a.nbytes) for a in arrays]
  try:
    for h, a in zip(handles, arrays): dev.allocator.copyin(h, memoryview(np.ascontiguousarray(a)).cast("B"))
    spec = ProgramSpec(name=src.split("void", 1)[1].split("(", 1)[0].strip(), uops=(), src=src, global_size=tuple(groups),
                       local_size=tuple(local), outs=tuple(range(len(arrays))))
    prg = dev.make_program(spec, dev.compiler.compile_cached(src))
    prg(*handles, global_size=tuple(groups), local_size=tuple(local), vals=tuple(vals))
    out = [np.empty_like(a) for a in arrays]
    for o, h in zip(out, handles): dev.allocator.copyout(memoryview(o).cast("B"), h)
    return out
  finally:
    for h, a in zip(handles, arrays): dev.allocator.free(h, a.nbytes)

@pytest.fixture
def run_kernel():
  """`run_kernel(dev, src, arrays, groups, local, vals=())` -> the arrays after the kernel ran."""
  return _run_kernel

def _run_dialect_kernel(dialect, src: str, arrays: list[np.ndarray], groups, local, vals=()) -> list[np.ndarray]:
  """Like run_kernel, for a dialect whose device has no renderer installed (CUDA C written by hand)."""
  from tinyplug.device import ProgramSpec
  from tinyplug_emulator.device import EmulatorAllocator, EmulatorCompiler, EmulatorProgram
  ok, reason = emulator_available()
  if not ok: pytest.skip(f"emulator unavailable: {reason}")
  compiler, alloc = EmulatorCompiler(dialect), EmulatorAllocator()
  handles = [alloc.alloc(a.nbytes) for a in arrays]
  try:
    for h, a in zip(handles, arrays): alloc.copyin(h, memoryview(np.ascontiguousarray(a)).cast("B"))
    name = dialect._signature(src)[0]
    spec = ProgramSpec(name=name, uops=(), src=src, global_size=tuple(groups), local_size=tuple(local),
                       outs=tuple(range(len(arrays))))
    prg = EmulatorProgram(compiler, spec, compiler.compile_cached(src))
    prg(*handles, global_size=tuple(groups), local_size=tuple(local), vals=tuple(vals))
    out = [np.empty_like(a) for a in arrays]
    for o, h in zip(out, handles): alloc.copyout(memoryview(o).cast("B"), h)
    return out
  finally:
    for h, a in zip(handles, arrays): alloc.free(h, a.nbytes)

@pytest.fixture
def run_dialect_kernel():
  """`run_dialect_kernel(dialect, src, arrays, groups, local, vals=())` -> the arrays after the kernel ran."""
  return _run_dialect_kernel
