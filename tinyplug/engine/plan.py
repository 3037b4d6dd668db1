"""Realize plans: a graph template's output (tensor_ops/template.py) realized again over other buffers of the same
shapes, dtypes, devices and views runs its kernels straight from a plan, without building the graph, scheduling it,
looking up its programs or walking the live tensors.

`x.sum()` or `a @ b` over plain buffers returns a *deferred* tensor (the template and its input UOps; its graph is
built only if something reads `.uop`). Realizing one asks `realize_deferred`: the plan for (template, settings) holds
the compiled programs, where each kernel's buffers come from (an input's buffer or a new output; intermediate outputs
whose lives do not overlap share memory, `_shared`) and how the result is seen (a reshape of an output). The first
realize of a template under some settings runs the usual way and records the plan; a schedule a plan cannot replay
exactly (a copy, bound variables, a kernel writing an input, a result that is not a plain view of a new buffer)
records a refusal, and those realizes stay on the usual path.

What decides a plan's meaning is part of its key or checked per call: the template (the method, its arguments, each
input's shape, dtype, device and gradient flag), the inputs' views (each must look like the template's placeholder,
and no two may share a buffer: the deferral checks both), every ContextVar (through `ContextVar.generation`: any
assignment rechecks them all), the plugin set (the scheduler's and codegen's pipelines). The usual path is taken
instead whenever it does more than run kernels: a TinyJit capture, schedules handed out by Tensor.schedule() and not
yet run, any event listener (the visualizer sees every schedule and rewrite), DEBUG >= 1. And a live tensor whose graph
holds part of the graph sends the realize the usual way too: there its nodes would be pointed at the new buffers."""
from __future__ import annotations
import itertools, weakref
from typing import Any, Callable
import numpy as _np
from tinyplug import events, plugins
from tinyplug.caches import BoundedCache
from tinyplug.backend import HostAllocator, launcher
from tinyplug.device import BUFFER_KEY, Device, handle_of, output_maker
from tinyplug.helpers import REALIZE_PLANS, SCALAR_ARGS, ContextVar, GlobalCounters
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import Ops, UOp, uop_maker
from tinyplug.engine import realize as engine
from tinyplug.schedule import cache as _schedule_cache

# what the tests read: template plans replayed, recorded, refused, deferred outputs realized the usual way; graph plans
# replayed, recorded, refused; parameter plans replayed (by a walk or by a skeleton), recorded, refused; pairs of
# outputs realized by their joint (`pair`)
counters = {"hits": 0, "recorded": 0, "refused": 0, "fallbacks": 0, "graph_hits": 0, "graph_recorded": 0,
            "graph_refused": 0, "param_hits": 0, "param_recorded": 0, "param_refused": 0, "skeleton_hits": 0,
            "lazy_gradient_hits": 0, "joint_hits": 0}

class Plan:
  __slots__ = ("steps", "outs", "result", "make_view", "kernels", "ops", "mem", "held", "direct")
  def __init__(self, steps: list, outs: tuple, result: int | None = None, make_view: Any = None,
               held: tuple = ()):
    # steps: (launch, buffer references, where its values come from, ops, mem) of each kernel that runs at all
    # (backend.launcher); a reference k >= 0 is input k's buffer (a template's) or node k of the graph (a graph
    # plan's), k < 0 new output -k-1; values: None, or the positions of a parameter plan's constants; outs: a maker of
    # each new output buffer with its memory (device.output_maker); a template's result is output `result`, seen
    # through `make_view`; held: buffers the template itself holds (a resize's weights), references k >= the inputs
    self.kernels, self.ops, self.mem = len(steps), sum(s[3] for s in steps), sum(s[4] for s in steps)
    self.steps = tuple(s for s in steps if s[0] is not None)
    self.outs, self.result, self.make_view, self.held = outs, result, make_view, held
    self.direct = _template_runner(self) if result is not None else None

def _step(runner: Any, refs: list[int], vals: tuple | None = None) -> tuple | None:
  """A plan's step for `runner` on the buffers `refs` (None: the kernel takes variables, which only a parameter plan
  binds: `vals`)."""
  spec = runner.spec
  if spec.vars and vals is None: return None
  launch = launcher(runner.prg, spec.global_size, spec.local_size) if 0 not in spec.global_size else None
  return (launch, tuple(refs), vals, spec.estimates.get("ops", 0), spec.estimates.get("mem", 0))

def _outs(outs: Any) -> tuple:
  return tuple(_out_maker(o) if o is not None else None for o in outs)

def _out_maker(out: tuple) -> Any:
  make = output_maker(*out)
  make.out = out   # (device, size, dtype): what _seen_through makes its viewed maker of
  return make

def _seen_through(make: Any, view: Any) -> Any:
  """A plan's output maker `make` with its output seen through `view` (a maker of one node over it; None: as it is):
  fn() -> (that node, the buffer's handle), the view pooled with its buffer (device.output_maker)."""
  return make if view is None else output_maker(*make.out, view=view)

def _shared(steps: list, outs: list[tuple], kept: set[int]) -> tuple[list, list[tuple | None]]:
  """The plan's steps and outputs with the intermediate outputs (all but `kept`) sharing memory where their lives do
  not overlap: an output takes the memory of an earlier intermediate of the same device and byte size whose last
  kernel ran before its first. A chain of kernels then runs over a few buffers that stay in cache instead of a new
  one per kernel (a 1024x1024 sort, one thread: 11 network kernels over 8 MB each, 13.2 -> 10.9 ms: each kernel's
  output was fresh memory, read for ownership from DRAM). `outs` are (device, size, dtype); a shared output's entry
  becomes None and the steps name the memory's owner instead."""
  first: dict[int, int] = {}
  last: dict[int, int] = {}
  for i, step in enumerate(steps):
    for r in step[1]:
      if r < 0: first.setdefault(-r - 1, i); last[-r - 1] = i
  owner = list(range(len(outs)))
  free_at: dict[int, int] = {}   # an owner of shared memory -> the last step that uses any of its outputs
  for k in sorted(first, key=first.__getitem__):
    if k in kept: continue
    dev, size, dtype = outs[k]
    if type(size) is not int: continue
    nbytes = size * dtype.itemsize
    for o, until in free_at.items():
      od, osize, odtype = outs[o]
      if until < first[k] and od == dev and osize * odtype.itemsize == nbytes:
        owner[k] = o
        break
    o = owner[k]
    free_at[o] = max(free_at.get(o, -1), last[k])
  if all(o == k for k, o in enumerate(owner)): return steps, list(outs)
  remap = lambda r: r if r >= 0 else -owner[-r - 1] - 1
  steps = [(s[0], tuple([remap(r) for r in s[1]])) + tuple(s[2:]) for s in steps]
  return steps, [o if owner[k] == k else None for k, o in enumerate(outs)]

