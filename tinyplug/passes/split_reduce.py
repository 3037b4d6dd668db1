"""The `split_reduce` pass set: a huge reduction into a few outputs (a sum of 16M floats) becomes partial results first
(k of them: a loop the CPU runtime can share out between threads and a GPU between work-groups), then a small reduction
of those. Off (`TINY_PLUGINS=-split_reduce`) such a reduction runs as one long loop: correct, on one core."""
from __future__ import annotations
import math
from tinyplug.uop.ops import Ops, UOp
from tinyplug.uop.upat import PatternMatcher, UPat

def _split(r: UOp) -> UOp | None:
  op, axes = r.arg
  shape = r.src[0].shape
  if any(isinstance(s, UOp) for s in shape): return None   # a size that is a variable's value: nothing to split by
  total = math.prod(shape[a] for a in axes)
  n_out = math.prod(r.shape)
  if total < 2**16 or n_out > 64: return None
  # at least 256 partials where they divide; more for a huge one, each still 64K elements (256M floats: 4096 partials,
  # enough work-groups to fill a GPU; 256 left an H200 at 1% of its bandwidth)
  k = next((c for c in (4096, 2048, 1024, 512) if total % c == 0 and total // c >= 1 << 16), None) or \
      next((c for c in (256, 128, 64, 32, 16) if total % c == 0), None)
  if k is None: return None
  order = tuple(a for a in range(len(shape)) if a not in axes) + tuple(axes)
  x = r.src[0] if order == tuple(range(len(shape))) else UOp(Ops.PERMUTE, r.src[0].dtype, (r.src[0],), order)
  x = UOp(Ops.RESHAPE, x.dtype, (x,), (n_out, k, total // k))
  part = UOp(Ops.CONTIGUOUS, r.dtype, (UOp(Ops.REDUCE_AXIS, r.dtype, (x,), (op, (2,))),))
  return UOp(Ops.RESHAPE, r.dtype, (UOp(Ops.REDUCE_AXIS, r.dtype, (part,), (op, (1,))),), r.shape)

def make_pass() -> PatternMatcher: return PatternMatcher([(UPat(Ops.REDUCE_AXIS, name="r"), _split)])
