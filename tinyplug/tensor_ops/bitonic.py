"""The bitonic network behind sort and topk, a few kernels deep.

Each kernel runs several consecutive steps of the network on groups of 2^s elements: the elements those s steps pair
up, taken as 2^s "lanes" (views of the input, one UOp each), so a step is a compare-exchange between two lane UOps and
the whole group stays in registers from the kernel's loads to its stores. The lanes are stacked back with a chain of
`where(lane != b, ..., lane_b)`; the heuristic upcasts that lane axis (`heuristic._lane_select`), so each output
lane's select is a constant and the lanes share one network. A merge of 2^p elements (steps of distance 2^(p-1) down
to 1) is about p / LANE_BITS kernels instead of p, and the first FIRST_BITS merges are one kernel together. The
network's last kernel stores the keys' indices (int32) rather than the keys.

Works on one integer key per element, an exchange a min and a max: sort's indices come from int64 keys that pack a
32-bit order key with the index (every key distinct), its values from int32 codes alone (equal codes are equal
values). Sizes along the sorted axis are powers of two (callers pad)."""
from __future__ import annotations
import functools
from typing import Callable
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp
from tinyplug.tensor_ops import graph

# steps per kernel: 32 lanes (1024-long rows: 18 -> 15 kernels, one thread ~13 -> ~11.5 ms; each kernel reads and
# writes all the keys, so fewer kernels are fewer passes over memory), except a merge's top kernel over elements below
# its lanes (its mirror reads a flipped view of them: 2 loads a lane), which takes 16 (one more where it halves). A
# 32-lane one (64 loads an element) was a scalar loop (10-14 ms against ~1) until llvmir.render_range clamped the
# shared loop's start on both sides; vectorized, it still reads every key twice, and 1024-long rows in 13 kernels
# with it measured ~4% slower than in 14 without (one thread, plan buffers shared). The first kernel sorts runs of 32
# (every mirror inside its lanes; 64 lanes were scalar: 66-124 ms); its ~1,400 UOps add ~0.3-0.5 s to a cold
# 1024-long sort's build
LANE_BITS, MIRROR_BITS, FIRST_BITS = 5, 4, 5

# the network is ~2,000 nodes for 1024-long rows, built per call: the makers below skip graph.alu's checks (every
# source has the lanes' shape by construction) and record the shape they know
def _node(op: Ops, dtype, srcs: tuple[UOp, ...], shape: tuple[int, ...], arg=None) -> UOp:
  return UOp(op, dtype, srcs, arg).with_known_shape(shape)

def _exchange(a: UOp, b: UOp) -> tuple[UOp, UOp]:
  shape = a.shape
  less = _node(Ops.CMPLT, dtypes.bool, (a, b), shape)
  return _node(Ops.WHERE, a.dtype, (less, a, b), shape), _node(Ops.WHERE, a.dtype, (less, b, a), shape)

def _min(a: UOp, b: UOp) -> UOp: return _exchange(a, b)[0]
def _max(a: UOp, b: UOp) -> UOp: return _exchange(a, b)[1]

@functools.lru_cache(maxsize=256)
def _lane_masks(shape: tuple[int, ...], axis: int, device: str) -> tuple[UOp, ...]:
  """For each b < shape[axis]: a bool of `shape`, true where the index along `axis` is not b (one padded constant
  each, so a kernel reads the lane as a range compare of its index; remembered: UOps are immutable)."""
  n = shape[axis]
  ones = (1,) * len(shape)
  masks = []
  for b in range(n):
    at_b = graph.pad(graph.const(True, dtypes.bool, device, (1,)), ((b, n - 1 - b),))
    at_b = graph.expand(graph.reshape(at_b, ones[:axis] + (n,) + ones[axis + 1:]), shape)
    masks.append(graph.alu(Ops.CMPNE, at_b, graph.const(True, dtypes.bool, device, shape)))
  return tuple(masks)

def low_index(u: UOp) -> UOp:
  """A key's index: its low 32 bits, as int32."""
  low = _node(Ops.AND, u.dtype, (u, graph.const(0xFFFFFFFF, u.dtype, u.device, u.shape)), u.shape)
  return _node(Ops.CAST, dtypes.int32, (low,), u.shape)

Finish = Callable[[UOp], UOp]   # what the network's last kernel stores of each key (the key, its index, a value)

