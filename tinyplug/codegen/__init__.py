"""Codegen: a kernel AST becomes a linear program through named stages; plugin passes slot in between them."""
from __future__ import annotations
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable
from tinyplug import events
from tinyplug.helpers import CACHELEVEL, CHECK_OOB, NOOPT, SPEC
from tinyplug.backend import ProgramSpec, Renderer, loop_work, shareable_loop
from tinyplug.plugins import get_plugin_manager
from tinyplug.uop.ops import Ops, GroupOp, UOp
from tinyplug.uop.rewrite import graph_rewrite
from tinyplug.uop.upat import PatternMatcher
from tinyplug.hookspecs.passes import CORE_STAGES, SCHEDULE_STAGES, PipelineStep, order_passes, passes_for, \
  pipeline_fingerprint
from tinyplug.codegen.linearize import linearize
from tinyplug.codegen.gpudims import add_gpudims
from tinyplug.schedule.naming import kernel_name

@dataclass
class KernelContext:
  """What the stages of one kernel's lowering share."""
  renderer: Renderer
  name: str = ""
  global_size: tuple[int, ...] = (1, 1, 1)
  local_size: tuple[int, ...] | None = None
  applied_opts: list = field(default_factory=list)
  # the optimisation actions for this kernel once decided: the engine's (BEAM), none (NOOPT=1), or those a heuristic
  # pass picked; None while undecided, which is what a heuristic pass looks for
  opts: Any = None

  def apply_opts(self, sink: UOp, opts: Any) -> UOp:
    """Apply optimisation actions to the kernel graph and record them as this kernel's decided actions (a heuristic
    pass calls this with the actions it picked). Raises KernelOptError for an action that does not apply."""
    from tinyplug.codegen.kernel import Kernel
    k = Kernel(sink, self.renderer)
    for o in opts: k.apply_opt(o)
    self.opts, self.applied_opts = list(opts), list(k.applied_opts)
    return k.finished_sink()

def _opt(sink: UOp, ctx: KernelContext, stage: str) -> UOp:
  # explicit actions (the engine's, from a search) are applied; NOOPT=1 decides "none"; otherwise the actions stay
  # undecided for a heuristic pass of this stage (the `heuristic` pass set, or a third party's)
  if ctx.opts is None and NOOPT: ctx.opts = []
  return ctx.apply_opts(sink, ctx.opts) if ctx.opts is not None else sink

def _expand(sink: UOp, ctx: KernelContext, stage: str) -> UOp:
  from tinyplug.codegen.expander import expand
  return expand(sink)

def _dtypes(sink: UOp, ctx: KernelContext, stage: str) -> UOp:
  from tinyplug.codegen.emulated_dtypes import lower_emulated_dtypes
  return lower_emulated_dtypes(sink, ctx.renderer)

def _gpudims(sink: UOp, ctx: KernelContext, stage: str) -> UOp:
  if ctx.renderer.runs_loops: return sink
  from tinyplug.codegen.gpu_lowering import lower_group_reduces
  sink = lower_group_reduces(sink, ctx.renderer)
  sink, ctx.global_size, ctx.local_size = add_gpudims(sink, ctx.renderer.global_max)
  return sink

def _decompositions(sink: UOp, ctx: KernelContext, stage: str) -> UOp:
  from tinyplug.codegen.decompositions import decompose_for
  return decompose_for(sink, ctx.renderer)

def _final(sink: UOp, ctx: KernelContext, stage: str) -> UOp:
  extra = ctx.renderer.extra_matcher
  return graph_rewrite(sink, extra, ctx=ctx, name=stage) if extra is not None else sink

def _unchanged(sink: UOp, ctx: KernelContext, stage: str) -> UOp: return sink

def _linearize(sink: UOp, ctx: KernelContext, stage: str) -> list[UOp]:
  return linearize(sink, ctx.renderer.match_scan_lanes)

