"""The scheduler's plugin passes: ordered among `SCHEDULE_STAGES` (tensor_graph, fusion) from the loaded plugin set,
loaded once per set, run with errors that name the pass and its plugin."""
from __future__ import annotations
from typing import Any
from tinyplug.hookspecs.passes import SCHEDULE_STAGES, FusionPass, PipelineStep, order_passes, passes_for, \
  pipeline_fingerprint
from tinyplug.uop.ops import UOp
from tinyplug.uop.upat import PatternMatcher
from tinyplug.plugins import get_plugin_manager

def schedule_steps() -> tuple[PipelineStep, ...]:
  """The scheduler's stages and plugin passes in run order, for the loaded plugin set."""
  pm = get_plugin_manager()
  if (steps := pm.derived.get("schedule.pipeline")) is None:
    steps = pm.derived["schedule.pipeline"] = tuple(order_passes(SCHEDULE_STAGES, passes_for(SCHEDULE_STAGES, pm.passes)))
  return steps

def schedule_key() -> str:
  """The fingerprint of the scheduler's passes: part of the schedule cache's key (another pass set cuts other kernels)."""
  pm = get_plugin_manager()
  if (key := pm.derived.get("schedule.fingerprint")) is None:
    key = pm.derived["schedule.fingerprint"] = pipeline_fingerprint(schedule_steps())
  return key

def _stage_of(step: PipelineStep, steps: tuple[PipelineStep, ...]) -> str:
  """The scheduler stage a plugin pass runs in: the last core stage before it."""
  stage = SCHEDULE_STAGES[0]
  for s in steps:
    if s.is_core: stage = s.name
    if s is step: return stage
  raise ValueError(f"{step.name} is not in the schedule pipeline")

def _loaded(step: PipelineStep, steps: tuple[PipelineStep, ...]) -> Any:
  """A pass's rewrite, built once per plugin set and checked against what its stage takes."""
  pm = get_plugin_manager()
  key = f"schedule.pass.{step.name}"
  if key in pm.derived: return pm.derived[key]
  stage, spec = _stage_of(step, steps), step.spec
  if spec.when is not None:
    raise TypeError(f"pass {step.name!r} (plugin {step.plugin!r}) runs in the scheduler's {stage!r} stage, which has no "
                    "renderer to ask: drop `when` and decide inside the pass")
  rewrite = pm.load_factory(spec.rewrite)()
  want = PatternMatcher if stage == "tensor_graph" else FusionPass   # materialize and fusion
  if not isinstance(rewrite, want):
    raise TypeError(f"pass {step.name!r} (plugin {step.plugin!r}) in the scheduler's {stage!r} stage: its rewrite factory "
                    f"must return a {want.__name__}, got {type(rewrite).__name__}")
  if isinstance(rewrite, PatternMatcher):
    for row in rewrite.rows: row.owner = step.plugin   # matches are credited to the pass's plugin
  pm.derived[key] = rewrite
  return rewrite

def passes_of(stage: str) -> list[tuple[PipelineStep, Any]]:
  """The plugin passes of one scheduler stage, in order, each with its loaded rewrite."""
  steps = schedule_steps()
  return [(s, _loaded(s, steps)) for s in steps if not s.is_core and _stage_of(s, steps) == stage]

def run_pass(step: PipelineStep, fn: Any, *args: Any) -> Any:
  """Call `fn(*args)` for plugin pass `step`; an error names the pass and how to turn its plugin off."""
  from tinyplug.plugins import PluginPassError
  try: return fn(*args)
  except Exception as e:
    raise PluginPassError(f"pass {step.name!r} of plugin {step.plugin!r} raised {type(e).__name__}: {e}; "
                          f"turn the plugin off with TINY_PLUGINS=-{step.plugin}") from e

def tensor_graph_rewrites(sink: UOp) -> dict[UOp, UOp]:
  """Every tensor_graph pass on `sink` in order: a map from each node of `sink` to what it became."""
  from tinyplug.uop.rewrite import graph_rewrite_map
  renamed = {n: n for n in sink.toposort()}
  for step, pm in passes_of("tensor_graph"):
    cur = renamed[sink]
    again = run_pass(step, lambda: graph_rewrite_map(cur, pm, bottom_up=step.spec.bottom_up, name=step.name))
    renamed = {old: again.get(new, new) for old, new in renamed.items()}
  return renamed
