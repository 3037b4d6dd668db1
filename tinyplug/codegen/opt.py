"""Optimisation actions on a kernel (upcast, unroll, local, group, ...): chosen by a heuristic or a search strategy.

NOOPT=1 applies none. The heuristic and the actions themselves arrive with the cpu_llvm work; until then every
kernel is lowered as written, which is correct and slow."""
from __future__ import annotations
from typing import Any
from tinyplug.uop.ops import UOp

def apply_optimisations(sink: UOp, ctx: Any) -> UOp:
  return sink
