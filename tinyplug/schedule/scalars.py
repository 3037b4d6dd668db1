"""Scalar arguments: a float32 constant that changes between graphs that are otherwise the same (`x * lr` with a
Python float `lr` set every step) becomes a kernel argument, so the graph schedules and compiles once instead of once
per value.

Constants stay in the code the first time a graph is seen (the best code, and most constants never change). When
the same graph comes back with other values in some float32 CONSTs, those positions become parameters for good:
each such CONST is replaced by BITCAST(BIND(DEFINE_VAR int32 "scalar<position>", placeholder)), whose 32 bits the
runtime passes as an int (every backend already passes int32 variables). The rewritten graph holds no values, so
its schedule template (cache.py) and compiled kernels serve every later step; the values travel in
`ScheduleItem.var_vals`. `SCALAR_ARGS=0` bakes every constant."""
from __future__ import annotations
import numpy as np
from tinyplug.caches import BoundedCache
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1
_CONST, _F32 = Ops.CONST._value_, id(dtypes.float32)

# the graph's structure with float32 constants left out -> (their first values, the positions made parameters)
_seen: BoundedCache = BoundedCache("schedule.scalar_args", 4096)

def float32_bits(value: float) -> int:
  """The bits of `value` rounded to float32 (as the code would hold it), as a signed 32-bit int."""
  with np.errstate(over="ignore"): return int(np.array(value, dtype=np.float32).view(np.int32))

def _param(c: UOp, position: int) -> UOp:
  var = UOp.variable(f"scalar{position}", INT32_MIN, INT32_MAX, dtypes.int32)
  # the bound value is a placeholder (the value comes with each run), so the graph is the same at every step
  bound = UOp(Ops.BIND, dtypes.int32, (var, UOp(Ops.CONST, dtypes.int32, c.src, 0)))
  return UOp(Ops.BITCAST, dtypes.float32, (bound,))

def _masked(key: tuple) -> tuple[list[int], tuple, tuple]:
  """(the positions of the float32 constants, the key with their values left out, their values)."""
  positions = [i for i, k in enumerate(key) if k[0] == _CONST and k[1] == _F32]
  masked = list(key)
  for i in positions: masked[i] = (_CONST, _F32, None, key[i][3])
  return positions, tuple(masked), tuple(key[i][2] for i in positions)

def remember(key: tuple) -> None:
  """Note the constants of a graph whose schedule came from disk as its first values (parameterize would have, had
  it been scheduled here): the same graph with other values then makes them parameters, as in the process that
  stored it, and finds that schedule on disk too."""
  positions, masked_key, values = _masked(key)
  if positions and _seen.get(masked_key) is None: _seen.put(masked_key, (values, frozenset()))

def parameterize(key: tuple, nodes: list[UOp]) -> tuple[list[UOp], dict[UOp, UOp], dict[str, int]] | None:
  """For a graph whose schedule template missed (`key`, `nodes` from cache.structure): None to schedule it as it
  is, or (the targets with changing constants made parameters, old node -> new node, the parameters' values)."""
  positions, masked_key, values = _masked(key)
  if not positions: return None
  if (seen := _seen.get(masked_key)) is None:
    _seen.put(masked_key, (values, frozenset()))
    return None
  first, params = seen
  changed = params | {i for i, v, f in zip(positions, values, first) if v != f}
  if not changed: return None
  if changed != params: _seen.put(masked_key, (first, frozenset(changed)))
  new: dict[UOp, UOp] = {}
  for i, n in enumerate(nodes):   # nodes are in toposort order: sources are rewritten first
    if i in changed: new[n] = _param(n, i)
    elif n.src and any(new[s] is not s for s in n.src): new[n] = n.replace(src=tuple([new[s] for s in n.src]))
    else: new[n] = n
  return list(new[nodes[-1]].src), new, {f"scalar{i}": float32_bits(nodes[i].arg) for i in changed}
