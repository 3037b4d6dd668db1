"""The TC action: a matmul-shaped reduction becomes warp-level matrix multiply-accumulates (`Ops.WMMA`).

What it matches: a kernel with one REDUCE, an ADD in the tensor core's `dtype_out`, whose value (under an optional
CAST to `dtype_out`) is MUL(x, y) with x and y each a LOAD of `dtype_in` (or such a LOAD cast to `dtype_out`). The M
axis is an output loop x's address depends on and y's does not, N the other way round, K a reduce axis both depend
on; their sizes must divide by the tensor core's M, N and K (the heuristic pads other sizes first with PADTO, which
TC may follow; a padded K's mask on the value is dropped, since both inputs' loads are gated to 0 there).

What it builds, for a tensor core of M x N x K run by T threads:
- M, N and K become loops over tiles (M/tm, N/tn, K/tk; they keep their axis ids), and a new "warp" axis of T
  threads joins the work-group (gpudims makes it the fastest local id, so T consecutive threads form one warp);
- each thread loads its fragment elements of A and B (`TensorCore.position` of its lane and each element) and the
  kernel's REDUCE becomes one REDUCE per element of C/D over GEP(WMMA(a..., b..., 0...), e): the linearizer puts
  those in one loop, so each K-tile runs one WMMA;
- every STORE of the kernel is copied once per element of C/D, at that element's (m, n): an epilogue (a bias, a cast
  back to half) is carried along.
Later actions split the tile loops like any other axis: UPCAST gives several WMMAs per thread (a register tile),
UNROLL several K-tiles per loop trip, LOCAL several warps per work-group."""
from __future__ import annotations
from dataclasses import dataclass
from tinyplug.backend import TensorCore
from tinyplug.codegen.kernel import replace_nodes
from tinyplug.uop.ops import Ops, UOp

WARP = "warp"   # the kind of the RANGE of a tensor core's lanes

@dataclass(frozen=True)
class TCMatch:
  """One way to run a kernel's reduction on a tensor core: the loads that give A and B, and the M, N, K axes."""
  reduce: UOp
  a: UOp
  b: UOp
  m: UOp
  n: UOp
  k: UOp

def _ranges(u: UOp) -> set[UOp]: return {x for x in u.toposort() if x.op is Ops.RANGE}

def _size(r: UOp) -> int | None: return r.src[0].arg if r.src[0].op is Ops.CONST else None

def _input_load(x: UOp, tc: TensorCore) -> UOp | None:
  if x.op is Ops.CAST and x.dtype == tc.dtype_out: x = x.src[0]
  return x if x.op is Ops.LOAD and x.dtype == tc.dtype_in else None

def _padded_reduce_range(body: UOp) -> UOp | None:
  """The reduce axis of a PADTO's `WHERE(r < n, value, 0)` around a reduction's value, else None."""
  if body.op is not Ops.WHERE or body.src[2].op is not Ops.CONST or body.src[2].arg != 0: return None
  cond = body.src[0]
  return cond.src[0] if cond.op is Ops.CMPLT and cond.src[0].op is Ops.RANGE and cond.src[1].op is Ops.CONST else None

def tc_matches(sink: UOp, tc: TensorCore, any_size: bool = False) -> list[TCMatch]:
  """Every (A, B, M, N, K) assignment of `sink`'s reduction that `tc` can run; [] when the kernel is not a matmul of
  `tc`'s dtypes or its sizes do not divide by the tensor core's (with `any_size`, sizes are not looked at: the
  heuristic pads them first)."""
  reduces = [u for u in sink.toposort() if u.op is Ops.REDUCE]
  if len(reduces) != 1 or reduces[0].arg is not Ops.ADD or reduces[0].dtype != tc.dtype_out: return []
  red = reduces[0]
  body = red.src[0]
  # a padded reduce axis masks the value; with both inputs' loads gated by it too (they read 0 there: PADTO gates
  # every global load of the axis) the products are 0 already and the mask can go
  padded = _padded_reduce_range(body)
  if padded is not None: body = body.src[1]
  if body.op is Ops.CAST and body.dtype == tc.dtype_out: body = body.src[0]   # CAST(float, MUL(half, half))
  if body.op is not Ops.MUL or body.dtype not in (tc.dtype_in, tc.dtype_out): return []
  x, y = (_input_load(s, tc) for s in body.src)
  if x is None or y is None: return []
  def fits(r: UOp, tile: int) -> bool: return (size := _size(r)) is not None and (any_size or size % tile == 0)
  tm, tn, tk = tc.dims
  loops = sorted((r for r in _ranges(sink) if r.arg[1] == "loop"), key=lambda r: r.arg)
  out = []
  for a, b in ((x, y), (y, x)):
    ra, rb = _ranges(a), _ranges(b)
    if padded is not None and not (padded in ra and padded in rb): return []
    for k in sorted(set(red.src[1:]) & ra & rb, key=lambda r: r.arg):
      if not fits(k, tk): continue
      for m in (r for r in loops if r in ra and r not in rb and fits(r, tm)):
        for n in (r for r in loops if r in rb and r not in ra and fits(r, tn)):
          out.append(TCMatch(red, a, b, m, n, k))
  return out

