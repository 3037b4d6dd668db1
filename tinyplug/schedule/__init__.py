"""Kernelize: split a tensor-level graph into kernels (one SINK AST each) and the buffers they read and write.

A node is materialized ("realized") when it is asked for, is CONTIGUOUS, COPY or ASSIGN, or is a reduction whose
result is used by more than elementwise math on the way to one kernel's output. Everything else fuses into the
kernel that consumes it, and movement ops turn into index arithmetic (indexing.py)."""
from __future__ import annotations
import math
from typing import Any
from dataclasses import dataclass, field, replace
from tinyplug import events
from tinyplug.caches import BoundedCache
from tinyplug.device import buffer_of
from tinyplug.helpers import SCALAR_ARGS
from tinyplug.uop.dtype import dtypes, strong_dtype
from tinyplug.uop.ops import Ops, GroupOp, UOp, _canonical_dtype
from tinyplug.schedule.indexing import INT32_MAX, const_index, index_dtype, linear_index, source_index, wide_index
from tinyplug.schedule.cache import _UNSET, MAX_TEMPLATES, Template, kept_key, make_template, structure
from tinyplug.schedule.scalars import parameterize, remember
from tinyplug.schedule.fusion import FusionGraph, fuse_step
from tinyplug.schedule.multi import lift_becomes, lower_multi
from tinyplug.schedule.passes import passes_of, run_pass, schedule_key, tensor_graph_rewrites
from tinyplug.schedule import scatter, simplify_cache, template_cache
from tinyplug.uop.rewrite import graph_rewrite, graph_rewrite_map
from tinyplug.uop.upat import PatternMatcher, UPat
from tinyplug.uop.symbolic import symbolic
from tinyplug.uop.sint import is_symbolic_shape, max_shape, unbind

@dataclass(frozen=True)
class ScheduleItem:
  """One kernel (or copy) to run. `bufs[0]` is written; the rest are read. `ast` is a SINK (or a COPY)."""
  ast: UOp
  buf_uops: tuple[UOp, ...]
  metadata: dict = field(default_factory=dict, compare=False)
  var_vals: dict = field(default_factory=dict, compare=False)   # values of its DEFINE_VARs (scalars.py), by name
  def __repr__(self) -> str:
    from tinyplug.schedule.naming import kernel_name
    what = kernel_name(self.ast) if self.ast.op is Ops.SINK else self.metadata.get("name", "copy")
    return f"<ScheduleItem {what} with {len(self.buf_uops)} buffers>"
  @property
  def bufs(self) -> list: return [buffer_of(b) for b in self.buf_uops]

def _unreshaped(x: UOp) -> UOp:
  while x.op is Ops.RESHAPE or x.op is Ops.DETACH: x = x.src[0]
  return x

def is_contiguous_buffer(x: UOp) -> bool: return _unreshaped(x).op in (Ops.BUFFER, Ops.AFTER)

def buffer_base(x: UOp) -> UOp:
  """The BUFFER under movement ops (and under a kernelized AFTER, or an ASSIGN: it writes its target's buffer)."""
  while x.op in GroupOp.Movement or x.op in (Ops.DETACH, Ops.AFTER, Ops.ASSIGN): x = x.src[0]
  return x

class ScheduleCycle(RuntimeError):
  def __init__(self, assigns: list[UOp]):
    super().__init__("ASSIGNs read each other's old values")
    self.assigns = assigns