# The pipeline, in order: each core stage id (the public ids of `tinyplug.hookspecs.passes.CORE_STAGES`, which say what
# each does) and what the core runs for it: what correct code needs, nothing more. What makes code faster or smaller
# comes from pass-set plugins placed among these stages by `order_passes` (the first-party ones: `simplify` in the
# symbolic stages, `heuristic` in opt, `vectorize` in devectorize; docs/architecture.md §3).
STAGES: tuple[tuple[str, Callable[[UOp, KernelContext, str], Any]], ...] = (
  ("early", _unchanged),               # the AST as scheduled: an anchor for plugin passes, no core rules
  ("symbolic_initial", _unchanged),    # an anchor: simplification is a pass set (`simplify`)
  ("opt", _opt),                       # explicit actions (BEAM) or none (NOOPT); a heuristic pass decides the rest
  ("expand", _expand),
  ("dtypes", _dtypes),                 # core: float dtypes the renderer lacks (fp8, ...) as bits in memory, float32 math
  ("symbolic_postopt", _unchanged),    # an anchor (`simplify`)
  ("gpudims", _gpudims),
  ("devectorize", _unchanged),         # an anchor: vector UOps are a pass set (`vectorize`); scalars are correct
  ("decompositions", _decompositions), # core: a renderer gets what it lacks from here, whatever pass sets are on
  ("symbolic_final", _unchanged),      # an anchor (`simplify`)
  ("final", _final),
  ("linearize", _linearize),           # the graph becomes the linear program (a list); later passes get the list
)
_STAGE_FN = dict(STAGES)
if tuple(_STAGE_FN) != CORE_STAGES: raise ImportError("codegen STAGES and hookspecs.passes.CORE_STAGES disagree")

def pipeline_steps(renderer: Renderer | None = None) -> tuple[PipelineStep, ...]:
  """The ordered core stages and plugin passes of the loaded plugin set (`reset_plugins()` gives a new set, and so
  a new pipeline). The renderer is not part of it: a pass's `when` decides per renderer as it runs."""
  from tinyplug.plugins import get_plugin_manager
  pm = get_plugin_manager()
  if (steps := pm.derived.get("codegen.pipeline")) is None:
    scheduler_passes = {spec.name for spec, _ in passes_for(SCHEDULE_STAGES, pm.passes)}   # tinyplug.schedule runs those
    steps = pm.derived["codegen.pipeline"] = tuple(order_passes(CORE_STAGES, [p for p in pm.passes.values()
                                                                              if p[0].name not in scheduler_passes]))
  return steps

def pipeline_key() -> str:
  """The fingerprint of the loaded plugin set's ordered pipeline (every step's id, plugin and version), computed once
  per plugin set: part of every compiled-program and search cache key (asked once per realized kernel: kept cheap)."""
  pm = get_plugin_manager()
  if (key := pm.derived.get("codegen.fingerprint")) is None:
    key = pm.derived["codegen.fingerprint"] = pipeline_fingerprint(pipeline_steps())
  return key

def heuristic_actions(sink: UOp, renderer: Renderer) -> list:
  """The actions the active heuristic pass(es) pick for `sink`, the graph the "opt" stage sees (a search starts from
  them): the opt stage with nothing decided and the passes placed after it, until expand. [] when no pass decides."""
  ctx = KernelContext(renderer)
  run_pipeline(sink, renderer, ctx, start="opt", until="expand")
  return list(ctx.applied_opts)

def _plugin_rewrite(step: PipelineStep) -> Any:
  """A pass's `rewrite` factory, called once per plugin set: a PatternMatcher or a function."""
  from tinyplug.plugins import get_plugin_manager
  pm = get_plugin_manager()
  key = f"codegen.pass.{step.name}"
  if key not in pm.derived:
    rewrite = pm.load_factory(step.spec.rewrite)()
    if isinstance(rewrite, PatternMatcher):
      for row in rewrite.rows: row.owner = step.plugin   # matches are credited to the pass's plugin
    elif not callable(rewrite):
      raise TypeError(f"pass {step.name!r} (plugin {step.plugin!r}): rewrite factory returned {type(rewrite).__name__}, "
                      "not a PatternMatcher or a function")
    pm.derived[key] = (rewrite, _takes_ctx(rewrite))
  return pm.derived[key]

def _takes_ctx(fn: Any) -> bool:
  """Whether a function pass takes (graph, ctx); one taking only the graph is called with it alone."""
  if isinstance(fn, PatternMatcher): return False
  try: inspect.signature(fn).bind(None, None)
  except TypeError: return False
  except ValueError: return True
  return True

class PassPlacementError(ValueError):
  """A plugin pass whose kind does not fit where it is anchored (a PatternMatcher after linearize)."""

def _run_plugin_pass(step: PipelineStep, x: Any, ctx: KernelContext, linear: bool) -> Any:
  """A plugin pass on the kernel graph, or (after linearize) on the linear program, a list of UOps."""
  from tinyplug.plugins import PluginPassError
  try: return _apply_plugin_pass(step, x, ctx, linear)
  except PassPlacementError: raise   # the pipeline refusing the pass, not the pass failing
  except Exception as e:   # name the pass and its plugin: otherwise every realize fails with an anonymous error
    raise PluginPassError(f"pass {step.name!r} of plugin {step.plugin!r} raised {type(e).__name__}: {e}; "
                          f"turn the plugin off with TINY_PLUGINS=-{step.plugin}") from e

