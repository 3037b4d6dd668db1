"""The heuristic's `pack` pass (the scheduler's tensor_graph stage): on a machine with caches (a loop-running renderer
that declares `cache_bytes`), the second operand B of a large matmul is first copied into column panels, B[k, n] ->
P[n // W, k, n % W], so the matmul kernel's register tile (W = `pack_width` columns, the heuristic's CPU tile width:
32 with AVX-512, 16 with AVX2) reads each k's W values from one contiguous panel instead of one row of B per k.

Why: a row of B is N floats long, so a tile's K rows are N * 4 bytes apart and each k reads W * 4 bytes of a
different N * 4-byte stretch. A set-associative cache maps an address to its set by the address modulo its way size,
so rows of a panel that far apart use only a W / N share of the cache's sets (for N a power of two, 1024 or 2048,
all of them fall into the same few sets: a 2048-wide B, 32 of the L2's 2,048), and the panel that the heuristic's
cache blocking keeps in the L2 fits there only while all of B would; from 4 KB apart every row is another page for
the TLB, and the prefetchers, which follow sequential streams within a page, see one line per row. Packed, a panel is
K * W * 4 contiguous bytes: every set, few pages, one stream. Measured on a Zen 4 core (one thread, CPU time,
2048^3): 65-77 GFLOP/s unpacked, 111 packed (numpy/OpenBLAS 102); the copy costs one pass over B (~1% of the
matmul's time at 2048).
Off with the heuristic (`TINY_PLUGINS=-heuristic`)."""
from __future__ import annotations
import math
from typing import Any
from tinyplug.uop.ops import GroupOp, Ops, UOp
from tinyplug.uop.upat import PatternMatcher, UPat
from tinyplug.passes.heuristic import TILE_BUDGETS, cpu_tile
from tinyplug.passes.views import view_strides

PACK_MIN_ROWS = 256    # M: the copy costs 2 * K * N element moves, the matmul 2 * M * N * K flops
PACK_MIN_REDUCE = 256  # K: shorter reductions are not cache blocked either
# B at least this many panels wide: a B of one panel is laid out as its panel already
PACK_MIN_PANELS = 2
# B at least this many times the L2: a smaller B's strided panels mostly stay in the L2, and the copy (reading a B
# that the kernel before left in the L3, a second kernel to launch) costs about what packing saves. Whole
# `(a @ b).realize()`, one thread, CPU time, best of 120-160 in blocks, packed vs not (Zen 4, 1 MB L2): N = 256 0.36
# vs 0.34 ms, 512 2.46 vs 2.41, 640 (B of 1.6 MB) 4.99 vs 4.82, 768 (2.25 MB) 8.33 vs 8.71, 1024 19.65 vs 21.11; the
# kernels alone (the copy hot in cache) had favoured packing from 256 on. (Packing only from rows 8 KB apart, a rule
# measured under load before, had left 1024 and 1536 unpacked: 1536 packed 66.4 vs 73.9 ms, one thread.)
PACK_MIN_L2_RATIO = 2