class _Scheduler:
  def __init__(self, targets: list[UOp]):
    self.targets = targets
    self.sink = UOp(Ops.SINK, dtypes.void, tuple(targets))
    self.nodes = list(self.sink.toposort())
    # index math in 64 bits when any array here has 2^31 elements or more (int32 offsets would wrap)
    self.wide_index = any(_too_big_for_int32(n) for n in self.nodes)
    self.children: dict[UOp, list[UOp]] = {}
    for n in self.nodes:
      for s in n.src: self.children.setdefault(s, []).append(n)
    self.realized: dict[UOp, None] = {}
    self.out_buffer: dict[UOp, UOp] = {}     # realized node -> the BUFFER uop holding it
    self.items: list[ScheduleItem] = []
    self.becomes: dict[UOp, UOp] = {}

  # ---- deciding what to materialize ----
  def decide(self) -> None:
    must = set()
    for t in self.targets:
      # a reshape of a CONTIGUOUS (realized anyway) is a view of its buffer, not a copy of it
      if not is_contiguous_buffer(t) and _unreshaped(t).op is not Ops.CONTIGUOUS: must.add(t)
    for n in self.nodes:
      if n.op in (Ops.CONTIGUOUS, Ops.ASSIGN): must.add(n)
      elif n.op is Ops.SCATTER_ADD:   # its own kernels; a source with a reduction in it is computed first
        must.add(n)
        must.update(s for s in n.src if not is_contiguous_buffer(s) and scatter.needs_own_kernel(s))
      elif n.op is Ops.COPY:
        must.add(n)
        if not is_contiguous_buffer(n.src[0]): must.add(n.src[0])
      elif n.op is Ops.BITCAST and n.dtype.itemsize != n.src[0].dtype.itemsize:
        raise NotImplementedError("a bitcast that changes the element size is not supported yet; cast instead")
    # reductions, consumers first, so each sees the final decision for what is downstream of it
    by_rule: set[UOp] = set()
    for n in reversed(self.nodes):
      if n.op is Ops.REDUCE_AXIS and n not in must and not self._fuses_into_one_output(n, must): by_rule.add(n)
    must |= by_rule
    # the fusion stage's passes may move some of those reductions into their consumer's kernel (row kernels)
    self.fusion = FusionGraph(self.nodes, self.children, must, set(by_rule))
    self.fusion_passes = (passes_of("fusion") if by_rule else []) + passes_of("materialize")
    for step, fusion_pass in self.fusion_passes:
      self.fusion.current_pass = step.name
      run_pass(step, fusion_pass.fuse, self.fusion)
    self.realized = {n: None for n in self.nodes if n in must}

  def _fuses_into_one_output(self, r: UOp, must: set[UOp]) -> bool:
    return FusionGraph(self.nodes, self.children, must, set()).one_end(r, fuse_step(must)) is not None

  # ---- building kernels ----
  def build(self) -> None:
    self.item_reads: list[set[UOp]] = []   # per item: the realized nodes and plain buffers it reads
    self.item_node: list[UOp] = []
    for n in self.nodes:
      if n not in self.realized: continue
      if n.op is Ops.COPY: self._copy_item(n)
      else: self._kernel_item(n)
    for t in self.targets:   # a target viewing a realized CONTIGUOUS through reshapes views its buffer
      if t not in self.realized and (view := self.becomes.get(_unreshaped(t))) is not None and \
         view.op is Ops.RESHAPE and view.src[0].op is Ops.BUFFER: self.becomes[t] = view.src[0].reshape(t.shape)
    self.items = self._order_items()

  def _order_items(self) -> list[ScheduleItem]:
    """Graph order, plus: a kernel that reads a buffer's old value runs before the ASSIGN that overwrites it."""
    producer = {n: i for i, n in enumerate(self.item_node)}
    after: list[set[int]] = [set() for _ in self.items]    # after[j]: items that must run before j
    for j, reads in enumerate(self.item_reads):
      for x in reads:
        if x in producer and producer[x] != j: after[j].add(producer[x])
    for j in range(1, len(self.items)):   # a SCATTER_ADD's kernels: the zeroing one first
      if self.item_node[j] is self.item_node[j - 1]: after[j].add(j - 1)
    for i, n in enumerate(self.item_node):
      if n.op is not Ops.ASSIGN: continue
      target = buffer_base(n.src[0])
      for j, reads in enumerate(self.item_reads):
        if j != i and target in reads: after[i].add(j)
    order, done = [], set()
    def visit(i: int, stack: list[int]) -> None:
      if i in done: return
      if i in stack:  # each ASSIGN on the loop must read old values another one overwrites
        raise ScheduleCycle([self.item_node[j] for j in stack[stack.index(i):] if self.item_node[j].op is Ops.ASSIGN])
      stack.append(i)
      for d in sorted(after[i]): visit(d, stack)
      stack.pop(); done.add(i); order.append(i)
    for i in range(len(self.items)): visit(i, [])
    self.ordered_nodes = [self.item_node[i] for i in order]   # the realized node of each item, in run order
    return [self.items[i] for i in order]

  def _new_output(self, n: UOp) -> UOp:
    dev = n.device
    if isinstance(dev, tuple): raise NotImplementedError("multi-device tensors are not supported yet")
    return UOp.new_buffer(dev, math.prod(max_shape(n.shape)), n.dtype)

  def _source_buffer(self, x: UOp) -> UOp:
    """The buffer holding x's value: x itself if it is a buffer view, else the realized node's output."""
    if x in self.out_buffer: return self.out_buffer[x]
    return buffer_base(x)

  def _copy_item(self, n: UOp) -> None:
    src = n.src[0]
    src_buf = self._source_buffer(src if src in self.realized else buffer_base(src))
    out = self._new_output(n)
    self.item_node.append(n); self.item_reads.append({src if src in self.realized else buffer_base(src)})
    self.items.append(ScheduleItem(UOp(Ops.COPY, n.dtype, (src_buf, out), arg=n.device), (out, src_buf),
                                   {"name": f"copy {src_buf.device}->{n.device}", "nbytes": out.arg * n.dtype.itemsize}))
    self._finish(n, out)

  def _kernel_item(self, n: UOp) -> None:
    with wide_index(self.wide_index): self._build_kernel_item(n)

  def _build_kernel_item(self, n: UOp) -> None:
    if n.op is Ops.SCATTER_ADD: return self._scatter_items(n)
    kb = _KernelBuilder(self, n)
    if n.op is Ops.ASSIGN:
      target, value = n.src
      out = buffer_base(target)
      g0 = kb.global_for(out)   # the written buffer is always parameter 0
      out_idx, ranges = kb.output_ranges(target.shape)
      store_idx, valid = kb.view_index(target, out_idx)
      val = kb.value(value, out_idx)
    else:
      value = n.src[0] if n.op is Ops.CONTIGUOUS else n
      out = self._new_output(n)
      g0 = kb.global_for(out)
      out_idx, ranges = kb.output_ranges(n.shape)
      store_idx, valid = linear_index(out_idx, max_shape(n.shape)), None
      val = kb.value(value, out_idx, root=value is n)
    index = UOp(Ops.INDEX, out.dtype.ptr(out.arg), (g0, store_idx) + ((valid,) if valid is not None else ()))
    ast = UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (index, val)),), arg=None)
    ast, var_vals = unbind(ast)   # bound variables become kernel arguments: one kernel serves every value
    ast = _simplify_kernel(ast)   # (x+3)+4 is x+7 before any device sees it
    ast, buffers = _drop_unread_buffers(ast, kb.buffers)
    if n.op is Ops.ASSIGN:   # writes after any earlier ASSIGN to the same target
      kb.reads |= {x for x in n.src[0].toposort() if x.op is Ops.ASSIGN and x in self.realized}
    self.item_node.append(n); self.item_reads.append(kb.reads)
    self.items.append(ScheduleItem(ast, buffers, var_vals=var_vals))
    self._finish(n, out if n.op is not Ops.ASSIGN else None)

  def _scatter_items(self, n: UOp) -> None:
    """The kernels of one SCATTER_ADD (scatter.py): its table zeroed, then the indices' rows added in; over a block
    index the second alone."""
    out = self._new_output(n)
    for build in scatter.builders(n):
      kb = _KernelBuilder(self, n)
      ast = build(kb, n, out)
      ast, var_vals = unbind(ast)
      ast, buffers = _drop_unread_buffers(_simplify_kernel(ast), kb.buffers)
      self.item_node.append(n); self.item_reads.append(kb.reads)
      self.items.append(ScheduleItem(ast, buffers, var_vals=var_vals))
    self._finish(n, out)

  def _finish(self, n: UOp, out: UOp | None) -> None:
    if out is None:  # ASSIGN: the target now holds the value
      target = n.src[0]
      self.out_buffer[n] = buffer_base(target)
      # an ASSIGN onto an ASSIGN: the result is the buffer, not the (already realized) inner ASSIGN
      if any(x in self.becomes for x in target.toposort()): target = target.substitute(self.becomes)
      self.becomes[n] = target
      return
    self.out_buffer[n] = out
    if is_symbolic_shape(n.shape):   # laid out with the strides of the largest shape (uop/sint.py)
      big = max_shape(n.shape)
      self.becomes[n] = UOp(Ops.SHRINK, n.dtype, (out.reshape(big),), tuple((0, s) for s in n.shape))
    else: self.becomes[n] = out.reshape(n.shape)

