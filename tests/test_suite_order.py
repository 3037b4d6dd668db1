"""The suite's run order (the root conftest.py): slow items first, so under pytest-xdist none of them starts last."""
from __future__ import annotations
import importlib.util, pathlib, subprocess, sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

def _root_conftest():
  spec = importlib.util.spec_from_file_location("tinyplug_root_conftest", ROOT / "conftest.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module

class _Item:
  def __init__(self, name: str, slow: bool): self.name, self.slow = name, slow
  def get_closest_marker(self, name: str): return object() if name == "slow" and self.slow else None

def test_slow_items_move_to_the_front_each_group_in_order():
  items = [_Item("a", False), _Item("b", True), _Item("c", False), _Item("d", True), _Item("e", False)]
  assert [i.name for i in _root_conftest().slow_first(items)] == ["b", "d", "a", "c", "e"]

def test_the_collection_of_the_suite_starts_with_the_emulator_op_suites():
  """As pytest collects it: the emulator's op suite (the longest item, collected last) comes before the core's quick
  tests; the others keep their order."""
  files = ["tests/test_suite_order.py", "plugins/emulator/tests/test_op_suite.py"]
  out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *files], capture_output=True,
                       text=True, cwd=ROOT, timeout=300)
  ids = [line for line in out.stdout.splitlines() if "::" in line]
  assert ids[0] == "plugins/emulator/tests/test_op_suite.py::test_op_suite_on_the_emulator", out.stdout[-2000:]
  assert ids[1:] == [  # the rest in collection order
    "tests/test_suite_order.py::test_slow_items_move_to_the_front_each_group_in_order",
    "tests/test_suite_order.py::test_the_collection_of_the_suite_starts_with_the_emulator_op_suites",
    "plugins/emulator/tests/test_op_suite.py::test_the_slice_keeps_every_operator_shape_and_axis"], out.stdout[-2000:]