# a B stored N x K (read along the reduction: `q @ k.T`, `x @ W.T`) is packed where the matmul, batches included, does at
# least the work of the heuristic's widest register tiles, and each packed value is reused by at least this many rows
# of A. Unpacked, such a matmul is a dot-product tile: vector loads of both inputs along K, each output's vector summed
# across its lanes at the end, which a K of 64 pays for every 4-8 multiply-adds (batched q @ k^T 8x12x128x64 on Zen 4,
# 2 threads: ~60 GFLOP/s whatever the tile); packed it is the outer-product tile of `g @ W` (measured in
# benchmarks/README.md, session 12). The copy moves each B value once; the matmul reads it M times.
PACK_T_MIN_ROWS = 64
# a B whose width is no whole number of panels (1000 classes, an odd vocabulary) is padded with zero columns to the next
# panel when it is at least this many panels wide (the padding costs at most 1/8 more work); unpacked such a B stored N x
# K ran the dot-product tile (x @ W.T, 1024x256 -> 1000: 71 GFLOP/s one thread on Zen 4 against 95 at 992 or 1024) and
# one stored K x N was read with rows that straddle cache lines
PACK_PAD_MIN_PANELS = 8
PACK_T_MIN_WORK = TILE_BUDGETS[0][0]
# a register tile of at most this many rows (AVX2's 16 x 4, `cpu_tile`) packs B from PACK_FEW_MIN_ROWS rows of A, and
# copies a large A stored K x M with its rows along the reduction where B does not pack (`_rows_only`). Unpacked, each
# reduction step of the tile reads one line of a row of B, and B's rows N * 4 bytes apart (4 KB or more from N = 1024:
# a page per step, the same L1 set) thrash where fewer tile rows share each loaded line: x @ W on a Zen 3 core (512 KB
# L2), one thread, kernels alone in turns, median, the copy included: 16x1024x4096 6.2 -> 2.6 ms, 64x512x2048 2.8 ->
# 1.7, 128x1024x2048 17.9 -> 6.5, 64x128x9216 3.3 -> 1.9 (4 and 8 rows gained too: 3.0 -> 2.3 and 5.9 -> 2.7 ms).
# x.T @ g with x 64 x 9216 and g 64 x 128: 3.2 -> 1.8 ms plus a 0.2-0.5 ms copy (x.T's rows, 9216 floats apart, all
# fall into one L1 set); 784x128x512 1.53 -> 1.47, 1024x256x256 2.50 -> 1.88 ms. AVX-512's 8-row tile was not
# measured so: its rules stay as above
NARROW_TILE_ROWS = 4
PACK_FEW_MIN_ROWS = 16
# ... and from a B of half the L2 (whole `(a @ b).realize()`s, one Zen 3 thread, CPU time, p10 of 40 in 3 alternated
# processes: 384^3 (B of 576 KB) 1.77-1.95 -> 1.28-1.35 ms, 512x512x256 1.94-2.09 -> 1.44-1.48, 1024x256x256 (256 KB)
# 1.84-2.17 -> 1.42-1.52, 64x384x384 0.50-0.57 -> 0.27-0.28; from a quarter, 128 KB, within noise); A stored K x M is
# copied along the reduction from half the L2 too (x.T @ g, m x n x k: 1024x64x128 0.74-0.76 -> 0.49-0.50 ms,
# 2048x128x64 0.71-0.76 -> 0.53-0.54, 512x256x256 1.07 -> 0.87-0.88)
PACK_NARROW_L2_RATIO = 0.5
# ... and from a reduction of this many (x @ W, whole realizes as above: 1024x1024x128 6.1-6.6 -> 3.3-3.4 ms,
# 512x2048x64 3.1-3.2 -> 1.7-2.1, 256x1024x128 1.7-1.8 -> 1.4)
PACK_NARROW_MIN_REDUCE = 64
# a B cut to its first N columns (the keys of one block of causal queries) packs the whole uncut B where that copy
# costs at most this share of the matmul's multiply-adds: every block shares the one copy (`_whole_of_prefix`)
PACK_SHARED_COPY_SHARE = 8

def _is_packed(y0: UOp) -> bool:
  if y0.op is Ops.SHRINK: y0 = y0.src[0]   # panels padded to whole ones, or a prefix of them
  return y0.op is Ops.RESHAPE and y0.src[0].op is Ops.PERMUTE and y0.src[0].src[0].op is Ops.CONTIGUOUS

def pack_width(renderer: Any) -> int:
  """Columns per panel: the width of the heuristic's CPU register tile on this renderer (`cpu_tile`)."""
  return cpu_tile(renderer)[0]

