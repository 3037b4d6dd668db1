"""A kernel under optimisation: its axes (RANGEs) and the optimisation actions that split and retype them.

Axes are numbered like tinygrad's: the output ("loop") axes first, then the reduce axes; UNROLL and GROUP count
from the first reduce axis, PADTO counts loop axes then reduce axes. Most actions split one axis of size n into an
outer axis of n/amt and an inner one of amt, and give the inner one a kind: upcast/unroll (expanded into straight-line
code), local/group (GPU work-group), loop (SPLIT: a plain loop, innermost), thread (THREAD: the outermost loop, one
share per CPU thread). SWAP exchanges the places of two loop axes; PADTO rounds an axis up to a multiple of amt and
masks the extra iterations. Loops run in the order of their axis ids, so SWAP, SPLIT and THREAD decide loop order.
TC (first, or after PADTOs only, on a GPU renderer with `tensor_cores`) runs a matmul's reduction on a tensor core
(codegen/tensor_cores.py): its axis picks one of the kernel's (A, B, M, N, K) assignments, its arg the tensor core."""
from __future__ import annotations
from dataclasses import dataclass
from enum import Enum, auto
from tinyplug.uop.dtype import PtrDType, dtypes
from tinyplug.uop.ops import Ops, UOp

class OptOps(Enum):
  UPCAST = auto(); UNROLL = auto(); LOCAL = auto(); GROUP = auto(); GROUPTOP = auto(); THREAD = auto(); NOLOCALS = auto()
  SPLIT = auto(); SWAP = auto(); PADTO = auto(); TC = auto(); STAGE = auto()
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
               OptOps.GROUPTOP: "group", OptOps.THREAD: "thread", OptOps.SPLIT: "loop"}
_SPLITS = {OptOps.UPCAST: ("loop",), OptOps.LOCAL: ("loop",), OptOps.THREAD: ("loop",), OptOps.UNROLL: ("reduce",),
           OptOps.GROUP: ("reduce",), OptOps.GROUPTOP: ("reduce",), OptOps.SPLIT: ("loop",), OptOps.SWAP: ("loop",),
           OptOps.PADTO: ("loop", "reduce")}
MAX_THREADS = 256

def _size(r: UOp) -> int:
  if r.src[0].op is not Ops.CONST:
    raise KernelOptError(f"axis {r.arg[0]} runs to a variable's value: it has no size to split")
  return r.src[0].arg

