"""The core op suite (tests/test_ops.py) on MOCK+CL, in a pytest subprocess with TINYPLUG_TEST_DEVICES=MOCK+CL.

The whole suite compiles ~1,500 kernels with clang (about 0.1-0.3 s each, cached on disk afterwards); CI runs the
slice emu_slice.py chooses (every test; the unary, binary, comparison and reduce tables with each operator and each
shape or axis once), which touches every op family: elementwise, reductions, movement, matmul/conv, indexing, casts
and bitcasts. `EMU_SUITE=full` runs the whole file; EMU_ORDER applies to the subprocess."""
from __future__ import annotations
import os, pathlib, re, subprocess, sys
import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
HERE = pathlib.Path(__file__).resolve().parent

@pytest.mark.slow
def test_op_suite_on_the_emulator(emu):
  ops = REPO / "tests" / "test_ops.py"
  if not ops.exists(): pytest.skip("the core test suite is not in this checkout")
  path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
  env = {**os.environ, "TINYPLUG_TEST_DEVICES": "MOCK+CL", "PYTHONPATH": path}
  args = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", str(ops)]
  if os.environ.get("EMU_SUITE") != "full": args += ["-p", "emu_slice"]
  out = subprocess.run(args, capture_output=True, text=True, env=env, cwd=REPO, timeout=3600)
  tail = "\n".join((out.stdout + out.stderr).splitlines()[-40:])
  assert out.returncode == 0, tail
  passed = re.search(r"(\d+) passed", tail)
  assert passed and int(passed.group(1)) >= (550 if os.environ.get("EMU_SUITE") == "full" else 350), tail

def _slice_rules():
  import importlib.util
  spec = importlib.util.spec_from_file_location("emu_slice_rules", HERE / "emu_slice.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.kept

def test_the_slice_keeps_every_operator_shape_and_axis():
  """Each table the slice cuts still runs every operator, every shape (or axis), and keepdim for every reduce op."""
  from tinyplug.testing import test_ops as suite
  kept = _slice_rules()
  unary = [u[0] for u in suite.UNARY if kept("test_unary", {"name": u[0], "shape": (45,)})]
  assert len(unary) == len(suite.UNARY)
  binary = [(b[0], s) for b in suite.BINARY for s in suite.BINARY_SHAPES if kept("test_binary", {"name": b[0], "shapes": s})]
  assert {n for n, _ in binary} == {b[0] for b in suite.BINARY} and {s for _, s in binary} == set(suite.BINARY_SHAPES)
  comparisons = [(op, s) for op in ("lt", "le", "gt", "ge", "eq", "ne") for s in [((3,), (3,)), ((2, 3), (3,)), ((), (4,))]
                 if kept("test_comparisons", {"op": op, "shapes": s})]
  assert {op for op, _ in comparisons} == {"lt", "le", "gt", "ge", "eq", "ne"} and len({s for _, s in comparisons}) == 3
  ops = ("sum", "max", "min", "mean", "prod", "var", "std", "logsumexp")
  reduce = {(op, str(axis), keepdim) for op in ops for axis in suite.REDUCE_AXES for keepdim in (False, True)
            if kept("test_reduce", {"op": op, "axis": axis, "keepdim": keepdim})}
  assert {(op, str(axis)) for op, axis, keepdim in reduce if not keepdim} == {(op, str(a)) for op in ops for a in suite.REDUCE_AXES}
  assert {op for op, _, keepdim in reduce if keepdim} == set(ops)
  assert kept("test_matmul", {"shapes": ((3,), (3,))})   # a test without a rule runs whole
