"""The core op suite (tests/test_ops.py) on MOCK+CL, in a pytest subprocess with TINYPLUG_TEST_DEVICES=MOCK+CL.

The whole suite compiles ~1,500 kernels with clang (about 0.1-0.3 s each, cached on disk afterwards); CI runs the
slice below, which touches every op family: elementwise (unary ops at one shape), reductions, movement,
matmul/conv, indexing, casts and bitcasts. `EMU_SUITE=full` runs the whole file; EMU_ORDER applies to the subprocess."""
from __future__ import annotations
import os, pathlib, re, subprocess, sys
import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
SLICE = "not test_unary or 45"   # every test, but the unary table only at shape (45,): ~400 of ~600 tests

@pytest.mark.slow
def test_op_suite_on_the_emulator(emu):
  ops = REPO / "tests" / "test_ops.py"
  if not ops.exists(): pytest.skip("the core test suite is not in this checkout")
  env = {**os.environ, "TINYPLUG_TEST_DEVICES": "MOCK+CL"}
  args = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", str(ops)]
  if os.environ.get("EMU_SUITE") != "full": args += ["-k", SLICE]
  out = subprocess.run(args, capture_output=True, text=True, env=env, cwd=REPO, timeout=3600)
  tail = "\n".join((out.stdout + out.stderr).splitlines()[-40:])
  assert out.returncode == 0, tail
  passed = re.search(r"(\d+) passed", tail)
  assert passed and int(passed.group(1)) >= (550 if os.environ.get("EMU_SUITE") == "full" else 380), tail