def _read_after(becomes: tuple) -> set[int]:
  """The outputs a schedule template's `becomes` recipes name: what the realized nodes are seen through."""
  return {-r - 1 for _, recipe in becomes for r in recipe if type(r) is int and r < 0}

_NOTHING = (None, None)   # the place of an output that shares another's memory

def _run(plan: Plan, handle_of: Any, vals_of: Any = None) -> list[UOp]:
  """Run the plan's kernels on new output buffers and what `handle_of(k)` gives for reference k >= 0; the outputs
  (None for an intermediate that shared another's memory: nothing reads it after the plan).
  A step of a parameter plan also names where its kernel's values come from (`vals_of` of that)."""
  # (one output, the usual plan: no comprehension for it, each is a call of its own)
  made = [make()] if len(outs := plan.outs) == 1 and (make := outs[0]) is not None else \
    [make() if make is not None else _NOTHING for make in outs]
  for launch, refs, vals, _, _ in plan.steps:
    launch([handle_of(r) if r >= 0 else made[-r - 1][1] for r in refs], () if vals is None else vals_of(vals))
  counters = GlobalCounters
  counters.kernel_count += plan.kernels
  counters.global_ops += plan.ops
  counters.global_mem += plan.mem
  return [made[0][0]] if len(made) == 1 else [u for u, _ in made]

# set by tinyplug.tensor (a layer above) when it loads this module: its registry of deferred outputs not built yet
# (tensor id -> weak reference), its function pointing live tensors at realized buffers, and its function telling
# whether a live tensor's graph holds one of some nodes
_deferred_refs: dict = {}
_apply_becomes_map: Any = None
_held_anywhere: Any = None

# (id of the template, settings number) -> (the template, its Plan or None: refused). The entry holds the template, so
# its id is not reused while the entry lives; tinyplug.reset() empties it (with the compiled programs)
_plans: BoundedCache = BoundedCache("engine.realize_plans", 4096)

class _Settings:
  gen = -1                  # ContextVar.generation when `token` was worked out
  manager: Any = None       # the plugin manager then
  token = 0                 # a small number for (every ContextVar's value, the scheduler's and codegen's pipelines)
  numbers: dict[tuple, int] = {}
  counter = itertools.count(1)

def _settings_token() -> int:
  """The number of the settings now (worked out again only after a ContextVar was assigned or the plugins changed)."""
  if ContextVar.generation != _Settings.gen or plugins._manager is not _Settings.manager: _refresh()
  return _Settings.token

def _refresh() -> None:
  from tinyplug.codegen import pipeline_key
  from tinyplug.schedule.passes import schedule_key
  values = tuple([(k, repr(v.value)) for k, v in ContextVar.registry.items()])
  key = (values, pipeline_key(), schedule_key())
  if (n := _Settings.numbers.get(key)) is None:
    if len(_Settings.numbers) > 256: _Settings.numbers.clear(); _plans.clear()
    n = _Settings.numbers[key] = next(_Settings.counter)
  _Settings.gen, _Settings.manager, _Settings.token = ContextVar.generation, plugins._manager, n

def may_defer() -> bool:
  """Whether a template's output may be returned deferred now (not while TinyJit captures or anyone listens)."""
  return engine.capturing is None and not events._subscribers and REALIZE_PLANS.value

def realize_deferred(t: Any, group: tuple = ()) -> bool:
  """Realize the deferred tensor `t` (its `_defer` is (template, input UOps)); False: the caller realizes it the
  usual way (which builds its graph). `group`: tensors realized with it in one call (they hold nothing afterwards
  that the usual way would point at t's buffers)."""
  built, inputs = t._defer
  if not engine.plans_apply():
    counters["fallbacks"] += 1
    return False
  # (over a copy of data just made: the usual way; one input, the usual reduction: no comprehension)
  if inputs[0].op is _COPY if len(inputs) == 1 else any([u.op is _COPY for u in inputs]):
    counters["fallbacks"] += 1
    return False
  key = (id(built), _settings_token())
  if (entry := _plans.get(key)) is None:
    _record(t, built, inputs, key)
    return True
  if (plan := entry[1]) is None:
    counters["fallbacks"] += 1
    return False
  if len(_deferred_refs) > 1:   # (another deferred output may be of t's own graph: _may_share's siblings)
    same: list = []
    if _may_share(t, built, inputs, group, same):
      counters["fallbacks"] += 1
      return False
  elif (alive := built.nodes_alive(inputs)) and _held_anywhere(alive):   # (_may_share's last line: t alone deferred)
    counters["fallbacks"] += 1
    return False
  else: same = ()
  t._uop = u = direct(inputs) if (direct := plan.direct) is not None else _result(plan, inputs)
  t._undefer()
  counters["hits"] += 1
  for o in same:   # t's own graph: t's buffer, as the usual way
    o._uop = u
    o._undefer()
  return True

# Another deferred output over some of the same inputs, realized later the usual way, reads t's buffers where its graph
# holds t's output (which t holds: the usual realize points every graph holding it at the buffer; the other nodes it
# made buffers no tensor holds, and a later realize computes them again) or is a node of t's graph. One of neither
# kind may stay deferred; one of either sends t the usual way (unless it is t's own graph: it takes t's buffer).
# (id of t's template, id of the other's template, where each of its inputs is among t's) -> (the templates, whether
# the other's graph holds t's output or is a node of t's graph)
_holds_output: BoundedCache = BoundedCache("engine.deferred_holds_output", 4096)

def _sibling(built: Any, inputs: list[UOp], other: tuple) -> bool | None:
  """For another deferred output `other` (its template and inputs) over some of t's inputs: True where it is t's own
  graph (the same template over the same inputs), False where its graph neither holds t's output nor is a node of
  t's graph (it may stay deferred), None otherwise, or where it is not a template's (t goes the usual way)."""
  if type(other[0]) is not type(built): return None
  if other[0] is built and all([a is b for a, b in zip(other[1], inputs)]): return True
  where = tuple([next((j for j, u in enumerate(inputs) if u is x), -1) for x in other[1]])
  key = (id(built), id(other[0]), where)
  if (hit := _holds_output.get(key)) is None or hit[0] is not built or hit[1] is not other[0]:
    hit = _holds_output.put(key, (built, other[0], _holds(built, other[0], where)))
  return None if hit[2] else False

def _holds(built: Any, other: Any, where: tuple) -> bool:
  """Whether the graph of template `other` over the inputs `where` says (j: t's input j, -1: one of its own) holds the
  output of `built`'s graph, or is a node of it (sort's values gathered by its indices: the usual realize of the
  values makes the indices' node a buffer, which the indices' tensor then holds); both over `built`'s placeholders
  (interned: a shared node is one object)."""
  holders = [built.holders[j] if j >= 0 else h for j, h in zip(where, other.holders)]
  out = other.nodes_over(holders)[-1]
  return built.order[-1] in out.toposort() or any([u is out for u in built.order])

