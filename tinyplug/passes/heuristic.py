"""The `heuristic` pass set: a hand-written recipe of optimisation actions for kernels nobody chose actions for.

Its one pass runs in the "opt" stage, after the core applied the actions that were decided already (the engine's,
from a search under BEAM=n; none under NOOPT=1): where they are still undecided it picks them with `heuristic_opts`
and applies them. Turned off (`TINY_PLUGINS=-heuristic`) kernels run as scheduled: plain loops, correct and slower."""
from __future__ import annotations
import math
from itertools import repeat
from typing import Any, Callable
from tinyplug.backend import ALIAS_BYTES, narrow_vectors
from tinyplug.uop.ops import Ops, UOp
from tinyplug.uop.dtype import dtypes
from tinyplug.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tinyplug.codegen.linearize import sparse_gate
from tinyplug.passes.heuristic_plugin import EXPAND_BUDGET

def make_pass() -> Callable[[UOp, Any], UOp]:
  """The pass's factory (named by the plugin's PassSpec)."""
  def heuristic_actions(sink: UOp, ctx: Any) -> UOp:
    if ctx.opts is not None: return sink   # decided already: BEAM's actions, NOOPT's none, or another heuristic's
    # a loop that runs to a variable's value (a symbolic shape) is left as it is: its size divides by nothing
    if any(u.op is Ops.RANGE and u.src[0].op is not Ops.CONST for u in sink.toposort()): return sink
    return ctx.apply_opts(sink, heuristic_opts(Kernel(sink, ctx.renderer)))
  return heuristic_actions

def _try(k: Kernel, opt: Opt) -> bool:
  try: k.apply_opt(opt)
  except KernelOptError: return False
  return True

def _try_tile(k: Kernel, opt: Opt) -> bool:
  """`_try` for the upcasts and unrolls of a reduction's register tile, whose lanes multiply the whole body (up to 256
  accumulators): not taken when the expanded kernel would exceed EXPAND_BUDGET. (An elementwise row, at most 16
  lanes that become one vector, is not capped: a 26-wide random init upcast by 13 is ~5,700 expanded UOps but 1.7x
  faster than by 2.)"""
  sink, applied = k.sink, list(k.applied_opts)
  if not _try(k, opt): return False
  if 0 < (budget := EXPAND_BUDGET.value):
    total, in_loop = expanded_sizes(k.sink)
    if in_loop > budget or total > budget * EPILOGUE_BUDGET_TIMES:
      k.sink, k.applied_opts = sink, applied
      return False
  return True

# the code outside the reduction's loop (its epilogue: a fused activation's gradient, a bias) may take this many times
# EXPAND_BUDGET: it runs once per output rather than once per step of the reduction, and capping it had cut the tile to
# one row (gelu's gradient fused into `g @ W`, 8x128x1024 by 256, one thread: 37.8 ms at 1 row, 19.2 at 2, 9.9 at 4,
# 8.3 at 8 rows; codegen + LLVM 0.11 / 0.16 / 0.25 / 0.49 s, once)
EPILOGUE_BUDGET_TIMES = 8

def expanded_size(sink: UOp) -> int:
  """`expanded_sizes`' total."""
  return expanded_sizes(sink)[0]

def expanded_sizes(sink: UOp) -> tuple[int, int]:
  """Estimated UOps of the kernel after the expand stage: each node once per lane of the upcast and unroll axes it
  depends on (a REDUCE folds the lanes of the axes it reduces). Codegen's cost grows with it, and so does LLVM's
  where the lanes do not become vectors, so it is what bounds the register tiles and unrolls. Returns that total and
  the part inside a reduction's loop (nodes that depend on a reduce or unroll axis their REDUCE has not folded yet)."""
  bits: dict[UOp, int] = {}
  open_loops: dict[UOp, int] = {}   # per node: a bit per reduce or unroll axis it depends on and no REDUCE folded
  loop_bit: dict[UOp, int] = {}
  sizes: list[int] = []
  lanes: dict[int, int] = {0: 1}
  total = in_loop = 0
  for u in sink.toposort():
    mask = looping = 0
    for s in u.src:
      mask |= bits[s]
      looping |= open_loops[s]
    if u.op is Ops.RANGE and u.arg[1] in ("upcast", "unroll"):
      mask |= 1 << len(sizes)
      sizes.append(u.src[0].arg)
    if u.op is Ops.RANGE and u.arg[1] in ("reduce", "unroll"): looping |= loop_bit.setdefault(u, 1 << len(loop_bit))
    elif u.op is Ops.REDUCE:
      for r in u.src[1:]:
        mask &= ~bits[r]
        looping &= ~loop_bit.get(r, 0)
    bits[u], open_loops[u] = mask, looping
    if (n := lanes.get(mask)) is None:
      n = lanes[mask] = math.prod(sz for i, sz in enumerate(sizes) if mask >> i & 1)
    total += n
    if looping: in_loop += n
  return total, in_loop

def _divisor(n: int, choices: tuple[int, ...]) -> int | None:
  return next((c for c in choices if n % c == 0 and n >= c), None)

