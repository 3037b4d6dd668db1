"""Split an output loop where its padding gates change: `cat` (and `pad`) read each input under a gate `r < c` on an
output loop r, so every step loads (at a safe address) and selects from every input. Cut r at those constants into
consecutive loops, one per piece: within each piece every gate is a constant, the selects and the reads of the other
inputs fold away, and the piece is a plain copy of its one input (the linearizer runs the pieces one after another).
Kept only where the pieces read fewer values (cat); a pad's pieces would read its input as often.

Only elementwise kernels (stores, no reductions), only gates on the loop itself (`r < c`), never the outermost loop
(threads share that one; stack and cat on dim 0 keep their gates: with the next loop outside instead, each thread
writing every piece's rows in turn, stack 4 x (1024, 4096) was no faster), and at most MAX_PIECES pieces in all."""
from __future__ import annotations
from typing import Any
from tinyplug.uop.ops import Ops, UOp
from tinyplug.uop.rewrite import graph_rewrite
from tinyplug.uop.upat import PatternMatcher, UPat

MAX_PIECES = 16
# a cut is kept where its pieces read at least this share fewer values per step than the loop did (cat of 4: 3/4)
MIN_SAVED_READS = 0.25

def _known_lanes(c: UOp, a: UOp, b: UOp) -> UOp | None:
  """A select whose vector condition repeats one constant (a gate known in a piece, broadcast to the lanes)."""
  first = c.src[0]
  if first.op is not Ops.CONST or any(x is not first for x in c.src): return None
  return a if first.arg else b

_fold_lanes = PatternMatcher([(UPat(Ops.WHERE, src=(UPat(Ops.VECTORIZE, name="c"), UPat.var("a"), UPat.var("b"))),
                               _known_lanes)])

def _simplify(sink: UOp) -> UOp:
  """`symbolic` (its rows compiled already: a matcher made of it and more would compile them again, ~0.25 s), the
  broadcast gates, `symbolic` again for what they leave (adds of zero)."""
  from tinyplug.uop.symbolic import symbolic
  sink = graph_rewrite(sink, symbolic, name="split loops")
  return graph_rewrite(graph_rewrite(sink, _fold_lanes, name="split loops"), symbolic, name="split loops")

def _loops(sink: UOp) -> list[UOp]:
  return sorted((u for u in sink.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg)

def _cuts(sink: UOp, r: UOp) -> list[int]:
  """The constants c of the gates `r < c` inside r's extent, in order."""
  n = r.src[0].arg
  return sorted({u.src[1].arg for u in sink.toposort() if u.op is Ops.CMPLT and u.src[0] is r
                 and u.src[1].op is Ops.CONST and isinstance(u.src[1].arg, int) and 0 < u.src[1].arg < n})

def _splittable(sink: UOp) -> bool:
  nodes = sink.toposort()
  return (sink.op is Ops.SINK and all(s.op is Ops.STORE for s in sink.src)
          and not any(u.op is Ops.REDUCE or (u.op is Ops.RANGE and u.arg[1] != "loop") for u in nodes))

def _renumber(sink: UOp, order: list[UOp]) -> UOp:
  """The loops numbered by their place in `order` (a piece's loops sit where the loop they replace sat), from a number
  above every old one: no new number is an old loop's."""
  base = max(r.arg[0] for r in order) + 1
  return sink.substitute({r: UOp(Ops.RANGE, r.dtype, r.src, (base + i, r.arg[1])) for i, r in enumerate(order)})

def _pieces(r: UOp, bounds: list[int], top: int) -> list[tuple[UOp | None, UOp]]:
  """Per piece [lo, hi) of r: its loop (None for a piece of one step) and what r is in it."""
  out: list[tuple[UOp | None, UOp]] = []
  for j, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
    if hi - lo == 1: out.append((None, UOp.const(r.dtype, lo)))
    else:
      piece = UOp(Ops.RANGE, r.dtype, (UOp.const(r.dtype, hi - lo),), (top + 1 + j, "loop"))
      out.append((piece, piece + UOp.const(r.dtype, lo) if lo else piece))
  return out

def _loads(u: UOp) -> int:
  return sum(1 for x in u.toposort() if x.op is Ops.LOAD)

def _cut(sink: UOp, loops: list[UOp], r: UOp, bounds: list[int]) -> UOp | None:
  """The stores of `sink` once per piece of r, each piece with its own copy of the loops inside r (a linear program
  opens a loop once), simplified; the loops numbered in nesting order. None where the pieces together would not read
  a share MIN_SAVED_READS fewer values per step of r than the loop did (a pad's pieces read its one input as often:
  more code to compile for nothing; conv's pad kernel compiled 2-3x longer)."""
  at, top = loops.index(r), max(x.arg[0] for x in loops)
  pieces = _pieces(r, bounds, top)
  inner, order, stores, reads = loops[at + 1:], loops[:at], [], 0
  fresh = top + len(pieces) + 1   # numbers no loop has
  for (piece, value), lo, hi in zip(pieces, bounds, bounds[1:]):
    copies = [UOp(Ops.RANGE, x.dtype, x.src, (fresh + i, x.arg[1])) for i, x in enumerate(inner)]
    fresh += len(inner)
    order += ([piece] if piece is not None else []) + copies
    part = UOp(Ops.SINK, sink.dtype, tuple(s.substitute({r: value, **dict(zip(inner, copies))}) for s in sink.src))
    part = _simplify(part)
    stores += part.src
    reads += _loads(part) * (hi - lo)
  if reads > (1 - MIN_SAVED_READS) * _loads(sink) * r.src[0].arg: return None
  out = UOp(Ops.SINK, sink.dtype, tuple(stores), sink.arg)
  present = set(out.toposort())
  return _renumber(out, [x for x in order if x in present])

def split_at_gates(sink: UOp) -> UOp:
  """`sink` with its innermost gated loop worth cutting (then the next ones) cut at its gates' constants; `sink`
  itself where no loop qualifies or the stores would pass MAX_PIECES."""
  if not _splittable(sink): return sink
  loops = _loops(sink)
  for r in reversed(loops[1:]):
    if r.src[0].op is not Ops.CONST or not (cuts := _cuts(sink, r)): continue
    # a loop inside one piece of an earlier cut: cutting it would repeat the other pieces' stores in each new piece
    if any(r not in s.toposort() for s in sink.src): continue
    bounds = [0, *cuts, r.src[0].arg]
    if (len(bounds) - 1) * len(sink.src) > MAX_PIECES: return sink
    if (out := _cut(sink, loops, r, bounds)) is not None: return split_at_gates(out)
  return sink

def make_pass() -> Any:
  def split_loops(sink: UOp, ctx: Any) -> UOp: return split_at_gates(sink)
  return split_loops