def _lane_offset(lane: UOp, steps: tuple[tuple[int, int], ...], axis: int) -> UOp | None:
  """sum over the set bits j of `lane` of steps[j][axis], as index math: runs of bits whose steps double
  (1, 2, 4: a lane group number) become one `(lane // 2**j) % 2**n * step`."""
  terms, j = [], 0
  while j < len(steps):
    w = steps[j][axis]
    if w == 0: j += 1; continue
    n = 1
    while j + n < len(steps) and steps[j + n][axis] == w << n: n += 1
    bits = lane if j == 0 else lane // (1 << j)
    if j + n < lane.src[0].arg.bit_length() - 1: bits = bits % (1 << n)
    terms.append(bits * w if w != 1 else bits)
    j += n
  if not terms: return None
  total = terms[0]
  for t in terms[1:]: total = total + t
  return total

def _coord(tc: TensorCore, lane: UOp, matrix: int, element: int, tile_row: UOp, tile_col: UOp) -> tuple[UOp, UOp]:
  """The (row, col) index expressions of `element` of this thread's fragment of `matrix` in the tile at
  (tile_row, tile_col) (the tiles' first row and column)."""
  out = []
  for axis, base in ((0, tile_row), (1, tile_col)):
    expr = base
    if (lane_part := _lane_offset(lane, tc.lane_bits[matrix], axis)) is not None: expr = expr + lane_part
    if (c := tc.element_offsets[matrix][element][axis]): expr = expr + c
    out.append(expr)
  return out[0], out[1]

def apply_tensor_core(sink: UOp, tc: TensorCore, match: TCMatch) -> UOp:
  """`sink` with `match`'s reduction run as WMMAs of `tc` (see the module docstring)."""
  tm, tn, tk = tc.dims
  m, n, k, red = match.m, match.n, match.k, match.reduce
  next_id = 1 + max(u.arg[0] for u in _ranges(sink))
  def tiles(r: UOp, size: int) -> UOp: return UOp(Ops.RANGE, r.dtype, (UOp.const(r.dtype, _size(r) // size),), r.arg)
  m_o, n_o, k_o = tiles(m, tm), tiles(n, tn), tiles(k, tk)
  lane = UOp(Ops.RANGE, m.dtype, (UOp.const(m.dtype, tc.threads),), (next_id, WARP))
  m0, n0, k0 = m_o * tm, n_o * tn, k_o * tk
  n_a, n_b, n_c = tc.elements
  a_vals, b_vals = [], []
  for i in range(n_a):
    row, col = _coord(tc, lane, 0, i, m0, k0)
    a_vals.append(replace_nodes(match.a, {m: row, k: col}))
  for i in range(n_b):
    row, col = _coord(tc, lane, 1, i, k0, n0)
    b_vals.append(replace_nodes(match.b, {k: row, n: col}))
  zero = UOp.const(tc.dtype_out, 0.0)
  wmma = UOp(Ops.WMMA, tc.dtype_out.vec(n_c), (*a_vals, *b_vals, *([zero] * n_c)), tc.name)
  others = tuple(r for r in red.src[1:] if r is not k)
  stores = []
  for e in range(n_c):
    value = UOp(Ops.GEP, tc.dtype_out, (wmma,), (e,))
    red_e = UOp(Ops.REDUCE, red.dtype, (value, k_o, *others), red.arg)
    row, col = _coord(tc, lane, 2, e, m0, n0)
    stores.extend(replace_nodes(s, {red: red_e, m: row, n: col}) for s in sink.src)
  return UOp(Ops.SINK, sink.dtype, tuple(dict.fromkeys(stores)), sink.arg)

def has_warp(sink: UOp) -> bool:
  return any(u.op is Ops.RANGE and u.arg[1] == WARP for u in sink.toposort())
