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
  if (inner := _inner_first(r, shape, axes)) is not None: return inner
  if k is None: return None
  order = tuple(a for a in range(len(shape)) if a not in axes) + tuple(axes)
  x = r.src[0] if order == tuple(range(len(shape))) else UOp(Ops.PERMUTE, r.src[0].dtype, (r.src[0],), order)
  x = UOp(Ops.RESHAPE, x.dtype, (x,), (n_out, k, total // k))
  part = UOp(Ops.CONTIGUOUS, r.dtype, (UOp(Ops.REDUCE_AXIS, r.dtype, (x,), (op, (2,))),))
  return UOp(Ops.RESHAPE, r.dtype, (UOp(Ops.REDUCE_AXIS, r.dtype, (part,), (op, (1,))),), r.shape)

# the reduced axes after the last kept one must hold at least this many elements to be reduced first
INNER_FIRST_MIN = 256

def _inner_first(r: UOp, shape: tuple, axes: tuple[int, ...]) -> UOp | None:
  """A reduction over an outer axis and the innermost ones with a kept axis between them (batchnorm's statistics over
  (0, 2, 3) of NCHW): the innermost reduced axes first, in memory order (partials [N, C], each a contiguous run of H*W,
  read as one stream), then the outer ones over those few partials. The flat split would permute C outwards, and
  read each partial's run far from the one before it (64x64x56x56: 2.8 GB/s)."""
  kept = [a for a in range(len(shape)) if a not in axes]
  suffix = tuple(a for a in axes if a > kept[-1]) if kept else ()
  if not suffix or len(suffix) == len(axes) or math.prod(shape[a] for a in suffix) < INNER_FIRST_MIN: return None
  op = r.arg[0]
  part = UOp(Ops.CONTIGUOUS, r.dtype, (UOp(Ops.REDUCE_AXIS, r.dtype, (r.src[0],), (op, suffix)),))
  return UOp(Ops.REDUCE_AXIS, r.dtype, (part,), (op, tuple(a for a in axes if a not in suffix)))

def make_pass() -> PatternMatcher: return PatternMatcher([(UPat(Ops.REDUCE_AXIS, name="r"), _split)])