def _drop_unread_buffers(ast: UOp, buffers: list[UOp]) -> tuple[UOp, tuple[UOp, ...]]:
  """The kernel's buffers without those simplification left unread (a read of padding only), parameters renumbered."""
  params = {u.arg: u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}
  if len(params) == len(buffers): return ast, tuple(buffers)
  kept = sorted(params)
  renumber = {params[old]: UOp(Ops.DEFINE_GLOBAL, params[old].dtype, (), new) for new, old in enumerate(kept) if new != old}
  new: dict[UOp, UOp] = {}
  for u in ast.toposort():   # one pass, not a rewrite to a fixed point: renumbered parameters must not be renumbered again
    src = tuple(new[x] for x in u.src)
    new[u] = renumber[u] if u in renumber else u.replace(src=src) if src != u.src else u
  return new[ast], tuple(buffers[i] for i in kept)

def _too_big_for_int32(n: UOp) -> bool:
  """Whether index math over `n` can pass int32: a buffer's offsets, a loop over one of its axes, or (a RESHAPE: the
  only movement op that flattens an index over its whole shape) its element count. A broadcast product that is never
  reshaped (a 4096^3 matmul's `a * b` before the sum) is indexed axis by axis: its loops and offsets stay int32."""
  if n.op is Ops.BUFFER: return n.arg > INT32_MAX
  if n.op in (Ops.SINK, Ops.DEVICE, Ops.UNIQUE) or n.dtype == dtypes.void: return False
  dims = [d for d in n.shape or () if isinstance(d, int)]
  if any(d > INT32_MAX for d in dims): return True
  if n.op is not Ops.RESHAPE: return False
  size = 1
  for d in dims: size *= d
  return size > INT32_MAX