def _apply_plugin_pass(step: PipelineStep, x: Any, ctx: KernelContext, linear: bool) -> Any:
  from tinyplug.plugins import get_plugin_manager
  spec = step.spec
  if spec.when is not None and not get_plugin_manager().load_factory(spec.when)(ctx.renderer): return x
  rewrite, takes_ctx = _plugin_rewrite(step)
  if linear:
    if isinstance(rewrite, PatternMatcher):
      raise PassPlacementError(f"pass {step.name!r} (plugin {step.plugin!r}) runs after linearize, on the linear program: its "
                       "rewrite must be a function (uops, ctx) -> uops, not a PatternMatcher; anchor it before linearize")
    out = rewrite(list(x), ctx) if takes_ctx else rewrite(list(x))
    if not isinstance(out, list) or not all(isinstance(u, UOp) for u in out):
      raise TypeError(f"pass {step.name!r} (plugin {step.plugin!r}) after linearize must return a list of UOps")
    return out
  if isinstance(rewrite, PatternMatcher):
    return graph_rewrite(x, rewrite, ctx=ctx, bottom_up=spec.bottom_up, name=step.name)
  return rewrite(x, ctx) if takes_ctx else rewrite(x)

def run_pipeline(ast: UOp, renderer: Renderer, ctx: KernelContext, until: str | None = None,
                 start: str | None = None) -> Any:
  """Every step in order (or those from stage `start` on, before stage `until`): the linear program, or the graph
  `until` sees."""
  x: Any = ast
  linear = False
  check = int(SPEC.value)
  steps = pipeline_steps(renderer)
  if start is not None: steps = steps[[s.name for s in steps].index(start):]
  for step in steps:
    if step.name == until: break
    with events.scope("pass", step.name):
      if step.is_core: x = _STAGE_FN[step.name](x, ctx, step.name)
      else: x = _run_plugin_pass(step, x, ctx, linear)
      if step.name == "linearize": x = _keep_parameters(ast, x)
    linear = linear or step.name == "linearize"
    if check and (step.is_core or check >= 2):
      from tinyplug.codegen.spec import verify
      verify(x, step.name if step.is_core else f"plugin pass {step.name} ({step.plugin})")
  return x

def _keep_parameters(ast: UOp, uops: list[UOp]) -> list[UOp]:
  """Every buffer of the kernel stays a parameter, in order, even when simplification removed its only use (a fully
  padded read): runtimes pass one pointer per buffer of the schedule item, so a missing one would shift the rest."""
  params = {u.arg: u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}
  present = {u.arg: u for u in uops if u.op is Ops.DEFINE_GLOBAL}
  if present.keys() >= params.keys(): return uops
  ordered = [present.get(i, params[i]) for i in sorted(params.keys() | present.keys())]
  return ordered + [u for u in uops if u.op is not Ops.DEFINE_GLOBAL]

def full_rewrite_to_sink(ast: UOp, renderer: Renderer | None = None, ctx: KernelContext | None = None) -> UOp:
  """Every stage before linearize: the lowered kernel graph (useful to inspect)."""
  if renderer is None:
    from tinyplug.device import Device
    renderer = Device[Device.DEFAULT].renderer
  return run_pipeline(ast, renderer, ctx or KernelContext(renderer), until="linearize")

def _disk_cache_on() -> bool:
  """Whether lowerings are read from and stored on disk (not without a disk cache, under SPEC checks, or while a
  rewrite recorder watches)."""
  return CACHELEVEL >= 1 and not SPEC and not events.enabled("rewrite")

def _program_key(name: str, ast: UOp, renderer: Renderer, opts: Any) -> str | None:
  """The disk-cache key of this lowering, or None when it must run (no disk cache, SPEC checks, a rewrite recorder)."""
  if not _disk_cache_on(): return None
  from tinyplug.codegen.program_cache import program_key
  return program_key(name, ast, renderer, opts, pipeline_steps(renderer))

def cached_programs(asts: list[UOp], renderer: Renderer) -> dict[UOp, ProgramSpec]:
  """get_program of each of `asts` (no explicit actions) that the disk cache holds, read in one query, with the key's
  shared part worked out once: {ast: program} of those found. What is missing is left for get_program to lower."""
  if not asts or not _disk_cache_on(): return {}
  from tinyplug.codegen import program_cache
  steps = pipeline_steps(renderer)
  context = program_cache.key_context(renderer, steps)
  keys = {program_cache.program_key(kernel_name(a), a, renderer, None, steps, context): a for a in asts}
  found = {}
  for key, spec in program_cache.load_many(list(keys)).items(): found[keys[key]] = _read_back(spec, keys[key], renderer)
  return found