def _template_runner(plan: Plan) -> Any:
  """fn(inputs) -> the result, for a template plan of one kernel writing its one new output (the result, seen as it
  is or through `make_view`) from inputs' buffers (`x.sum(1)`, `x.logsumexp(1)`): _run without the reference lambda,
  the lists and the generic loop. None for any other plan."""
  if len(plan.steps) != 1 or len(plan.outs) != 1 or plan.held or plan.result != 0 or (make := plan.outs[0]) is None:
    return None
  launch, refs, vals, _, _ = plan.steps[0]
  if vals is not None or refs[0] != -1 or not all(r >= 0 for r in refs[1:]): return None
  kernels, ops, mem, gcounters, view, BUFFER, key = plan.kernels, plan.ops, plan.mem, GlobalCounters, plan.make_view, \
    Ops.BUFFER, BUFFER_KEY
  def input_handle(u: UOp) -> Any:
    b = u if u.op is BUFFER else u.base
    # (handle_of's usual hit, inline: an input's Buffer holds memory)
    if (c := b._cache) is None or (buf := c.get(key)) is None or (h := buf._handle) is None: h = handle_of(b)
    return h
  if len(refs) == 2:   # (one input: the usual reduction)
    (i,) = refs[1:]
    def run_one(inputs: list[UOp]) -> UOp:
      u, h = make()
      b = x if (x := inputs[i]).op is BUFFER else x.base
      if (c := b._cache) is None or (buf := c.get(key)) is None or (hb := buf._handle) is None: hb = handle_of(b)
      launch([h, hb], ())
      gcounters.kernel_count += kernels; gcounters.global_ops += ops; gcounters.global_mem += mem
      return u if view is None else view((u,))
    return run_one
  ins = refs[1:]
  def run(inputs: list[UOp]) -> UOp:
    u, h = make()
    launch([h, *[input_handle(inputs[i]) for i in ins]], ())
    gcounters.kernel_count += kernels; gcounters.global_ops += ops; gcounters.global_mem += mem
    return u if view is None else view((u,))
  return run

def _result(plan: Plan, inputs: list[UOp]) -> UOp:
  """The template plan's result over `inputs`, run now."""
  if (direct := plan.direct) is not None: return direct(inputs)
  ins = inputs if not plan.held else [*inputs, *plan.held]
  out = _run(plan, lambda r: handle_of(ins[r].base))[plan.result]
  return out if plan.make_view is None else plan.make_view((out,))

def realize_together(ts: list, group: tuple) -> None:
  """Realize the deferred template outputs `ts`, all of them in `group` (one Tensor.realize call), each from its plan
  as realize_deferred would alone: the others of the group are realized in this call too, so none of them holds a
  node afterwards that the usual way would point at another's buffer. Those a plan does not take stay deferred (the
  caller realizes them the usual way), as does any that a record's usual realize built on the way. Two outputs paired
  (`pair`) and both in the group are computed by their joint."""
  for t in ts:
    if t._defer is not None and not (_joint and _realize_joint(t, group)): realize_deferred(t, group)

# deferred outputs of one call that one computation makes together for less than each alone (topk's values and
# indices: one network that carries the value with its index): id(output) -> (weak output, weak partner, joint)
_joint: BoundedCache = BoundedCache("engine.joint_outputs", 1024)

def pair(a: Any, b: Any, joint: Callable[[Any, Any], tuple[UOp, UOp] | None]) -> None:
  """When the deferred outputs `a` and `b` are realized in one call, `joint(a, b)` computes both: their realized
  uops (None: each the usual way)."""
  ra, rb = weakref.ref(a), weakref.ref(b)
  _joint.put(id(a), (ra, rb, joint))
  _joint.put(id(b), (rb, ra, lambda y, x: None if (got := joint(x, y)) is None else got[::-1]))

def _realize_joint(t: Any, group: tuple) -> bool:
  if (entry := _joint.get(id(t))) is None or entry[0]() is not t: return False
  if (o := entry[1]()) is None or o._defer is None or not any([o is g for g in group]): return False
  if (got := entry[2](t, o)) is None: return False
  for x, u in zip((t, o), got):
    x._uop = u
    x._undefer()
  counters["joint_hits"] += 1
  return True

def deferred_value(t: Any) -> UOp | None:
  """The value of the deferred tensor `t` as a new buffer (view), computed from its template's plan, `t` left as it is
  (deferred): what numpy() reads, which points no tensor at any buffer; the first time, t's graph is built and realized
  the usual way to record the plan. None: a refused plan, or plans do not apply."""
  built, inputs = t._defer
  if not engine.plans_apply() or any([u.op is _COPY for u in inputs]): return None
  key = (id(built), _settings_token())
  if (entry := _plans.get(key)) is None:
    value = _record(t, built, inputs, key, apply=False)
    # (a view other than a reshape of a buffer: numpy() reads the graph the usual way)
    return value if (b := value.src[0] if value.op is Ops.RESHAPE else value).op is _BUFFER else None
  if (plan := entry[1]) is None: return None
  counters["hits"] += 1
  return _result(plan, inputs)

# ---------------- lazy gradients (gradient_template.py): a gradient realized as it is, its graph never built ----------------
# (id of the recipe, id of its schedule template, settings number) -> (recipe, template, plan, what the plan reads,
# what the realized nodes become) or None: the graph plan reads a node the recipe would make (the usual way then)
_lazy_runs: BoundedCache = BoundedCache("engine.lazy_gradient_runs", 4096)