class _KernelBuilder:
  """Builds one kernel's value expression: loads from realized inputs, index math for movement ops."""
  def __init__(self, sched: _Scheduler, root: UOp):
    self.sched, self.root = sched, root
    self.buffers: list[UOp] = []
    self.globals: dict[UOp, UOp] = {}
    self.memo: dict[tuple, UOp] = {}
    self.reads: set[UOp] = set()
    self.next_axis = 0

  def global_for(self, buf: UOp) -> UOp:
    if buf not in self.globals:
      self.globals[buf] = UOp(Ops.DEFINE_GLOBAL, buf.dtype.ptr(buf.arg), arg=len(self.buffers))
      self.buffers.append(buf)
    return self.globals[buf]

  def new_range(self, size, kind: str) -> UOp:
    end = size.cast(index_dtype()) if isinstance(size, UOp) else const_index(size)
    r = UOp(Ops.RANGE, index_dtype(), (end,), (self.next_axis, kind))
    self.next_axis += 1
    return r

  def output_ranges(self, shape: tuple[int, ...]) -> tuple[tuple[UOp, ...], list[UOp]]:
    idx, ranges = [], []
    for s in shape:
      if s == 1: idx.append(const_index(0))
      else: ranges.append(r := self.new_range(s, "loop")); idx.append(r)
    return tuple(idx), ranges

  def view_index(self, x: UOp, idx: tuple[UOp, ...]) -> tuple[UOp, UOp | None]:
    """Linear index into the buffer under the movement ops of x, and the validity mask."""
    valid = None
    while x.op in GroupOp.Movement or x.op in (Ops.DETACH, Ops.ASSIGN):
      if x.op in (Ops.DETACH, Ops.ASSIGN): x = x.src[0]; continue
      idx, v = source_index(x, idx)
      if v is not None: valid = v if valid is None else valid & v
      x = x.src[0]
    return linear_index(idx, x.shape), valid

  def value(self, x: UOp, idx: tuple[UOp, ...], valid: UOp | None = None, root: bool = False) -> UOp:
    key = (x, idx, valid)
    if (hit := self.memo.get(key)) is not None: return hit
    ret = self._value(x, idx, valid, root)
    self.memo[key] = ret
    return ret

  def _value(self, x: UOp, idx: tuple[UOp, ...], valid: UOp | None, root: bool) -> UOp:
    sched = self.sched
    if not root and x.op is Ops.ASSIGN and x in sched.realized and not is_contiguous_buffer(x.src[0]):
      # an ASSIGN through a view (t[1].assign(...)): its value is read back through that view, after it ran
      # (the read is of the written buffer: it orders after the ASSIGN, not before it like a read of the old value)
      self.reads.add(x)
      buf = buffer_base(x.src[0])
      lin, v = self.view_index(x.src[0], idx)
      v = valid if v is None else (v if valid is None else valid & v)
      index = UOp(Ops.INDEX, buf.dtype.ptr(buf.arg), (self.global_for(buf), lin) + ((v,) if v is not None else ()))
      return UOp(Ops.LOAD, x.dtype, (index,) + ((UOp.const(x.dtype, 0),) if v is not None else ()))
    if not root and (x in sched.realized or x.op is Ops.BUFFER or x.op is Ops.AFTER):
      buf = sched._source_buffer(x)
      self.reads.add(x if x in sched.realized else buffer_base(x))
      g = self.global_for(buf)
      lin = linear_index(idx, max_shape(x.shape))
      index = UOp(Ops.INDEX, buf.dtype.ptr(buf.arg), (g, lin) + ((valid,) if valid is not None else ()))
      return UOp(Ops.LOAD, x.dtype, (index,) + ((UOp.const(x.dtype, 0),) if valid is not None else ()))
    op = x.op
    if op is Ops.CONST: return UOp.const(x.dtype, x.arg)
    if op in GroupOp.Movement:
      sidx, v = source_index(x, idx)
      if v is None: return self.value(x.src[0], sidx, valid)
      inner = self.value(x.src[0], sidx, v if valid is None else valid & v)
      return v.where(inner, UOp.const(x.dtype, 0))
    if op is Ops.REDUCE_AXIS:
      reduce_op, axes = x.arg
      src_shape = x.src[0].shape
      sidx, rngs = list(idx), []
      for a in axes:
        if src_shape[a] == 1: sidx[a] = const_index(0)
        else: rngs.append(r := self.new_range(src_shape[a], "reduce")); sidx[a] = r
      inner = self.value(x.src[0], tuple(sidx), valid)
      if not rngs: return inner
      return UOp(Ops.REDUCE, x.dtype, (inner, *rngs), reduce_op)
    if op in (Ops.CONTIGUOUS, Ops.DETACH): return self.value(x.src[0], idx, valid)
    if op in GroupOp.Elementwise:
      return UOp(op, x.dtype, tuple(self.value(s, idx, valid) for s in x.src), x.arg)
    if op is Ops.DEFINE_VAR: return UOp(Ops.DEFINE_VAR, x.dtype, (), x.arg)
    # the value travels with the kernel (create_schedule unbinds it into the item's var_vals)
    if op is Ops.BIND:
      var = UOp(Ops.DEFINE_VAR, x.dtype, (), x.src[0].arg)
      return UOp(Ops.BIND, x.dtype, (var, UOp.const(x.dtype, x.src[1].arg)))
    raise NotImplementedError(f"the scheduler cannot put {op} inside a kernel")

