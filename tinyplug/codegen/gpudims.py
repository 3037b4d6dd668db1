"""GPU-style launch: the output loops of a kernel become SPECIAL group/local ids instead of RANGE loops."""
from __future__ import annotations
from tinyplug.uop.ops import Ops, UOp

def loop_ranges(sink: UOp) -> list[UOp]:
  return sorted((u for u in sink.toposort() if u.op is Ops.RANGE and u.arg[1] in ("loop", "global", "local", "warp")),
                key=lambda r: r.arg)

def _dims(sizes: list[int], max_dims: int) -> list[int]:
  # more loops than the device has launch dims: merge the outermost ones
  while len(sizes) > max_dims: sizes = [sizes[0] * sizes[1]] + sizes[2:]
  return sizes

def add_gpudims(sink: UOp, max_global: tuple[int, ...] | None = None) -> tuple[UOp, tuple[int, ...], tuple[int, ...]]:
  """Replace loop RANGEs by SPECIAL ids. Returns the new sink, the global size (in groups) and the local size."""
  # a loop that runs to a variable's value stays a loop in each thread: the launch size is fixed when compiling
  loops = [r for r in loop_ranges(sink) if r.src[0].op is Ops.CONST]
  glob = [r for r in loops if r.arg[1] not in ("local", "warp")]
  # a tensor core's lanes ("warp", from the TC action) are the fastest local id: its threads are one warp
  loc = [r for r in loops if r.arg[1] == "local"] + [r for r in loops if r.arg[1] == "warp"]
  if not loops: return sink, (1, 1, 1), (1, 1, 1)
  subs: dict[UOp, UOp] = {}
  gsize = _assign(glob, "gidx", subs, len(max_global) if max_global else 3)
  lsize = _assign(loc, "lidx", subs, 3)
  return sink.substitute(subs, name="gpudims"), tuple(gsize + [1] * (3 - len(gsize))), tuple(lsize + [1] * (3 - len(lsize)))

def _assign(ranges: list[UOp], prefix: str, subs: dict[UOp, UOp], max_dims: int) -> list[int]:
  if not ranges: return []
  sizes = [r.src[0].arg for r in ranges]
  dims = _dims(list(sizes), max_dims)
  # the innermost loop is dimension 0 (fastest varying), as GPUs number them
  specials = [UOp(Ops.SPECIAL, ranges[0].dtype, (), (f"{prefix}{len(dims)-1-i}", d)) for i, d in enumerate(dims)]
  merged = len(ranges) - len(dims) + 1
  # the first `merged` ranges share specials[0]; unflatten them
  flat = specials[0]
  acc = 1
  for r, s in reversed(list(zip(ranges[:merged], sizes[:merged]))):
    subs[r] = (flat // acc) % s if acc != 1 else (flat % s if merged > 1 else flat)
    acc *= s
  for r, sp in zip(ranges[merged:], specials[1:]): subs[r] = sp
  return list(reversed(dims))