def _chunk(x: UOp, at: int, lo_bit: int, nbits: int, steps: list[tuple[str, int]], halve: bool = False,
           finish: Finish | None = None) -> UOp:
  """One kernel: `steps` of the network on the lanes of bits lo_bit .. lo_bit+nbits-1 of the index along `at`.
  ("mirror", q): lane b against lane b ^ (2^q - 1), the group of 2^q lanes mirrored (a merge's first step: the
  elements below lo_bit are mirrored too, so it must come first when lo_bit > 0); ("half", t): lane b against
  b | 2^t. The smaller value goes to the lower lane. `halve` keeps the lower half of the lanes only (topk's merge of
  two sorted runs into the smaller half). `finish`: what the network's last kernel stores of each key (its index,
  int32: half the bytes of the key, and no kernel of its own to unpack them)."""
  shape = x.shape
  size, pre, post = shape[at], shape[:at], shape[at + 1:]
  g, d = 1 << nbits, 1 << lo_bit
  groups = size // (g * d)
  v = graph.reshape(x, pre + (groups, g, d) + post)
  lane_shape = pre + (groups, 1, d) + post   # each lane keeps its axis (of 1): the stack expands it back
  bounds = [(0, s) for s in v.shape]
  lanes: list[UOp | None] = []
  for b in range(g):
    bounds[at + 1] = (b, b + 1)
    lanes.append(_node(Ops.SHRINK, x.dtype, (v,), lane_shape, tuple(bounds)))
  keep = g // 2 if halve else g
  for i, (kind, t) in enumerate(steps):
    if kind == "half": pairs = [(b, b | 1 << t) for b in range(g) if not b >> t & 1]
    else: pairs = [(b, b ^ ((1 << t) - 1)) for b in range(g) if not b >> (t - 1) & 1]
    for b, p in pairs:
      if b >= keep: continue   # both lanes are dropped
      lb, lp = lanes[b], lanes[p]
      assert lb is not None and lp is not None
      if kind == "mirror" and d > 1:
        assert i == 0, "a mirror over elements below the lanes reads the input: it must be the first step"
        lanes[b] = _min(lb, graph.flip(lp, (at + 2,)))
        lanes[p] = _max(lp, graph.flip(lb, (at + 2,))) if p < keep else None
      elif p < keep: lanes[b], lanes[p] = _exchange(lb, lp)
      else: lanes[b], lanes[p] = _min(lb, lp), None
  # stacked back: where(lane != b, <the lanes after b>, lane b), a chain the heuristic upcasts (_lane_select)
  out_shape = pre + (groups, keep, d) + post
  masks = _lane_masks(out_shape, at + 1, x.device)
  kept: list[UOp] = [finish(u) if finish else u for u in lanes[:keep]]   # type: ignore[misc,arg-type]
  dt = kept[0].dtype
  spread = [_node(Ops.EXPAND, dt, (u,), out_shape, out_shape) for u in kept]
  out = spread[-1]
  for b in range(keep - 2, -1, -1): out = _node(Ops.WHERE, dt, (masks[b], out, spread[b]), out_shape)
  return UOp(Ops.CONTIGUOUS, dt, (graph.reshape(out, pre + (groups * keep * d,) + post),))

def _merge(x: UOp, at: int, p: int, halve: bool = False, finish: Finish | None = None,
           bits: tuple[int, int] | None = None) -> UOp:
  """Phase p: every run of 2^p elements (two sorted halves) sorted, in kernels of up to LANE_BITS steps (one more
  where the top kernel halves), the top bits first: that kernel's first step is the merge's mirror. `bits`: (lane,
  mirror) bits in place of (LANE_BITS, MIRROR_BITS)."""
  lane_bits, mirror_bits = bits or (LANE_BITS, MIRROR_BITS)
  top = mirror_bits + halve   # the mirror kernel's bits where elements lie below its lanes
  # as few kernels as the lanes allow, their bits shared out evenly, the fewest on top (the mirror)
  count = 1 if p <= lane_bits + halve else 1 + -(-(p - top) // lane_bits)
  widths = [p // count + (i >= count - p % count) for i in range(count)]   # ascending: widths[0] the top's
  widths = widths[1:] + widths[:1]
  chunks = [(sum(widths[:i]), w) for i, w in enumerate(widths)]
  for i, (lo, nb) in enumerate(reversed(chunks)):
    steps = ([("mirror", nb)] + [("half", t) for t in range(nb - 2, -1, -1)]) if i == 0 else \
      [("half", t) for t in range(nb - 1, -1, -1)]
    x = _chunk(x, at, lo, nb, steps, halve=halve and i == 0, finish=finish if i == len(chunks) - 1 else None)
  return x

def sort_runs(x: UOp, at: int, q: int, index: bool = False, finish: Finish | None = None,
              bits: tuple[int, int] | None = None) -> UOp:
  """Every run of 2^q elements along `at` sorted ascending (q = log2 of the size: the whole axis); `index`: their
  indices (the keys' low 32 bits, int32) in that order; `finish`: what is stored of each key (elementwise); `bits`
  as in _merge."""
  if index: finish = low_index
  first = min(q, FIRST_BITS)
  if first == 0: return finish(x) if finish else x
  x = _chunk(x, at, 0, first, [s for p in range(1, first + 1)
                               for s in [("mirror", p)] + [("half", t) for t in range(p - 2, -1, -1)]],
             finish=finish if q == first else None)
  for p in range(first + 1, q + 1): x = _merge(x, at, p, finish=finish if p == q else None, bits=bits)
  return x

def smallest(x: UOp, at: int, q: int, index: bool = False, finish: Finish | None = None,
             bits: tuple[int, int] | None = None) -> UOp:
  """The 2^q smallest along `at`, ascending: runs of 2^q sorted, then each two neighbouring runs merged into the
  smaller half (the axis halves each time) until one run is left. `index`, `finish`, `bits` as in sort_runs."""
  if index: finish = low_index
  x = sort_runs(x, at, q, finish=finish if x.shape[at] <= 1 << q else None, bits=bits)
  while x.shape[at] > 1 << q:
    x = _merge(x, at, q + 1, halve=True, finish=finish if x.shape[at] == 2 << q else None, bits=bits)
  return x
