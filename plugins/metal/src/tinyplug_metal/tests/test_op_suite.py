"""The shipped op suite (tinyplug.testing) on MOCK+METAL, every kernel the Metal renderer's exact MSL compiled by
clang for the host and run by the emulator, checked against torch, in a pytest subprocess; on a Mac, on METAL.

With a clang for the MSL check, every kernel the run compiles is also checked (msl_check_plugin.py).
CI runs the slice below (every dtype Metal has through casts, bitcasts and half math, integer ops, reductions,
argmax and a matmul); `METAL_SUITE=full` runs the whole suite (plugins/metal/README.md has the last result)."""
from __future__ import annotations
import os, re
import pytest
from tinyplug.testing.suite import run_op_suite

SLICE = ("test_cast or test_bitcast or test_half_math or test_int_binary or test_where or test_reduce_ints_and_bools "
         "or test_argmax_argmin or test_matmul_ints_and_dot or test_special_values")

def run_suite(device: str, k: str, at_least: int, check_kernels: bool = False) -> None:
  full = os.environ.get("METAL_SUITE") == "full"
  plugin = ("-p", "tinyplug_metal.tests.msl_check_plugin") if check_kernels else ()
  tail = run_op_suite(device, None if full else k, 550 if full else at_least, pytest_args=("-n", "0", *plugin))
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