class Kernel:
  def __init__(self, sink: UOp, renderer=None):
    self.sink, self.renderer = sink, renderer
    self.applied_opts: list[Opt] = []
    self.dont_use_locals = False
    self.staged: int | None = None   # STAGE's arg (tc_staging's STAGE_* bits): built by finished_sink

  def copy(self) -> Kernel:
    k = Kernel(self.sink, self.renderer)
    k.applied_opts, k.dont_use_locals, k.staged = list(self.applied_opts), self.dont_use_locals, self.staged
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

  def axis_for(self, opt: Opt, axis: int | None = None) -> UOp:
    kinds = _SPLITS[opt.op]
    axes = self.reduce_axes if kinds == ("reduce",) else self.loop_axes if kinds == ("loop",) else \
      self.loop_axes + self.reduce_axes
    axis = opt.axis if axis is None else axis
    if not isinstance(axis, int) or not (0 <= axis < len(axes)):
      raise KernelOptError(f"{opt}: axis {axis} does not exist; the kernel has {len(axes)} {' or '.join(kinds)} axes")
    return axes[axis]

  # ---- actions ----
  def apply_opt(self, opt: Opt) -> None:
    if not isinstance(opt.op, OptOps): raise KernelOptError(f"{opt}: not an optimisation action")
    if opt.op is OptOps.NOLOCALS:
      if any(r.arg[1] in ("local", "group", "warp") for r in self.ranges): raise KernelOptError("NOLOCALS after locals")
      self.dont_use_locals = True
    elif opt.op is OptOps.SWAP: self.sink = self._swap(opt)
    elif opt.op is OptOps.PADTO: self.sink = self._padto(opt)
    elif opt.op is OptOps.TC: self.sink = self._tensor_core(opt)
    elif opt.op is OptOps.STAGE: self._stage(opt)
    else: self._split(opt)
    self.applied_opts.append(opt)

  def _swap(self, opt: Opt) -> UOp:
    a, b = self.axis_for(opt), self.axis_for(opt, opt.arg)
    if a is b: raise KernelOptError(f"{opt}: swaps axis {opt.axis} with itself")
    return replace_nodes(self.sink, {a: _with_id(a, b.arg[0]), b: _with_id(b, a.arg[0])})

  def _tensor_core(self, opt: Opt) -> UOp:
    from tinyplug.codegen.tensor_cores import apply_tensor_core, tc_matches
    from tinyplug.helpers import TC
    if not TC: raise KernelOptError(f"{opt}: tensor cores are off (TC=0)")
    cores = tuple(self.renderer.tensor_cores) if self.renderer is not None else ()
    if not cores or not self.renderer.uses_work_groups: raise KernelOptError(f"{opt}: the renderer has no tensor cores")
    if any(o.op is not OptOps.PADTO for o in self.applied_opts) or \
       any(r.arg[1] not in ("loop", "reduce") for r in self.ranges):
      raise KernelOptError(f"{opt}: TC must be the first action (after PADTOs)")
    if not isinstance(opt.arg, int) or not 0 <= opt.arg < len(cores):
      raise KernelOptError(f"{opt}: tensor core {opt.arg} does not exist; the renderer has {len(cores)}")
    tc = cores[opt.arg]
    if tc.threads > max(self.renderer.local_max or (1024,)): raise KernelOptError(f"{opt}: work-groups are too small")
    matches = tc_matches(self.sink, tc)
    if not isinstance(opt.axis, int) or not 0 <= opt.axis < len(matches):
      raise KernelOptError(f"{opt}: the kernel has {len(matches)} way(s) to run on {tc.name}")
    return apply_tensor_core(self.sink, tc, matches[opt.axis])

  def _stage(self, opt: Opt) -> None:
    from tinyplug.codegen.tensor_cores import has_warp
    if self.staged is not None: raise KernelOptError(f"{opt}: the operands are staged already")
    from tinyplug.codegen.tc_staging import STAGE_ARGS
    if opt.arg is not None and opt.arg not in range(STAGE_ARGS):
      raise KernelOptError(f"{opt}: arg is 0 (stage) to {STAGE_ARGS - 1}: the sum of 1 (prefetch the next K step), "
                           "2 (fill B with 16-byte loads), 4 (fill A so), 8 (pad the shared tiles); or 16 (row-major swizzled tiles "
                           "filled by cp.async, read by ldmatrix) + 32 * (stages - 2) (2 to 5 stages) + 128 (no swizzle) + 256 "
                           "(work-groups in grouped order) + 512 * (work-groups per multiprocessor, 1 to 3) + 2048 (bit 16's tiles read by "
                           "descriptors: a descriptor tensor core's, Hopper's wgmma)")
    if not has_warp(self.sink): raise KernelOptError(f"{opt}: stages a tensor core's operands; apply TC first")
    if self.renderer is None or not self.renderer.has_shared or self.dont_use_locals:
      raise KernelOptError(f"{opt}: the renderer has no shared memory")
    self.staged = opt.arg or 0

  def finished_sink(self) -> UOp:
    """The kernel once every action is applied: STAGE's shared-memory staging is built last (codegen/tc_staging.py),
    when the tile it copies is final."""
    if self.staged is None: return self.sink
    from tinyplug.codegen.tc_staging import StagingError, stage_operands
    try: return stage_operands(self.sink, self.renderer, arg=self.staged)
    except StagingError as e: raise KernelOptError(f"{Opt(OptOps.STAGE, None, self.staged)}: {e}") from None

  def _padto(self, opt: Opt) -> UOp:
    r = self.axis_for(opt)
    n, amt = _size(r), opt.arg
    if not isinstance(amt, int) or amt <= 1: raise KernelOptError(f"{opt}: pads to a multiple of {amt}; need an int >= 2")
    padded = -(-n // amt) * amt
    if padded == n: raise KernelOptError(f"{opt}: axis of size {n} is already a multiple of {amt}")
    if padded > 2 * n: raise KernelOptError(f"{opt}: padding {n} to {padded} more than doubles the work")
    if any(u.op is Ops.STORE and u.src[0].src[0].op is not Ops.DEFINE_GLOBAL for u in self.sink.toposort()):
      raise KernelOptError(f"{opt}: the kernel stores to non-global memory")
    return pad_range(self.sink, r, padded)

  def _split(self, opt: Opt) -> None:
    r = self.axis_for(opt)
    n, amt = _size(r), opt.arg if opt.arg else _size(r)
    if amt <= 1 or n % amt != 0: raise KernelOptError(f"{opt}: {amt} does not split an axis of size {n}")
    if opt.op in (OptOps.LOCAL, OptOps.GROUP, OptOps.GROUPTOP):
      if self.renderer is None or not self.renderer.has_local or self.dont_use_locals:
        raise KernelOptError(f"{opt}: the renderer has no work-groups")
      if opt.op in (OptOps.GROUP, OptOps.GROUPTOP) and (self.renderer is None or not self.renderer.has_shared):
        raise KernelOptError(f"{opt}: the renderer has no shared memory")
      if opt.op in (OptOps.GROUP, OptOps.GROUPTOP) and any(x.arg[1] == "warp" for x in self.ranges):
        raise KernelOptError(f"{opt}: a grouped reduction does not combine with tensor cores")
      local_now = 1
      for x in self.ranges:
        if x.arg[1] in ("local", "group", "warp"): local_now *= _size(x)
      lmax = (self.renderer.local_max or (1024,))
      if local_now * amt > max(lmax): raise KernelOptError(f"{opt}: work-group of {local_now * amt} is too large")
    if opt.op in (OptOps.UPCAST, OptOps.UNROLL) and self.upcasted * amt > 256:
      raise KernelOptError(f"{opt}: more than 256 upcasted elements")
    if opt.op is OptOps.THREAD: self._check_thread(opt, amt)
    if opt.op is OptOps.SPLIT and amt == n: raise KernelOptError(f"{opt}: splits off the whole axis of size {n}")
    top = opt.op in (OptOps.GROUPTOP, OptOps.THREAD)   # a thread takes one contiguous share of the axis
    # the thread axis gets the smallest id: it becomes the outermost loop, the one the runtime splits across threads
    inner_id = min(x.arg[0] for x in self.ranges) - 1 if opt.op is OptOps.THREAD else None
    self.sink = split_range(self.sink, r, amt, _INNER_KIND[opt.op], top=top, inner_id=inner_id)

  def _check_thread(self, opt: Opt, amt: int) -> None:
    if self.renderer is not None and self.renderer.uses_work_groups:
      raise KernelOptError(f"{opt}: the renderer launches work-groups; THREAD is for loop-running (CPU) renderers")
    if any(x.arg[1] == "thread" for x in self.ranges): raise KernelOptError(f"{opt}: the kernel already has a THREAD axis")
    if amt > MAX_THREADS: raise KernelOptError(f"{opt}: {amt} threads is more than {MAX_THREADS}")

def replace_nodes(sink: UOp, mapping: dict[UOp, UOp]) -> UOp:
  """`sink` with each key of `mapping` replaced by its value, in one pass: a value is never replaced again, so two
  RANGEs can trade places."""
  memo = dict(mapping)
  for u in sink.toposort():
    if u in memo: continue
    src = tuple(memo.get(x, x) for x in u.src)
    if any(a is not b for a, b in zip(src, u.src)): memo[u] = UOp(u.op, u.dtype, src, u.arg)
  return memo.get(sink, sink)

def _with_id(r: UOp, axis_id: int) -> UOp: return UOp(Ops.RANGE, r.dtype, r.src, (axis_id, r.arg[1]))

def pad_range(sink: UOp, r: UOp, padded: int) -> UOp:
  """Let RANGE r (size n) run to `padded`. Global loads and stores that depend on it are gated by `r < n`, and a
  REDUCE over it adds its identity for the extra iterations, so every result stays exact."""
  from tinyplug.codegen.linearize import reduce_identity
  n = _size(r)
  new = UOp(Ops.RANGE, r.dtype, (UOp.const(r.dtype, padded),), r.arg)
  valid = UOp(Ops.CMPLT, dtypes.bool, (new, UOp.const(r.dtype, n)))
  memo: dict[UOp, UOp] = {r: new}
  uses_r = {r}
  nodes = sink.toposort()
  stored = {u.src[0] for u in nodes if u.op is Ops.STORE}
  loose_ok = r.arg[1] != "reduce" and not any(_may_trap(u) for u in nodes)
  for u in nodes:
    if u is r: continue
    if any(x in uses_r for x in u.src): uses_r.add(u)
    src = tuple(memo.get(x, x) for x in u.src)
    if u.op is Ops.INDEX and u.src[0].op is Ops.DEFINE_GLOBAL and u in uses_r:
      if loose_ok and u not in stored and _reads_inside(src):   # ungated: only its own padded outputs read it
        if src != u.src: memo[u] = UOp(Ops.INDEX, u.dtype, src, u.arg)
      else:
        gate = valid if len(src) < 3 else UOp(Ops.AND, dtypes.bool, (src[2], valid))
        memo[u] = UOp(Ops.INDEX, u.dtype, (*src[:2], gate), u.arg)
    elif u.op is Ops.REDUCE and r in u.src[1:]:
      identity = UOp.const(u.dtype, reduce_identity(u.arg, u.dtype))
      memo[u] = UOp(Ops.REDUCE, u.dtype, (UOp(Ops.WHERE, u.dtype, (valid, src[0], identity)), *src[1:]), u.arg)
    elif u.op is Ops.LOAD and len(src) == 1 and src[0] is not u.src[0] and len(src[0].src) > 2:
      memo[u] = UOp(Ops.LOAD, u.dtype, (src[0], UOp.const(u.dtype, 0)), u.arg)   # a masked load reads 0
    elif any(a is not b for a, b in zip(src, u.src)): memo[u] = UOp(u.op, u.dtype, src, u.arg)
  return memo.get(sink, sink)

def _may_trap(u: UOp) -> bool:
  """An integer division or remainder by a computed value (a padded iteration's values could make it divide by 0)."""
  return u.op in (Ops.IDIV, Ops.MOD) and u.src[1].op is not Ops.CONST

def _reads_inside(src: tuple[UOp, ...]) -> bool:
  """Whether an ungated float load at INDEX(buffer, idx[, gate]) stays inside its buffer for every value of its
  ranges: a padded output axis then reads what lies there (a padded panel's spare columns) and only the store is
  gated; its values reach no other output."""
  buf, idx = src[0], src[1]
  if len(src) > 2 or not isinstance(buf.dtype, PtrDType) or not dtypes.is_float(buf.dtype.base): return False
  lo, hi = idx.vmin, idx.vmax
  return isinstance(lo, int) and isinstance(hi, int) and 0 <= lo and hi < buf.dtype.size

def split_range(sink: UOp, r: UOp, amt: int, kind: str, top: bool = False, inner_id: int | None = None) -> UOp:
  """Replace RANGE r (size n) by outer (n/amt, same kind) and inner (amt, `kind`); with top the inner part is the
  slow-moving one. REDUCEs over r reduce over both parts. The inner part gets `inner_id`, else a new largest id."""
  n, (axis_id, old_kind) = _size(r), r.arg
  new_id = 1 + max(u.arg[0] for u in sink.toposort() if u.op is Ops.RANGE) if inner_id is None else inner_id
  outer = UOp(Ops.RANGE, r.dtype, (UOp.const(r.dtype, n // amt),), (axis_id, old_kind))   # int32, or int64 when wide
  inner = UOp(Ops.RANGE, r.dtype, (UOp.const(r.dtype, amt),), (new_id, kind))
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
