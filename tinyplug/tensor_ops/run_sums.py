"""Sums over runs of equal keys along an axis: cummax / cummin's gradient (an output's gradient goes to the index it
reported, and the outputs reporting one index are a run), as scans.

`run_prefix_sum(v, keys, ax)[i] = sum of v[k] for k <= i with keys[k] == keys[i]`, where equal keys along `ax` are
contiguous (cummax's indices never decrease); `run_suffix_sum` the same from i to the run's end. Each run's sum is
added up from its own elements: no difference of running totals (which would lose the small runs of a long row to the
rounding of the large totals)."""
from __future__ import annotations
from typing import Any
from tinyplug.tensor_ops.reduce import SCAN_BLOCK, SCAN_DIRECT

def _direct(v: Any, keys: Any, ax: int) -> Any:
  """One reduction per output over a triangle of the axis: n * n work per row."""
  n, lead, rest = v.shape[ax], v.shape[:ax], v.shape[ax + 1:]
  wide = lead + (n, n) + rest
  vk, kk = v.unsqueeze(ax).expand(wide), keys.unsqueeze(ax).expand(wide)    # [..., i, k, rest] = v[..., k, rest]
  ar = type(v).arange(n, device=v.device)
  upto = (ar.reshape(1, n) < ar.reshape(n, 1) + 1).reshape((n, n) + (1,) * len(rest))   # k <= i
  # the position's where inside the key's: the last lane's `k < n` folds away, and a where dropped inside is what the
  # vectorizer puts back (`upto & same` left that lane a bare compare: every lane scalar, 2.5x the time)
  return kk.eq(keys.unsqueeze(ax + 1)).where(upto.where(vk, 0), 0).sum(ax + 1)

def _edge(t: Any, ax: int, at: int) -> Any:
  """Element `at` of axis `ax`, the axis dropped."""
  return t.shrink(tuple((at, at + 1) if i == ax else (0, s) for i, s in enumerate(t.shape))).squeeze(ax)

def _shift_on(t: Any, ax: int, fill) -> Any:
  """t moved one step along `ax` (out[i] = t[i - 1]), `fill` first."""
  return t.pad(((0, 0),) * ax + ((1, -1),) + ((0, 0),) * (t.ndim - ax - 1), value=fill)

def run_prefix_sum(v: Any, keys: Any, ax: int, keep: Any = None) -> Any:
  """v summed from the start of each run of equal `keys` along `ax` to each element (in v's dtype); 0 where `keep`
  (a bool tensor like v, if given) is False. A long axis goes in blocks of SCAN_BLOCK: the sums inside each block,
  plus for a block's first run its part in the blocks before, which is the run sum, one level up, of the blocks' last
  runs (keyed by the blocks' last keys)."""
  n = v.shape[ax]
  if not isinstance(n, int) or n <= SCAN_DIRECT:
    return _direct(v, keys, ax) if keep is None else keep.where(_direct(v, keys, ax), 0)
  lead, rest = v.shape[:ax], v.shape[ax + 1:]
  m, b = SCAN_BLOCK, -(-n // SCAN_BLOCK)
  if b * m > n:   # the padding adds nothing to any run
    widths = ((0, 0),) * ax + ((0, b * m - n),) + ((0, 0),) * len(rest)
    v, keys = v.pad(widths, value=0), keys.pad(widths, value=-1)
    if keep is not None: keep = keep.pad(widths, value=False)
  vb, kb = v.reshape(lead + (b, m) + rest), keys.reshape(lead + (b, m) + rest)   # [..., block, i, rest]
  # [..., block, rest]; the last keys stored: read in place they are a gather per lane (every SCAN_BLOCK-th key), which
  # left the blocks' triangle and their tails' sums scalar
  first, last = _edge(kb, ax + 1, 0), _edge(kb, ax + 1, m - 1).contiguous()
  tails = run_prefix_sum(kb.eq(last.unsqueeze(ax + 1)).where(vb, 0).sum(ax + 1), last, ax)
  # the block before's last run goes on into this block's first one when their keys are equal
  carry = _shift_on(last, ax, -1).eq(first).where(_shift_on(tails, ax, 0), 0)
  out = _direct(vb, kb, ax + 1) + kb.eq(first.unsqueeze(ax + 1)).where(carry.unsqueeze(ax + 1), 0)
  # in the same kernel as the sums (the keys are loaded there already), not a pass of its own after them
  if keep is not None: out = keep.reshape(lead + (b, m) + rest).where(out, 0)
  # computed in the blocks' shape (as the blocked scan: the triangle's mask one compare, not i's digits), then whole
  out = out.contiguous().reshape(lead + (b * m,) + rest)
  return out.shrink(tuple((0, n) if i == ax else (0, s) for i, s in enumerate(out.shape))) if b * m > n else out

def run_suffix_sum(v: Any, keys: Any, ax: int, keep: Any = None) -> Any:
  """v summed from each element to the end of its run of equal `keys` along `ax` (0 where `keep` is False): the
  prefix sums of the flipped axis (read as views: a vector load and a lane shuffle on CPUs)."""
  return run_prefix_sum(v.flip(ax), keys.flip(ax), ax, None if keep is None else keep.flip(ax)).flip(ax)