def _read_back(spec: ProgramSpec, ast: UOp, renderer: Renderer) -> ProgramSpec:
  """A program read from the disk cache, checked (CHECK_OOB) and announced as a lowering is."""
  if CHECK_OOB: check_in_bounds(spec.name, spec.uops)
  announce_kernel(spec, ast, renderer.device)
  return spec

def get_program(ast: UOp, renderer: Renderer, opts: Any = None) -> ProgramSpec:
  """Lower a kernel AST for `renderer`: run the pipeline (linearize included), render. With the disk cache on, a
  kernel lowered before (by any process, with the same code and settings) is read back instead (program_cache.py)."""
  ctx = KernelContext(renderer, name=kernel_name(ast), opts=opts)
  if (key := _program_key(ctx.name, ast, renderer, opts)) is not None:
    from tinyplug.codegen import program_cache
    if (cached := program_cache.load(key)) is not None: return _read_back(cached, ast, renderer)
  with events.scope("kernel", ctx.name, ast=ast), events.profile_span("codegen", ctx.name):
    uops = run_pipeline(ast, renderer, ctx)
    if CHECK_OOB: check_in_bounds(ctx.name, uops)
    src = renderer.render(ctx.name, uops)
  est = estimate(ast)
  bufs = [u for u in uops if u.op is Ops.DEFINE_GLOBAL]
  outs = tuple(sorted({u.src[0].src[0].arg for u in uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_GLOBAL}))
  ins = tuple(b.arg for b in bufs if b.arg not in outs)
  variables = tuple(sorted((u for u in uops if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg))
  spec = ProgramSpec(ctx.name, tuple(uops), src, ctx.global_size, ctx.local_size, variables, outs, ins,
                     tuple(ctx.applied_opts), est,
                     thread_split=renderer.runs_loops and shareable_loop(uops) is not None, work=loop_work(uops))
  announce_kernel(spec, ast, renderer.device)
  if key is not None: program_cache.store(key, spec)
  return spec

def announce_kernel(spec: ProgramSpec, ast: UOp, device: str) -> None:
  """The `kernel` event of a lowered kernel (built here, read from the disk cache, or built by a BEAM worker)."""
  if events.enabled("kernel"):
    events.emit("kernel", {"name": spec.name, "ast": ast, "uops": list(spec.uops), "src": spec.src, "device": device,
                           "opts": spec.applied_opts, "estimates": spec.estimates, "global_size": spec.global_size,
                           "local_size": spec.local_size})

def check_in_bounds(name: str, uops: Any) -> None:
  """CHECK_OOB: every unmasked access to a kernel buffer stays inside it, for every value its index can take (the
  index's bounds over loop ranges and variable ranges). A masked access (an INDEX with a gate) is not judged: its
  index may leave the buffer where the gate is off."""
  for u in uops:
    if u.op is not Ops.INDEX or len(u.src) != 2 or u.src[0].op is not Ops.DEFINE_GLOBAL: continue
    size = u.src[0].dtype.size
    lo, hi = u.src[1]._min_max
    if size >= 0 and (lo < 0 or hi >= size):
      raise RuntimeError(f"CHECK_OOB: kernel {name} may access buffer {u.src[0].arg} (of {size} elements) at index "
                         f"{lo}..{hi}: out of bounds")

def estimate(ast: UOp) -> dict:
  """Rough work of a kernel: ALU ops and bytes moved, for DEBUG=2 GFLOP/s and GB/s."""
  ops, mem = 0, 0
  iters: dict[UOp, int] = {}
  for u in ast.toposort():
    if u.op is Ops.RANGE: iters[u] = int(u.src[0].arg) if u.src[0].op is Ops.CONST else 1
  deps: dict[UOp, frozenset] = {}
  for u in ast.toposort():
    d = frozenset().union(*(deps[s] for s in u.src)) if u.src else frozenset()
    if u.op is Ops.RANGE: d = d | {u}
    deps[u] = d
    count = 1
    for r in d: count *= iters[r]
    if u.op in GroupOp.ALU and u.dtype.scalar().name != "bool" and not _is_index_math(u): ops += count
    elif u.op is Ops.REDUCE:
      ops += count
      deps[u] = d - frozenset(u.src[1:])   # its value is per outer iteration: users do not repeat the reduce loops
  for u in ast.toposort():
    if u.op is Ops.DEFINE_GLOBAL: mem += max(u.dtype.size, 0) * u.dtype.itemsize
  return {"ops": ops, "mem": mem}

def _is_index_math(u: UOp) -> bool:
  return u.dtype.scalar().name in ("int", "long") and any(s.op in (Ops.RANGE, Ops.SPECIAL) for s in u.src)
