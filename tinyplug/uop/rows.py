"""UOp graphs as rows of JSON values (op name, dtype, arg, sources by position), back to the very same UOps, and as
one line of text that names a graph exactly: what the disk caches store and key by. Never pickle."""
from __future__ import annotations
from typing import Any
from tinyplug.uop.dtype import DType, PtrDType, dtypes
from tinyplug.uop.ops import Ops, UOp

class NotStorable(Exception): """A value the JSON form does not cover: the entry is simply not stored."""

_dtype_texts: dict[int, tuple[DType, str]] = {}

def graph_text(root: UOp) -> str:
  """The graph as one entry per node (op, dtype, arg, sources by position) in toposort order: it names the graph
  exactly, like `str(root)`, at about half the cost (no nesting, no names for shared nodes)."""
  index: dict[UOp, int] = {}
  lines: list[tuple] = []
  for u in root.toposort():
    dt = u.dtype
    if (hit := _dtype_texts.get(id(dt))) is None or hit[0] is not dt: _dtype_texts[id(dt)] = hit = (dt, repr(dt))
    index[u] = len(index)
    lines.append((u.op._name_, hit[1], u.arg, tuple([index[s] for s in u.src])))
  return repr(lines)

_DTYPES = {dt.name: dt for dt in dtypes.fields().values()}

def enc_dtype(dt: DType) -> Any:
  if isinstance(dt, PtrDType): return {"p": [enc_dtype(dt.base), dt.local, dt.v, dt.size]}
  sc = dt.scalar()
  if _DTYPES.get(sc.name) is not sc: raise NotStorable(f"dtype {dt!r}")
  return [sc.name, dt.count]

def _dec_dtype(x: Any) -> DType:
  if isinstance(x, dict):
    base, local, v, size = x["p"]
    return _dec_dtype(base).ptr(size, local).vec(v)
  return _DTYPES[x[0]].vec(x[1])

def enc_arg(x: Any) -> Any:
  if x is None or isinstance(x, (bool, str)): return x
  if isinstance(x, int): return {"i": str(x)} if abs(x) >= 2**53 else x
  if isinstance(x, float): return {"f": x.hex()}
  if isinstance(x, tuple): return {"t": [enc_arg(v) for v in x]}
  if isinstance(x, Ops): return {"o": x.name}
  if isinstance(x, DType): return {"d": enc_dtype(x)}
  raise NotStorable(f"{type(x).__name__} argument")

def dec_arg(x: Any) -> Any:
  if not isinstance(x, dict): return x
  (tag, v), = x.items()
  if tag == "i": return int(v)
  if tag == "f": return float.fromhex(v)
  if tag == "t": return tuple(dec_arg(e) for e in v)
  if tag == "o": return Ops[v]
  if tag == "d": return _dec_dtype(v)
  raise ValueError(f"unknown tag {tag!r}")

_OPS = {op.name: op for op in Ops}
_dtype_memo: dict[tuple, DType] = {}

def _dec_dtype_fast(x: Any) -> DType:
  if isinstance(x, list) and (dt := _dtype_memo.get((x[0], x[1]))) is not None: return dt
  dt = _dec_dtype(x)
  if isinstance(x, list): _dtype_memo[(x[0], x[1])] = dt
  return dt

def build_uops(rows: list) -> tuple[UOp, ...]:
  uops: list[UOp] = []
  for op, dt, arg, src in rows:
    uops.append(UOp(_OPS[op], _dec_dtype_fast(dt), tuple([uops[i] for i in src]) if src else (),
                    dec_arg(arg) if isinstance(arg, dict) else arg))
  return tuple(uops)


def graph_rows(root: UOp) -> list:
  """`root`'s graph as rows in toposort order (build_uops(rows)[-1] is root again); NotStorable where an arg or
  dtype has no JSON form."""
  index: dict[UOp, int] = {}
  rows = []
  for u in root.toposort():
    index[u] = len(index)
    rows.append([u.op.name, enc_dtype(u.dtype), enc_arg(u.arg), [index[s] for s in u.src]])
  return rows
