"""Multi-device tensors: every op over a MULTI node becomes one op per device before kernels are cut.

A tensor split over devices is `MULTI(shard_0, ..., shard_n-1)` (arg: the axis it is split along, None when each
device holds all of it). The Tensor graph above it is built on the whole tensor's shape; `lower_multi` rewrites it,
sources first, so that each op sees MULTI sources and becomes a MULTI of per-device ops, with the axis that
`uop.shapes.axis_of` gives the op. Where a source is split differently from what the op needs, its parts are
re-split (a part of each copy, or a gather); a reduction over the split axis adds the devices' partial results on
every device (an all-reduce); a COPY to one device gathers the parts. What is left is an ordinary graph of
single-device nodes, with MULTIs only at the top, which the scheduler cuts into kernels and copies as usual."""
from __future__ import annotations
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import GroupOp, Ops, UOp
from tinyplug.uop.rewrite import graph_rewrite_map
from tinyplug.uop.shapes import shard_bounds
from tinyplug.uop.upat import PatternMatcher, UPat

def _multi(parts: list[UOp], axis: int | None) -> UOp: return UOp(Ops.MULTI, parts[0].dtype, tuple(parts), axis)

def _copy(x: UOp, device: str) -> UOp: return UOp(Ops.COPY, x.dtype, (x, UOp(Ops.DEVICE, dtypes.void, arg=device)))

def _on(x: UOp, device: str, fresh: bool = False) -> UOp:
  """x on `device`: itself when it lives there (unless a buffer of its own is wanted), else a copy."""
  return x if x.device == device and not fresh else _copy(x, device)

def _piece(x: UOp, axis: int, count: int, i: int) -> UOp:
  """Part i of x when its `axis` is split over `count` devices."""
  bounds = tuple(shard_bounds(s, count, i) if j == axis else (0, s) for j, s in enumerate(x.shape))
  return UOp(Ops.SHRINK, x.dtype, (x,), bounds)

_BITS = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}

def gather(m: UOp, device: str, fresh: bool = False) -> UOp:
  """The whole of MULTI m on `device`. The parts are padded to the full size and OR-ed as bits (zero padding leaves
  every other part's bits as they are: exact, -0.0 and NaN payloads included)."""
  if m.arg is None:
    here = next((s for s in m.src if s.device == device), m.src[0])
    return _on(here, device, fresh)
  axis, n, dt = m.arg, len(m.src), m.dtype
  bits = dt if dt == dtypes.bool or dtypes.is_int(dt) else _BITS[dt.itemsize]
  size = m.src[0].shape[axis]
  out = None
  for i, s in enumerate(m.src):
    part = _on(s, device, fresh)
    if bits != dt: part = UOp(Ops.BITCAST, bits, (part,))
    pad = tuple((i * size, (n - 1 - i) * size) if j == axis else (0, 0) for j in range(len(part.shape)))
    part = UOp(Ops.PAD, bits, (part,), pad)
    out = part if out is None else UOp(Ops.OR, bits, (out, part))
  return out if bits == dt else UOp(Ops.BITCAST, dt, (out,))

def reshard(m: UOp, axis: int | None) -> list[UOp]:
  """MULTI m's value as one part per device of m, split along `axis` (None: whole on each)."""
  if m.arg == axis: return list(m.src)
  n = len(m.src)
  if m.arg is None: return [_piece(s, axis, n, i) for i, s in enumerate(m.src)]   # each device has all: cut its part
  wholes = [gather(m, s.device) for s in m.src]
  return wholes if axis is None else [_piece(w, axis, n, i) for i, w in enumerate(wholes)]

def _per_device(x: UOp, m: UOp, axis: int | None, arg=None) -> UOp:
  """x applied to each part of m (with `arg`, when the part needs another one than the whole)."""
  arg = x.arg if arg is None else arg
  return _multi([UOp(x.op, x.dtype, (s,) + x.src[1:], arg) for s in m.src], axis)

def _replicated(x: UOp, m: UOp) -> UOp:
  """x on each device over the whole of m (an op that cannot keep m's split)."""
  return _multi([UOp(x.op, x.dtype, (gather(m, s.device),) + x.src[1:], x.arg) for s in m.src], None)

def _elementwise(x: UOp) -> UOp | None:
  multis = [s for s in x.src if s.op is Ops.MULTI]
  if not multis: return None
  axis, n = x.axis, len(multis[0].src)
  if (single := next((s for s in x.src if s.op is not Ops.MULTI and s.device is not None), None)) is not None:
    raise ValueError(f"{x.op} mixes a tensor on {multis[0].device} with one on {single.device}")
  cols = [reshard(s, axis) if s.op is Ops.MULTI else [s] * n for s in x.src]   # a deviceless value is shared
  return _multi([UOp(x.op, x.dtype, tuple(c[i] for c in cols), x.arg) for i in range(n)], axis)

def _reduce(x: UOp, m: UOp) -> UOp:
  op, axes = x.arg
  partial = [UOp(Ops.REDUCE_AXIS, x.dtype, (s,), x.arg) for s in m.src]
  if m.arg is None or m.arg not in axes: return _multi(partial, m.arg)
  # all-reduce: every device combines all partial results, in the same order (the copies hold the same values)
  out = []
  for s in m.src:
    parts = [_on(p, s.device) for p in partial]
    acc = parts[0]
    for p in parts[1:]: acc = UOp(op, x.dtype, (acc, p))
    out.append(acc)
  return _multi(out, None)