def _reuse(k: Kernel) -> list[int]:
  """For each output axis: how much of the kernel's input the loads that do not depend on it read (upcasting the
  axis reuses each such loaded value once per lane)."""
  loads = [u for u in k.sink.toposort() if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
  deps = [(set(x for x in u.toposort() if x.op is Ops.RANGE), max(u.src[0].src[0].dtype.size, 1)) for u in loads]
  return [sum(size for d, size in deps if r not in d) for r in k.loop_axes]

# a reduction at least this long (elements) over an output of at least this many elements gets cache blocking
BLOCK_MIN_REDUCE, BLOCK_MIN_OUTPUT = 256, 256 * 1024

def _worth_blocking(k: Kernel) -> bool:
  return math.prod(r.src[0].arg for r in k.reduce_axes) >= BLOCK_MIN_REDUCE and \
    math.prod(r.src[0].arg for r in k.loop_axes) >= BLOCK_MIN_OUTPUT

# the register tile of a small reduction is capped by its work (multiply-adds): a 32x8 tile of a 128x64x32 matmul
# is ~2,400 UOps that take LLVM ~0.3 s to compile, to save microseconds per run; (least work, most upcasted elements)
TILE_BUDGETS = ((1 << 24, 256), (1 << 21, 64), (0, 16))

def _tile_budget(k: Kernel) -> int:
  work = math.prod(r.src[0].arg for r in k.loop_axes) * math.prod(r.src[0].arg for r in k.reduce_axes)
  return next(budget for least, budget in TILE_BUDGETS if work >= least)

# the data caches (L1d, L2, L3) assumed where the renderer does not declare its machine's (`Renderer.cache_bytes`)
DEFAULT_CACHES = (32 << 10, 1 << 20, 32 << 20)

def cache_sizes(renderer: Any) -> tuple[int, ...]:
  """The renderer's data caches per level, or DEFAULT_CACHES where it does not know them."""
  caches = tuple(renderer.cache_bytes or ()) if renderer is not None else ()
  return caches if len(caches) >= 2 else DEFAULT_CACHES

# the CPU register tile where the renderer does not declare its vector registers: 32 columns (two AVX-512 vectors of
# float32) by 8 rows
DEFAULT_TILE = (32, 8)

def cpu_tile(renderer: Any) -> tuple[int, int]:
  """The CPU register tile of a large reduction, (columns, rows): each row two vectors of float32 (two loads of the
  second input feed a row of FMAs), and as many rows, a power of two up to 8, as leave room among the vector
  registers (`Renderer.vector_registers`) for the 2 * rows accumulators, the two loaded vectors and a broadcast.
  AVX-512 (32 registers of 64 bytes): 32 x 8; AVX2 (16 of 32 bytes): 16 x 4 (a 1024^3 matmul compiled for znver3, one
  Zen 4 core: the 32 x 8 tile, 32 accumulators, spilled at 58 GFLOP/s, 16 x 8 at 37, 16 x 4 94); NEON (32 of 16):
  8 x 8. DEFAULT_TILE where the renderer does not say."""
  if renderer is None or not renderer.vector_bytes or not renderer.vector_registers: return DEFAULT_TILE
  nbytes, regs = renderer.vector_bytes, renderer.vector_registers
  rows = next((r for r in (8, 4, 2) if 2 * r + 3 <= regs), 1)
  return max(2 * nbytes // 4, 2), rows

def unpadded_row_tile(k: Kernel, row: int, tile_w: int, tile_rows: int) -> tuple[int, int] | None:
  """A reduction's row longer than the CPU tile's width, at most twice it, that the tile would pad (`_pad_for_tile`)
  but whole half-vectors divide (56 on AVX-512: three vectors and a half, padded to 64 an eighth of the work wasted):
  (row, rows), the row upcast whole with as many rows, a power of two, as keep its accumulators (a half vector counts
  as one register) within the tile's (32 x 8: 16 vectors, so 56 x 4). Else None. (`_whole_row_tile` takes rows of
  whole vectors for matmuls read along B's rows; this one any reduction's row the tile would pad.)
  conv2d b8 64->64 56x56 k3 p1, one thread, CPU time interleaved: 25.8-33.5 ms as 64 x 8 (padded), 16.8-19.1 ms as
  56 x 4."""
  if k.renderer is None or not k.renderer.vector_bytes or not k.reduce_axes: return None
  lanes = k.renderer.vector_bytes // _acc_itemsize(k)
  if lanes < 4 or not tile_w < row <= 2 * tile_w or row % tile_w == 0 or row % (lanes // 2): return None
  if -(-row // tile_w) * tile_w > row * 5 // 4: return None   # the tile would not pad it (40, 48: 16 wide by 8)
  regs, per_row = tile_rows * -(-tile_w // lanes), -(-row // lanes)
  rows = next((r for r in (8, 4, 2) if r <= tile_rows and r * per_row <= regs), None)
  return (row, rows) if rows is not None else None

def _acc_itemsize(k: Kernel) -> int:
  """Bytes of one accumulator: the widest reduction's dtype (float32 for a float or half convolution)."""
  return max((u.dtype.itemsize for u in k.sink.toposort() if u.op is Ops.REDUCE), default=4)

# a small reduction's register tile where the innermost output axis is read contiguously (its lanes are vectors): one
# vector wide by this many rows, each row one vector accumulator (the second input's vector feeds a row of FMAs)
SMALL_VECTOR_ROWS = 4

def vector_lanes(k: Kernel) -> int:
  """Lanes of one vector register (`Renderer.vector_bytes`) for the kernel's accumulator dtype where every global load
  that depends on the innermost output axis is contiguous along it (its lanes become vector loads, as in `x.T @ g` and
  `g @ W`); 0 where some is read across it (`x @ W.T`: gathers), none depends on it, or the renderer does not say."""
  if k.renderer is None or not k.renderer.vector_bytes or not k.loop_axes or not k.reduce_axes: return 0
  along = [s for s in _load_strides(k, k.loop_axes[-1]) if s != 0]
  if not along or any(s != 1 for s in along): return 0
  red = next(u for u in k.sink.toposort() if u.op is Ops.REDUCE)
  return max(k.renderer.vector_bytes // max(red.dtype.itemsize, 1), 1)

# a small reduction's vector row over computed inputs is at most this many vectors wide: 4 was faster still (below)
# but its expanded code doubled the codegen time of the mlp step's changed kernels (+50 ms against +25 ms for 2)
FUSED_ROW_VECTORS = 2

def _row_vectors(k: Kernel) -> tuple[int, ...]:
  """How many vectors wide a small reduction's vector row may be, widest first: one where the reduction multiplies
  plain loads; where it multiplies computed values (a fused ReLU mask or bias: every input value of the tile is
  computed again for each tile that reads it), up to FUSED_ROW_VECTORS, as many as leave room among the vector
  registers for SMALL_VECTOR_ROWS rows of accumulators, the row's loaded vectors and a broadcast (a training step's
  `x.T @ g` with both inputs behind a ReLU, 64x64x128, one thread: 32 us one vector wide, 25 two, 20 four)."""
  if all(_is_product_of_loads(u.src[0]) for u in k.sink.toposort() if u.op is Ops.REDUCE): return (1,)
  regs = k.renderer.vector_registers or 0
  return tuple(v for v in range(FUSED_ROW_VECTORS, 0, -1) if v == 1 or v * SMALL_VECTOR_ROWS + v + 1 <= regs)

def _threads(k: Kernel) -> int:
  return max(1, int(k.renderer.threads or 1)) if k.renderer is not None else 1

def _step_bytes(k: Kernel, axis: UOp) -> int:
  """Bytes that the global loads depending on `axis` (and not on the innermost output axis) read per iteration of
  the output loops: each such load's extent over the upcast, unroll and reduce axes it depends on. For a matmul's
  outer tile axis: the tile's rows of A (rows x K floats)."""
  inner, total = k.loop_axes[-1], 0
  for u in k.sink.toposort():
    if u.op is not Ops.LOAD or u.src[0].src[0].op is not Ops.DEFINE_GLOBAL: continue
    deps = set(x for x in u.toposort() if x.op is Ops.RANGE)
    if axis in deps and inner not in deps:
      total += u.dtype.itemsize * math.prod(r.src[0].arg for r in deps if r.arg[1] != "loop")
  return total

def _panel_bytes(k: Kernel) -> int:
  """Bytes the loads depending on the innermost output axis read per iteration of it: a matmul's column panel of B
  (K x the tile's width), which every tile of a row block reuses."""
  inner, total = k.loop_axes[-1], 0
  for u in k.sink.toposort():
    if u.op is not Ops.LOAD or u.src[0].src[0].op is not Ops.DEFINE_GLOBAL: continue
    deps = set(x for x in u.toposort() if x.op is Ops.RANGE)
    if inner in deps: total += u.dtype.itemsize * math.prod(r.src[0].arg for r in deps if r.arg[1] != "loop")
  return total

def _panel_contiguous(k: Kernel) -> bool:
  """Whether the column panel (the loads depending on the innermost output axis) is one contiguous stretch of memory:
  each step of the reduction moves its loads by no more than they read (B packed into panels, or read along its
  rows), rather than a whole row of B further."""
  inner, red = k.loop_axes[-1], k.reduce_axes[-1]
  memo: dict[UOp, int | None] = {}
  for u in k.sink.toposort():
    if u.op is not Ops.LOAD or u.src[0].src[0].op is not Ops.DEFINE_GLOBAL: continue
    deps = set(x for x in u.toposort() if x.op is Ops.RANGE)
    if inner not in deps: continue
    step = index_stride(u.src[0].src[1], red, memo)
    reads = math.prod(r.src[0].arg for r in deps if r.arg[1] in ("upcast", "unroll"))
    if step is None or abs(step) > reads: return False
  return True

# cache block sizes, in tile rows, largest first
BLOCK_ROWS = (64, 32, 16, 8, 4, 2)
# the blocks of all threads together take at most this share of the last-level cache: the panels stream through it
# too (2048^3 on 2 threads, kernel CPU time: 4 blocks of 64 rows 157 ms, 2 of 128 rows, 16 MB of A, 165 ms)
BLOCK_LLC_SHARE = 4

def _pick(rows: int, sizes: list[int], threads: int) -> int:
  """Of the block sizes that fit: one that leaves a multiple of `threads` blocks (every thread an equal share) first,
  then the largest."""
  return max(sizes, key=lambda s: ((rows // s) % threads == 0, s))

def block_rows(rows: int, row_bytes: int, llc: int, threads: int) -> int | None:
  """How many steps of the outer tile axis (of `rows`, `row_bytes` of input each) one cache block takes, where the
  column panel that the loop over the innermost axis brings in is contiguous (B packed). Every step of the block
  reuses the panel from the L2: the more steps, the fewer times each panel comes in from the last-level cache (the
  first tile on a panel runs slower than the rest). A contiguous panel spreads over all the L2's sets, and the block's
  own rows, read once per panel as a few sequential streams the prefetchers keep ahead of, need not stay in the L2
  (a packed 2048 matmul on a Zen 4 core with a 1 MB L2, 8-row tiles, one thread: blocks of 8 rows, 512 KB of A, 158
  ms; 16 rows 155; 32 rows 152; 64 rows 152), only in the last-level cache: all threads' blocks together take at
  most 1/BLOCK_LLC_SHARE of it. None: no size splits the axis."""
  fits = [s for s in BLOCK_ROWS if rows % s == 0 and rows // s >= 2]
  if not fits: return None
  in_llc = [s for s in fits if max(threads, 1) * s * row_bytes * BLOCK_LLC_SHARE <= llc]
  return _pick(rows, in_llc or fits[-1:], threads)

# strided panels: block sizes in tile rows (a 512 matmul, B unpacked, 2 threads: blocks of 32 rows, one per thread,
# 1.27-1.28 ms; 16 rows 1.22)
STRIDED_BLOCK_ROWS = (16, 8, 4, 2)

def strided_block_rows(rows: int, row_bytes: int, panel_bytes: int, l2: int, threads: int) -> int | None:
  """`block_rows` where the panel is read down B's rows (B not packed): its rows use only a few of the L2's sets, so
  the block's rows and the panel must fit the L2 together, or the block evicts the panel it is meant to reuse."""
  fits = [s for s in STRIDED_BLOCK_ROWS if rows % s == 0 and rows // s >= 2]
  if not fits: return None
  return _pick(rows, [s for s in fits if s * row_bytes + panel_bytes <= l2] or fits[-1:], threads)

# a THREAD axis in this many contiguous parts per thread where the axis divides: on an idle machine each thread runs its
# parts one after the other, the rows and order of one part per thread; a thread that loses its core for a while
# leaves its parts not yet started to the others (the runtime's shares), where one part per thread left them waiting
# for the rest of its half (a 56x56 conv's halves are ~8 ms each)
THREAD_PARTS = (4, 2, 1)

def _masked_rows_cost_more(k: Kernel) -> bool:
  """Whether padding the outer tile axis to whole cache blocks costs more than the blocks save: on a renderer with
  `narrow_vectors` (AVX2). Each padded row's broadcast load is masked, which x86 code generation makes a branch per
  row on every step of the reduction; a 4-row tile's loop then runs at half speed (Winograd's (16, 392, 256) @ (16,
  256, 256) matmul on a Zen 3 core, rows 98 tiles of 4: padded to 112 in blocks of 16 19.9-21.8 ms, unpadded
  10.7-12.0, in blocks of 2 11.5). AVX-512's 8-row tile was not measured: unchanged."""
  return narrow_vectors(k.renderer)

def _block_for_cache(k: Kernel) -> None:
  """Large matmul-like kernels: the outer tile axis is split into blocks, and inside a block the loop over the
  innermost output axis runs outside the block's rows, so each column panel of the other input that loop brings in
  is reused from the L2 by every tile of the block. The block size follows the renderer's caches
  (`Renderer.cache_bytes`) and thread count: by the last-level cache where the panel is contiguous (`block_rows`),
  by the L2 where it is strided (`strided_block_rows`). Then a contiguous share of the outermost loop per thread, in
  THREAD_PARTS parts where the axis allows."""
  sizes = [r.src[0].arg for r in k.loop_axes]
  threads = _threads(k)
  if (outer := next((a for a in range(len(sizes) - 1) if sizes[a] >= 64), None)) is not None:
    if not _divisor(sizes[outer], (16, 8, 4)) and not _masked_rows_cost_more(k): _pad_for_tile(k, outer, 16)
    rows, caches = k.loop_axes[outer].src[0].arg, cache_sizes(k.renderer)
    row_bytes = _step_bytes(k, k.loop_axes[outer])
    amt = block_rows(rows, row_bytes, caches[-1], threads) if _panel_contiguous(k) else \
      strided_block_rows(rows, row_bytes, _panel_bytes(k), caches[1], threads)
    if amt is not None: _try(k, Opt(OptOps.SPLIT, outer, amt))
  _share_threads(k)

def _share_threads(k: Kernel) -> None:
  """A THREAD axis: the outermost loop that splits into THREAD_PARTS parts per thread (a contiguous share each)."""
  if (threads := _threads(k)) > 1:
    for axis in range(len(k.loop_axes)):
      if any(_try(k, Opt(OptOps.THREAD, axis, threads * parts)) for parts in THREAD_PARTS): break

def _load_ranges(k: Kernel) -> list[set[UOp]]:
  """For each load from global memory: the RANGEs its address depends on."""
  loads = [u for u in k.sink.toposort() if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
  return [set(x for x in u.toposort() if x.op is Ops.RANGE) for u in loads]

# upcasted elements a small-window tile may reach when its vectors are not a power of two wide (measured on AVX-512:
# 11x4 and 13x4 beat 11x8 and 13x8, 3x3x8 beats 3x3x4)
SMALL_TILE_BUDGET = 72
# ... and when the second axis's lanes are vectors (its loads contiguous along it): up to 16 vector accumulators (a
# strided convolution's input-gradient phase, 13x16: 8.2 -> 5.7 ms over its four phases, one thread)
VECTOR_TILE_BUDGET = 256

# a window with more taps than this many registers hold twice over (a broadcast and an accumulator each) is tiled as
# one row of taps by vectors (below); at most this many vector accumulators then, and at most half the registers
WIDE_WINDOW_REGISTERS, WIDE_WINDOW_VECTORS = 32, 16

def _wide_window_vectors(r: Any) -> int:
  """Vector accumulators of a wide window's row of taps: within half the registers, the rest for the row's broadcasts
  and the loaded vectors. AVX2 (16 registers) 8: the weight gradient r_64_32_4_4_8_28_28 (conv_transpose2d b8
  64->32 28x28 k4 s2, conv2d 32->64 56x56 k4 s2) on a Zen 3 core, one thread, unmasked reads: 4 x 32 channels
  8.4-8.9 ms (16 accumulators and the broadcasts spill), 4 x 16 4.7-5.0. AVX-512 (32 registers): 16, as before."""
  regs = r.vector_registers if r is not None and r.vector_registers else 2 * WIDE_WINDOW_VECTORS
  return min(WIDE_WINDOW_VECTORS, regs // 2)

# a strided window's row over a reduction this long (products per output) is tiled up to this many positions wide
LONG_GATHER_REDUCE, GATHER_ROW_POSITIONS = 512, 16

def _small_window_tile(k: Kernel) -> list[Opt] | None:
  """Convolution-shaped CPU kernels whose innermost output axis is small and odd (an output width of 11 or 13, a
  weight gradient's kernel width of 3): no power-of-two upcast fits it, so it is upcast whole (an axis of at most 4,
  like a kernel width, together with the axis before it when that is as small). The second tile axis is one whose
  loads do not depend on the axes already upcast (so each of its loads feeds a whole row of the tile), by up to 8
  within SMALL_TILE_BUDGET, or by 16 within VECTOR_TILE_BUDGET when its loads are contiguous along it (its lanes are
  vectors: a strided convolution's channels, read from a channel-innermost copy); a reduce axis of at most 4 (the
  kernel width of a forward conv) is unrolled."""
  loops, reduces = k.loop_axes, k.reduce_axes
  if not reduces or len(loops) < 2: return None
  sizes, inner = [r.src[0].arg for r in loops], len(loops) - 1
  if (sizes[inner] > 32 or _divisor(sizes[inner], (16, 8))) and not _long_gather_row(k): return None
  amt = max((d for d in range(2, 17) if sizes[inner] % d == 0), default=None)
  padded = amt is None
  if padded:
    # a prime row over 16 (a 58-wide padded input's stride-2 input-gradient phases: 29) is padded by one and tiled
    # by its half, as a 15-wide row is (r_8_64_29_29_128_2_2, one thread: the generic 8 channels x 4 unrolled 28.2 ms,
    # 30 padded 15 x 16 4.6 ms, 32 padded 16 x 16 4.6, the row whole 29 x 4 5.4)
    if sizes[inner] <= 16: return None
    k = k.copy()
    if not _try(k, Opt(OptOps.PADTO, inner, (sizes[inner] + 1) // 2)): return None
    sizes[inner] += 1
    amt = sizes[inner] // 2
  if not padded and (turned := _channel_vector_tile(k)) is not None: return turned
  if not padded and (phased := _phase_row_tile(k)) is not None: return phased
  # a long reduction (64 or more multiply-adds per output: a convolution's input gradient over 64 channels) takes a
  # 17-32-wide row whole (two vectors) with room for 4 rows of the second axis: r_64_32_26_26_64_3_3 33 -> 20 ms;
  # a short one (a one-channel 3x3 convolution) keeps half the row (whole, it measured 2x slower)
  budget = SMALL_TILE_BUDGET
  whole_long = not padded and sizes[inner] > 16 and math.prod(r.src[0].arg for r in reduces) >= 64
  if whole_long: amt, budget = sizes[inner], 4 * sizes[inner]
  # a window's row read with a stride (a stride-2 convolution's input) gives lanes that are gathers: a short row (4)
  # and a wide second axis, whose loads do not depend on the row (r_64_64_12_12_32_3_3, one thread: 12x4 13.3 ms,
  # 4x16 8.7). Not a row read across a matrix's rows (a linear layer's 10 outputs: 10x4 38 us, 2x16 104 us)
  along = [s for s in _load_strides(k, loops[inner]) if s != 0]
  gathers = len(reduces) >= 2 and bool(along) and all(s is not None and 1 < abs(s) <= 8 for s in along)
  if gathers and math.prod(r.src[0].arg for r in reduces) >= GATHER_PAIR_REDUCE and \
     (pairs := _gather_row_channel_pairs(k, inner)) is not None: return pairs
  if gathers: amt = next((d for d in (4, 2) if sizes[inner] % d == 0), amt)
  # ... but a long one (512 or more products per output: 64 input channels) takes up to 16 positions of the row by
  # one vector of channels, one row: twice the independent accumulators, each weight vector feeding 14 FMAs (one Zen 4
  # thread, CPU time interleaved, benchmarks/conv_row_ab.py: b8 64->128 56x56 s2 p1 4 x 16 x 2 10.6-12.3 ms, 14 x 16
  # 8.9-9.9; 64->64 6.5-6.7 / 5.0; 32->64 (288 products) 3.4 / 2.8; 128->128 28x28 5.1 / 4.4; 64->64 26x26 (12 wide)
  # 1.69 / 1.61-1.67; the strided CNN's 32->64 26x26 (288) 4.0-4.3 / 4.1-4.5: kept at 4 x 16 x 2)
  long_row = gathers and math.prod(r.src[0].arg for r in reduces) >= LONG_GATHER_REDUCE
  if long_row:   # (room among the vector registers for the accumulators, the weight vector and a broadcast)
    regs = (k.renderer.vector_registers if k.renderer is not None else None) or GATHER_ROW_POSITIONS + 2
    amt = max(d for d in range(1, min(GATHER_ROW_POSITIONS, regs - 2) + 1) if sizes[inner] % d == 0)
  k = k.copy()
  deps, reuse, red = _load_ranges(k), _reuse(k), set(reduces)
  _try_tile(k, Opt(OptOps.UPCAST, inner, amt))
  # pooling has no value that stays the same across the row (a conv's weight): the row of outputs is the whole tile
  if not any(loops[inner] not in d and d & red for d in deps): return k.applied_opts
  tiled, wide = [inner], False
  if sizes[inner] <= 4 and sizes[inner - 1] <= 4 and reuse[inner - 1]:
    # a window whose taps' broadcasts and accumulators (one each per tap) outnumber AVX-512's vector registers (4x4:
    # 16 + 16 + the loaded vector) spills: one row of taps by up to 4 vectors of the vector axis instead (conv_transpose2d
    # b8 64->32 28x28 k4 s2's weight gradient r_64_32_4_4_8_28_28, one Zen 4 thread: 4x4x16 5.8-5.9 ms, 4x64 4.35)
    # (fewer registers than AVX-512's, the same 16 taps: AVX2's 4x4x16 spilled too, 24.4 ms against 9.3 as 4x16 and
    # 8.2 as 4x32 on a Zen 3 core; a 3x3 window stays tiled there, its 18 accumulators measured faster than one row:
    # conv 64->128 56x56 s2's weight gradient 3x3x16 15.4 ms, 3x32 22.7)
    regs = (k.renderer.vector_registers if k.renderer is not None else None) or 0
    if regs and 2 * sizes[inner] * sizes[inner - 1] + 1 > max(regs, WIDE_WINDOW_REGISTERS): wide = True
    else: tiled.append(inner - 1)
  if len(tiled) > 1: _try_tile(k, Opt(OptOps.UPCAST, inner - 1, sizes[inner - 1]))
  # the long whole row takes two rows (an unstrided 3x3 convolution's output rows: each weight broadcast feeds both),
  # before the channels, within twice the budget (conv 64->64 28x28 b8, one thread: 28 x 4 5.8 ms, 28 x 2 x 4 4.9;
  # the rows after the channels 5.1)
  if whole_long and not gathers and sizes[inner - 1] % 2 == 0 and reuse[inner - 1] and \
     _try_tile(k, Opt(OptOps.UPCAST, inner - 1, 2)):
    tiled.append(inner - 1)
    budget *= 2
  up = {loops[a] for a in tiled}
  def clash(a: int) -> int: return sum(1 for d in deps if loops[a] in d and d & up)
  others = sorted((a for a in range(tiled[-1]) if reuse[a]), key=lambda a: (clash(a), -reuse[a], -sizes[a]))
  for axis in others:
    # loads contiguous along the axis (a strided convolution's weight copy, output channel innermost): its lanes are
    # vectors, and the budget counts them as such (r_32_64_3_3_64_12_12, one thread: 3x3x8 4.5 ms, 3x3x16 3.1)
    vec = all(s in (0, 1) for s in _load_strides(k, loops[axis])) and any(s == 1 for s in _load_strides(k, loops[axis]))
    # channels read through a copy blocked by them (AVX2, layout.output_channel_blocks): a wide window's row of taps
    # takes its vectors as above; a 3x3 window one vector, 9 accumulators (one Zen 3 thread, conv 64->128 s2's weight
    # gradient at 56x56: 3x3x8 11.3 ms, 3x3x16 15.0; 28x28: 2.8 / 4.2)
    blocked = not vec and _blocked_vector_axis(k, axis)
    if blocked and not wide and k.renderer is not None and k.renderer.vector_bytes:
      one = max(k.renderer.vector_bytes // _acc_itemsize(k), 1)
      if sizes[axis] % one == 0 and _try_tile(k, Opt(OptOps.UPCAST, axis, one)): break
    vec = vec or blocked
    cap = VECTOR_TILE_BUDGET if vec else budget
    # a window's row of taps by vectors: accumulators in half the registers (AVX-512: 16 of 16 lanes, the budget;
    # AVX2: 8 of 8 lanes, 4 taps x 16 channels)
    if wide and vec and k.renderer is not None and k.renderer.vector_bytes:
      cap = min(cap, _wide_window_vectors(k.renderer) * max(k.renderer.vector_bytes // _acc_itemsize(k), 1))
    # the long strided row's channels: one vector (its accumulators are the row's positions)
    if long_row and vec and k.renderer is not None and k.renderer.vector_bytes:
      cap = min(cap, k.upcasted * max(k.renderer.vector_bytes // _acc_itemsize(k), 1))
    lanes = (64, 32, 16, 8, 4, 2) if wide and vec else (16, 8, 4, 2) if gathers or vec else (8, 4, 2)
    if (amt := next((c for c in lanes if sizes[axis] % c == 0 and k.upcasted * c <= cap), None)) \
       and _try_tile(k, Opt(OptOps.UPCAST, axis, amt)):
      # a strided row's tile with vector channels takes two rows too: twice the accumulators in flight
      # (r_64_64_12_12_32_3_3, one thread: 4x16 4.5 ms, 2x4x16 3.7)
      if vec and gathers and not long_row and inner - 1 != axis and sizes[inner - 1] % 2 == 0 and \
         k.upcasted * 2 <= VECTOR_TILE_BUDGET:
        _try_tile(k, Opt(OptOps.UPCAST, inner - 1, 2))
      break
  last = len(reduces) - 1
  if reduces[last].src[0].arg <= 4: _try_tile(k, Opt(OptOps.UNROLL, last, reduces[last].src[0].arg))
  return k.applied_opts

def _blocked_vector_axis(k: Kernel, axis: int) -> bool:
  """Whether the loads along loop axis `axis` are contiguous within each vector of it though not along the whole
  axis: read from a copy blocked by channels (layout.output_channel_blocks, (c // W) * S + c % W), on a renderer with
  at most `backend.NARROW_MAX_REGISTERS` vector registers (the only ones that make such copies). Tried as an upcast by
  the vector's lanes, the index simplified."""
  from tinyplug.uop.rewrite import graph_rewrite
  from tinyplug.uop.symbolic import symbolic
  r = k.renderer
  if not narrow_vectors(r): return False
  trial = k.copy()
  if not _try(trial, Opt(OptOps.UPCAST, axis, max(r.vector_bytes // _acc_itemsize(k), 1))): return False
  trial.sink = graph_rewrite(trial.sink, symbolic)
  lanes = max((x for x in trial.ranges if x.arg[1] == "upcast"), key=lambda x: x.arg[0])
  strides = _load_strides(trial, lanes)
  return all(s in (0, 1) for s in strides) and 1 in strides

# `_row_band_tile`: the output rows a band takes (each weight broadcast feeds them all), and the output channels
BAND_ROWS, BAND_CHANNELS = 4, 2

def _row_band_tile(k: Kernel) -> list[Opt] | None:
  """An unstrided convolution's output row wider than two of cpu_tile's rows (56 and up), read contiguously, on a
  renderer with at most `backend.NARROW_MAX_REGISTERS` vector registers (AVX2): one vector of the row by BAND_ROWS
  rows by BAND_CHANNELS output channels (8 accumulators), the window's rows unrolled (the input rows that adjacent
  taps share are loaded once), and the channels' loop moved inside the rows' so a band of input rows stays in the L2
  while every channel block passes over it, instead of the whole image (861 KB at 64 channels) coming again from
  the L3 per block. conv2d b8 64->64 56x56 k3 p1 on a Zen 3 core, one thread: the forward's r_8_64_56_56_64_3_3 as
  the generic 16 (56 padded to 64) x 4 26.5-28.0 ms, this 21.0-22.0; without the loop swap 25.2; the input
  gradient's 28.5 -> 22.9. None where it does not apply."""
  r = k.renderer
  if not narrow_vectors(r): return None
  loops, reduces = k.loop_axes, k.reduce_axes
  if len(loops) < 3 or len(reduces) < 3: return None
  sizes, inner, lanes = [x.src[0].arg for x in loops], len(loops) - 1, r.vector_bytes // _acc_itemsize(k)
  window = [x.src[0].arg for x in reduces[-2:]]
  if sizes[inner] <= 2 * cpu_tile(r)[0] or sizes[inner] % lanes or max(window) > 4: return None
  along = _load_strides(k, loops[inner])
  if any(st not in (0, 1) for st in along) or 1 not in along: return None
  rows, chans, reuse = inner - 1, inner - 2, _reuse(k)
  if sizes[rows] % BAND_ROWS or sizes[chans] % BAND_CHANNELS or not reuse[rows] or not reuse[chans]: return None
  k = k.copy()
  for opt in (Opt(OptOps.UPCAST, inner, lanes), Opt(OptOps.UPCAST, rows, BAND_ROWS),
              Opt(OptOps.UPCAST, chans, BAND_CHANNELS), Opt(OptOps.UNROLL, len(reduces) - 2, window[0]),
              Opt(OptOps.SWAP, chans, rows)):
    if not _try(k, opt): return None
  _share_threads(k)
  return k.applied_opts

def _long_gather_row(k: Kernel) -> bool:
  """A strided convolution's output row (read every 2nd to 8th input element) over a long reduction (512 or more
  products per output) that the long strided row's tile (`_small_window_tile`: up to GATHER_ROW_POSITIONS positions by
  a vector of output channels) fits with at least 8 positions, however wide the row or whatever divides it. Elsewhere
  such a row (8, 16, 24, 32 or over 32 wide) took the generic tile, a whole vector of gathered positions by a few
  channels: b8 64->128 k3 s2 p1, one Zen 4 thread, input 16 / 32 / 48 / 64 / 84 / 112 wide: 0.74 / 4.7 / 8.7 / 18.2 /
  80 / 44 ms, with this tile 0.66 / 3.0 / 6.8 / 13.0 / 23 / 25 ms."""
  loops, reduces = k.loop_axes, k.reduce_axes
  if len(reduces) < 2 or math.prod(r.src[0].arg for r in reduces) < LONG_GATHER_REDUCE: return False
  row = loops[-1].src[0].arg
  along = [s for s in _load_strides(k, loops[-1]) if s != 0]
  if not along or not all(s is not None and 1 < abs(s) <= 8 for s in along): return False
  return max(d for d in range(1, GATHER_ROW_POSITIONS + 1) if row % d == 0) >= 8

# `_gather_row_channel_pairs`: vectors of output channels per position, the most padding of the row it takes (a
# fraction of the row), and the fewest products per output it is for
GATHER_PAIR_VECTORS, GATHER_PAIR_PAD, GATHER_PAIR_REDUCE = 2, 1 / 8, 256

def _gather_row_channel_pairs(k: Kernel, inner: int) -> list[Opt] | None:
  """A strided convolution's row over a reduction of GATHER_PAIR_REDUCE products or more, on a renderer with
  `narrow_vectors` (AVX2): as many positions as the vector registers leave room for (6 of 16: 12 accumulators, two
  weight vectors, a broadcast) by GATHER_PAIR_VECTORS vectors of output channels, the row padded to a multiple of
  the positions where that adds at most GATHER_PAIR_PAD of it, and the channels' loop moved innermost, so the input
  a tile reads (64 channels x 3 rows x 13 columns) stays in the L1 while every channel block passes over it and the
  weights come from the L2. The generic 14 positions by one vector take a broadcast per multiply-add and walk the
  whole image per channel block. conv2d b8 64->128 56x56 k3
  s2 p1's r_8_128_28_28_64_3_3 on a Zen 3 core, one thread (benchmarks/conv_row_ab.py S2=1): 14 x 8 13.6-14.3 ms,
  6 x 16 with the channels innermost 11.8-11.9, without the loop moves 13.0-13.8, 4 x 16 (8 accumulators) 14.5;
  b4 112x112: 36 -> 26 ms; b8 32->64 56x56 s2 (288 products) 8.1 ms as the 2 x 4 x 16 of AVX-512's registers
  (spilled), 4.0; the strided CNN's r_64_64_12_12_32_3_3 9.8 -> 4.4. A 14-wide row (28x28 s2: 3.38 as 18 padded by
  6 x 16, 3.45 as 14 x 8) keeps its tile. None where it does not apply."""
  r = k.renderer
  if not narrow_vectors(r): return None
  loops, lanes = k.loop_axes, max(r.vector_bytes // _acc_itemsize(k), 1)
  positions, width = (r.vector_registers - GATHER_PAIR_VECTORS - 1) // GATHER_PAIR_VECTORS, GATHER_PAIR_VECTORS * lanes
  row = loops[inner].src[0].arg
  padded = -(-row // positions) * positions
  if positions < 4 or row < 2 * positions or padded - row > GATHER_PAIR_PAD * row: return None
  reuse = _reuse(k)
  def channels(a: int) -> bool:
    strides = _load_strides(k, loops[a])
    return reuse[a] > 0 and all(s in (0, 1) for s in strides) and 1 in strides and loops[a].src[0].arg % width == 0
  if (chan := next((a for a in range(inner - 1, -1, -1) if channels(a)), None)) is None: return None
  k = k.copy()
  if padded != row:
    # the padding's reads must stay inside the input (ungated): a gated broadcast is a branch per tap on x86
    # (conv_transpose2d k4 s2's input gradient, a 4-wide window over a 58-wide row: 5.6 ms as 14 x 8, 10.6 padded)
    gated = _gated_loads(k)
    if not _try(k, Opt(OptOps.PADTO, inner, positions)) or _gated_loads(k) > gated: return None
  opts = [Opt(OptOps.UPCAST, inner, positions), Opt(OptOps.UPCAST, chan, width)]
  opts += [Opt(OptOps.SWAP, a, a + 1) for a in range(chan, inner)]
  return k.applied_opts if all(_try(k, o) for o in opts) else None

def _gated_loads(k: Kernel) -> int:
  """The kernel's loads whose index carries a gate (a masked read)."""
  return sum(1 for u in k.sink.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and len(u.src[0].src) > 2)

# the most positions of a row that `_channel_vector_tile` upcasts (and the fewest: 4): each a broadcast feeding the
# vectors of channels
CHANNEL_TILE_POSITIONS = 8

def _channel_vector_tile(k: Kernel) -> list[Opt] | None:
  """A long reduction (64 or more products per output) whose 17-32-wide row is read contiguously but is not a whole
  number of vectors (28 on AVX-512 or AVX2: a conv_transpose2d's 28x28 phase convolutions), beside an output axis
  whose loads are contiguous along it (channels, from a channel-innermost weight copy): the tile turns around, that
  axis taking cpu_tile's width (two vectors, loaded whole) and the row the largest divisor of it from 4 to
  CHANNEL_TILE_POSITIONS positions that the vector registers hold accumulators for, each one broadcast value, rather
  than the row whole with its last vector partly filled. conv_transpose2d b8 64->32 28x28 k4 s2 p1's phase kernel,
  one Zen 4 thread, CPU time interleaved (benchmarks/conv_row_ab.py, CONVT=1): 28 x 8 p10 1.72-1.78 ms, 4 x 32
  1.05-1.10 ms, 7 x 32 ~4% faster than 4 x 32; conv 64->128 56x56 s2's unpadded input-gradient phase
  r_8_64_28_28_128_2_2 (benchmarks/conv_grad_kernels.py): 4 x 32 5.2-5.3 ms, 7 x 32 and 14 x 16 4.1. Not a strided
  row (its lanes are gathers; `_small_window_tile` takes it: a
  stride-2 conv's 4 x 16 x 2 measured no slower than 4 x 32 x 2). None where it does not apply."""
  if k.renderer is None or not k.renderer.vector_bytes or not k.renderer.runs_loops: return None
  loops, reduces, inner = k.loop_axes, k.reduce_axes, len(k.loop_axes) - 1
  row, lanes = loops[inner].src[0].arg, k.renderer.vector_bytes // _acc_itemsize(k)
  if not 16 < row <= 32 or lanes < 4 or row % lanes == 0: return None
  if math.prod(r.src[0].arg for r in reduces) < 64: return None
  along = [s for s in _load_strides(k, loops[inner]) if s != 0]
  if not along or any(s != 1 for s in along): return None
  tile_w, reuse = cpu_tile(k.renderer)[0], _reuse(k)
  def vector_axis(a: int) -> bool:
    strides = _load_strides(k, loops[a])
    return reuse[a] > 0 and all(s in (0, 1) for s in strides) and 1 in strides and loops[a].src[0].arg % tile_w == 0
  axis = next((a for a in range(inner - 1, -1, -1) if vector_axis(a)), None)
  if axis is None: return None
  return _positions_by_channels(k, inner, row, axis, tile_w, lanes)

def _positions_by_channels(k: Kernel, row_axis: int, row: int, chan_axis: int, tile_w: int,
                           lanes: int) -> list[Opt] | None:
  """The row upcast by the largest divisor from 4 to CHANNEL_TILE_POSITIONS positions whose accumulators (positions x
  the vectors of a row of `tile_w` channels) the vector registers hold beside one row of weight vectors and a
  broadcast, then the channels by `tile_w`; where no divisor fits, the row padded by one position where a count then
  divides it (`_padded_row_positions`), else the same with one vector of channels (AVX2's room for two is 6
  positions: a 14-wide row, conv 64->128 28x28 s2's input-gradient phases, one Zen 3 thread, took the generic 14 x 16
  at 2.5 / 1.4 / 0.70 ms, 7 x 8 1.57 / 0.75 / 0.48); None where neither or an upcast is refused."""
  def fits(vecs: int, n: int = row) -> int | None:
    room = min(CHANNEL_TILE_POSITIONS, ((k.renderer.vector_registers or 16) - vecs - 1) // vecs)
    return max((d for d in range(4, room + 1) if n % d == 0), default=None)
  k = k.copy()
  if (positions := fits(max(tile_w // lanes, 1))) is None:
    if (padded := _padded_row_positions(k, row_axis, row, fits(max(tile_w // lanes, 1), row + 1))) is not None:
      k, positions = padded
    elif (positions := fits(1)) is None: return None
    else: tile_w = lanes
  if not _try_tile(k, Opt(OptOps.UPCAST, row_axis, positions)) or \
     not _try_tile(k, Opt(OptOps.UPCAST, chan_axis, tile_w)): return None
  return k.applied_opts

def _padded_row_positions(k: Kernel, row_axis: int, row: int, positions: int | None) -> tuple[Kernel, int] | None:
  """`_positions_by_channels`' row padded by one position where that lets `positions` (a count that fits two vectors
  of channels) divide it, on a renderer with `narrow_vectors` (AVX2), the padding at most GATHER_PAIR_PAD of the row
  and its reads inside the input (ungated: the phases' shared padded copy has a spare row for them,
  nn._strided_input_grad). The other choice there is one vector of channels, each broadcast feeding one FMA. conv
  64->128 28x28 s2's input-gradient phases (rows of 14), one Zen 3 thread (benchmarks/conv_step_kernels.py): 7 x 8
  0.48 / 0.71 / 1.00 / 1.58 ms, 15 padded as 5 x 16 0.35 / 0.64 / 0.75 / 1.45 (the last one's reads gated). (k
  padded, positions), or None."""
  if positions is None or not narrow_vectors(k.renderer) or 1 > GATHER_PAIR_PAD * row: return None
  k, gated = k.copy(), _gated_loads(k)
  if not _try(k, Opt(OptOps.PADTO, row_axis, positions)) or _gated_loads(k) > gated: return None
  return k, positions

# the longest row `_channels_inner_tile` takes (nn.PHASE_ROW_MAX: the phase rows stored channel-innermost)
CHANNELS_INNER_ROW_MAX = 64

def _channels_inner_tile(k: Kernel) -> list[Opt] | None:
  """`_channel_vector_tile` for a convolution stored channel-innermost (a strided convolution's input-gradient phases,
  nn._strided_input_grad): the innermost output axis is the channels, read contiguously by one input (the weight
  copy) and not at all by the other, the axis before it a row (at most CHANNELS_INNER_ROW_MAX, not a whole number of
  vectors) read contiguously by that other input alone. The tile is the same as there, turned: a few positions of the
  row (each a broadcast) by cpu_tile's width of channels, whose stores are then whole vectors instead of one scalar
  per channel (conv 64->128 56x56 s2's phases, one Zen 4 thread: the 1x1 phase r_8_28_28_64_128 as the generic 4
  rows x 64 channels 0.98-1.12 ms, 7 x 32 0.90-0.92, 14 x 16 0.90; stored channels-outermost, 7 x 32, 1.30-1.48).
  None where it does not apply."""
  if k.renderer is None or not k.renderer.vector_bytes or not k.renderer.runs_loops: return None
  loops, reduces = k.loop_axes, k.reduce_axes
  # (batch, rows, row, channels): a plane's rows beside the row, not a matrix's (a linear layer's weight gradient,
  # 10 x 9216, keeps its 10 rows whole)
  if len(loops) < 3 or not reduces or math.prod(r.src[0].arg for r in reduces) < 64: return None
  inner = len(loops) - 1
  chans, row = loops[inner].src[0].arg, loops[inner - 1].src[0].arg
  tile_w, lanes = cpu_tile(k.renderer)[0], k.renderer.vector_bytes // _acc_itemsize(k)
  if lanes < 4 or chans % tile_w or row > CHANNELS_INNER_ROW_MAX or row % lanes == 0: return None
  along_ch, along_row = _load_strides(k, loops[inner]), _load_strides(k, loops[inner - 1])
  if 1 not in along_ch or 1 not in along_row or any(a not in (0, 1) or b not in (0, 1) or (a and b)
                                                   for a, b in zip(along_ch, along_row)): return None
  return _positions_by_channels(k, inner - 1, row, inner, tile_w, lanes)

# vector accumulators a phase-innermost tile keeps (of AVX-512's 32 registers: the rest hold the weight vector and the
# broadcast inputs)
PHASE_TILE_VECTORS = 16

def _phase_row_tile(k: Kernel) -> list[Opt] | None:
  """A sub-pixel convolution (a strided conv_transpose2d as one kernel whose output axes are (q, r) per dim, r the
  output's phase: nn._subpixel_conv_transpose): the innermost output axis is the phase (at most 4), which every load
  of the reduction depends on, so no load is reused across it. The tile takes the phase whole and, within
  PHASE_TILE_VECTORS vector accumulators, either an odd number of positions of the row before it by one or two vectors
  of an output axis whose loads are contiguous along it (channels, from the channel-innermost weight copy), each
  position one broadcast, or, where no odd divisor fits, the row's lanes as the vectors by a few channels, each weight
  a broadcast. Which one the vectorizer makes of the tile is decided by the stores (phase x positions contiguous
  outputs), hence the odd counts. conv_transpose2d b8 64->32 n x n k4 s2 p1, one Zen 4 thread, CPU time
  interleaved (CONVT=n benchmarks/conv_row_ab.py): 28: the generic rule (the phase alone) 240 ms, 2 x 7 x 16 3.96-4.12
  ms, 7 x 32 4.00, 2 x 4 x 16 17.3; 24: 2 x 3 x 32 3.05-3.11, 2 x 3 x 16 3.44, 2 x 6 x 16 24.7, 2 x 8 x 8 4.35; 32:
  2 x 16 x 8 5.62-5.64, 2 x 8 x 16 15.0; 16: 2 x 16 x 8 1.37-1.41, 2 x 8 x 16 3.10; 20: 2 x 5 x 16 2.17 (95-100
  GFLOP/s each). None where it does not apply."""
  if k.renderer is None or not k.renderer.vector_bytes or not k.renderer.runs_loops: return None
  loops, reduces, inner = k.loop_axes, k.reduce_axes, len(k.loop_axes) - 1
  if len(loops) < 3 or not 2 <= (phase := loops[inner].src[0].arg) <= 4: return None
  red = set(reduces)
  if not all(loops[inner] in d for d in _load_ranges(k) if d & red): return None
  lanes = k.renderer.vector_bytes // _acc_itemsize(k)
  def vector_axis(a: int) -> bool:
    strides = _load_strides(k, loops[a])
    return all(s in (0, 1) for s in strides) and 1 in strides and loops[a].src[0].arg % lanes == 0
  axis = next((a for a in range(inner - 2, -1, -1) if vector_axis(a)), None)
  if axis is None or lanes < 4: return None
  row = loops[inner - 1].src[0].arg
  k = k.copy()
  # an odd count of positions: the vectorizer then groups the channels (phase x positions contiguous stores of 6 or
  # 14 are not a whole vector; of 12, 2 x 6, it grouped pairs of phases: 24 ms against 3.4 for 2 x 3)
  budget = min(PHASE_TILE_VECTORS, (k.renderer.vector_registers or 32) // 2)
  odd = [d for d in range(budget // phase, 2, -1) if row % d == 0 and d % 2]
  # fewer registers than AVX-512's (AVX2's 16): the phase is left alone, the tile is as many positions as half the
  # registers hold by one vector of channels (a haswell target on Zen 4, one thread, rows of 16 / 24 / 28 / 32:
  # the rules below 4.0 / 9.4 / 7.8 / 15.5 ms, this 1.9 / 4.2 / 4.9 / 8.3)
  alone = [d for d in range(budget, 2, -1) if row % d == 0] if budget < PHASE_TILE_VECTORS else []
  if alone:
    if _try_tile(k, Opt(OptOps.UPCAST, inner - 1, alone[0])) and _try_tile(k, Opt(OptOps.UPCAST, axis, lanes)):
      return k.applied_opts
    return None
  if not _try_tile(k, Opt(OptOps.UPCAST, inner, phase)): return None
  if odd:
    vectors = min(max(PHASE_TILE_VECTORS // (phase * odd[0]), 1), 2)
    _try_tile(k, Opt(OptOps.UPCAST, inner - 1, odd[0]))
    if not _try_tile(k, Opt(OptOps.UPCAST, axis, lanes * vectors)): _try_tile(k, Opt(OptOps.UPCAST, axis, lanes))
    return k.applied_opts
  # else the row's lanes are the vectors (phase x positions contiguous outputs), a few channels each a broadcast
  # weight: 32x32 input, one thread: 2 x 16 x 8 5.6 ms, 2 x 8 x 16 (channel vectors) 15.0
  positions = next((d for d in (lanes, lanes // 2, lanes // 4) if d >= 2 and row % d == 0), None)
  if positions is not None: _try_tile(k, Opt(OptOps.UPCAST, inner - 1, positions))
  _try_tile(k, Opt(OptOps.UPCAST, axis, max(PHASE_TILE_VECTORS // phase, 1)))
  return k.applied_opts

def index_stride(idx: UOp, r: UOp, memo: dict[UOp, int | None]) -> int | None:
  """How far index `idx` moves per step of RANGE r: 0 when it does not depend on r, None when not affine in r."""
  if (got := memo.get(idx, -1)) != -1: return got
  if idx is r: out: int | None = 1
  elif idx.op is Ops.ADD:
    parts = [index_stride(x, r, memo) for x in idx.src]
    out = None if None in parts else sum(p for p in parts if p is not None)
  elif idx.op is Ops.MUL and any(x.op is Ops.CONST for x in idx.src):
    const, other = (idx.src[0], idx.src[1]) if idx.src[0].op is Ops.CONST else (idx.src[1], idx.src[0])
    inner = index_stride(other, r, memo)
    out = None if inner is None else inner * const.arg
  elif not idx.src: out = 0
  else: out = 0 if all(index_stride(x, r, memo) == 0 for x in idx.src) else None
  memo[idx] = out
  return out

def _load_strides(k: Kernel, r: UOp) -> list[int | None]:
  """For each load from global memory: its stride along RANGE r."""
  memo: dict[UOp, int | None] = {}
  return [index_stride(u.src[0].src[1], r, memo) for u in k.sink.toposort()
          if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]

def _is_product_of_loads(u: UOp) -> bool:
  def load(x: UOp) -> bool: return x.op is Ops.LOAD or (x.op is Ops.CAST and x.src[0].op is Ops.LOAD)
  return u.op is Ops.MUL and all(load(x) for x in u.src)

def _is_separable_product(u: UOp, loops: list[UOp]) -> bool:
  """A MUL of two factors, each independent of some output axis (`relu(x)[m, k] * w[n, k]`), so each factor is
  computed once per element of its input rather than once per output."""
  if u.op is Ops.CAST: u = u.src[0]
  if u.op is not Ops.MUL or len(u.src) != 2: return False
  deps = [set(x for x in s.toposort() if x.op is Ops.RANGE) for s in u.src]
  return all(any(r not in d for r in loops) for d in deps)

def _contiguous_reduce(k: Kernel) -> bool:
  """A matmul whose inputs are both contiguous along the reduction and neither along the innermost output axis
  (`x @ w.T`, a linear layer's forward): upcasting output axes gives lanes that are gathers (one scalar accumulator
  each: a 32x8 tile was ~2,400 UOps and half the speed); unrolling the reduction gives vector loads of both inputs."""
  inner, red = k.loop_axes[-1], k.reduce_axes[-1]
  # a product of two inputs, each read (or computed: a fused ReLU) without one of the output axes; a heavier body (a
  # pow per pair) is compute-bound, and its lanes are better as the tile's
  if not all(_is_separable_product(u.src[0], k.loop_axes) for u in k.sink.toposort() if u.op is Ops.REDUCE): return False
  # only the loads that walk the reduction count: a bias added after it (`x.linear(w.T, b)`) is read along the row,
  # and took a 1000-wide layer to a tile of gathers (1024x1000x256, one thread: 30 ms, 6.9 without the bias)
  walking = [(s, i) for s, i in zip(_load_strides(k, red), _load_strides(k, inner)) if s != 0]
  return len(walking) >= 2 and all(s == 1 for s, _ in walking) and all(i != 1 for _, i in walking)

REDUCE_VECTOR_STEPS = 8

def _reduce_vector(k: Kernel) -> int | None:
  """The vector width to read the reduction by: the widest that leaves REDUCE_VECTOR_STEPS steps per output (each
  output's vector is summed across its lanes once at the end, which a short reduction pays for over few steps: Zen 4,
  one thread, `x @ W.T` 128x64x64: 16 lanes 29 us, 8 lanes 18 us, the lane tile 8 x 2 unrolled by 4 23 us), else the
  narrowest that divides it; None where none does (an odd reduction)."""
  loads = [u for u in k.sink.toposort() if u.op is Ops.LOAD]
  widths = k.renderer.vector_widths.get(loads[0].dtype.scalar(), ()) if loads and k.renderer is not None else ()
  if loads and k.renderer is not None and k.renderer.vector_bytes:   # no wider than one vector register
    widths = tuple(w for w in widths if w * loads[0].dtype.scalar().itemsize <= k.renderer.vector_bytes)
  size = k.reduce_axes[-1].src[0].arg
  fits = [w for w in sorted(widths, reverse=True) if w >= 4 and size % w == 0]
  return next((w for w in fits if size // w >= REDUCE_VECTOR_STEPS), fits[-1] if fits else None)

def _vector_reduce_tile(k: Kernel, budget: int, big: bool) -> list[Opt]:
  """The reduction unrolled by a vector width (each input read as vectors, a vector accumulator per output) and a
  small tile of outputs (4x4 for large kernels, 4x2 otherwise) so each loaded vector feeds several of them."""
  if (amt := _reduce_vector(k)) is not None: _try_tile(k, Opt(OptOps.UNROLL, len(k.reduce_axes) - 1, amt))
  reuse, loops = _reuse(k), k.loop_axes
  inner = len(loops) - 1
  # 4 outputs along the row, or an odd divisor near it (a 10-output layer: 5)
  size = loops[inner].src[0].arg
  if reuse[inner]: any(size % a == 0 and _try_tile(k, Opt(OptOps.UPCAST, inner, a)) for a in (4, 5, 3, 2))
  second = 4 if budget >= 256 else 2
  for axis in sorted((a for a in range(inner) if reuse[a]), key=lambda a: (-reuse[a], -loops[a].src[0].arg)):
    if _try_tile(k, Opt(OptOps.UPCAST, axis, second)) or _try_tile(k, Opt(OptOps.UPCAST, axis, 2)): break
  if big: _block_for_cache(k)
  return k.applied_opts

# a long contiguous reduction into many outputs (at least STREAMS per thread) on a CPU reads one output's stream at a
# time, unrolled by one of STREAM_UNROLLS (a vector accumulator per output, summed across its lanes once). Side by side
# rows were slower: Zen 4, 64 MB of float32 summed by rows of 1K-16K, the kernels alone, p10 of 30; one thread
# 2.14-2.52 ms with 8 rows side by side unrolled by 8 against 1.92-2.10 ms one row unrolled by 16; two threads at
# real-time priority 0.96-1.34 -> 0.73-1.19 ms; rows of 256 level (0.84 ms); a 16M-float sum's 256 partials 0.89-0.97 ->
# 0.66-0.71 ms. (Before the reductions' lanes were reassociated, one row was one chain of adds and lost.)
STREAMS, STREAM_MIN_REDUCE, STREAM_UNROLLS = 8, 1024, (16, 8, 4, 2)

def _streams(k: Kernel, min_reduce: int = STREAM_MIN_REDUCE) -> bool:
  """A reduction with one output loop whose loads all walk memory contiguously along the reduction (a huge sum's
  partials, a row sum) and many outputs: each is one load stream (a reduction of `min_reduce` or more)."""
  loops, reduces = k.loop_axes, k.reduce_axes
  if len(loops) != 1 or len(reduces) != 1 or loops[0].src[0].arg % STREAMS: return False
  if reduces[0].src[0].arg < min_reduce or loops[0].src[0].arg < STREAMS * _threads(k): return False
  on_red = [s for s in _load_strides(k, reduces[0]) if s != 0]
  return bool(on_red) and all(s == 1 for s in on_red)

# a reduction down the columns keeps at most this many vector accumulators (and never more than half the vector
# registers): each step of the reduction reads that many vectors of one row
COLUMN_VECTORS = 16

# ... except a row of at most this many bytes, read whole however few the registers: consecutive steps then read one
# stream of memory, and the accumulators that spill stay in L1 (AVX2, max(1) of 16x4096x256, one thread: 32 ymm
# accumulators 3.0 ms; 4 unrolled by 2 6.2 ms; split into chunks of 16 rows, 8.6 ms)
COLUMN_ROW_BYTES = 1024

# a reduction down at most this many rows (a chunk of them) takes a small tile
SHORT_COLUMN = 16

# a column reduction's output axis that its loads do not depend on (a scan's block rows) is upcast by this many
SCAN_ROWS = 4

# a scan's triangle along the row (cumsum(1)'s blocks, the scan of their totals) also upcasts the next output axis out
# by the first of these that divides it: each output is one chain of dependent adds, these many run side by side
# (within the tile budget or SCAN_CHAIN_LANES upcast elements: a triangle's body is a compare, a select and an add)
SCAN_CHAINS, SCAN_CHAIN_LANES = (8, 4), 128

def _scan_chain_lanes(k: Kernel, budget: int) -> int:
  """A scan triangle's upcast lanes: the tile budget or SCAN_CHAIN_LANES, its accumulators at most half the vector
  registers where the renderer says (AVX2's 16 ymm hold 128 floats: 8 chains of a 16-lane row took every register,
  4 do not; one Zen 3 thread, kernels in turns: cummax(1)'s gradient triangle 1.96 -> 0.76 ms, its forward's 1.97 ->
  1.39; AVX-512's half is 256 floats, more than any budget)."""
  lanes, r = max(budget, SCAN_CHAIN_LANES), k.renderer
  if r is None or not r.vector_bytes or not r.vector_registers: return lanes
  return min(lanes, r.vector_bytes * r.vector_registers // 2 // _acc_itemsize(k))

def _column_reduce(k: Kernel) -> bool:
  """A reduction down the columns: every load that walks a reduced axis does so across rows (not contiguously) and is
  contiguous along the innermost output axis (`sum(0)`, a middle axis of a 3D tensor, `var(0)`'s squares), or does not
  depend on it and depends on no output axis that the column loads do not (argmax's countdown, one value per step and
  chunk of rows; not a matmul's first input `g` in `g @ W`, whose rows would each reuse W's vectors); loads of the
  outputs' own values (the mean) may not depend on the reduction."""
  loops, reduces = k.loop_axes, k.reduce_axes
  if not loops or not reduces: return False
  per_loop = [_load_strides(k, r) for r in loops]
  columns, tables = set(), set()
  for r in reduces:
    for i, along in enumerate(_load_strides(k, r)):
      if along == 0: continue
      if per_loop[-1][i] == 0: tables.add(i)
      elif along is None or abs(along) == 1 or per_loop[-1][i] != 1: return False
      else: columns.add(i)
  return bool(columns) and all(st[i] == 0 or all(st[j] != 0 for j in columns) for i in tables for st in per_loop[:-1])

def _reread_axes(k: Kernel) -> list[int]:
  """Output axes that no load walking a reduction depends on: each of their outputs reduces the same values (a scan's
  outputs within a block, masked differently)."""
  walking = [d for d in _load_ranges(k) if any(r in d for r in k.reduce_axes)]
  return [a for a, r in enumerate(k.loop_axes) if walking and all(r not in d for d in walking)]

def _column_opts(k: Kernel) -> list[Opt] | None:
  """A reduction down the columns (`_column_reduce`), read as whole vectors of a row per step of the reduction: the
  innermost output axis upcast by up to COLUMN_VECTORS vectors (within half the vector registers), whole where it fits
  (then consecutive steps of the reduction read consecutive memory: `sum(1)` of 16x4096x256 reads one stream), else
  half that, the reduction unrolled by 2, so each step reads a few cache lines of every row it touches rather than
  one (4096x4096 `sum(0)`, 2 threads, loaded machine: 16 lanes unrolled by 4 27 ms, 128 lanes unrolled by 2 5-6 ms;
  numpy 5.8). None where the row is not a whole number of vectors (the other rules take it)."""
  if not _column_reduce(k) or not (lanes := vector_lanes(k)): return None
  k = k.copy()
  inner = len(k.loop_axes) - 1
  size = k.loop_axes[inner].src[0].arg
  regs = k.renderer.vector_registers or 16
  most = max(1, min(COLUMN_VECTORS, regs // 2))
  red = k.reduce_axes[-1].src[0].arg
  if size % lanes:
    # a row no whole vector divides (the bias gradient of a 1000-, 200- or 100-wide layer): narrower vectors that
    # divide it, as many as divide the row, or a short row whole (Zen 4, one thread, the kernel alone: (8, 128, 1000)
    # summed to 1000 606 -> 54 us, (1024, 200) 114 -> 13 us, (256, 100) 5.2 -> 3.9 us; each output had been a scalar
    # walk down its column)
    narrow = next((n for n in (lanes // 2, lanes // 4) if n >= 4 and size % n == 0), None)
    if narrow is None:
      whole_row = size * (k.renderer.vector_bytes // lanes) <= COLUMN_ROW_BYTES   # (as `whole` below)
      return k.applied_opts if whole_row and _try_tile(k, Opt(OptOps.UPCAST, inner, size)) else None
    vectors = next((v for v in range(min(most, size // narrow), 0, -1) if size % (v * narrow) == 0), 1)
    if not _try_tile(k, Opt(OptOps.UPCAST, inner, vectors * narrow)): return None
    if red % 2 == 0 and red >= SHORT_COLUMN: _try_tile(k, Opt(OptOps.UNROLL, len(k.reduce_axes) - 1, 2))
    return k.applied_opts
  # another output axis that no column load depends on (a scan's outputs within a block, each summing a triangle of
  # the block's rows) is upcast by SCAN_ROWS, the row by the vectors left: each loaded vector feeds SCAN_ROWS sums
  # (cumsum(0) 1024x1024's block kernel, loaded machine: 2 vectors unrolled by 4 1.3 ms, 4 vectors x 4 rows 0.5 ms)
  reused = next((a for a in _reread_axes(k) if a < inner and k.loop_axes[a].src[0].arg % SCAN_ROWS == 0), None)
  if reused is not None:
    # as many bytes of the row as AVX-512's tile however few the registers (AVX2 / SSE2 targets on Zen 4, one thread:
    # 2 vectors 974 / 1983 us, 256 bytes of the row 675 / 1522 us; spilled accumulators stay in L1)
    wide = max(most, COLUMN_ROW_BYTES // k.renderer.vector_bytes) // SCAN_ROWS
    vectors = next((v for v in (wide, 2, 1) if v >= 1 and size % (v * lanes) == 0), 1)
    sink, applied = k.sink, list(k.applied_opts)
    if _try_tile(k, Opt(OptOps.UPCAST, inner, vectors * lanes)) and _try_tile(k, Opt(OptOps.UPCAST, reused, SCAN_ROWS)):
      return k.applied_opts
    k.sink, k.applied_opts = sink, applied
  # (vectors, unroll), widest first: the row whole where it fits, else half the accumulators and two rows per step
  whole = size // lanes <= most or size * (k.renderer.vector_bytes // lanes) <= COLUMN_ROW_BYTES
  choices = ([(size // lanes, 1)] if whole else []) + \
    [(v, 2) for v in (most // 2, most // 4, 2) if v >= 1 and size % (v * lanes) == 0 and v * lanes < size]
  # a short walk (split_reduce's chunk of 16 rows) already reads its rows as streams: two vectors unrolled by 4 run
  # as fast with a quarter of the lanes to expand (4096x4096 `sum(0)`'s chunks, loaded machine: 3.7 ms either way)
  if red <= SHORT_COLUMN and size // lanes > most and size % (2 * lanes) == 0: choices = [(2, 4)]
  for vectors, unroll in choices:
    if vectors * lanes > 1 and not _try_tile(k, Opt(OptOps.UPCAST, inner, vectors * lanes)): continue
    if unroll > 1 and red % unroll == 0 and red >= min(8 * unroll, SHORT_COLUMN):
      _try_tile(k, Opt(OptOps.UNROLL, len(k.reduce_axes) - 1, unroll))
    return k.applied_opts
  return None

def _transpose_axis(k: Kernel) -> int | None:
  """An elementwise kernel that reads some input across its rows (a transpose, a permute, B's column panels from a
  transposed B): the output axis, nearest the innermost, along which those reads are contiguous. Upcast by 16 beside
  the row's 4, a 16x4 tile reads 4 vectors and writes 16 short rows, instead of 4-lane gathers down a column
  (2048x2048 `.T.contiguous()`, 2 threads: 28-38 ms as gathers, 3.0 ms as 16x4 tiles)."""
  loops = k.loop_axes
  if len(loops) < 2: return None
  across = [i for i, s in enumerate(_load_strides(k, loops[-1])) if s is not None and s not in (0, 1)]
  if not across: return None
  for a in reversed(range(len(loops) - 1)):
    strides = _load_strides(k, loops[a])
    if all(strides[i] == 1 for i in across): return a
  return None

def _transpose_tile(k: Kernel, across: int) -> tuple[int, int] | None:
  """On narrow vectors (AVX2), a transposing copy whose output rows lie a multiple of ALIAS_BYTES apart and whose
  reads and writes fit half the last-level cache: its tile (output rows, a vector of each), else None. Rows of 4
  share one L1 set 16 ways and are evicted before their lines fill: a whole vector each, 16 rows where the input's
  rows alias too, else 8 (fewer store streams in the one set). Past the cache the copy waits on DRAM and the 16x4 tile
  was faster. Zen 3, one thread, 16x4 -> this tile: 1024x1024 0.77 -> 0.53 ms (16x8), 2048x512 0.74 -> 0.46 (8x8), a
  1024x1048 view (rows padded off 4 KB) into 1024x1024 0.41 (16x8) -> 0.26 (8x8); unchanged: 768x1024 (rows 3 KB
  apart, 16x8 0.23 -> 0.39), 2048x2048 (16x8 3.2 -> 3.6)."""
  if not narrow_vectors(k.renderer): return None
  stores = [u for u in k.sink.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX]
  loads = [u for u in k.sink.toposort() if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL]
  if len(stores) != 1: return None
  itemsize = stores[0].src[1].dtype.itemsize
  def aliases(idx: UOp, axis: UOp, size: int) -> bool:
    return bool(stride := index_stride(idx, axis, {})) and stride * size % ALIAS_BYTES == 0
  if not aliases(stores[0].src[0].src[1], k.loop_axes[across], itemsize): return None
  moved = math.prod(k.full_shape) * (itemsize + sum(u.dtype.itemsize for u in loads))
  if 2 * moved > cache_sizes(k.renderer)[-1]: return None
  inputs_alias = all(aliases(u.src[0].src[1], k.loop_axes[-1], u.dtype.itemsize) for u in loads
                     if index_stride(u.src[0].src[1], k.loop_axes[-1], {}) not in (0, 1))
  return (16 if inputs_alias else 8), k.renderer.vector_bytes // itemsize

# a copy that reads short runs of its input (a row of at most RUN_MAX elements) ...
RUN_MAX, RUN_STEPS = 32, 4

def _run_axis(k: Kernel) -> int | None:
  """An elementwise kernel whose short row (at most RUN_MAX) reads a contiguous run of every input, where another
  output axis continues those runs in the input but not in the output (the pack pass's copy of B into column panels:
  a panel's row is 32 floats of a row of B, the next panel the next 32): that axis, else None. Its row whole and
  RUN_STEPS steps of that axis at once read RUN_STEPS runs back to back, which the prefetchers follow, instead of one
  run per row of B (into panels, one thread, CPU time: 2048x2048 1.93-2.01 ms upcast by 4 along the row, 1.50-1.62
  so; 1024x1024 0.32-0.35 ms, 0.26-0.27)."""
  loops = k.loop_axes
  if len(loops) < 2 or (width := loops[-1].src[0].arg) > RUN_MAX: return None
  if not (along := _load_strides(k, loops[-1])) or any(st != 1 for st in along): return None
  stores = [u for u in k.sink.toposort() if u.op is Ops.STORE and u.src[0].op is Ops.INDEX]
  memo: dict[UOp, int | None] = {}
  for a in reversed(range(len(loops) - 1)):
    if all(st == width for st in _load_strides(k, loops[a])) and \
       all(index_stride(u.src[0].src[1], loops[a], memo) != width for u in stores): return a
  return None

def _row_io(k: Kernel) -> tuple[int, list[tuple[UOp, int | None]]] | None:
  """An elementwise kernel's accesses along its row (the innermost loop): (bytes of the widest value it stores, 0 for
  none; [(the INDEX of each load from global memory, its stride along the row)]). None where the renderer declares no
  vectors, the kernel reduces, or a store does not run along the row."""
  if k.renderer is None or not k.renderer.vector_bytes or k.reduce_axes or not k.loop_axes: return None
  inner, memo, store_bytes, loads = k.loop_axes[-1], {}, 0, []
  for u in k.sink.toposort():
    if u.op is Ops.STORE and u.src[0].op is Ops.INDEX:
      if index_stride(u.src[0].src[1], inner, memo) != 1: return None
      store_bytes = max(store_bytes, u.src[1].dtype.itemsize)
    elif u.op is Ops.LOAD and u.src[0].src[0].op is Ops.DEFINE_GLOBAL:
      loads.append((u.src[0], index_stride(u.src[0].src[1], inner, memo)))
  return store_bytes, loads

def _spread_lanes(k: Kernel) -> int | None:
  """An elementwise kernel that reads some input at a fraction of the row's rate (its index `r // m` of the innermost
  loop r: an upsample, a resize's taps, repeat_interleave) while every other load from global memory and the store
  run along the row or do not depend on it, none gated: the lanes of one vector register of the stored dtype, else
  None. Upcast so wide, a copy reads vector/m contiguous inputs and spreads them with one shuffle (bilinear 2x of
  8x64x56x56, 2 threads: E_8_64_112_112 1.7-3.4 ms upcast by 4, 0.96-1.05 ms by 16 with AVX-512)."""
  if (io := _row_io(k)) is None: return None
  (store_bytes, loads), inner, memo, spread = io, k.loop_axes[-1], {}, False
  for index, st in loads:
    if len(index.src) > 2: return None
    if st in (0, 1): continue
    divs = [x for x in index.src[1].toposort()
            if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and inner in x.src[0].toposort()]
    if st is not None or not divs or any(index_stride(x.src[0], inner, memo) != 1 for x in divs): return None
    spread = True
  return max(k.renderer.vector_bytes // (store_bytes or 4), 1) if spread else None

# a padded row up to this many elements is upcast whole where vectors are narrow (_whole_padded_row)
WHOLE_PAD_ROW_MAX = 128

def _whole_padded_row(k: Kernel) -> bool:
  """An elementwise kernel on a renderer with `narrow_vectors` (AVX2) whose row no vector divides, longer than one
  vector and at most WHOLE_PAD_ROW_MAX, every load from global memory along it or independent of it and at least one
  of them gated along it (a pad or a cat along the row), the store along it. Upcast whole, LLVM splits the row into
  full vectors shifted by the pad (unaligned loads, full stores, the border lanes blended in) and the rows of zeros
  into plain stores; upcast by a vector (padded) or by a divisor, each store is cut at the border into 2 + 4 + 2
  lanes or narrower (pads by 1, one thread, CPU time: of 8x64x56x56 0.25 -> 0.21 ms, of 8x64x112x112 3.2 -> 2.0 ms;
  by 2 of 8x64x56x56, a row of 60 that was upcast by 4: 0.76 -> 0.50 ms)."""
  if not narrow_vectors(k.renderer) or (io := _row_io(k)) is None: return False
  (store_bytes, loads), inner = io, k.loop_axes[-1]
  row, lanes = inner.src[0].arg, max(k.renderer.vector_bytes // max(store_bytes, 1), 1)
  if row % lanes == 0 or not lanes < row <= WHOLE_PAD_ROW_MAX or any(st not in (0, 1) for _, st in loads): return False
  return any(len(index.src) > 2 and inner in index.src[2].toposort() for index, _ in loads)

def _padded_row_lanes(k: Kernel) -> int | None:
  """An elementwise kernel whose row no 4 divides nor any divisor that fills half a vector (58: a 56-wide row padded
  by one on each side; not 26, upcast by 13), every load from global memory along it or independent of it (gated or
  not) and the store along it: the lanes of one vector register of the stored dtype where the row padded up to a
  multiple of them is at most a quarter longer, else None.
  The divisor rule would upcast 58 by 2: 29 two-lane masked loads per row instead of 4 vectors (a pad of
  8x64x56x56, under load on 2 threads: 366-381 us so, 289-314 us 16 lanes wide with AVX-512)."""
  if (io := _row_io(k)) is None or (row := k.loop_axes[-1].src[0].arg) % 4 == 0: return None
  store_bytes, loads = io
  if any(st not in (0, 1) for _, st in loads): return None
  lanes = max(k.renderer.vector_bytes // max(store_bytes, 1), 1)
  if max(d for d in range(1, lanes + 1) if row % d == 0) * 2 >= lanes: return None   # a divisor fills half a vector
  return lanes if lanes >= 4 and row >= lanes and -(-row // lanes) * lanes * 4 <= row * 5 else None

def _gathered_row_lanes(k: Kernel) -> int | None:
  """An elementwise kernel that copies rows picked by an index it loads (`x[idx]`, an embedding lookup, after the
  one-hot collapse): a load from global memory whose address moves by 1 along the innermost loop and depends on a
  value loaded from memory, the store along the row, every other load from global memory along it or independent of
  it. The lanes of one vector register of the stored dtype, else None: each step of the row is then one full-width
  load and store of the picked row (the index, its gate and the row's base address do not depend on the row's loop,
  so they are computed once per row)."""
  if (io := _row_io(k)) is None: return None
  store_bytes, loads = io
  if any(st not in (0, 1) for _, st in loads): return None
  gathered = any(st == 1 and any(x.op is Ops.LOAD for x in index.src[1].toposort()) for index, st in loads)
  return max(k.renderer.vector_bytes // store_bytes, 1) if gathered and store_bytes else None

# elementwise math that costs many instructions per element (libm-style calls, divisions, square roots)
COSTLY_MATH = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.FDIV})

def math_lanes(k: Kernel) -> int:
  """Lanes of one vector register for an elementwise kernel whose math is costly (COSTLY_MATH on floats): its row is
  upcast that wide, so each call or division works on a whole register rather than a quarter of one (tanh of 16M
  floats on AVX-512, 2 threads: `<4 x float>` exp2 calls 17 ms, numpy 13 ms); 0 where the math is cheap, the
  renderer does not say, or the kernel reduces."""
  if k.renderer is None or not k.renderer.vector_bytes or k.reduce_axes: return 0
  floats = [u.dtype.itemsize for u in k.sink.toposort() if u.op in COSTLY_MATH and dtypes.is_float(u.dtype)]
  return k.renderer.vector_bytes // max(floats) if floats else 0

def _gated_by_parity(k: Kernel) -> bool:
  """Whether a load from global memory is gated by a remainder of an index along the innermost loop (`x % 2`)."""
  inner = k.loop_axes[-1]
  for u in k.sink.toposort():
    if u.op is Ops.INDEX and len(u.src) > 2 and u.src[0].op is Ops.DEFINE_GLOBAL and inner in u.src[2].toposort():
      if any(x.op is Ops.MOD and inner in x.toposort() for x in u.src[2].toposort()): return True
  return False

def _phase_moduli(k: Kernel) -> dict[int, int]:
  """{loop axis: m} for the output axes whose index gates a load from global memory through a remainder by a constant
  m (`(x + 1) % 2`: an interleave of strided phases, read from a buffer per phase)."""
  loops, found = k.loop_axes, {}
  for u in k.sink.toposort():
    if u.op is not Ops.INDEX or len(u.src) <= 2 or u.src[0].op is not Ops.DEFINE_GLOBAL: continue
    for x in u.src[2].toposort():
      if x.op is Ops.MOD and x.src[1].op is Ops.CONST and isinstance(x.src[1].arg, int) and x.src[1].arg > 1:
        for a, rng in enumerate(loops):
          if rng in x.src[0].toposort(): found.setdefault(a, x.src[1].arg)
  return found

def _phase_opts(k: Kernel) -> bool:
  """A phase interleave whose row divides by its stride: the row (and the axis above, where it is gated too) upcast by
  the stride, so each copy reads one phase (its gate a constant), then by 4 where that divides a phase's row, else by
  the whole phase row up to 16, so each copy's reads are vectors (one thread: conv_transpose2d k4 s2 p1's
  E_8_32_56_56 0.70 ms as a loop, 0.17 ms so; the strided CNN's 26-wide E_64_32_26_26 0.65-0.78 ms, 0.47-0.66 ms with
  13 lanes). False, nothing applied: the row stays a loop for LLVM's vectorizer."""
  inner = len(k.loop_axes) - 1
  mods = _phase_moduli(k)
  m, size = mods.get(inner), k.loop_axes[inner].src[0].arg
  if m is None or size % m != 0: return False
  q = size // m
  lanes = 4 if q % 4 == 0 else q if 4 < q <= 16 else None
  # phases stored channel-innermost (nn._strided_input_grad): a transposing interleave, 16 channels at once, each
  # phase read as channel vectors (conv 64->128 s2's E_8_64_56_56 in a step's flow, one thread: 2 x 2 x 4 along the
  # row 1.8 ms, 16 channels x 2 x 2 1.0-1.1; E_8_64_28_28 0.34-0.44, 0.20), whatever the phase row (42: 5.8 ms as a
  # loop, 2.9 so)
  chans = next((a for a in range(inner - 1) if a not in mods and k.loop_axes[a].src[0].arg % 16 == 0 and
                (along := _load_strides(k, k.loop_axes[a])) and all(st == 1 for st in along)), None)
  if (lanes is None and chans is None) or not _try(k, Opt(OptOps.UPCAST, inner, m)): return False
  if (above := mods.get(inner - 1)) is not None and k.loop_axes[inner - 1].src[0].arg % above == 0:
    _try(k, Opt(OptOps.UPCAST, inner - 1, above))
  if chans is not None and _try(k, Opt(OptOps.UPCAST, chans, 16)): return True
  if lanes is not None: _try(k, Opt(OptOps.UPCAST, inner, lanes))
  return True

# the most lanes a one-hot row upcasts: the kernel's limit (its accumulators may spill: only the rare matches touch them)
ONE_HOT_ROW_LANES = 256

def _one_hot_row_opts(k: Kernel) -> list[Opt] | None:
  """A sum of one-hot matches (`x[idx]`'s gradient: for each output row, the rows of g whose index is it) runs a
  branch per match test (linearize's `sparse_gate`), and the test does not depend on the columns: the whole row is
  upcast, up to ONE_HOT_ROW_LANES, so each test runs once per row, index and 256 columns, not per 64-wide tile
  (4096 indices into 50000x512: 1.6G tests at the matmul-style 64x4 tile, 410M so). Nothing else is upcast: another
  output row would test again."""
  if not k.loop_axes or not k.reduce_axes: return None
  reds = [u for u in k.sink.toposort() if u.op is Ops.REDUCE]
  if len(reds) != 1 or (gate := sparse_gate(reds[0])) is None: return None
  inner = k.loop_axes[-1]
  if inner in gate[0].toposort() or inner not in gate[1].toposort(): return None
  row = inner.src[0].arg
  amt = next((a for a in range(min(row, ONE_HOT_ROW_LANES), 1, -1) if row % a == 0), None)
  if amt is None or not _try(k, Opt(OptOps.UPCAST, len(k.loop_axes) - 1, amt)): return None
  return k.applied_opts

# the most lanes a lane select is upcast to (sort's network kernels: 16, topk's merges: 32 read, 16 kept)
LANE_SELECT_MAX = 32
LANE_SELECT_NODES = 64   # an index compare is a few nodes; a condition larger than this is not one

def _lane_reads(cond: UOp, loops: list[UOp]) -> set[tuple[int, int, int]]:
  """The (m, axis, q) a memory-free condition may read as lanes: `(r // q) % m` of a loop axis r, `r // q` (the lanes
  are all of r above q), r itself, or `r < c` on a boundary of such lanes; empty where it reads memory or is too
  large to be an index compare."""
  seen: set[UOp] = set()
  stack = [cond]
  while stack:
    x = stack.pop()
    if x in seen: continue
    if x.op is Ops.LOAD or len(seen) >= LANE_SELECT_NODES: return set()
    seen.add(x)
    stack.extend(x.src)
  found = set()
  for x in seen:
    if x.op is Ops.CMPLT and x.src[0] in loops and x.src[1].op is Ops.CONST and isinstance(c := x.src[1].arg, int):
      # `r < c`: the lanes of size q = |r| / m each, when c is on a lane's boundary (`r // q < b` simplified)
      size = x.src[0].src[0].arg
      found.update((m, loops.index(x.src[0]), size // m) for m in (4, 8, 16, 32)
                   if m <= LANE_SELECT_MAX and size % m == 0 and c % (size // m) == 0)
      continue
    m, r, q = (x.src[1].arg, x.src[0], 1) if x.op is Ops.MOD and x.src[1].op is Ops.CONST else (None, x, 1)
    if r.op is Ops.IDIV and r.src[1].op is Ops.CONST: r, q = r.src[0], r.src[1].arg
    if r not in loops or not isinstance(q, int) or q < 1: continue
    size = r.src[0].arg
    if m is None: m = size // q
    if isinstance(m, int) and 4 <= m <= LANE_SELECT_MAX and size % (q * m) == 0: found.add((m, loops.index(r), q))
  return found

def _lane_select(k: Kernel) -> tuple[int, int, int] | None:
  """(axis, q, m) of an elementwise kernel whose stored value is picked among m lanes by a chain of m - 1 WHEREs,
  `where(lane != b, <the chain for the lanes after b>, lane_b)`, each condition reading the same lanes of a loop
  axis r as `(r // q) % m` (tensor_ops/bitonic.py stacks the lanes of sort's network so). None otherwise (a pad's or
  a cat's gates are no such chain)."""
  loops = k.loop_axes
  memo: dict[UOp, set] = {}
  reads = lambda w: memo[w] if w in memo else memo.setdefault(w, _lane_reads(w.src[0], loops))
  for u in reversed(k.sink.toposort()):   # users first: a chain is met at its head
    if u.op is not Ops.WHERE or not (lanes := reads(u)): continue
    length, v = 1, u.src[1]
    while v.op is Ops.WHERE and (both := lanes & reads(v)):
      length, v, lanes = length + 1, v.src[1], both
    # the chain names the lane count: m - 1 WHEREs (a condition may also read a coarser split of the same index)
    if (best := max((c for c in lanes if length >= c[0] - 1), default=None)) is not None:
      m, axis, q = best
      return axis, q, m
  return None

def _lane_select_opts(k: Kernel, axis: int, q: int, m: int) -> bool:
  """Upcast the lane part of the axis (split off below it first when q > 1, that part kept as the loop right under
  it), so each output lane's select is a constant and the lanes share the work of the values they pick from; the
  loops below stay plain for LLVM's vectorizer (the innermost one runs along the rows: sort's kernels go through
  whole vectors of rows). Per-thread CPU time of a 16-lane network kernel over 1024x1024 int64 keys: ~0.4 ms,
  against 16 times the network per element without the upcast."""
  sink, applied = k.sink, list(k.applied_opts)
  if q > 1 and _try(k, Opt(OptOps.SPLIT, axis, q)):
    # the split-off part is the last loop: bring it back right under its axis
    for j in range(len(k.loop_axes) - 2, axis, -1): _try(k, Opt(OptOps.SWAP, j, j + 1))
  if (q == 1 or len(k.applied_opts) > len(applied)) and _try(k, Opt(OptOps.UPCAST, axis, m)): return True
  k.sink, k.applied_opts = sink, applied
  return False

def _is_row_kernel(k: Kernel) -> bool:
  """A reduction whose value does not depend on the innermost output loop (the scheduler's row kernels: softmax's
  max and sum, computed once per row and used by every output of it). A register tile or a loop split would put
  the row's outputs around the reduction and run it once per tile."""
  if not k.loop_axes or not k.reduce_axes: return False
  inner = k.loop_axes[-1]
  return any(inner not in u.toposort() for u in k.sink.toposort() if u.op is Ops.REDUCE)

def _passes_over_rows(k: Kernel) -> int:
  """How many reductions over ranges of their own the kernel runs one after another (a row kernel's passes)."""
  return len({tuple(u.src[1:]) for u in k.sink.toposort() if u.op is Ops.REDUCE})

# a row kernel of max passes (argmax's max, then the first index equal to it) on narrow vectors reads rows side by
# side once each row is at least this many vectors long
MAX_PASS_MIN_VECTORS = 4
# ... and a row max read contiguously from rows this long (shorter than a stream's), where the vector-wide unroll ran
# each row as one chain of vector maxima (Zen 3, one thread, kernels alone in turns, p10: max(1) of 64x1000 8.7 ->
# 6.3 us, 256x1000 27.1 -> 24.0, 4096x512 178 -> 158; rows of 128-256 were level or slower: 1024x256 24.4 -> 27.7)
MAX_ROWS_MIN_REDUCE = 512

def _max_pass_rows(k: Kernel, stream: bool) -> int | None:
  """How many rows a kernel whose reductions are all maxima along rows reads side by side on narrow vectors: argmax's
  two passes (which narrow vectors take: no 64-bit max), a `stream` of one max per row or a max over contiguous rows
  of MAX_ROWS_MIN_REDUCE or more: half the vector registers
  (each pass keeps one accumulator per row, and argmax's index pass a broadcast of each row's max). Plain loops ran
  one row at a time, the index pass's compare, mask and max on the row after its maxima (Zen 3, AVX2, one thread,
  kernels alone in turns, 4096x4096: argmax(1) 4.39-4.71 -> 3.57-3.72 ms with 8 rows, 3.79-3.96 with 4 (argmin(1): 5.0
  with 16), numpy 3.68-3.79; max(1) 3.09-3.26 -> 2.49 ms, min(1) 3.37 -> 2.22). None elsewhere (wide vectors' plain
  loops: measured on Zen 4), and for rows under MAX_PASS_MIN_VECTORS vectors (argmax(1) of 8192x10: 21 -> 40 us
  with 8)."""
  r = k.renderer
  if r is None or not narrow_vectors(r) or not r.vector_registers or not k.loop_axes: return None
  if not stream and _passes_over_rows(k) < 2 and not _streams(k, MAX_ROWS_MIN_REDUCE): return None
  reduces = [u for u in k.sink.toposort() if u.op is Ops.REDUCE]
  if any(u.arg is not Ops.MAX for u in reduces): return None
  rows, lanes = r.vector_registers // 2, r.vector_bytes // max(u.src[0].dtype.scalar().itemsize for u in reduces)
  row = min(math.prod(x.src[0].arg for x in u.src[1:]) for u in reduces)
  if row < MAX_PASS_MIN_VECTORS * lanes or k.loop_axes[-1].src[0].arg % rows: return None
  return rows

def _row_opts(k: Kernel) -> list[Opt]:
  """Row kernels: vector-wide writes of the row; the reductions' loops stay plain (LLVM vectorises and interleaves
  them better than an UNROLL does: softmax 4096x4096 14 ms plain, 18-27 ms unrolled by 16); the CPU runtime splits
  the outer (row) loop across threads. A row no whole vector register divides whose outputs each take costly math
  (softmax's and cross-entropy's gradient's exp) stays a plain loop too: LLVM then runs it a full register wide with
  a short tail, where an upcast by a divisor runs every exp on half a register or less (Zen 4, one thread, outputs
  bit-equal: cross-entropy gradient 512x1000 540 -> 427 us, 4096x10 147 -> 79 us; softmax 4096x100 523 -> 303 us)."""
  inner, row = k.loop_axes[-1], k.full_shape[len(k.loop_axes) - 1]
  store = next(u for u in k.sink.toposort() if u.op is Ops.STORE)
  lanes = max((k.renderer.vector_bytes or 16) // max(store.src[1].dtype.itemsize, 1), 1)
  if isinstance(row, int) and row % lanes and any(u.op in COSTLY_MATH and dtypes.is_float(u.dtype) and inner in u.toposort()
                                      for u in store.src[1].toposort()):
    return k.applied_opts
  for amt in (16, 8, 4, 2):
    if _try(k, Opt(OptOps.UPCAST, len(k.loop_axes) - 1, amt)): break
  return k.applied_opts

# a reduction of fewer multiply-adds per output than this is short: its tile's row is not padded to the tile width
SHORT_REDUCE = 64

def _pad_for_tile(k: Kernel, axis: int, width: int) -> None:
  """An output axis a little short of a multiple of the tile width (1000 for 32) is padded up to one (the extra
  iterations are masked), so it gets the full-width tile instead of a narrow one."""
  n = k.loop_axes[axis].src[0].arg
  if n >= width and n % width and -(-n // width) * width <= n * 5 // 4: _try(k, Opt(OptOps.PADTO, axis, width))

# the work-group tile the tensor-core tiles below aim at (M, N, and the K step): an axis is padded to a multiple of
# the largest power-of-two part of it that costs at most 1/8 more work, else of the core's own tile
TC_BLOCK = (128, 128, 32)

def _tc_pad(n: int, tile: int, block: int) -> int | None:
  """What to PADTO an axis of size `n` to, for a tensor core tile of `tile` aiming at `block`; None: nothing. (A
  1000-wide axis padded to 1008 is 63 tiles of 16, which no tile action divides: one warp of one tile; to 1024, the
  full 128x128 block.)"""
  amt = next((b for b in (block, block // 2, block // 4) if b >= tile and b % tile == 0 and
              -(-n // b) * b <= n + n // 8), tile)
  return amt if n % amt else None

def tensor_core_opts(k: Kernel) -> list[Opt] | None:
  """The actions that put a matmul on the renderer's tensor cores: TC, after PADTOs of the M, N and K axes whose sizes
  do not divide by the core's (each at most doubled) or, at most 1/8 more work, by a part of the work-group tile
  (`_tc_pad`); None: no tensor cores, TC=0, another dtype or kernel shape."""
  from tinyplug.codegen.tensor_cores import tc_matches
  from tinyplug.helpers import TC
  if not TC or k.renderer is None or not k.renderer.uses_work_groups: return None
  def padded(r: UOp, tile: int) -> int: return -(-r.src[0].arg // tile) * tile
  for i, tc in enumerate(k.renderer.tensor_cores):
    if tc.name in k.renderer.descriptor_cores: continue   # those only with their own recipe (_descriptor_core_opts)
    # the assignments that need the least padding first (none, for sizes that divide)
    matches = sorted(tc_matches(k.sink, tc, any_size=True), key=lambda mt: math.prod(
      padded(r, tile) / r.src[0].arg for r, tile in zip((mt.m, mt.n, mt.k), tc.dims)))
    for match in matches[:4]:
      trial = k.copy()
      axes = k.loop_axes + k.reduce_axes
      pads = [Opt(OptOps.PADTO, axes.index(r), amt) for r, tile, block in zip((match.m, match.n, match.k), tc.dims,
                                                                            TC_BLOCK)
              if (amt := _tc_pad(r.src[0].arg, tile, block)) is not None]
      if all(_try(trial, p) for p in pads) and _try(trial, Opt(OptOps.TC, 0, i)): return trial.applied_opts
  return None

def _tensor_core_opts(k: Kernel, actions: list[Opt]) -> list[Opt]:
  """A matmul on tensor cores: each warp runs a register tile of up to 4x8 WMMAs per K-tile (64x64 of the output for
  m16n8k16: each A fragment is reused across the row, each B fragment down the column), two K-tiles per loop trip,
  up to 2x2 warps share a work-group (a 128x128 block), and with two warps or more the work-group stages A and B
  through shared memory (STAGE: each K step's tiles are read from global memory once per work-group, not once per
  warp), loading the next K step's while the tensor cores run (arg 1), both tiles filled with 16-byte loads (2, 4) into
  padded rows (8), where it fits; where the renderer has asynchronous copies (CUDA sm_80+) and the operands no gates,
  row-major swizzled tiles filled by cp.async in 3 stages and read by ldmatrix, the blocks in grouped order (304 =
  16 + 32 + 256; 48 where the grouping does not apply) instead. (fp16 4096^3 on an H200: 0.351-0.357 ms with 304,
  0.354-0.360 ms with 48, 0.55 ms with 15; 0.85 ms with 2-byte fills, 0.94 ms with 4x4 WMMAs and 2x4 warps, 2.4 ms
  unstaged.)"""
  for o in actions: k.apply_opt(o)
  m, n = len(k.loop_axes) - 2, len(k.loop_axes) - 1
  for axis, amts in ((n, (8, 4, 2)), (m, (4, 2))): any(_try(k, Opt(OptOps.UPCAST, axis, a)) for a in amts)
  _try(k, Opt(OptOps.UNROLL, len(k.reduce_axes) - 1, 2))
  for axis in (n, m): _try(k, Opt(OptOps.LOCAL, axis, 2))
  if math.prod(r.src[0].arg for r in k.ranges if r.arg[1] == "local") >= 2:   # warps per work-group
    # 304: cp.async into 3 stages of row-major tiles, ldmatrix, blocks in grouped order (tc_async.py); 48: ungrouped
    if (staged := _first_stage(k, (304, 48, 15, 1))) is not None: return staged.applied_opts
  return k.applied_opts

def _first_stage(k: Kernel, stages: tuple[int, ...]) -> Kernel | None:
  """A copy of `k` with the first STAGE arg of `stages` that applies and whose staged tiles fit the shared memory."""
  for stage in stages:
    trial = k.copy()
    try:
      trial.apply_opt(Opt(OptOps.STAGE, None, stage))
      trial.finished_sink()
    except KernelOptError: continue
    return trial
  return None

# STAGE args for a descriptor core (tc_wgmma.py: 2048 + 16), best first: 3 stages in grouped order (two 96 KB blocks
# fit a multiprocessor), 4 stages grouped, then ungrouped
DESCRIPTOR_STAGES = (2048 + 16 + 32 + 256, 2048 + 16 + 64 + 256, 2048 + 16 + 32, 2048 + 16 + 64, 2048 + 16)

def _descriptor_core_opts(k: Kernel) -> list[Opt] | None:
  """A matmul on a tensor core that reads shared memory through descriptors (Hopper's wgmma), where the renderer
  prefers them: one warpgroup per 64 rows of the core's 64 x N tile, two warpgroups a work-group (a 128 x N block),
  K steps of 4 K-tiles (64: one 128-byte row of A), STAGE's descriptor mode (DESCRIPTOR_STAGES); sizes must divide
  (no PADTO: cp.async copies whole chunks). None where no descriptor core runs the kernel so."""
  from tinyplug.codegen.tensor_cores import tc_matches
  from tinyplug.helpers import TC
  r = k.renderer
  if not TC or r is None or not r.prefer_descriptor_cores or any(True for _ in k.applied_opts): return None
  for i, tc in enumerate(r.tensor_cores):
    if tc.name not in r.descriptor_cores or not tc_matches(k.sink, tc): continue
    for local in (2, 1):
      base = k.copy()
      if not _try(base, Opt(OptOps.TC, 0, i)) or not _try(base, Opt(OptOps.UNROLL, len(base.reduce_axes) - 1, 4)): break
      if local > 1 and not _try(base, Opt(OptOps.LOCAL, len(base.loop_axes) - 2, local)): continue
      if (staged := _first_stage(base, DESCRIPTOR_STAGES)) is not None: return staged.applied_opts
  return None

def _row_reduce_vector(k: Kernel) -> int | None:
  """A batch of independent row reductions (every load from global memory depends on every output axis, so no output
  axis reuses a loaded value, and every load that walks the reduction does so contiguously: softmax's max and sum over
  attention scores, 8x12x128 rows of 128): the vector width to unroll the reduction by (`_reduce_vector`), so each
  step reads vectors and keeps a vector accumulator, summed across its lanes once per row. None: not such a kernel."""
  loops, reduces = k.loop_axes, k.reduce_axes
  if not loops or len(reduces) != 1 or any(_reuse(k)) or _streams(k): return None   # a long one: `_streams`' rule
  if _max_pass_rows(k, False) is not None: return None   # narrow vectors' row maxima: side by side
  along = [s for s in _load_strides(k, reduces[0]) if s != 0]
  if not along or any(s != 1 for s in along): return None
  return _reduce_vector(k)

def _whole_row_tile(k: Kernel, row: int) -> tuple[tuple[int, ...], int] | None:
  """A large matmul whose second input is read along its rows (`g @ W`, every load that depends on the innermost output
  axis contiguous along it) and whose output row is wider than the CPU tile but at most twice it, a whole number of
  vectors (attention's `attn @ v`: rows of 64 floats): the tile takes the row whole, so each step of the reduction
  reads a whole row of B as one contiguous run, with as many rows (a power of two) as keep cpu_tile's count of vector
  accumulators (AVX-512: 64 x 4 for 32 x 8; one Zen 4 core, 8x12x128x64x128, kernels interleaved: 72-83 -> 87-103
  GFLOP/s). ((widths,), rows), or None."""
  tile_w, tile_rows = cpu_tile(k.renderer)
  lanes = vector_lanes(k)
  if not lanes or not tile_w < row <= 2 * tile_w or row % lanes: return None
  accumulators = (tile_w // lanes) * tile_rows
  rows = next((r for r in (8, 4, 2) if (row // lanes) * r <= accumulators), 1)
  return (row,), rows

# a reduction this short (all its axes together) over at least SHORT_ROWS_MIN outputs, left with no actions, runs
# SHORT_ROWS_UPCAST outputs side by side
SHORT_ROWS_REDUCE, SHORT_ROWS_MIN, SHORT_ROWS_UPCAST = 64, 4096, 4

def _costly_reduce_lanes(k: Kernel) -> int:
  """Lanes of one vector register for a reduction that takes costly float math (COSTLY_MATH) on each element it
  reduces (logsumexp's exp), else 0. Rows side by side so wide reduce as one vector accumulator: the math runs a whole
  register at a time on values gathered from the rows (the vectorize pass builds such an accumulator only for math
  that decomposes into many lane-wise ops)."""
  if not k.renderer.vector_bytes: return 0
  along, sizes = set(k.reduce_axes), []
  for u in k.sink.toposort():
    if u.op is Ops.REDUCE: continue
    if any(s in along for s in u.src):
      along.add(u)
      if u.op in COSTLY_MATH and dtypes.is_float(u.dtype): sizes.append(u.dtype.itemsize)
  return k.renderer.vector_bytes // max(sizes) if sizes else 0

def _short_rows_opts(k: Kernel) -> list[Opt] | None:
  """Many short reductions that no rule took (a global average pool's 7x7 windows, a 10-class logsumexp over 4096
  rows, 49-wide row sums): each output is one chain of dependent adds or maxes, its loop a few iterations. Four
  outputs side by side run four chains at once, and a second reduce axis of at most 8 is unrolled (its loop's own
  overhead was a third of the time). Zen 4, one thread, kernel alone: mean((2, 3)) of 32x512x7x7 220 -> 98 us,
  sum(1) of 16384x49 216 -> 47 us, max(1) of 4096x25 41 -> 32 us.
  Costly math on every reduced element (a 10-class logsumexp's exp) runs a vector register of rows side by side from
  any count of rows (`_costly_reduce_lanes`; Zen 3, one thread, logsumexp(1) of 4096x10 134-143 -> 64-66 us, 8192x10
  241-256 -> 118-126 us; upcast so with the lanes kept scalar it was 83-92 us)."""
  if k.renderer is None or not k.renderer.runs_loops or k.renderer.uses_work_groups: return None
  loops, reduces = k.loop_axes, k.reduce_axes
  if not loops or not reduces: return None
  # each REDUCE's own length (a row kernel's passes, logsumexp's max then sum, are separate REDUCEs over one axis each)
  if max(math.prod(r.src[0].arg for r in u.src[1:]) for u in k.sink.toposort() if u.op is Ops.REDUCE) > SHORT_ROWS_REDUCE:
    return None
  k = k.copy()
  if (lanes := _costly_reduce_lanes(k)) and loops[-1].src[0].arg % lanes == 0 and \
     _try(k, Opt(OptOps.UPCAST, len(loops) - 1, lanes)):
    return k.applied_opts
  if math.prod(r.src[0].arg for r in loops) < SHORT_ROWS_MIN or loops[-1].src[0].arg % SHORT_ROWS_UPCAST: return None
  # passes over a row one after another (argmax's max then first index) are left to LLVM's loop vectorizer: upcast,
  # argmax(1) of 8192x10 ran 45 -> 102 us (logsumexp's took the rule above)
  if _passes_over_rows(k) > 1: return None
  if not _try(k, Opt(OptOps.UPCAST, len(loops) - 1, SHORT_ROWS_UPCAST)): return None
  if len(reduces) >= 2 and (n := reduces[-1].src[0].arg) <= 8: _try(k, Opt(OptOps.UNROLL, len(reduces) - 1, n))
  return k.applied_opts

def heuristic_opts(k: Kernel) -> list[Opt]:
  """`_recipe`, and where it takes no action, `_short_rows_opts`."""
  opts = _recipe(k)
  if not opts and (short := _short_rows_opts(k)) is not None: return short
  return opts

# vector registers of a scatter-add's row per index: its index, gate and row address are worked out once for them
SCATTER_ROW_VECTORS = 4

def _scatter_opts(k: Kernel) -> list[Opt] | None:
  """A kernel with an ordered loop (SCATTER_ADD's, over its indices; no action may touch that loop): its row axis
  (the last output axis: the only one, outermost, which threads share out by columns; or, over a block index, the one
  inside the ordered loop, the blocks outside it) upcast by up to SCATTER_ROW_VECTORS vector registers of the stored
  dtype, the widest that divides it. None for other kernels."""
  if not k.loop_axes or not any(r.arg[1] == "ordered" for r in k.sink.toposort() if r.op is Ops.RANGE): return None
  store = next(u for u in k.sink.toposort() if u.op is Ops.STORE)
  lanes = max((k.renderer.vector_bytes or 16) // max(store.src[1].dtype.itemsize, 1), 1)
  axis = len(k.loop_axes) - 1
  for amt in sorted({lanes * v for v in range(SCATTER_ROW_VECTORS, 0, -1)} | {8, 4, 2}, reverse=True):
    if amt > 1 and k.full_shape[axis] % amt == 0 and _try(k, Opt(OptOps.UPCAST, axis, amt)): break
  return k.applied_opts

def _recipe(k: Kernel) -> list[Opt]:
  """A short hand-written recipe. Reductions over two or more output axes (matmul, conv) get a register tile: the
  innermost output axis upcast by up to 16 (on CPUs two vectors, another axis by as many rows as the vector registers
  leave room for: `cpu_tile`), another by up to 8, so each loaded value feeds many accumulators; large ones on CPUs
  are then blocked for the cache and split across threads.
  Other reductions unroll their loop; elementwise kernels upcast their fastest axis. GPU-style renderers also get a
  work-group on an output axis. A matmul the renderer's tensor cores can run goes to them first (TC=0: never)."""
  k = k.copy()
  loops, reduces = k.loop_axes, k.reduce_axes
  gpu = k.renderer is not None and k.renderer.uses_work_groups
  if gpu and (wg := _descriptor_core_opts(k)) is not None: return wg
  if gpu and (tc := tensor_core_opts(k)) is not None: return _tensor_core_opts(k, tc)
  if gpu and k.renderer.parallel_work_items and k.reduce_axes and (grouped := _gpu_group(k)) is not None: return grouped
  cpu = k.renderer is not None and k.renderer.runs_loops
  if cpu and (scatter := _scatter_opts(k)) is not None: return scatter
  if not gpu and _is_row_kernel(k): return _row_opts(k)
  if cpu and not gpu and (one_hot := _one_hot_row_opts(k)) is not None: return one_hot
  # `x @ W.T` (both inputs along the reduction) before the small-window tile, which would take a 10-output layer's
  # forward as a convolution's odd row (64x10x9216, one thread: 204 us as a 10x4 tile of gathers, 164 us so)
  if cpu and not gpu and len(loops) >= 2 and reduces and _contiguous_reduce(k) and _reduce_vector(k) is not None:
    return _vector_reduce_tile(k, _tile_budget(k), _worth_blocking(k))
  if cpu and not gpu and (amt := _row_reduce_vector(k)) is not None and \
     _try_tile(k, Opt(OptOps.UNROLL, len(reduces) - 1, amt)):
    return k.applied_opts
  if cpu and not gpu and (inner_ch := _channels_inner_tile(k)) is not None: return inner_ch
  if cpu and not gpu and (band := _row_band_tile(k)) is not None: return band
  if not gpu and (small := _small_window_tile(k)) is not None: return small
  if cpu and not gpu and (column := _column_opts(k)) is not None: return column
  if reduces and len(loops) >= 2:
    reuse = _reuse(k)
    inner = len(loops) - 1
    big = cpu and _worth_blocking(k)
    budget = _tile_budget(k) if cpu else 256
    # two vectors per tile row (32 lanes with AVX-512) pay off on CPUs once a row is that wide (conv 32x32: 20% faster)
    tile_w, tile_rows = cpu_tile(k.renderer) if cpu else (16, 8)
    widths = (4, 2) if gpu else tuple(w for w in (64, 32, 16, 8, 4, 2) if w <= tile_w) if cpu else (16, 8, 4, 2)
    # the row takes at most half the budget's lanes in a small tile (8x2 rather than 16x1: the second axis reuses loads)
    widths = tuple(w for w in widths if w * (1 if budget == 256 else 2) <= budget) or (2,)
    # the second tile axis: the output axis the most loads do not depend on (each of their values is reused per lane)
    others = sorted((a for a in range(len(loops) - 1) if reuse[a]), key=lambda a: (-reuse[a], -loops[a].src[0].arg))
    # a short second axis that no power of two divides well (a linear layer's 10 outputs) is upcast whole, the row
    # one vector wide, past the tile budget: the other input is then read once instead of once per pair of rows
    # (`g.T @ x` of a 9216->10 layer: 0.48 -> 0.22 ms; 2.3 -> 1.9 ms in a training step, which fuses the loss
    # gradient in); EXPAND_BUDGET bounds its code
    whole = next((a for a in others[:1] if 2 < loops[a].src[0].arg <= 16 and loops[a].src[0].arg % 4), None) \
      if cpu and budget >= 64 else None
    if whole is not None: widths = tuple(w for w in widths if w <= 16)
    # a small reduction whose row is read as vectors: the budget counts vector accumulators, not lanes. One vector
    # wide by SMALL_VECTOR_ROWS rows, unrolled no further, is faster than the lane budget's 8 x 2 unrolled by 4 with
    # fewer UOps (Zen 4, one thread: `x.T @ g` 64x64x128 24 -> 11 us, `g @ W` 128x64x64 16.4 -> 11.3 us; 128x784x64
    # 164 -> 114 us, where the 64-lane budget took 32 x 2 and padded 784 to 800)
    # (a tile of fewer rows reuses each loaded vector too little: a 10-output layer's weight gradient keeps 8 x 2)
    lanes = vector_lanes(k) if cpu and budget < 256 and whole is None and reuse[inner] else 0
    row = loops[inner].src[0].arg
    if lanes and row >= lanes and (row % lanes == 0 or -(-row // lanes) * lanes <= row * 5 // 4) and \
       any(loops[a].src[0].arg % SMALL_VECTOR_ROWS == 0 for a in others[:1]):
      widths = tuple(lanes * v for v in _row_vectors(k) if row % (lanes * v) == 0) or (lanes,)
      tile_rows, budget = SMALL_VECTOR_ROWS, widths[0] * SMALL_VECTOR_ROWS
    elif cpu and budget >= 256 and whole is None and reuse[inner] and (whole_row := _whole_row_tile(k, row)):
      widths, tile_rows = whole_row
    # padded lanes pay off where each output sums many products; a short window (a depthwise 3x3: 9) has its row
    # upcast by half the tile width where that divides it (r_8_64_56_56_3_3, 2 threads under load: 56 padded to 64
    # and upcast by 16, 850-860 us; by 8, 400-545 us, interleaved)
    half = (widths[0] // 2,) if math.prod(r.src[0].arg for r in reduces) < SHORT_REDUCE and widths[0] >= 8 and \
      row % (widths[0] // 2) == 0 else ()
    if cpu and reuse[inner] and not half and whole is None and (tile := unpadded_row_tile(k, row, tile_w, tile_rows)):
      widths, tile_rows = (row,), tile[1]
      budget = max(budget, row * tile_rows)
    if cpu and reuse[inner] and not half: _pad_for_tile(k, inner, widths[0])
    reread = _reread_axes(k) if cpu else []
    if reuse[inner]:
      size = k.loop_axes[inner].src[0].arg
      any(size % w == 0 and size >= w and _try_tile(k, Opt(OptOps.UPCAST, inner, w)) for w in widths + half)
    if whole is not None and _try_tile(k, Opt(OptOps.UPCAST, whole, loops[whole].src[0].arg)): others = []
    for axis in others:
      if cpu: _pad_for_tile(k, axis, tile_rows)
      choices = tuple(c for c in ((8, 4, 2) if not gpu else (4, 2)) if k.upcasted * c <= budget and c <= tile_rows)
      size = k.loop_axes[axis].src[0].arg
      # the widest that divides the axis and keeps the expanded kernel within EXPAND_BUDGET
      if any(size % c == 0 and size >= c and _try_tile(k, Opt(OptOps.UPCAST, axis, c)) for c in choices): break
    # a scan's triangle (no load walking the reduction depends on the row's outputs, no other axis reuses a load):
    # its row of outputs is one vector of dependent add chains; the next axis out upcast gives independent ones
    # (cumsum(1) 1024x1024, kernels timed interleaved, loaded machine, p10: the blocks' triangle 490 -> 285-310 us
    # with 8 or 4 blocks, the totals' scan 113 -> 81 us with 4 rows)
    chains = cpu and not others and inner in reread and k.upcasted > 1 and inner > 0 and \
      any(k.loop_axes[inner - 1].src[0].arg % c == 0 and k.upcasted * c <= _scan_chain_lanes(k, budget) and
          _try_tile(k, Opt(OptOps.UPCAST, inner - 1, c)) for c in SCAN_CHAINS)
    if k.upcasted <= 16 and not chains:
      for amt in (4, 2):
        if _try_tile(k, Opt(OptOps.UNROLL, 0, amt)): break
    if big: _block_for_cache(k)
  elif reduces:
    size = reduces[0].src[0].arg
    unrolls = (8, 4, 2)
    streams = not gpu and _streams(k)
    # on narrow vectors, rows of maxima (a stream's, argmax's two passes) side by side (_max_pass_rows)
    if cpu and not gpu and (rows := _max_pass_rows(k, streams)) and _try(k, Opt(OptOps.UPCAST, len(loops) - 1, rows)):
      return k.applied_opts
    # elsewhere a stream of maxima (a row's max; argmax's int64 keys, one max per row) keeps plain loops, which LLVM
    # vectorises and interleaves: 8 rows side by side, unrolled, were slower (4096x4096, one Zen 4 thread, the two
    # builds alternated, p10: argmax(1) 3.35-4.07 -> 2.89-3.46 ms, max(1) 3.10-3.80 -> 2.63-3.39 ms)
    if streams and all(u.arg is Ops.MAX for u in k.sink.toposort() if u.op is Ops.REDUCE): return k.applied_opts
    if streams: unrolls = STREAM_UNROLLS
    # a sum down the columns (a bias gradient: the batch reduced, the outputs contiguous): one vector of outputs, so
    # each step of the reduction is one vector load and add, unrolled by 4 (r_64_128 of the mlp step, one thread:
    # 7.1 us unrolled by 8 as scalars, 3.3 us so)
    elif cpu and loops and (lanes := vector_lanes(k)) and _try(k, Opt(OptOps.UPCAST, len(loops) - 1, lanes)):
      unrolls = (4, 2)
    # one value per row from passes over the row one after another (`fuse_rows`: argmax's max then index pass,
    # logsumexp's max then sum) keeps plain loops, which LLVM vectorises and interleaves: argmax(1) 4096x4096, loaded
    # machine, 3.0 ms plain, 3.8 ms with the index pass unrolled by 8, 7.8 ms with both (one vector max chain)
    if _passes_over_rows(k) > 1: unrolls = ()
    for amt in unrolls:
      if size >= 4 * amt and _try(k, Opt(OptOps.UNROLL, 0, amt)): break
  elif loops:
    inner = loops[-1].src[0].arg
    # 4 where it divides the row; otherwise, on CPUs and for big kernels, the widest divisor up to 16 (a 26- or 11-wide row of
    # index-heavy work, like a pool's gradient, is upcast by 13 or 11 rather than by 2 or not at all)
    small = math.prod(r.src[0].arg for r in loops) < 4096   # tiny kernels keep the simple rule (and their code)
    choices = (4, 2) if gpu or small or inner % 4 == 0 else tuple(d for d in range(16, 1, -1) if inner % d == 0)
    if not gpu and not small and (lanes := math_lanes(k)) > 4:
      choices = tuple(c for c in (lanes, lanes // 2) if c > 4 and inner % c == 0) + choices
    # a phase interleave (a strided convolution's input gradient, conv_transpose2d: every other element of the row from
    # another buffer, gated by `% 2`) is upcast by its stride and then by a vector per phase (_phase_opts);
    # else it stays a loop on CPUs: LLVM's loop vectorizer turns its gates and index arithmetic into vector selects,
    # while the lanes of a plain upcast stay scalar (E_64_64_28_28, one thread: 2.8 ms as a loop, 13.6 ms upcast by 4)
    if cpu and not gpu and (lanes_at := _lane_select(k)) is not None and _lane_select_opts(k, *lanes_at):
      choices = ()
    elif not gpu and _gated_by_parity(k):
      _phase_opts(k)
      choices = ()
    elif not gpu and not small and (lanes := _spread_lanes(k) or _gathered_row_lanes(k)) is not None:
      # a row no vector divides keeps the divisor rule (a gathered row of 513: padded to 528 and upcast by 16, masked
      # tails, it was slower: 4096 rows, one thread, CPU time p10 0.67 ms upcast by 9, 0.89 ms padded)
      choices = tuple(c for c in (lanes, lanes // 2, lanes // 4) if c >= 4 and inner % c == 0) or choices
    elif not gpu and not small and _whole_padded_row(k):
      choices = (inner,)
    elif not gpu and not small and (lanes := _padded_row_lanes(k)) is not None:
      choices = (lanes,) if _try(k, Opt(OptOps.PADTO, len(loops) - 1, lanes)) else choices
    elif not gpu and not small and (across := _transpose_axis(k)) is not None:
      tile = _transpose_tile(k, across)
      if tile is not None and (loops[across].src[0].arg % tile[0] or inner % tile[1]): tile = None
      amt = tile[0] if tile else next((c for c in (16, 8, 4) if loops[across].src[0].arg % c == 0), None)
      if amt is not None and _try(k, Opt(OptOps.UPCAST, across, amt)) and tile is not None: choices = (tile[1],) + choices
    elif not gpu and not small and (run := _run_axis(k)) is not None:
      # the row whole and RUN_STEPS steps of the axis that continues its run: RUN_STEPS runs read back to back
      if _try(k, Opt(OptOps.UPCAST, len(loops) - 1, inner)) and loops[run].src[0].arg % RUN_STEPS == 0:
        _try(k, Opt(OptOps.UPCAST, run, RUN_STEPS))
      choices = ()
    for amt in choices:
      if _try(k, Opt(OptOps.UPCAST, len(k.loop_axes) - 1, amt)): break
  if gpu: _gpu_locals(k)
  return k.applied_opts

# GPU work-groups: this many threads per group; a reduction into fewer outputs than this shares each one out
GPU_GROUP_THREADS, GPU_GROUP_OUTPUTS = 256, 16384

def _gpu_group(k: Kernel) -> list[Opt] | None:
  """A reduction whose outputs are too few to keep a GPU busy at one thread each (a sum's partials, a conv's weight
  gradient), or a row reduction (contiguous along the reduction, not along the outputs: softmax, layernorm), gets a
  work-group per output that shares the reduction out, then combines in shared memory. (One thread per softmax row
  read 8192 floats 32 KB away from its neighbour's: 1.5 ms on an H200, 0.8 ms grouped; torch 0.29.)"""
  loops, red = k.loop_axes, k.reduce_axes[0]
  if any(r.src[0].op is not Ops.CONST for r in k.reduce_axes): return None
  n_out, size = math.prod(r.src[0].arg for r in loops), red.src[0].arg
  # (stride along the reduction, along the innermost output) of each load that reads along the reduction
  pairs = [(a, b) for a, b in zip(_load_strides(k, red), _load_strides(k, loops[-1]) if loops else repeat(0)) if a != 0]
  row = bool(pairs) and all(a == 1 and b != 1 for a, b in pairs)
  # short reductions stay one per thread (a small matmul's 32-long dot products): a group would barely have work
  if math.prod(r.src[0].arg for r in k.reduce_axes) < 256 or not (n_out < GPU_GROUP_OUTPUTS or (row and len(loops) <= 1)):
    return None
  # a row's threads each read four neighbours as one vector load, then share the row 128 ways: a softmax row max
  # over 8192 floats on an H200 took 0.072 ms so, 0.134 ms as 256 threads of scalar loads (kernel times)
  if row and size % (4 * 128) == 0 and size >= 4 * 4 * 128 and _try(k, Opt(OptOps.UNROLL, 0, 4)): size //= 4
  sizes = (128, 64, 32, 16) if row else (GPU_GROUP_THREADS, 128, 64, 32, 16)
  amt = next((a for a in sizes if size % a == 0 and size >= 2 * a), None)
  if amt is None or not _try(k, Opt(OptOps.GROUP, 0, amt)): return None
  # a few independent loads in flight per thread
  for unroll in (4, 2):
    if size // amt >= 4 * unroll and _try(k, Opt(OptOps.UNROLL, 0, unroll)): break
  return k.applied_opts

def _gpu_locals(k: Kernel) -> None:
  """Work-groups of up to GPU_GROUP_THREADS threads over the output axes, innermost first: the innermost takes at
  most a warp's 32 when other axes can take the rest (a 16x16-like block reuses both inputs of a tile), any divisor
  of an axis (a 56-wide conv row takes 14, not 2)."""
  if any(r.arg[1] in ("local", "group") for r in k.ranges): return
  if not k.renderer.parallel_work_items:   # CPU OpenCL: one work-group axis, a power of two, as tuned on PoCL
    for axis in reversed(range(len(k.loop_axes))):
      if any(_try(k, Opt(OptOps.LOCAL, axis, amt)) for amt in (256, 128, 64, 32, 16, 8, 4, 2)): return
    return
  plan, threads, n = [], 1, len(k.loop_axes)
  for axis in reversed(range(n)):
    size = k.loop_axes[axis].src[0].arg
    room = GPU_GROUP_THREADS // threads
    if axis == n - 1 and n > 1 and size >= 32: room = min(room, 32)
    amt = max((d for d in range(2, min(size, room) + 1) if size % d == 0), default=None)
    if amt is not None: plan.append((axis, amt)); threads *= amt
    if threads * 2 > GPU_GROUP_THREADS: break
  # applied outermost first: a later local is a faster-varying launch dimension, so the innermost axis is threadIdx.x
  for axis, amt in reversed(plan): _try(k, Opt(OptOps.LOCAL, axis, amt))