def realize_lazy_gradient(t: Any, lazy: Any) -> bool:
  """Realize the deferred gradient `t` (`lazy`: its gradient_template.LazyGradient) from the graph plan of its
  schedule, over the forward nodes alone; False: the caller builds its graph and realizes it the usual way (no plan
  yet, or this backward's gradients were built: a live graph may hold the nodes the plan would realize)."""
  if not engine.plans_apply():
    counters["fallbacks"] += 1
    return False
  replay = lazy.replay
  if replay.grads is not None: return False
  # a deferred loss (replay.source): its graph is not built, so the plan's realized nodes beyond its inputs' graphs
  # are nodes nothing holds, unless a live graph holds part of it after all (then the usual way points it at them)
  if (source := replay.source) is not None and _may_share(t, *source): return False
  recipe = replay.recipe
  hint = next((h for h in recipe[2] or () if h[0] == (lazy.step,)), None)
  if hint is None: return False
  _, key, _, where = hint
  token = _settings_token()
  if (template := _sched()._templates.get((key, _sched().schedule_key()))) is None: return False
  if (entry := _graph_plans.get((id(template), token))) is None or (plan := entry[1]) is None: return False
  rkey = (id(recipe), id(template), token)
  if (run := _lazy_runs.get(rkey)) is None or run[0] is not recipe or run[1] is not template or run[2] is not plan:
    run = _lazy_runs.put(rkey, (recipe, template, plan, *(_lazy_reads(template, plan, where, len(recipe[0])) or (None,))))
  if (reads := run[3]) is None: return False
  fwd = replay.nodes
  if max(reads.values(), default=-1) >= len(fwd): return False   # (a deferred loss's own node: not built)
  outs = _run(plan, lambda r: handle_of(fwd[reads[r]]))
  ref = lambda r: fwd[reads[r]] if r >= 0 else outs[-r - 1]
  value, becomes = None, {}
  for p, steps in run[4]:
    if p is not None and p >= len(fwd): continue   # (a deferred loss's own node: nothing holds it)
    v = _cache()._replay(steps, ref)
    if p is None: value = v
    else: becomes[fwd[p]] = v
  t._uop = value
  t._undefer()
  counters["graph_hits"] += 1
  counters["lazy_gradient_hits"] += 1
  if becomes: _apply_becomes_map(becomes)
  return True

def _lazy_reads(template: Any, plan: Plan, where: tuple, n_steps: int) -> tuple | None:
  """(walk position -> forward node index for each node the plan and the becomes recipes read; (forward node index,
  or None for the gradient itself, recipe) of each realized node that is a forward node or the gradient), or None
  when something read is a node only the recipe makes. `where`: each position of the gradient's walk below it, as
  the recipe's hint has it (a step's index, or n_steps + a forward node's index)."""
  root = len(where)
  def forward(r: int) -> int | None:
    return where[r] - n_steps if 0 <= r < root and where[r] >= n_steps else None
  reads: dict[int, int] = {}
  def need(r: int) -> bool:
    if (f := forward(r)) is None: return False
    reads[r] = f
    return True
  for step in plan.steps:
    if not all(need(r) for r in step[1] if r >= 0): return None
  becomes = []
  for p, steps in template.becomes:
    if p != root and forward(p) is None: continue   # a node the recipe makes: nothing holds it, as it is not made
    if not all(need(r) for r in steps if type(r) is int and r >= 0): return None
    becomes.append((None if p == root else forward(p), steps))
  if sum(p is None for p, _ in becomes) != 1: return None
  return reads, tuple(becomes)

# (id of a schedule template, settings number) -> (the template, its Plan or None: refused)
_graph_plans: BoundedCache = BoundedCache("engine.graph_plans", 4096)

def realize_graph(uops: list[UOp]) -> tuple[dict[UOp, UOp] | None, Any]:
  """What realizing `uops` makes of them, computed from a plan when their graph's schedule is a cached template (any
  graph seen before on other buffers: `t = (t + 1).realize()`, an elementwise chain); None: realize them the usual
  way, with the graph's structure (for create_schedule). The engine asks only where the usual path would do nothing
  more (no capture, no listener, DEBUG 0)."""
  cache = _cache()
  token = _settings_token()
  if len(uops) == 1:   # a one-op graph over buffers and constants (`t + 1`): its plan found by its shallow key
    if (shallow := cache.shallow_key(uops[0])) is not None and (hit := _one_op_plans.get((shallow, token))) is not None:
      return _run_one_op(hit, uops[0]), None
    if (skel := _skeleton_of(uops[0], token)) is not None:
      if (becomes := _realize_skeleton(uops[0], *skel)) is not None:
        return (becomes if type(becomes) is dict else {uops[0]: becomes}), None
    template, found = _sched().cached_template(uops, shallow)
  else: shallow, skel, (template, found) = None, None, _sched().cached_template(uops)
  if template is None: return (None if found is None else _realize_params(found, skel)), found
  nodes = found[1]
  key = (id(template), token)
  if (entry := _graph_plans.get(key)) is None:
    entry = _graph_plans.put(key, (template, _graph_plan_of(template, nodes)))
    counters["graph_recorded" if entry[1] is not None else "graph_refused"] += 1
  if (plan := entry[1]) is None: return None, found
  if shallow is not None and (recipe := cache.shallow_recipe(shallow)) is not None:
    out = _sole_output(template, len(recipe))
    served, view = _result_view(template.becomes, len(recipe))
    run_one = _one_op_runner(plan, recipe, view) if served else None
    _one_op_plans.put((shallow, token), (template, plan, recipe, out, run_one))
  if skel is not None: _remember_skeleton(skel, nodes, _graph_plans, key, entry)
  outs = _run(plan, lambda r: handle_of(nodes[r]))
  counters["graph_hits"] += 1
  return template.becomes_over(nodes, outs), found

# (shallow key of a one-op graph, settings number) -> (its schedule template, its graph plan, where its nodes come
# from, the output the op becomes as it is or None, its _one_op_runner or None)
_one_op_plans: BoundedCache = BoundedCache("engine.one_op_plans", 4096)

def _run_one_op(hit: tuple, x: UOp) -> dict[UOp, UOp]:
  """What the one-op graph `x` becomes, run from its _one_op_plans entry `hit`."""
  template, plan, recipe, out, run_one = hit
  counters["graph_hits"] += 1
  if run_one is not None: return {x: run_one(x)}
  nodes = _cache().nodes_of(recipe, x)
  outs = _run(plan, lambda r: handle_of(nodes[r]))
  return {x: outs[out]} if out is not None else template.becomes_over(nodes, outs)