def _expand_after(targets: list[UOp]) -> tuple[list[ScheduleItem], list[UOp]]:
  """Kernels already decided by kernelize() (AFTER nodes) run first, in dependency order."""
  pre: list[ScheduleItem] = []
  seen: set[UOp] = set()
  # one walk from the sink of all targets (create_schedule walked it already: cached), not one per target; it
  # meets the AFTER nodes in the same order as target by target
  for n in UOp(Ops.SINK, dtypes.void, tuple(targets)).toposort():
    if n.op is Ops.AFTER and n not in seen:
      seen.add(n)
      pre.append(n.src[1].arg)
  return pre, list(seen)

def cached_template(targets: list[UOp], shallow: Any = _UNSET) -> tuple[Template | None, tuple | None]:
  """The schedule template create_schedule would use for `targets` (None if there is none) and the graph's structure
  (key, nodes), or None when templates do not cover it (pass it on to create_schedule: it is not worked out again).
  `shallow`: cache.shallow_key of the single target, when the caller has it."""
  found = structure(UOp(Ops.SINK, dtypes.void, tuple(targets)), shallow)
  return (None if found is None else _templates.get((found[0], schedule_key()))), found

UNKNOWN_STRUCTURE: tuple = ("not worked out",)

def create_schedule(targets: list[UOp], found: tuple | None = UNKNOWN_STRUCTURE) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """The kernels that compute `targets`, in execution order, and what each realized node becomes.

  A graph of the same structure as one scheduled before (other buffers, same constants) reuses that schedule
  (cache.py); the rewrites are then not run again, so the visualizer shows them the first time only."""
  sink = UOp(Ops.SINK, dtypes.void, tuple(targets))
  if found is UNKNOWN_STRUCTURE: found = structure(sink)   # (the caller may have worked it out: cached_template)
  tkey = (found[0], schedule_key()) if found is not None else None   # another pass set cuts other kernels
  template = _templates.get(tkey) if tkey is not None else None
  disk_key = template_cache.template_key(found) if tkey is not None and template is None else None
  if disk_key is not None and (template := template_cache.load(disk_key)) is not None:
    _templates.put((kept_key(tkey[0]), tkey[1]), template)   # scheduled by an earlier process
    if SCALAR_ARGS: remember(tkey[0])
  if template is not None:
    items, becomes = template.instantiate(found[1])
    if events.enabled("schedule"):
      events.emit("schedule", {"sink": sink, "items": tuple(items), "scope": events.current_scope() + ("schedule",)})
    return items, becomes
  if found is None and (lowered := lower_multi(targets)) is not None:
    # tensors split over devices: scheduled as the per-device graph they lower to (multi.py)
    flat, renamed = lowered
    items, becomes = create_schedule(flat)
    return items, lift_becomes(renamed, becomes)
  if found is not None and SCALAR_ARGS and (p := parameterize(*found)) is not None:
    # the graph seen before with other float constants: schedule it with those as kernel arguments
    new_targets, new, var_vals = p
    items, becomes = create_schedule(new_targets)
    items = [replace(it, var_vals={**it.var_vals, **var_vals}) if it.ast.op is Ops.SINK else it for it in items]
    return items, {old: becomes[n] for old, n in new.items() if n in becomes}
  with events.scope("schedule", "schedule"), events.profile_span("schedule", f"schedule {len(targets)} outputs"):
    pre, afters = _expand_after(targets)
    s, renamed = _schedule_breaking_cycles(targets)
    if events.enabled("schedule"):  # the visualizer shows the tensor graph, the kernels it was split into and why
      from tinyplug.schedule.explain import explain
      events.emit("schedule", {"sink": s.sink, "items": tuple(pre + s.items), "scope": events.current_scope(),
                               "item_nodes": (None,) * len(pre) + tuple(s.ordered_nodes), "decisions": tuple(explain(s))})
  becomes = {a: a.src[0] for a in afters} | {old: s.becomes[new] for old, new in renamed.items() if new in s.becomes}
  items = pre + s.items
  if found is not None and (template := make_template(found[1], items, becomes)) is not None:
    # under the kept key: a gradient's or a graph template's hint brings the same object
    _templates.put((kept_key(tkey[0]), tkey[1]), template)
    if disk_key is not None: template_cache.store(disk_key, template)
  return items, becomes

