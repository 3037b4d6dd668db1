"""The emulator op suite's CI slice (a pytest plugin its subprocess loads with `-p emu_slice`): which parameter sets
of the op suite's parametrized tests run on MOCK+CL. Tests without a rule run whole; `EMU_SUITE=full` runs all."""
from __future__ import annotations
import pytest

# each rule keeps every operator once and every shape (or axis) once; the cases left out repeat a kernel already built
KEEP = {
  # every unary op at one shape: the other shapes change index arithmetic only, which the movement tests cover
  "test_unary": lambda p: p["shape"] == (45,),
  # every operator where both operands broadcast, and every shape with add (the shape's index arithmetic)
  "test_binary": lambda p: p["name"] == "add" or p["shapes"] == ((2, 1, 3), (4, 1)),
  # every comparison at the broadcasting shape, every shape with lt
  "test_comparisons": lambda p: p["op"] == "lt" or p["shapes"] == ((2, 3), (3,)),
  # keepdim only reshapes the output (the same reduce kernel): every op at every axis without it, once with it
  "test_reduce": lambda p: not p["keepdim"] or p["axis"] == (0, 2),
}

def kept(name: str, params: dict) -> bool:
  """Whether the op-suite test `name` with these parameters is in the slice."""
  rule = KEEP.get(name)
  return rule is None or bool(rule(params))

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
  keep = [i for i in items if kept(getattr(i, "originalname", i.name), getattr(getattr(i, "callspec", None), "params", {}))]
  dropped = [i for i in items if i not in keep]
  if dropped: config.hook.pytest_deselected(items=dropped)
  items[:] = keep
