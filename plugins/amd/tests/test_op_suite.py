"""The shipped op suite (tinyplug.testing) on MOCK+AMD: every kernel is the AMDGPU renderer's exact LLVM IR, lowered to
the host and compiled by clang, run by the emulator, checked against torch, in a pytest subprocess.

CI runs the slices below (every dtype through casts and bitcasts, half math, integer ops, reductions through LDS, a
matmul, softmax); `AMD_SUITE=full` runs the whole suite for both renderers (plugins/amd/README.md has the command and its last result).
The emulator runs IR written for AMDGPU whatever AMD_ARCH says; the compile tests cover the three targets."""
from __future__ import annotations
import os
import pytest
from tinyplug.testing.suite import run_op_suite

SLICE = ("test_cast or test_bitcast or test_half_math or test_int_binary or test_where or test_reduce_ints_and_bools "
         "or test_argmax_argmin or test_matmul_ints_and_dot or test_special_values or test_softmax or test_cumsum")

# the HIP C renderer (MOCK+AMD:HIP: plain HIP through the emulator's CUDA/HIP prelude): the same less the matmul and cumsum
HIP_SLICE = ("test_cast or test_bitcast or test_half_math or test_int_binary or test_where or "
             "test_reduce_ints_and_bools or test_argmax_argmin or test_special_values or test_softmax")

def run_suite(device: str, k: str, at_least: int) -> None:
  full = os.environ.get("AMD_SUITE") == "full"
  run_op_suite(device, None if full else k, 550 if full else at_least)

@pytest.mark.slow
def test_op_suite_on_the_emulator_with_the_amdgpu_renderer(mock_amd):
  run_suite("MOCK+AMD", SLICE, 70)

@pytest.mark.slow
def test_op_suite_on_the_emulator_with_the_hip_renderer(mock_amd):
  run_suite("MOCK+AMD:HIP", HIP_SLICE, 60)
