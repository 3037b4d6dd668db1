"""A kernel under optimisation: its axes (RANGEs) and the optimisation actions that split and retype them.

Axes are numbered like tinygrad's: the output ("loop") axes first, then the reduce axes; UNROLL and GROUP count
from the first reduce axis. Every action splits one axis of size n into an outer axis of n/amt and an inner one of
amt, and gives the inner one a kind: upcast/unroll (expanded into straight-line code), local/group (GPU work-group)."""
from __future__ import annotations
from dataclasses import dataclass
from enum import Enum, auto
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp

class OptOps(Enum):
  UPCAST = auto(); UNROLL = auto(); LOCAL = auto(); GROUP = auto(); GROUPTOP = auto(); THREAD = auto(); NOLOCALS = auto()
  def __repr__(self) -> str: return f"OptOps.{self.name}"

@dataclass(frozen=True, order=True)
class Opt:
  op: OptOps
  axis: int | None = None
  arg: int | None = None
  def __repr__(self) -> str: return f"Opt(op={self.op!r}, axis={self.axis}, arg={self.arg})"

class KernelOptError(ValueError):
  pass

# the kind an action gives the inner part of the axis it splits, and the kinds of axis it may split
_INNER_KIND = {OptOps.UPCAST: "upcast", OptOps.UNROLL: "unroll", OptOps.LOCAL: "local", OptOps.GROUP: "group",
               OptOps.GROUPTOP: "group", OptOps.THREAD: "thread"}
_SPLITS = {OptOps.UPCAST: ("loop",), OptOps.LOCAL: ("loop",), OptOps.THREAD: ("loop",), OptOps.UNROLL: ("reduce",),
           OptOps.GROUP: ("reduce",), OptOps.GROUPTOP: ("reduce",)}

def _size(r: UOp) -> int: return r.src[0].arg

class Kernel:
  def __init__(self, sink: UOp, renderer=None):
    self.sink, self.renderer = sink, renderer
    self.applied_opts: list[Opt] = []
    self.dont_use_locals = False

  def copy(self) -> Kernel:
    k = Kernel(self.sink, self.renderer)
    k.applied_opts, k.dont_use_locals = list(self.applied_opts), self.dont_use_locals
    return k

  # ---- axes ----
  @property
  def ranges(self) -> list[UOp]:
    rngs = [u for u in self.sink.toposort() if u.op is Ops.RANGE]
    return sorted(rngs, key=lambda r: (r.arg[1] != "loop", r.arg[1] != "reduce", r.arg[0]))
  @property
  def loop_axes(self) -> list[UOp]: return [r for r in self.ranges if r.arg[1] == "loop"]
  @property
  def reduce_axes(self) -> list[UOp]: return [r for r in self.ranges if r.arg[1] == "reduce"]
  @property
  def full_shape(self) -> tuple[int, ...]: return tuple(_size(r) for r in self.ranges)
  @property
  def upcasted(self) -> int:
    n = 1
    for r in self.ranges:
      if r.arg[1] in ("upcast", "unroll"): n *= _size(r)
    return n

  def axis_for(self, opt: Opt) -> UOp:
    kinds = _SPLITS[opt.op]
    axes = self.reduce_axes if kinds == ("reduce",) else self.loop_axes
    if opt.axis is None or not (0 <= opt.axis < len(axes)):
      raise KernelOptError(f"{opt}: axis {opt.axis} does not exist; the kernel has {len(axes)} {kinds[0]} axes")
    return axes[opt.axis]

  # ---- actions ----
  def apply_opt(self, opt: Opt) -> None:
    if opt.op is OptOps.NOLOCALS:
      if any(r.arg[1] in ("local", "group") for r in self.ranges): raise KernelOptError("NOLOCALS after locals")
      self.dont_use_locals = True
      self.applied_opts.append(opt)
      return
    r = self.axis_for(opt)
    n, amt = _size(r), opt.arg if opt.arg else _size(r)
    if amt <= 1 or n % amt != 0: raise KernelOptError(f"{opt}: {amt} does not split an axis of size {n}")
    if opt.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP):
      if self.renderer is None or not self.renderer.has_local or self.dont_use_locals:
        raise KernelOptError(f"{opt}: the renderer has no work-groups")
      if opt.op in (OptOps.GROUP, OptOps.GROUPTOP) and (self.renderer is None or not self.renderer.has_shared):
        raise KernelOptError(f"{opt}: the renderer has no shared memory")
      local_now = 1
      for x in self.ranges:
        if x.arg[1] in ("local", "group"): local_now *= _size(x)
      lmax = (self.renderer.local_max or (1024,))
      if local_now * amt > max(lmax): raise KernelOptError(f"{opt}: work-group of {local_now * amt} is too large")
    if opt.op in (OptOps.UPCAST, OptOps.UNROLL) and self.upcasted * amt > 256:
      raise KernelOptError(f"{opt}: more than 256 upcasted elements")
    self.sink = split_range(self.sink, r, amt, _INNER_KIND[opt.op], top=opt.op is OptOps.GROUPTOP)
    self.applied_opts.append(opt)

def split_range(sink: UOp, r: UOp, amt: int, kind: str, top: bool = False) -> UOp:
  """Replace RANGE r (size n) by outer (n/amt, same kind) and inner (amt, `kind`); with top the inner part is the
  slow-moving one. REDUCEs over r reduce over both parts."""
  n, (axis_id, old_kind) = _size(r), r.arg
  new_id = 1 + max(u.arg[0] for u in sink.toposort() if u.op is Ops.RANGE)
  outer = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, n // amt),), (axis_id, old_kind))
  inner = UOp(Ops.RANGE, dtypes.index, (UOp.const(dtypes.index, amt),), (new_id, kind))
  expr = inner * (n // amt) + outer if top else outer * amt + inner
  # one pass: other uses of r become the index expression; a REDUCE over r reduces over both parts instead
  memo: dict[UOp, UOp] = {r: expr}
  for u in sink.toposort():
    if u is r: continue
    if u.op is Ops.REDUCE and r in u.src[1:]:
      memo[u] = UOp(Ops.REDUCE, u.dtype, (memo.get(u.src[0], u.src[0]), *(x for x in u.src[1:] if x is not r), outer, inner),
                    u.arg)
      continue
    src = tuple(memo.get(x, x) for x in u.src)
    if any(a is not b for a, b in zip(src, u.src)): memo[u] = UOp(u.op, u.dtype, src, u.arg)
  return memo.get(sink, sink)