def should_pack(m: int, n: int, k: int, itemsize: int, renderer: Any) -> bool:
  """Whether a matmul of (m x k) @ (k x n) packs B on this renderer: a machine that runs loops and declares its
  caches, B at least PACK_MIN_L2_RATIO times the L2 (its strided panels would not stay there), enough rows of A to
  pay for the copy (PACK_MIN_ROWS), a reduction long enough to be cache blocked, and whole panels, at least
  PACK_MIN_PANELS of them. A register tile of at most NARROW_TILE_ROWS rows packs from PACK_FEW_MIN_ROWS rows, a B of
  PACK_NARROW_L2_RATIO times the L2 and a reduction of PACK_NARROW_MIN_REDUCE."""
  if renderer is None or not renderer.runs_loops: return False
  caches = tuple(renderer.cache_bytes or ())
  if len(caches) < 2: return False
  w, narrow = pack_width(renderer), _narrow_tile(renderer)
  big = n * k * itemsize >= (PACK_NARROW_L2_RATIO if narrow else PACK_MIN_L2_RATIO) * caches[1]
  rows, reduce = (PACK_FEW_MIN_ROWS, PACK_NARROW_MIN_REDUCE) if narrow else (PACK_MIN_ROWS, PACK_MIN_REDUCE)
  return big and m >= rows and k >= reduce and _whole_panels(n, w)

def _narrow_tile(renderer: Any) -> bool:
  return cpu_tile(renderer)[1] <= NARROW_TILE_ROWS

def should_pack_transposed(batch: int, m: int, n: int, k: int, renderer: Any) -> bool:
  """Whether a matmul whose B is stored N x K (contiguous along the reduction) packs B on this renderer: a machine
  that runs loops with vector registers and caches, at least PACK_T_MIN_WORK multiply-adds over all batches, at least
  PACK_T_MIN_ROWS rows of A to reuse each packed value, and whole panels, at least PACK_MIN_PANELS of them."""
  if renderer is None or not renderer.runs_loops or not renderer.vector_bytes: return False
  if len(tuple(renderer.cache_bytes or ())) < 2: return False
  w = pack_width(renderer)
  return batch * m * n * k >= PACK_T_MIN_WORK and m >= PACK_T_MIN_ROWS and _whole_panels(n, w)

def _whole_panels(n: int, w: int) -> bool:
  """Whether a B n wide makes panels of w columns: at least PACK_MIN_PANELS whole ones, or PACK_PAD_MIN_PANELS with the
  last padded."""
  return n >= PACK_MIN_PANELS * w and (n % w == 0 or n >= PACK_PAD_MIN_PANELS * w)

def _along_last(y: UOp) -> bool:
  """Whether the innermost axis of movement view `y` walks the value it views contiguously, with no broadcast, pad or
  flip on the way (a cut is a start elsewhere: k cut from q, k and v's buffer): B stored N x K is read along K."""
  if any(u.op is Ops.EXPAND for u in _movement_chain(y)): return False
  return (strides := view_strides(y, offset_ok=True)) is not None and bool(strides) and strides[-1] == 1

def _movement_chain(y: UOp) -> list[UOp]:
  chain = [y]
  while chain[-1].op in GroupOp.Movement: chain.append(chain[-1].src[0])
  return chain

def _reduction_last(r: UOp) -> UOp | None:
  """A matmul reducing middle or leading axes ((m, k, n) summed over k: the input gradient `g @ W.T` as autograd builds
  it; (b, t, n, m) summed over b and t: the weight gradient of a Linear layer on a batch of sequences) as the same
  matmul over one last axis, both operands' views permuted under their broadcasts, then reshaped back."""
  op, axes = r.arg
  x = r.src[0]
  if op is not Ops.ADD or x.op is not Ops.MUL or x.shape is None or len(x.shape) - len(axes) < 2: return None
  nd = len(x.shape)
  if axes == (nd - 1,) or any(y.op is not Ops.EXPAND or y.src[0].shape is None for y in x.src): return None
  if (last := _reduced_last(r, tuple(i for i in range(nd) if i not in axes))) is None: return None
  if (packed := _pack(last)) is None: return None
  return UOp(Ops.RESHAPE, r.dtype, (packed,), r.shape)