def realize_one_op(x: UOp) -> UOp | dict[UOp, UOp] | None:
  """What realizing the graph of the ALU op (or CONTIGUOUS) `x` makes of it (a UOp: the buffer x becomes as it is, from a one-op
  or direct skeleton runner, with no map made; else the becomes map), run from a plan found without the engine's layers: a
  one-op graph (`t + 1` over realized buffers and constants) by its shallow key, another small graph by its skeleton
  (a new constant's `((x * k) + 1).exp()`); None: no such plan (yet), or plans do not apply now (realize it the usual
  way, which records the plan). Tensor.realize asks this first: for such a graph the engine's layers in between decide
  nothing more (realize_graph's first branch, reached in one call)."""
  if not engine.plans_apply(): return None
  token = _settings_token()
  if x.op is _CONTIGUOUS:   # (`x.pad(...).contiguous()`: no one-op key for it, its skeleton finds its plan)
    return _realize_skeleton(x, *skel) if (skel := _skeleton_of(x, token)) is not None else None
  # the usual tiny op, `t + 1.0` on a buffer: its plan by a flat key first (no shallow key to build, no nested tuple
  # to hash)
  if len(src := x.src) == 2 and (a := src[0]).op is _BUFFER and len(a.src) == 2 and a.src[0].op is _UNIQUE and \
     (cc := (c := src[1])._cache) is not None and cc.get("buffer_free") is True:
    flat = (x.op, id(x.dtype), x.arg, id(a.dtype), a.arg, a.src[1], c, token)
    if (hit := _flat_one_op_plans.get(flat)) is not None:
      if (run_one := hit[4]) is None: return _run_one_op(hit, x)
      counters["graph_hits"] += 1
      return run_one(x)
  else: flat = None
  if (shallow := _schedule_cache.shallow_key(x)) is None:
    # (a miss here costs the usual way nothing: the skeleton stays on the nodes, the shortcuts are looked up again)
    if (skel := _skeleton_of(x, token)) is not None: return _realize_skeleton(x, *skel)
    return None
  if (hit := _one_op_plans.get((shallow, token))) is None: return None
  if flat is not None: _flat_one_op_plans.put(flat, hit)
  if (run_one := hit[4]) is None: return _run_one_op(hit, x)
  counters["graph_hits"] += 1   # (_run_one_op's usual way, without its call)
  return run_one(x)

# A one-op graph of an op over a plain buffer (first) and a constant (second), `t + 1.0`: (op, id of its dtype, arg,
# id of the buffer's dtype, its size, its DEVICE node, the constant's node, settings number) -> its _one_op_plans
# entry. The same facts as its shallow key (a buffer by dtype, size, device and no view; a constant by its node), flat
_flat_one_op_plans: BoundedCache = BoundedCache("engine.flat_one_op_plans", 4096)
_BUFFER, _UNIQUE, _COPY, _CONTIGUOUS = Ops.BUFFER, Ops.UNIQUE, Ops.COPY, Ops.CONTIGUOUS

def _one_op_runner(plan: Plan, recipe: tuple, view: Any = None) -> Any:
  """fn(op) -> the buffer the one-op graph's op becomes, for a plan of one kernel over the op's operands' buffers and
  one new output that the op becomes as it is (`t + 1` on a buffer) or through `view` (its maker: `t + 1` on a 2-D
  buffer, a RESHAPE of the output): _run without the node list, the reference lookups and the lists (the shallow key
  that found the plan fixed which operand is which buffer). None for any other plan."""
  if len(plan.steps) != 1 or len(plan.outs) != 1 or (make := plan.outs[0]) is None: return None
  launch, refs, vals, _, _ = plan.steps[0]
  if vals is not None or refs[0] != -1 or -1 in refs[1:]: return None
  operands = []
  for r in refs[1:]:
    if not (0 <= r < len(recipe)) or type(step := recipe[r]) is not tuple or step[1] != 1: return None
    operands.append(step[0])   # the BUFFER of operand step[0] (the operand itself, or the RESHAPE over it)
  make = _seen_through(make, view)
  kernels, ops, mem, counters, BUFFER = plan.kernels, plan.ops, plan.mem, GlobalCounters, Ops.BUFFER
  if len(operands) == 1:
    (i,) = operands
    def run(x: UOp) -> UOp:
      u, h = make()
      b = s if (s := x.src[i]).op is BUFFER else s.src[0]
      # (handle_of's usual hit, inline: a realized operand's Buffer holds memory)
      if (c := b._cache) is None or (buf := c.get(BUFFER_KEY)) is None or (hb := buf._handle) is None: hb = handle_of(b)
      launch([h, hb], ())
      counters.kernel_count += kernels; counters.global_ops += ops; counters.global_mem += mem
      return u
  elif len(operands) == 2:
    i, j = operands
    def run(x: UOp) -> UOp:
      src = x.src
      u, h = make()
      launch([h, handle_of(a if (a := src[i]).op is BUFFER else a.src[0]),
              handle_of(b if (b := src[j]).op is BUFFER else b.src[0])], ())
      counters.kernel_count += kernels; counters.global_ops += ops; counters.global_mem += mem
      return u
  else: return None
  return run

def _sole_output(template: Any, op_pos: int) -> int | None:
  """k when the one-op graph's op (at `op_pos`) is all that is realized and it becomes new output k as it is
  (`t + 1` on a 1-D buffer): its becomes map then needs no replay."""
  if len(template.becomes) != 1: return None
  p, recipe = template.becomes[0]
  return -recipe[0] - 1 if p == op_pos and len(recipe) == 1 and recipe[0] < 0 else None

def _cache():
  global _cache_mod
  if _cache_mod is None:
    import tinyplug.schedule.cache as mod
    _cache_mod = mod
  return _cache_mod
_cache_mod: Any = None

def _graph_plan_of(template: Any, nodes: list[UOp]) -> Plan | None:
  steps = []
  for ast, refs, _, _, var_vals in template.items:
    if var_vals: return None   # bound variables or scalar arguments
    devices = [nodes[r].device if r >= 0 else template.outs[-r - 1][0] for r in refs]
    if any(r >= 0 and nodes[r].op is not Ops.BUFFER for r in refs) or any(type(d) is not str for d in devices):
      return None
    if ast is None:   # a copy (a tensor just made from data: its host buffer to the device)
      if (step := _copy_step(devices[0], devices[1], refs, template.outs, nodes)) is None: return None
    elif (step := _step(engine.get_runner(devices[0], ast), refs)) is None: return None
    steps.append(step)
  steps, made = _shared(steps, list(template.outs), _read_after(template.becomes))
  return Plan(steps, _outs(made))

def _copy_step(dest: str, src: str, refs: tuple, outs: tuple, nodes: list[UOp]) -> tuple | None:
  """A plan's step copying buffer refs[1] (on `src`) into refs[0] (on `dest`), as run_item copies: the source read
  back to the host, written to the destination."""
  if dest.startswith("DISK:") or src.startswith("DISK:"): return None   # (a file's bytes have paths of their own)
  size, dtype = (nodes[refs[0]].arg, nodes[refs[0]].dtype) if refs[0] >= 0 else outs[-refs[0] - 1][1:]
  if type(size) is not int or not size: return None
  nbytes = size * dtype.itemsize
  dest_alloc, src_dev = Device[dest].allocator, Device[src]
  if isinstance(src_dev.allocator.raw, HostAllocator):
    # host memory (a tensor just made from data) is written to the device as it is: no copy of it on the way
    def copy_from_host(handles: list, vals: tuple) -> None:
      src_dev.synchronize()
      dest_alloc.copyin(handles[0], memoryview(handles[1][:nbytes]))
    return (copy_from_host, tuple(refs), None, 0, nbytes)
  def copy(handles: list, vals: tuple) -> None:
    out = _np.empty(nbytes, _np.uint8)
    src_dev.synchronize()
    src_dev.allocator.copyout(memoryview(out), handles[1])
    dest_alloc.copyin(handles[0], memoryview(out))
  return (copy, tuple(refs), None, 0, nbytes)