_templates: BoundedCache = BoundedCache("schedule.templates", MAX_TEMPLATES)   # graph structure -> its schedule (cache.py)

_simplified: dict[UOp, UOp] = {}
# every node kernel simplification has rewritten -> its final form: kernels share index math, loads and constants
_simplify_memo: BoundedCache = BoundedCache("schedule.simplify_memo", 1 << 16)

def _simplify_kernel(ast: UOp) -> UOp:
  # the same computation on other buffers builds the very same AST (buffers are parameters): simplify it once
  if (hit := _simplified.get(ast)) is not None: return hit
  if len(_simplified) > 4096: _simplified.clear()
  if (key := simplify_cache.simplify_key(ast)) is not None and (ret := simplify_cache.load(key)) is not None:
    _simplified[ast] = ret   # simplified by an earlier process (simplify_cache.py)
    return ret
  if len(_simplify_memo) > _simplify_memo.maxsize: _simplify_memo.clear()   # filled by the rewrite, not by put
  _simplified[ast] = ret = graph_rewrite(ast, symbolic, name="simplify kernel", memo=_simplify_memo)
  if key is not None: simplify_cache.store(key, ret)
  return ret

# a custom gradient rule (gradient.py) is done with once the graph is scheduled: the marker is its value
strip_custom_grads = PatternMatcher([(UPat(Ops.CUSTOM_GRAD, name="m"), lambda m: m.src[0])])

