"""The shipped op suite (tinyplug.testing) on MOCK+CUDA: every kernel is the CUDA C renderer's exact source, compiled
by clang for the host and run by the emulator, checked against torch, in a pytest subprocess.

Each test compiles many kernels with clang (0.1-0.3 s each, cached on disk afterwards), so CI runs the slice below,
which touches every dtype (casts, bitcasts, half math), integer ops, reductions and a matmul; `CUDA_SUITE=full`
runs the whole suite (see plugins/cuda/README.md for the command and its last result)."""
from __future__ import annotations
import os
import pytest
from tinyplug.testing.suite import run_op_suite

SLICE = ("test_cast or test_bitcast or test_half_math or test_int_binary or test_where or test_reduce_ints_and_bools "
         "or test_argmax_argmin or test_matmul_ints_and_dot or test_special_values")

# the PTX renderer (MOCK+CUDA:PTX: its NVPTX LLVM IR lowered to the host): a smaller slice, dtypes and reductions
PTX_SLICE = ("test_cast or test_bitcast or test_half_math or test_where or test_reduce_ints_and_bools or test_argmax_argmin "
             "or test_special_values")

def run_suite(device: str, k: str, at_least: int) -> None:
  full = os.environ.get("CUDA_SUITE") == "full"
  run_op_suite(device, None if full else k, 550 if full else at_least)

@pytest.mark.slow
def test_op_suite_on_the_emulator_with_the_cuda_renderer(mock_cuda):
  run_suite("MOCK+CUDA", SLICE, 60)

@pytest.mark.slow
def test_op_suite_on_the_emulator_with_the_ptx_renderer(mock_cuda):
  pytest.importorskip("llvmlite")
  run_suite("MOCK+CUDA:PTX", PTX_SLICE, 25)
