"""A slice of the shipped op suite with each first-party pass set turned off (TINY_PLUGINS=-<id>), on every device
under test (PYTHON, CPU and CL here): results against torch stay right without the pass set, only slower.

The slice touches every kind of kernel the pass sets change: register tiles, unrolls and padded axes (matmul, conv),
row kernels (softmax), masked loads (pad), vectors. The whole suite with each pass set off:
    TINY_PLUGINS=-heuristic TINYPLUG_TEST_DEVICES=PYTHON,CPU,CL python -m pytest tests/test_ops.py
(and -simplify, -vectorize, -fuse_rows, -split_reduce, -materialize)
"""
from __future__ import annotations
import pytest
from tinyplug.plugins import reset_plugins
# collected again here, under the fixture below
from tinyplug.testing.test_ops import test_conv2d, test_matmul, test_pad, test_softmax  # noqa: F401

PASS_SETS = ("heuristic", "simplify", "vectorize", "fuse_rows", "split_reduce", "materialize")

@pytest.fixture(autouse=True, params=PASS_SETS, ids=[f"without-{p}" for p in PASS_SETS])
def pass_set_off(request, monkeypatch):
  from tinyplug.codegen import pipeline_steps
  from tinyplug.schedule.passes import schedule_steps
  monkeypatch.setenv("TINY_PLUGINS", f"-{request.param}")
  reset_plugins()
  assert not any(s.plugin == request.param for s in (*pipeline_steps(), *schedule_steps()))
  yield request.param
  monkeypatch.delenv("TINY_PLUGINS")
  reset_plugins()