def _sched():
  global _sched_mod
  if _sched_mod is None:
    import tinyplug.schedule as mod
    _sched_mod = mod
  return _sched_mod
_sched_mod: Any = None

def _may_share(t: Any, built: Any, inputs: list[UOp], group: tuple = (), same: list | None = None) -> bool:
  """Whether a live tensor may hold a node of the template's graph over `inputs`, which the usual realize would point
  at the new buffers. Every node of the graph holds one of the nodes right over the inputs (`Built.probes`): a few
  lookups find those still alive, and a live tensor holds a node of the graph only if its graph holds one of them
  (found from those nodes upwards, tensor_ops/users.py: unrelated tensors are not looked at). And another deferred
  output using one of the inputs may hold the same nodes once its graph is built (not one of `group`, realized in the
  same call; with `same` given, only one `_sibling` does not let be, and those of t's own graph are added to it)."""
  if len(_deferred_refs) > 1:
    for r in list(_deferred_refs.values()):
      if (o := r()) is not None and o is not t and (d := o._defer) is not None and any([x in inputs for x in d[1]]) \
         and not any([o is g for g in group]):
        if same is None or (own := _sibling(built, inputs, d)) is None: return True
        if own: same.append(o)
  return bool(alive := built.nodes_alive(inputs)) and _held_anywhere(alive)

def _record(t: Any, built: Any, inputs: list[UOp], key: tuple, apply: bool = True) -> UOp:
  """Realize `t` the usual way and keep the plan of what ran (or a refusal); what t's graph became. Without `apply`
  (numpy()), only writes and copies that ran are pointed at: t keeps its graph."""
  uop = t.uop   # builds the graph
  schedule, becomes = engine.realize_schedule([uop], plans=False)
  plan = _plan_of(uop, inputs, schedule, becomes, built.order) if built.probes else None   # (no input: refused)
  _plans.put(key, (built, plan))
  counters["recorded" if plan is not None else "refused"] += 1
  _apply_becomes_map(becomes if apply else {k: v for k, v in becomes.items() if k.op in (Ops.ASSIGN, Ops.COPY)})
  return becomes[uop]

def _plan_of(uop: UOp, inputs: list[UOp], schedule: list, becomes: dict[UOp, UOp], own: tuple) -> Plan | None:
  if uop not in becomes or any(k.op in (Ops.ASSIGN, Ops.COPY) for k in becomes): return None
  # a realized node that depends on no input (a constant computed into a buffer) may be held by anything: the probes
  # over the inputs cannot tell
  if any(k is not uop and not any(x in k.toposort() for x in inputs) for k in becomes): return None
  where = {u.base: k for k, u in enumerate(inputs)}
  graph = uop.toposort()
  outs: dict[UOp, int] = {}
  held: dict[UOp, int] = {}   # buffers of the template's own graph (not over any input): the same every call
  steps = []
  for item in schedule:
    if item.ast.op is not Ops.SINK or item.var_vals: return None
    refs = []
    for b in item.buf_uops:
      if b in where: refs.append(where[b])
      elif b.op is Ops.BUFFER and b not in graph and b.src[0].op is Ops.UNIQUE and type(b.arg) is int:
        refs.append(-outs.setdefault(b, len(outs)) - 1)
      elif b.op is Ops.BUFFER and b in graph and b not in becomes and b in own:
        refs.append(len(inputs) + held.setdefault(b, len(held)))
      else: return None
    if refs[0] >= 0: return None   # it writes an input's buffer
    if (step := _step(engine.get_runner(item.buf_uops[0].device, item.ast), refs)) is None: return None
    steps.append(step)
  value = becomes[uop]
  if value in outs: result, make_view = outs[value], None
  elif value.op is Ops.RESHAPE and value.src[0] in outs:
    result, make_view = outs[value.src[0]], uop_maker(Ops.RESHAPE, value.dtype, value.arg)
  else: return None
  steps, made = _shared(steps, [(b.device, b.arg, b.dtype) for b in outs], {result})
  return Plan(steps, _outs(made), result, make_view, tuple(held))


# ---------------- parameter plans: a graph seen before with other float constants ----------------
# (schedule/scalars.py makes a float32 constant that changed a kernel argument; its schedule template is the one of
# the rewritten graph.) Keyed by the graph's structure with those constants left out and the settings number, a plan
# runs the rewritten graph's kernels straight on this graph's buffers, the values read from the constants: no new
# nodes, no second walk, no schedule items, no program lookup.

class _ParamPlan:
  __slots__ = ("plan", "changed", "baked", "becomes")
  def __init__(self, plan: Plan, changed: tuple, baked: tuple, becomes: Any):
    # changed: positions of the constants passed as values; baked: (position, key) of the float32 constants the
    # kernels hold as they are (the plan serves only graphs with those same values); becomes: a Template over this
    # graph's positions telling what each realized node becomes
    self.plan, self.changed, self.baked, self.becomes = plan, changed, baked, becomes

# (structure with float32 constants masked, settings number) -> _ParamPlan, False (refused) or how many times the
# rewritten graph had no template
_NO_TEMPLATE: Any = object()
_param_plans: BoundedCache = BoundedCache("engine.param_plans", 4096)
_F32_STRUCT, _I32_STRUCT = None, None

def _masked(key: tuple) -> tuple | None:
  """`key` (cache.structure's) with the values of its float32 constants left out, as scalars.py masks it."""
  scalars = _scalars()
  c, f32 = scalars._CONST, scalars._F32
  out, masked = [], False
  for k in key:   # (one pass)
    if k[0] == c and k[1] == f32:
      out.append((c, f32, None, k[3]))
      masked = True
    else: out.append(k)
  return tuple(out) if masked else None

def _bits(value: float) -> int:
  """scalars.float32_bits without numpy for a value float32 can hold (the usual case)."""
  try: return _I32_STRUCT.unpack(_F32_STRUCT.pack(value))[0]
  except (OverflowError, TypeError): return _scalars().float32_bits(value)

# A graph seen before and made anew (a new constant's `((x * k) + 1).exp()`, or the same graph again over new nodes)
# finds its graph or parameter plan by its skeleton (schedule/cache.py), without the structure walk and its key: the
# plan's shortcut knows where in the walk's node list each node it reads would be, all of them leaves of the skeleton
# (buffers, float32 constants) or the target itself. (skeleton number, how its leaves repeat, settings number) -> the
# shortcuts recorded for it, newest first (a graph plan for some constants, a parameter plan for any value of those the
# kernels take as arguments).
_skeleton_plans: BoundedCache = BoundedCache("engine.skeleton_plans", 4096)

