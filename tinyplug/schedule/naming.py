"""Kernel names as tinygrad prints them: E_ for elementwise, r_ for reductions, then the loop sizes."""
from __future__ import annotations
from tinyplug.caches import BoundedCache
from tinyplug.uop.ops import Ops, UOp

_seen: BoundedCache = BoundedCache("schedule.kernel_names", 4096)   # name -> {kernel ast: its variant number}

def kernel_name(ast: UOp) -> str:
  """`E_4_4`, `r_16_32`; a different kernel with the same sizes gets `n1`, `n2`, ... appended."""
  if ast.op is not Ops.SINK: return ast.op.name.lower()
  ranges = sorted((u for u in ast.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg)
  kind = "r" if any(r.arg[1] == "reduce" for r in ranges) else "E"
  sizes = [str(r.src[0].arg) if r.src[0].op is Ops.CONST else "s" for r in ranges]
  base = "_".join([kind] + (sizes or ["1"]))
  if (variants := _seen.get(base)) is None: variants = _seen.put(base, {})
  n = variants.setdefault(ast, len(variants))
  return base if n == 0 else f"{base}n{n}"