def _reshape(x: UOp, m: UOp) -> UOp:
  if m.arg is None: return _per_device(x, m, None)
  if (axis := x.axis) is None: return _replicated(x, m)
  n = len(m.src)
  return _per_device(x, m, axis, tuple(s // n if i == axis else s for i, s in enumerate(x.arg)))

def _expand(x: UOp, m: UOp) -> UOp:
  if m.arg is None: return _per_device(x, m, None)
  return _per_device(x, m, m.arg, tuple(m.src[0].shape[i] if i == m.arg else s for i, s in enumerate(x.arg)))

def _keep_or_replicate(x: UOp, m: UOp) -> UOp:
  """PAD, SHRINK, FLIP: per device where the split axis is left alone, else over the gathered whole. A shrink to
  exactly one device's part copies that part to every device instead."""
  a = m.arg
  if a is None: return _per_device(x, m, None)
  if x.axis == a:
    if x.op is Ops.SHRINK:
      return _per_device(x, m, a, tuple((0, m.src[0].shape[a]) if i == a else b for i, b in enumerate(x.arg)))
    return _per_device(x, m, a)
  n, size = len(m.src), m.src[0].shape[a]
  j = next((j for j in range(n) if tuple(x.arg[a]) == (j * size, (j + 1) * size)), None) if x.op is Ops.SHRINK else None
  if j is not None:
    part = UOp(Ops.SHRINK, x.dtype, (m.src[j],), tuple((0, size) if i == a else b for i, b in enumerate(x.arg)))
    return _multi([_on(part, s.device) for s in m.src], None)
  return _replicated(x, m)

def _assign(x: UOp, t: UOp) -> UOp:
  v = x.src[1]
  values = reshard(v, t.arg) if v.op is Ops.MULTI else [v] * len(t.src)
  return _multi([UOp(Ops.ASSIGN, x.dtype, (ts, vs)) for ts, vs in zip(t.src, values)], t.arg)

def _copy_out(m: UOp, d: UOp) -> UOp:
  if not isinstance(d.arg, str): raise NotImplementedError("a COPY from several devices to several devices")
  return gather(m, d.arg, fresh=True)   # a tensor of its own: never the buffer of one of the parts

_M = UPat(Ops.MULTI, name="m")
multi_lowering = PatternMatcher([
  (UPat(GroupOp.ALU | {Ops.CAST, Ops.BITCAST}, name="x"), _elementwise),
  (UPat(Ops.REDUCE_AXIS, src=(_M,), name="x"), _reduce),
  (UPat(Ops.RESHAPE, src=(_M,), name="x"), _reshape),
  (UPat(Ops.PERMUTE, src=(_M,), name="x"), lambda x, m: _per_device(x, m, None if m.arg is None else x.arg.index(m.arg))),
  (UPat(Ops.EXPAND, src=(_M,), name="x"), _expand),
  (UPat((Ops.PAD, Ops.SHRINK, Ops.FLIP), src=(_M,), name="x"), _keep_or_replicate),
  (UPat((Ops.CONTIGUOUS, Ops.DETACH), src=(_M,), name="x"), lambda x, m: _per_device(x, m, m.arg)),
  (UPat(Ops.COPY, src=(_M, UPat(Ops.DEVICE, name="d"))), _copy_out),
  (UPat(Ops.ASSIGN, src=(UPat(Ops.MULTI, name="t"), UPat()), name="x"), _assign),
  # a custom gradient rule is done with once the graph is scheduled (as schedule.strip_custom_grads does)
  (UPat(Ops.CUSTOM_GRAD, name="x"), lambda x: x.src[0] if any(s.op is Ops.MULTI for s in x.src) else None),
])

def lower_multi(targets: list[UOp]) -> tuple[list[UOp], dict[UOp, UOp]] | None:
  """(the single-device targets to schedule, what each node of the graph became), or None without MULTI nodes."""
  sink = UOp(Ops.SINK, dtypes.void, tuple(targets))
  if not any(n.op is Ops.MULTI for n in sink.toposort()): return None
  renamed = graph_rewrite_map(sink, multi_lowering, name="lower multi-device tensors")
  flat: list[UOp] = []
  for t in targets:
    new = renamed[t]
    flat.extend(new.src if new.op is Ops.MULTI else (new,))
  for n in UOp(Ops.SINK, dtypes.void, tuple(flat)).toposort():
    if n.op is not Ops.MULTI and any(s.op is Ops.MULTI for s in n.src):
      raise NotImplementedError(f"{n.op} of a tensor split over the devices {n.src[0].device} is not supported")
    if n.op is Ops.COPY and isinstance(n.src[1].arg, tuple): raise NotImplementedError("a COPY to several devices")
  return flat, renamed

def lift_becomes(renamed: dict[UOp, UOp], becomes: dict[UOp, UOp]) -> dict[UOp, UOp]:
  """What each node of the multi-device graph became, from what its lowered nodes became: a MULTI becomes the MULTI of
  its parts' buffers once every part is a buffer (newly computed, or one already)."""
  out: dict[UOp, UOp] = {}
  for old, new in renamed.items():
    if new.op is Ops.MULTI:
      parts = [becomes.get(s, s) for s in new.src]
      if any(s in becomes for s in new.src) and all(p.base.op is Ops.BUFFER for p in parts):
        out[old] = _multi(parts, new.arg)
    elif (b := becomes.get(new)) is not None: out[old] = b
  return out