def _strong(x: UOp) -> UOp:
  strong = strong_dtype(x.dtype)
  return x.src[0] if x.op is Ops.CAST and x.src[0].dtype == strong else x.replace(dtype=strong)

# a weak int (a tensor over a bound Variable, uop/dtype.py) is the default int in every kernel
strengthen_weak_ints = PatternMatcher([
  (UPat(dtype=dtypes.weakint, name="x"), _strong),
  (UPat(Ops.CAST, name="x"), lambda x: x.src[0] if x.src[0].dtype == x.dtype else None),
])
_WEAK = _canonical_dtype(dtypes.weakint)

def _schedule_breaking_cycles(targets: list[UOp]) -> tuple[_Scheduler, dict[UOp, UOp]]:
  """Schedule; where ASSIGNs read each other's old values (a.assign(f(b)); b.assign(g(a))), compute their values
  into buffers of their own first, then copy them into place."""
  snapshot: set[UOp] = set()
  sink = UOp(Ops.SINK, dtypes.void, tuple(targets))
  if any(n.op is Ops.CUSTOM_GRAD or n.dtype is _WEAK for n in sink.toposort()):
    renamed = graph_rewrite_map(sink, strip_custom_grads + strengthen_weak_ints, name="custom gradients, weak ints")
  else: renamed = {n: n for n in sink.toposort()}
  if any(n.op is Ops.REDUCE_AXIS for n in sink.toposort()):   # the tensor_graph stage's passes (split huge reductions)
    again = tensor_graph_rewrites(renamed[sink])
    renamed = {old: again.get(new, new) for old, new in renamed.items()}
  targets = [renamed[t] for t in targets]
  for _ in range(8):
    s = _Scheduler(targets)
    s.decide()
    try:
      s.build()
      return s, renamed
    except ScheduleCycle as e:
      snapshot |= set(e.assigns)
    wrap = PatternMatcher([(UPat(Ops.ASSIGN, name="a"), lambda ctx, a: a.replace(src=(a.src[0], UOp(Ops.CONTIGUOUS,
                            a.dtype, (a.src[1],)))) if a in ctx and a.src[1].op is not Ops.CONTIGUOUS else None)])
    sink = UOp(Ops.SINK, dtypes.void, tuple(targets))
    again = graph_rewrite_map(sink, wrap, ctx=snapshot, name="snapshot assigned values")
    renamed = {old: again.get(new, new) for old, new in renamed.items()}
    targets = [again.get(t, t) for t in targets]
  raise RuntimeError("could not order the ASSIGNs of this schedule")

def kernelize(targets: list[UOp]) -> dict[UOp, UOp]:
  """Decide the kernels without running them: each realized node becomes AFTER(its buffer, KERNEL).

  A KERNEL's sources are the buffers it reads, or the AFTER nodes of kernels that must run first."""
  items, becomes = create_schedule(targets)
  after: dict[UOp, UOp] = {}      # output buffer -> AFTER(buffer, KERNEL)
  for it in items:
    out = it.buf_uops[0]
    kernel = UOp(Ops.KERNEL, dtypes.void, tuple(after.get(b, b) for b in it.buf_uops[1:]), it)
    after[out] = UOp(Ops.AFTER, out.dtype, (out, kernel))
  # each realized view rebuilt over its buffer's AFTER (not by substitute: the AFTER holds the buffer, it would loop)
  def over(view: UOp) -> UOp | None:
    if view in after: return after[view]
    if view.op is Ops.MULTI:   # a multi-device tensor: each part over its kernel's AFTER
      parts = [over(p) for p in view.src]
      return None if any(p is None for p in parts) else view.replace(src=tuple(parts))
    if (view.op in GroupOp.Movement or view.op is Ops.DETACH) and (inner := over(view.src[0])) is not None:
      return view.replace(src=(inner,))
    return None
  ret = {}
  for n, view in becomes.items():
    if (v := over(view)) is not None: ret[n] = v
  return ret