class _Shortcut:
  __slots__ = ("cache", "key", "entry", "n_nodes", "fills", "held", "param", "direct")
  def __init__(self, cache: BoundedCache, key: tuple, entry: Any, n_nodes: int, fills: tuple, held: tuple, param: bool):
    # entry: what cache[key] held when this was made (it stands only while it still does); fills: (position, leaf
    # number) of each node the plan reads; held: (position, CONST node) of each constant the kernels hold as it is,
    # checked by identity (nodes are hash-consed: while this holds the node, the same value is the same node);
    # direct: (fn(x, leaves) -> becomes, held as (leaf number, CONST node)) for a plan _direct_runner serves, else None
    self.cache, self.key, self.entry, self.n_nodes, self.fills, self.held, self.param = \
      cache, key, entry, n_nodes, fills, held, param
    self.direct = None

def _result_view(becomes: tuple, target: int) -> tuple[bool, Any]:
  """(True, None) when the target (at position `target`) is all that is realized and becomes new output 0 as it is,
  (True, maker) when it becomes one view over that output (a 2-D result: a RESHAPE of the new buffer; `maker((out,))`
  makes it), (False, None) otherwise: what a runner returning a UOp (no becomes map) may serve."""
  if len(becomes) != 1 or becomes[0][0] != target: return False, None
  recipe = tuple(becomes[0][1])
  if recipe == (-1,): return True, None
  if len(recipe) == 2 and recipe[0] == -1 and type(step := recipe[1]) is tuple and tuple(step[1]) == (0,):
    return True, step[0]
  return False, None

def _direct_runner(plan: Plan, becomes: tuple, target: int, where: dict[int, int]) -> Any:
  """fn(x, leaves) -> the buffer (or the view over it) x becomes (no map: Tensor.realize points the tensor at it),
  for a plan of one kernel with one new output that the target (at position `target`) becomes as it is or through
  one view (a new constant's `((x * k) + 1).exp()`, `x.pad(...).contiguous()` of a 2-D x): _run and becomes_over over
  the skeleton's leaves, without the node list, the reference lambdas and the recipes. `where`: a position's leaf
  number. None for any other plan."""
  if len(plan.steps) != 1 or len(plan.outs) != 1 or (make := plan.outs[0]) is None: return None
  served, view = _result_view(becomes, target)
  if not served: return None
  launch, refs, vals, _, _ = plan.steps[0]
  if refs[0] != -1 or any(r not in where for r in refs[1:]) or any(p not in where for p in vals or ()): return None
  ins = tuple([where[r] for r in refs[1:]])
  make = _seen_through(make, view)
  values = None if vals is None else tuple([where[p] for p in vals])
  kernels, ops, mem, gcounters = plan.kernels, plan.ops, plan.mem, GlobalCounters
  if len(ins) == 1 and values is not None and len(values) == 1:   # (`x * k` and the like: no loop, no comprehension)
    (i,), (v,) = ins, values
    def run_one_value(x: UOp, leaves: tuple) -> UOp:
      u, h = make()
      launch([h, handle_of(leaves[i])], (_bits(leaves[v].arg),))
      gcounters.kernel_count += kernels; gcounters.global_ops += ops; gcounters.global_mem += mem
      return u
    return run_one_value
  if len(ins) == 1 and values is None:   # (`(x + 1) * 2`, `x.T.contiguous()`: one input, constants baked in)
    (i,) = ins
    def run_one(x: UOp, leaves: tuple) -> UOp:
      u, h = make()
      launch([h, handle_of(leaves[i])], ())
      gcounters.kernel_count += kernels; gcounters.global_ops += ops; gcounters.global_mem += mem
      return u
    return run_one
  def run(x: UOp, leaves: tuple) -> UOp:
    u, h = make()
    handles = [h]
    for i in ins: handles.append(handle_of(leaves[i]))
    launch(handles, () if values is None else tuple([_bits(leaves[i].arg) for i in values]))
    gcounters.kernel_count += kernels; gcounters.global_ops += ops; gcounters.global_mem += mem
    return u
  return run

def _skeleton_of(x: UOp, token: int) -> tuple | None:
  """(x's skeleton leaves, its _skeleton_plans key), or None when x's graph has no skeleton."""
  if (skel := _schedule_cache.skeleton(x)) is None: return None
  sid, leaves = skel
  return leaves, (sid, _schedule_cache.repeats(leaves), token)

def _realize_skeleton(x: UOp, leaves: tuple, skey: tuple) -> UOp | dict[UOp, UOp] | None:
  """What realizing x makes, run from a plan its skeleton finds (a UOp: the buffer x becomes as it is, from a direct
  runner; else the becomes map); None: the walk's way."""
  if (shortcuts := _skeleton_plans.get(skey)) is None: return None
  for sc in shortcuts:
    if sc.cache.get(sc.key) is not sc.entry: continue   # (made again since: the walk's way records it anew)
    if (direct := sc.direct) is not None:   # (the same checks and counts, over the leaves themselves)
      run, held = direct
      for i, c in held:
        if leaves[i] is not c: break
      else:
        counters["skeleton_hits"] += 1
        counters["param_hits" if sc.param else "graph_hits"] += 1
        return run(x, leaves)
      continue
    nodes: list[Any] = [None] * sc.n_nodes
    for p, i in sc.fills: nodes[p] = leaves[i]
    for p, c in sc.held:
      if nodes[p] is not c: break   # another value in a constant the kernels hold
    else:
      nodes[-2] = x   # (structure(): the target, then its SINK)
      counters["skeleton_hits"] += 1
      if sc.param: return _run_params(sc.entry, nodes)
      template, plan = sc.entry
      counters["graph_hits"] += 1
      return template.becomes_over(nodes, _run(plan, lambda r: handle_of(nodes[r])))
  return None

