"""SPEC=1: check the kernel after each codegen stage (SPEC=2: after each plugin pass too), so a malformed graph is
blamed on the step that made it instead of failing later in a renderer.

The rules are the IR's invariants (docs/architecture.md §4): operands of an ALU op share its dtype, comparisons give
bool, WHERE takes a bool condition, INDEX addresses a buffer with an integer, LOAD and STORE go through an INDEX, loop
ends are integers; a WMMA's last operands are its C elements, of its dtype's scalar type; a linear program defines every
value before its use and closes loops innermost first."""
from __future__ import annotations
from typing import Any
from tinyplug.uop.dtype import PtrDType, dtypes
from tinyplug.uop.ops import GroupOp, Ops, UOp

_SAME_DTYPE = GroupOp.ALU - {Ops.WHERE, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.SHL, Ops.SHR}
_COMPARISON = (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ)
_MEMORY = (Ops.DEFINE_GLOBAL, Ops.DEFINE_LOCAL, Ops.DEFINE_REG)

class SpecError(ValueError):
  """A UOp graph or linear program that breaks an IR rule; the message names the step that produced it."""

def _problem(u: UOp) -> str | None:
  op, dt = u.op, u.dtype
  if op in _SAME_DTYPE and any(s.dtype != dt for s in u.src):
    return f"operands {[s.dtype for s in u.src]} differ from the result dtype {dt!r}"
  if op in _COMPARISON:
    if dt.scalar() != dtypes.bool: return f"a comparison gives {dt!r}, not bool"
    if u.src[0].dtype != u.src[1].dtype: return f"compares {u.src[0].dtype!r} with {u.src[1].dtype!r}"
  if op is Ops.WHERE:
    if u.src[0].dtype.scalar() != dtypes.bool: return f"condition of dtype {u.src[0].dtype!r}, not bool"
    if u.src[1].dtype != u.src[2].dtype or u.src[1].dtype != dt: return f"branches {u.src[1].dtype!r} / {u.src[2].dtype!r}, result {dt!r}"
  if op is Ops.INDEX:
    mem = u.src[0].src[0] if u.src and u.src[0].op is Ops.AFTER else u.src[0] if u.src else None
    if len(u.src) < 2 or mem is None or mem.op not in _MEMORY: return "INDEX does not address a DEFINE_GLOBAL/LOCAL/REG"
    if not dtypes.is_int(u.src[1].dtype): return f"INDEX by {u.src[1].dtype!r}, not an integer"
    if len(u.src) > 2 and u.src[2].dtype.scalar() != dtypes.bool: return f"INDEX gate of dtype {u.src[2].dtype!r}"
  if op in (Ops.LOAD, Ops.STORE) and u.src and u.src[0].op is not Ops.INDEX and isinstance(u.src[0].dtype, PtrDType):
    return f"{op.name} of {u.src[0].op.name}, not of an INDEX"
  if op is Ops.RANGE and (not u.src or not dtypes.is_int(u.src[0].dtype)): return "RANGE end is not an integer"
  if op is Ops.WMMA and (dt.count < 2 or len(u.src) <= dt.count or any(s.dtype != dt.scalar() for s in u.src[-dt.count:])):
    return f"a WMMA of {dt!r} needs A and B elements, then {dt.count} C elements of {dt.scalar()!r}"
  return None

def verify(x: Any, step: str) -> None:
  """Raise SpecError naming `step` when the graph (a UOp) or linear program (a list of UOps) breaks a rule."""
  if isinstance(x, UOp):
    for u in x.toposort():
      if (why := _problem(u)) is not None: raise SpecError(f"SPEC: after {step}: {u.op} {u.dtype!r}: {why}")
    return
  seen: set[UOp] = set()
  open_loops: list[UOp] = []
  for i, u in enumerate(x):
    if (why := _problem(u)) is not None: raise SpecError(f"SPEC: after {step}: uop {i} {u.op}: {why}")
    for s in u.src:
      if s not in seen and s.op not in (Ops.CONST, Ops.VCONST):
        raise SpecError(f"SPEC: after {step}: uop {i} {u.op} uses {s.op} before it is defined")
    if u.op is Ops.RANGE: open_loops.append(u)
    elif u.op is Ops.END:
      if not open_loops or open_loops[-1] is not u.src[0]: raise SpecError(f"SPEC: after {step}: uop {i} ends a loop that is not the innermost open one")
      open_loops.pop()
    seen.add(u)
  if open_loops: raise SpecError(f"SPEC: after {step}: {len(open_loops)} loop(s) never end")
