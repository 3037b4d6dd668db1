"""The whole suite's run order: tests marked `slow` (each a subprocess or a wait of tens of seconds) run first.

pytest-xdist hands the first quarter of the items out in turn and the rest as workers free up, so a slow item that
comes late in the collection (the plugins' op suites on the emulator come last) runs on one worker while the other has
nothing left, and the run ends when it does. First, they overlap with everything else."""
from __future__ import annotations
import pytest


def slow_first(items: list[pytest.Item]) -> list[pytest.Item]:
  """`items` with the ones marked slow moved to the front; each group keeps its order."""
  slow = [item for item in items if item.get_closest_marker("slow") is not None]
  return slow + [item for item in items if item.get_closest_marker("slow") is None]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
  items[:] = slow_first(items)