def _remember_skeleton(skel: tuple, nodes: list[UOp], cache: BoundedCache, key: tuple, entry: Any) -> None:
  """Keep a shortcut to the plan `entry` (`cache[key]`: a _ParamPlan, or a graph plan's (template, Plan)) for the
  walked graph `nodes`, when every node the plan reads is a leaf of its skeleton."""
  leaves, skey = skel
  where: dict[int, int] = {}
  for i, n in enumerate(leaves): where.setdefault(id(n), i)
  if param := type(entry) is _ParamPlan:
    plan, becomes = entry.plan, entry.becomes.becomes
    held = tuple(i for i, _ in entry.baked)
  else:
    (template, plan), becomes = entry, entry[0].becomes
    # every float32 constant is held as it is: the leaves that are constants
    held = tuple(p for p, n in enumerate(nodes) if n.op is Ops.CONST and id(n) in where)
  needed = {r for step in plan.steps for r in step[1] if r >= 0} | {i for step in plan.steps for i in step[2] or ()} | \
    set(held)
  for p, recipe in becomes:
    needed.add(p)
    needed.update(r for r in recipe if type(r) is int and r >= 0)
  needed.discard(len(nodes) - 2)
  if any(id(nodes[p]) not in where for p in needed): return
  sc = _Shortcut(cache, key, entry, len(nodes), tuple((p, where[id(nodes[p])]) for p in sorted(needed)),
                 tuple((p, nodes[p]) for p in held), param)
  leaf_of = dict(sc.fills)
  # (a held constant that is the target itself, a gradient that folded to one, is no leaf: no direct runner then)
  if all(p in leaf_of for p, _ in sc.held) and \
     (run := _direct_runner(plan, tuple(becomes), len(nodes) - 2, leaf_of)) is not None:
    sc.direct = (run, tuple((leaf_of[p], c) for p, c in sc.held))
  # the newest first; one of each kind (a later graph plan for other constants replaces the earlier one)
  _skeleton_plans.put(skey, (sc,) + tuple(o for o in _skeleton_plans.get(skey, ()) if o.param != param)[:1])

def _realize_params(found: tuple, skel: tuple | None = None) -> dict[UOp, UOp] | None:
  """What realizing the graph `found` (structure key, nodes) makes, run from a parameter plan; None: no plan (yet).
  `skel`: the single target's (leaves, _skeleton_plans key), to remember the plan by."""
  key, nodes = found
  if (masked := _masked(key)) is None: return None
  # (its hash kept: a skeleton's shortcut looks this key up on every run to check its plan still stands)
  pkey = _schedule_cache.kept_key((masked, _settings_token()))
  if (entry := _param_plans.get(pkey)) is None or type(entry) is int:
    if (got := _record_params(key, nodes, masked)) is None: return None
    if got is _NO_TEMPLATE:   # the rewritten graph has no template (yet: the usual path makes it; never: give up)
      _param_plans.put(pkey, False if (entry or 0) >= 2 else (entry or 0) + 1)
      return None
    entry = _param_plans.put(pkey, got)
  if entry is False: return None   # refused
  for i, k in entry.baked:
    if key[i][2] != k:   # another value in a constant these kernels hold: scalars.py may have made it a parameter
      if type(entry := _record_params(key, nodes, masked)) is not _ParamPlan or \
         any(key[j][2] != v for j, v in entry.baked): return None
      _param_plans.put(pkey, entry)
      break
  if skel is not None: _remember_skeleton(skel, nodes, _param_plans, pkey, entry)
  return _run_params(entry, nodes)

def _run_params(entry: _ParamPlan, nodes: list) -> dict[UOp, UOp]:
  """Run a parameter plan over `nodes` (where the plan reads them), its values read from their constants."""
  outs = _run(entry.plan, lambda r: handle_of(nodes[r]),
              lambda positions: tuple([_bits(nodes[i].arg) for i in positions]))
  counters["param_hits"] += 1
  return entry.becomes.becomes_over(nodes, outs)

def _record_params(key: tuple, nodes: list[UOp], masked: tuple) -> Any:
  """The parameter plan of the graph once scalars.py made some of its constants parameters and the rewritten graph
  was scheduled (its template cached); None: not yet (the usual path runs and gets there); _NO_TEMPLATE: the
  rewritten graph has no template; False: refused for good."""
  global _F32_STRUCT, _I32_STRUCT
  scalars, sched = _scalars(), _sched()
  if not SCALAR_ARGS: return False   # (part of the settings number: refused under these settings only)
  if (seen := scalars._seen.get(masked)) is None or not seen[1]: return None
  if (p := scalars.parameterize(key, nodes)) is None: return None
  new_targets, new, _ = p
  found2 = sched.structure(UOp(Ops.SINK, dtypes.void, tuple(new_targets)))
  if found2 is None: return False
  if (template := sched._templates.get((found2[0], sched.schedule_key()))) is None: return _NO_TEMPLATE
  if _F32_STRUCT is None:
    import struct
    _F32_STRUCT, _I32_STRUCT = struct.Struct("<f"), struct.Struct("<i")
  entry = _param_plan_of(key, nodes, new, found2[1], template)
  counters["param_recorded" if entry else "param_refused"] += 1
  return entry

def _param_plan_of(key: tuple, nodes: list[UOp], new: dict, nodes2: list[UOp], template: Any) -> Any:
  scalars = _scalars()
  old_pos = {n: i for i, n in enumerate(nodes)}
  # a node of the rewritten graph -> the position of the node it stands for in this graph
  back = {v: old_pos[k] for k, v in new.items()}
  def same(r: int) -> int | None:   # a reference of the rewritten graph as one of this graph (None: a rewritten node)
    if r < 0: return r
    n = nodes2[r]
    return back[n] if new.get(n) is n else None
  changed = tuple(sorted(i for i, k in enumerate(key) if new[nodes[i]] is not nodes[i]))
  names = {f"scalar{i}": i for i in changed}
  steps = []
  for ast, refs, _, _, var_vals in template.items:
    if ast is None: return False
    refs = tuple([same(r) for r in refs])
    r0 = refs[0]
    if None in refs or any(r >= 0 and nodes[r].op is not Ops.BUFFER for r in refs): return False
    device = nodes[r0].device if r0 >= 0 else template.outs[-r0 - 1][0]
    if type(device) is not str: return False
    runner = engine.get_runner(device, ast)
    spec = runner.spec
    if any(v.arg[0] not in names for v in spec.vars): return False   # another variable: bound per call
    steps.append(_step(runner, refs, tuple([names[v.arg[0]] for v in spec.vars])))
  becomes = []
  for p, recipe in template.becomes:
    if (op := back.get(nodes2[p])) is None: return False
    tr = []
    for step in recipe:
      if type(step) is int:
        if (r := same(step)) is None: return False
        tr.append(r)
      else: tr.append(step)
    becomes.append((op, tuple(tr)))
  c, f32 = scalars._CONST, scalars._F32
  baked = tuple((i, k[2]) for i, k in enumerate(key) if k[0] == c and k[1] == f32 and i not in changed)
  Template = type(template)
  steps, made = _shared(steps, list(template.outs), _read_after(template.becomes))
  return _ParamPlan(Plan(steps, _outs(made)),
                    changed, baked, Template(template.outs, (), tuple(becomes)))

def _scalars():
  global _scalars_mod
  if _scalars_mod is None:
    import tinyplug.schedule.scalars as mod
    _scalars_mod = mod
  return _scalars_mod
_scalars_mod: Any = None
