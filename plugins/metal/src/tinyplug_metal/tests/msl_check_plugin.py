"""A pytest plugin (`-p tinyplug_metal.tests.msl_check_plugin`) for op-suite runs on MOCK+METAL: every MSL kernel the
emulator compiles first goes through the clang MSL check (tinyplug_metal.check), so a kernel with an address-space
mistake fails its test; the summary line says how many kernels were checked."""
from __future__ import annotations
import pytest

CHECKED = [0]

@pytest.hookimpl
def pytest_configure(config) -> None:
  from tinyplug_emulator import device
  from tinyplug_metal.check import check_msl
  original = device.EmulatorCompiler.compile
  def compile_checked(self, src: str) -> bytes:
    if self.dialect.name == "metal":
      check_msl(src, "kernel.metal")
      CHECKED[0] += 1
    return original(self, src)
  device.EmulatorCompiler.compile = compile_checked

def pytest_terminal_summary(terminalreporter) -> None:
  terminalreporter.write_line(f"MSL check: {CHECKED[0]} kernels passed")
