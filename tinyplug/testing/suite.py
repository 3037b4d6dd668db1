"""A backend plugin's own tests on its device: skip where the device is not here (with the reason), and run the shipped
op suite (`tinyplug.testing`) on it in a pytest subprocess (every op against torch, on the device or on the GPU
emulator, `MOCK+<device>`)."""
from __future__ import annotations
import os, re, subprocess, sys
import pytest

def device_or_skip(name: str) -> str:
  """`name` when a plugin provides that device and it is available here; otherwise the test is skipped saying why."""
  from tinyplug.plugins import get_plugin_manager
  pm = get_plugin_manager(check=False)
  if pm.resolve_device(name) is None: pytest.skip(f"no installed plugin provides {name}")
  ok, reason = pm.device_available(name)
  if not ok: pytest.skip(f"{name} unavailable: {reason}")
  return name

def run_op_suite(device: str, k: str | None = None, at_least: int = 1, timeout: float = 7200,
                 pytest_args: tuple[str, ...] = ()) -> str:
  """Run the op suite (only the tests matching `k`, or all of them) with TINYPLUG_TEST_DEVICES=device, plus
  `pytest_args` (e.g. `("-p", "my_plugin")`); fails with the end of pytest's output unless it passes with at least
  `at_least` tests. Returns that end of the output (40 lines)."""
  args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args, "--pyargs", "tinyplug.testing"]
  if k is not None: args += ["-k", k]
  out = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "TINYPLUG_TEST_DEVICES": device},
                       timeout=timeout)
  tail = "\n".join((out.stdout + out.stderr).splitlines()[-40:])
  assert out.returncode == 0, tail
  passed = re.search(r"(\d+) passed", tail)
  assert passed and int(passed.group(1)) >= at_least, f"fewer than {at_least} tests passed on {device}:\n{tail}"
  return tail
