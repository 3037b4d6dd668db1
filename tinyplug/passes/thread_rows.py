"""The heuristic's `thread_rows` pass (after the gpudims stage, loop-running renderers with threads): the loop that
threads share out (the outermost output loop, `tinyplug.backend.shareable_loop`) gets enough iterations for all of
the renderer's threads. Where it has fewer than the threads, or splits unevenly among them and is short, it is merged
with the output loop inside it: one loop over both, each old index recovered by // and %. The innermost output loop
is merged only where its body is already more than a row of scalars: a reduction loop runs in each iteration (a tile
of dot products: a skinny matmul's 8 x 4 tiles, a conv weight gradient's 8 x 64; the merge costs a division per
reduction) or no store is contiguous along it (each step writes a tile the heuristic upcast: a matmul's packing of
B, 8 x 1024 steps of 4 x 32 floats, 32 apart). Elsewhere it is the row LLVM's loop vectoriser works on (topk's 8 rows
of 1024 on 16 threads merged into one loop of 8192 elements ran slower).

Why: a convolution's outermost loop is its batch (8), a batched matmul's too (8 of 8 x 12 heads), so on 16 threads
half of them had no share (16-core Xeon: a stride-2 conv 2.3 ms against PyTorch's 0.93 ms, q @ k^T 0.54 against
0.17 ms); merged with the next loop (8 x 16 channel blocks, 8 x 12 heads) every thread gets rows and the loop order,
so what each thread reads, stays the same. Off with the heuristic (`TINY_PLUGINS=-heuristic`)."""
from __future__ import annotations
import math
from typing import Any, Callable
from tinyplug.uop.ops import Ops, UOp
from tinyplug.codegen.kernel import replace_nodes
from tinyplug.passes.heuristic import index_stride

# a shared loop of at least this many rows per thread is left as it is even when its rows split unevenly (its shortest
# share is at most a quarter shorter than the others)
EVEN_ROWS_PER_THREAD = 4

def make_pass() -> Callable[[UOp, Any], UOp]:
  """The pass's factory (named by the plugin's PassSpec)."""
  def thread_rows(sink: UOp, ctx: Any) -> UOp: return share_rows(sink, ctx.renderer.threads)
  return thread_rows

def short_for(rows: int, threads: int) -> bool:
  """Whether a shared loop of `rows` leaves some of `threads` threads idle or with a much smaller share."""
  return rows < threads or (rows % threads != 0 and rows < EVEN_ROWS_PER_THREAD * threads)

def share_rows(sink: UOp, threads: int) -> UOp:
  """`sink` with its outer output loops merged until the outermost has enough rows for `threads` (`short_for`).
  Only loops every store depends on are merged (a store outside the inner loop would repeat, from two threads at
  once); kernels with loops of other kinds (a THREAD axis, a scatter's ordered loop) or of variable length, or with a
  store that is not to a global buffer, stay."""
  if threads <= 1: return sink
  nodes = sink.toposort()
  ranges = [u for u in nodes if u.op is Ops.RANGE]
  if any(r.arg[1] not in ("loop", "reduce") or r.src[0].op is not Ops.CONST for r in ranges): return sink
  loops = sorted((r for r in ranges if r.arg[1] == "loop"), key=lambda r: r.arg[0])
  least = 2 if loops and _tile_body(nodes, ranges, loops[-1]) else 3   # the innermost loop too (the module's docstring)
  while len(loops) >= least and short_for(loops[0].src[0].arg, threads):
    outer, inner = loops[0], loops[1]
    deps = _range_deps(nodes)
    stores = [u for u in nodes if u.op is Ops.STORE]
    # every store is a global one (anything else, a local or register store, is left to the kernel as it was)
    if not stores or any(s.src[0].op is not Ops.INDEX or s.src[0].src[0].op is not Ops.DEFINE_GLOBAL for s in stores):
      break
    if not all(outer in deps[s] and inner in deps[s] for s in stores): break
    n_inner = inner.src[0].arg
    merged = UOp(Ops.RANGE, outer.dtype, (UOp.const(outer.dtype, outer.src[0].arg * n_inner),), outer.arg)
    sink = replace_nodes(sink, {outer: merged // n_inner, inner: merged % n_inner})
    nodes, loops = sink.toposort(), [merged] + loops[2:]
  return sink

# a reduction this long inside the innermost loop makes each of its steps a tile (a shorter one LLVM may unroll into a
# row it vectorises)
TILE_REDUCE_STEPS = 16

def _tile_body(nodes: list[UOp], ranges: list[UOp], innermost: UOp) -> bool:
  """Whether each step of the innermost output loop is a tile rather than an element of a row: it runs a reduction
  of TILE_REDUCE_STEPS or more steps, or (in a kernel without reductions) every store moves by a known stride other than one element per step."""
  # a reduction whose values vary along the innermost loop (a softmax row's max and sum do not: merged, they would be
  # worked out again for every element)
  deps = _range_deps(nodes)
  if any(u.op is Ops.REDUCE and innermost in deps[u.src[0]] and
         math.prod(r.src[0].arg for r in u.src[1:] if r.op is Ops.RANGE) >= TILE_REDUCE_STEPS for u in nodes): return True
  if any(r.arg[1] == "reduce" for r in ranges): return False
  memo: dict[UOp, int | None] = {}
  strides = [index_stride(u.src[0].src[1], innermost, memo) for u in nodes if u.op is Ops.STORE and u.src[0].op is Ops.INDEX]
  return bool(strides) and all(s is not None and abs(s) > 1 for s in strides)

def _range_deps(nodes: list[UOp]) -> dict[UOp, frozenset[UOp]]:
  """For each node (in toposort order): the RANGEs it depends on."""
  deps: dict[UOp, frozenset[UOp]] = {}
  empty: frozenset[UOp] = frozenset()
  for u in nodes:
    if u.op is Ops.RANGE: deps[u] = frozenset((u,))
    elif len(u.src) == 1: deps[u] = deps[u.src[0]]
    else: deps[u] = empty.union(*(deps[s] for s in u.src)) if u.src else empty
  return deps
