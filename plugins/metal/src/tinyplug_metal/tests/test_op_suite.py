"""The shipped op suite (tinyplug.testing) on MOCK+METAL, every kernel the Metal renderer's exact MSL compiled by
clang for the host and run by the emulator, checked against torch, in a pytest subprocess; on a Mac, on METAL.

With a clang for the MSL check, every kernel the run compiles is also checked (msl_check_plugin.py).
CI runs the slice below (every dtype Metal has through casts, bitcasts and half math, integer ops, reductions,
argmax and a matmul); `METAL_SUITE=full` runs the whole suite (plugins/metal/README.md has the last result)."""
from __future__ import annotations
import os, re, subprocess, sys
import pytest

SLICE = ("test_cast or test_bitcast or test_half_math or test_int_binary or test_where or test_reduce_ints_and_bools "
         "or test_argmax_argmin or test_matmul_ints_and_dot or test_special_values")

def run_suite(device: str, k: str, at_least: int, check_kernels: bool = False) -> None:
  env = {**os.environ, "TINYPLUG_TEST_DEVICES": device}
  args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "--pyargs", "tinyplug.testing"]
  if check_kernels: args += ["-p", "tinyplug_metal.tests.msl_check_plugin"]
  full = os.environ.get("METAL_SUITE") == "full"
  if not full: args += ["-k", k]
  out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=7200)
  tail = "\n".join((out.stdout + out.stderr).splitlines()[-40:])
  assert out.returncode == 0, tail
  passed = re.search(r"(\d+) passed", tail)
  assert passed and int(passed.group(1)) >= (550 if full else at_least), tail
  if check_kernels:   # every kernel the run compiled passed the MSL check (a failing one fails its test above)
    checked = re.search(r"MSL check: (\d+) kernels passed", tail)
    assert checked and int(checked.group(1)) >= at_least, tail

@pytest.mark.slow
def test_op_suite_on_the_emulator_with_the_metal_renderer(mock_metal):
  from tinyplug_metal.check import find_clang
  run_suite("MOCK+METAL", SLICE, 55, check_kernels=find_clang()[0] is not None)

@pytest.mark.slow
def test_op_suite_on_metal(metal):
  run_suite("METAL", SLICE, 55)
