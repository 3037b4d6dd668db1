"""Helpers for the cpu_llvm tests: build linear programs by hand and run them on numpy arrays."""
from __future__ import annotations
import numpy as np
import pytest

pytest.importorskip("llvmlite")

def run_uops(uops, bufs: list[np.ndarray], vals=(), threads: int = 1, name: str = "test") -> str:
  """Render, compile and run `uops` on the CPU device with numpy arrays as buffers; returns the IR."""
  from tinyplug.device import Device, ProgramSpec
  from tinyplug.helpers import Context
  from tinyplug.uop import Ops
  dev = Device["CPU"]
  src = dev.renderer.render(name, list(uops))
  lib = dev.compiler.compile_cached(src)
  variables = tuple(sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg))
  prg = dev.make_program(ProgramSpec(name, tuple(uops), src, vars=variables), lib)
  with Context(CPU_THREADS=threads): prg(*bufs, vals=vals, wait=True)
  return src

@pytest.fixture
def run():
  return run_uops