def _reduced_last(r: UOp, kept: tuple[int, ...]) -> UOp | None:
  """The product `r` sums over its reduced axes, with its kept axes in the order `kept` and the summed ones last,
  merged into one: both operands' views permuted (and reshaped) under their broadcasts. None where an operand's
  reduced axes are neither all broadcast nor all there, or where its plain strides would not merge (the view would
  need a copy of its own); a view without plain strides (a gradient assembled by pads) merges by its index math."""
  x, red = r.src[0], tuple(r.arg[1])
  order, n = (*kept, *red), len(kept)
  length = math.prod(x.shape[i] for i in red)
  srcs = []
  for y in x.src:
    view = UOp(Ops.PERMUTE, y.dtype, (y.src[0],), order)
    if len(red) > 1:
      inner = tuple(y.src[0].shape[i] for i in order)
      summed = math.prod(inner[n:])
      if summed not in (1, length): return None
      merged = UOp(Ops.RESHAPE, y.dtype, (view,), (*inner[:n], summed))
      if view_strides(view) is not None and view_strides(merged) is None: return None
      view = merged
    srcs.append(UOp(Ops.EXPAND, y.dtype, (view,), (*(x.shape[i] for i in kept), length)))
  return UOp(Ops.REDUCE_AXIS, r.dtype, (x.replace(src=tuple(srcs)),), (r.arg[0], (n,)))

def _stored_permuted(p: UOp, rs: UOp, r: UOp) -> UOp | None:
  """A matmul whose result is stored with its kept axes permuted (the weight gradient of `x @ W`, W stored in x out:
  autograd's (1, out, in) reduction over the rows, stored transposed) as the matmul in the stored axis order: the
  operand packed is the one read along the stored rows, which the register tile's vectors walk. In the reduction's
  own order the other operand would be packed, and the vectors would load a row of the unpacked one each reduction
  step: on the 16-core Xeon host that kernel ran at 2.5x the forward's time per thread, on a Zen 4 core 1.25x."""
  op, axes = r.arg
  x = r.src[0]
  if op is not Ops.ADD or x.op is not Ops.MUL or x.shape is None or len(x.shape) - len(axes) < 2: return None
  kept = [i for i in range(len(x.shape)) if i not in axes]
  if rs.shape != tuple(x.shape[i] for i in kept) or len(p.arg) != len(kept): return None
  stored = [kept[j] for j in p.arg]
  if stored == kept or any(y.op is not Ops.EXPAND or y.src[0].shape is None for y in x.src): return None
  if (last := _reduced_last(r, tuple(stored))) is None or (packed := _pack(last)) is None: return None
  return UOp(Ops.RESHAPE, r.dtype, (packed,), p.shape)

def _pack(r: UOp) -> UOp | None:
  op, axes = r.arg
  x = r.src[0]
  if op is not Ops.ADD or x.op is not Ops.MUL or len(axes) != 1: return None
  shape = x.shape
  if shape is None or len(shape) < 3 or axes[0] != len(shape) - 1 or any(not isinstance(s, int) for s in shape):
    return None
  m, n, k = shape[-3:]
  # B: the operand broadcast along the rows of A, (..., 1, N, K) before its EXPAND
  at = next((i for i, y in enumerate(x.src) if y.op is Ops.EXPAND and y.src[0].shape is not None and
             y.src[0].shape[-3:] == (1, n, k)), None)
  if at is None: return None
  y = x.src[at]
  y0 = y.src[0]
  if _is_packed(y0): return None
  from tinyplug.device import renderer_of
  renderer = renderer_of(y0.device)
  batch = math.prod(shape[:-3])
  if not should_pack(m, n, k, y0.dtype.itemsize, renderer) and \
     not (_along_last(y0) and should_pack_transposed(batch, m, n, k, renderer)):
    return _rows_only(r, x.src[1 - at], 1 - at, m, n, k, renderer)
  w = pack_width(renderer)
  lead = len(y0.shape) - 3
  wide = -(-n // w) * w
  if (whole := _whole_of_prefix(y0, m, n, w)) is not None:
    back = UOp(Ops.SHRINK, y0.dtype, (_panels_back(whole, whole.shape[-2], k, w),), tuple((0, s) for s in y0.shape))
  else:
    padded = y0 if wide == n else UOp(Ops.PAD, y0.dtype, (y0,), ((0, 0),) * (lead + 1) + ((0, wide - n), (0, 0)))
    back = _panels_back(padded, wide, k, w)
  srcs = list(x.src)
  if (rows := _rows_along_reduction(x.src[1 - at], m, k, renderer)) is None: rows = _indexed_rows(x.src[1 - at])
  if rows is not None: srcs[1 - at] = rows
  if wide == n:
    srcs[at] = y.replace(src=(back,))
    return r.replace(src=(x.replace(src=tuple(srcs)),))
  # the product over the padded width, its result cut back: the panels' loads need no bounds check in the loop
  full = (*shape[:-2], wide, k)
  a = srcs[1 - at]
  if a.op is not Ops.EXPAND or a.src[0].shape is None or a.src[0].shape[-2] != 1: return None
  srcs[at] = UOp(Ops.EXPAND, y.dtype, (back,), full)
  srcs[1 - at] = UOp(Ops.EXPAND, a.dtype, (a.src[0],), full)
  wide_r = r.replace(src=(x.replace(src=tuple(srcs)),))
  return UOp(Ops.SHRINK, r.dtype, (wide_r,), tuple((0, s) for s in r.shape))

def _panels_back(y: UOp, wide: int, k: int, w: int) -> UOp:
  """B (..., 1, wide, K) copied into panels (..., wide // W, K, W), viewed back in B's shape."""
  lead = len(y.shape) - 3
  swap = tuple(range(lead)) + (lead, lead + 2, lead + 1)   # (..., N // W, W, K) <-> (..., N // W, K, W)
  split = UOp(Ops.RESHAPE, y.dtype, (y,), (*y.shape[:lead], wide // w, w, k))
  panels = UOp(Ops.CONTIGUOUS, y.dtype, (UOp(Ops.PERMUTE, y.dtype, (split,), swap),))
  return UOp(Ops.RESHAPE, y.dtype, (UOp(Ops.PERMUTE, y.dtype, (panels,), swap),), y.shape)

def _whole_of_prefix(y0: UOp, m: int, n: int, w: int) -> UOp | None:
  """B's view (..., 1, N, K) without its cut, where B is the first N of a longer run of columns, whole panels long both,
  seen through permutes and reshapes that only add or drop axes of 1: the keys up to a block's last query in causal
  attention by blocks. Every block then packs the same whole B (one copy, hash-consed, instead of one per block) and
  reads its first N // W panels. Only where the whole copy costs at most 1 / PACK_SHARED_COPY_SHARE of this matmul's
  multiply-adds, so a prefix that no other matmul shares wastes little."""
  chain, at = _movement_chain(y0), len(y0.shape) - 2
  spots = []
  for u in chain[:-1]:
    if u.op is Ops.SHRINK: break
    spots.append(at)
    if (at := _axis_below(u, at)) is None: return None
  else: return None
  src = u.src[0]
  whole = src.shape[at]
  if any(c != ((0, n) if i == at else (0, s)) for i, (c, s) in enumerate(zip(u.arg, src.shape))): return None
  if n % w or whole % w or whole * PACK_SHARED_COPY_SHARE > m * n: return None
  for v, spot in zip(reversed(chain[:len(spots)]), reversed(spots)):
    arg = v.arg if v.op is Ops.PERMUTE else tuple(whole if i == spot else s for i, s in enumerate(v.arg))
    src = UOp(v.op, src.dtype, (src,), arg)
  return src

def _axis_below(u: UOp, at: int) -> int | None:
  """Where axis `at` of movement op `u` sits in its source: through a permute, or a reshape that only adds or drops
  axes of 1; None for anything else."""
  if u.op is Ops.PERMUTE: return u.arg[at]
  if u.op is not Ops.RESHAPE or u.shape[at] == 1: return None
  src = u.src[0].shape
  kept = [i for i, s in enumerate(src) if s != 1]
  if [s for s in u.shape if s != 1] != [src[i] for i in kept]: return None
  return kept[sum(1 for s in u.shape[:at] if s != 1)]

def _rows_along_reduction(y: UOp, m: int, k: int, renderer: Any) -> UOp | None:
  """A, when it is stored K x M (`x.T @ g`, the weight gradient) and large: a copy with its rows along the reduction.
  The register tile reads a few of A's rows per reduction step; stored K x M, every step's values lie one row of A
  apart, in another page: a stream per step instead of one per row. (Zen 4, one thread, `a.T @ g` with B packed:
  1024^3 20.6 ms copied vs 22.0 ms strided; A of 1 MB, (256 x 1024) against N = 768 or 1024, 4.2 vs 4.0 ms: below
  PACK_MIN_L2_RATIO times the L2 its rows stay cached.)"""
  if y.op is not Ops.EXPAND or (y0 := y.src[0]).shape is None or y0.shape[-3:] != (m, 1, k): return None
  strides = view_strides(y0)
  if strides is None or strides[-3] != 1 or strides[-1] == 1: return None
  caches = tuple(renderer.cache_bytes or ())
  ratio = PACK_NARROW_L2_RATIO if _narrow_tile(renderer) else PACK_MIN_L2_RATIO
  if m * k * y0.dtype.itemsize < ratio * caches[1]: return None
  return y.replace(src=(UOp(Ops.CONTIGUOUS, y0.dtype, (y0,)),))

def _indexed_rows(y: UOp) -> UOp | None:
  """A, when its view has no plain strides but holds no value twice (q, k and v's gradients side by side in their heads'
  layout: every step along the reduction divides its index by the parts): copied in order. The register tile reads
  it n / W times; in place each read paid that index math (the gpt step's `g_qkv @ W`, one Zen 3 thread: 8.2-10.3 ms
  against 6.2 for a plain operand of its size). A window view that reads values more than once (a convolution's
  input) is left: its copy would be larger than the data."""
  if y.op is not Ops.EXPAND or (y0 := y.src[0]).shape is None or y0.op not in GroupOp.Movement: return None
  if view_strides(y0) is not None or any(not isinstance(d, int) for d in y0.shape): return None
  base = _movement_chain(y0)[-1]
  if base.shape is None or any(not isinstance(d, int) for d in base.shape) or math.prod(y0.shape) > math.prod(base.shape):
    return None
  return y.replace(src=(UOp(Ops.CONTIGUOUS, y0.dtype, (y0,)),))

def _rows_only(r: UOp, a: UOp, at: int, m: int, n: int, k: int, renderer: Any) -> UOp | None:
  """A matmul whose B does not pack, on a machine whose register tile has at most NARROW_TILE_ROWS rows: A copied with
  its rows along the reduction (`_rows_along_reduction`) where it is stored K x M, at least PACK_MIN_ROWS rows, and
  B at least PACK_MIN_PANELS tiles wide. None where nothing changes."""
  if renderer is None or not renderer.runs_loops or len(tuple(renderer.cache_bytes or ())) < 2: return None
  if not _narrow_tile(renderer) or m < PACK_MIN_ROWS or n < PACK_MIN_PANELS * pack_width(renderer): return None
  if (rows := _rows_along_reduction(a, m, k, renderer)) is None: return None
  x = r.src[0]
  return r.replace(src=(x.replace(src=tuple(rows if i == at else y for i, y in enumerate(x.src))),))

def _one_permute(p: UOp, q: UOp) -> UOp:
  """A permute of a permute as one (none where they cancel): `_stored_permuted` must see the order stored (a Linear
  weight's gradient comes out of autograd permuted twice, back to the order of its reduction)."""
  order = tuple(q.arg[i] for i in p.arg)
  return q.src[0] if order == tuple(range(len(order))) else UOp(Ops.PERMUTE, p.dtype, (q.src[0],), order)

def make_pass() -> PatternMatcher:
  """Run parents first (the pass spec's bottom_up): a permuted store must be seen before its reduction is rewritten."""
  return PatternMatcher([
    (UPat(Ops.PERMUTE, src=(UPat(Ops.PERMUTE, name="q"),), name="p"), _one_permute),
    (UPat(Ops.PERMUTE, src=(UPat(Ops.RESHAPE, src=(UPat(Ops.REDUCE_AXIS, name="r"),), name="rs"),), name="p"),
     _stored_permuted),
    (UPat(Ops.REDUCE_AXIS, name="r"), _pack), (UPat(Ops.REDUCE_AXIS, name="r"), _reduction_last)])
