"""Hooks for rewrite passes, the stable core stage ids, and how plugin passes are placed among them.

Two pipelines take plugin passes: the scheduler's (`SCHEDULE_STAGES`, once per scheduled graph) and codegen's
(`CORE_STAGES`, once per kernel). A pass belongs to the pipeline whose stage ids it names. A plugin pass names where
it goes:
- `stage="devectorize"`: it runs as part of that stage, after the core rules and before the next stage;
- `after=(...)` / `before=(...)`: stage ids or other passes' names it must follow / precede.
`order_passes` turns that into one deterministic list; install and registration order never matter.

A pass's `rewrite` factory returns a PatternMatcher (run with `graph_rewrite`, its `ctx` the kernel's
`KernelContext`, which has `.renderer`) or a function: `fn(sink, ctx) -> sink` (or `fn(sink)`) before linearize,
`fn(uops, ctx) -> uops` after it. A PatternMatcher placed after linearize is refused with an error naming the pass.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Callable, Iterable, Mapping, NamedTuple, Union

from tinyplug.hookspecs.markers import hookspec
from tinyplug.hookspecs.specs import PassSpec

if TYPE_CHECKING:
  from tinyplug.schedule.fusion import FusionGraph
  from tinyplug.uop.ops import UOp

# Stable ids of the core codegen stages, in pipeline order (`tinyplug.codegen.STAGES` runs them). They are public API:
# renaming one is a major change. Until linearize a step gets the kernel graph (a SINK of STOREs) and returns one;
# after it, the linear program (a list of UOps) and returns one (function passes only). The core does what correct
# code needs; what makes it faster comes from pass sets placed at these stages (first-party: `simplify` at the three
# symbolic stages, `heuristic` at opt, `vectorize` at devectorize), each a plugin that can be turned off.
CORE_STAGES: tuple[str, ...] = (
  "early",             # nothing: the kernel AST as the scheduler made it, for passes that want it unsimplified
  "symbolic_initial",  # nothing in the core: simplification passes (constant folding, index arithmetic) go here
  "opt",               # optimisation actions (upcast/unroll/local/group/split/swap/padto/thread) decided already are
                       # applied: explicit ones (the engine's, from a search) or none with NOOPT=1; while undecided
                       # (`ctx.opts is None`) a heuristic pass of this stage picks and applies them
  "expand",            # upcast/unroll axes become straight-line code: one scalar copy of the work per lane
  "dtypes",            # float dtypes the renderer lacks (fp8 everywhere so far; any EMULATED_DTYPES names) become bits
                       # in memory and float32 values in registers, rounded to the dtype (codegen/emulated_dtypes.py)
  "symbolic_postopt",  # nothing in the core: simplification after the optimisations
  "gpudims",           # renderers with launch ids: output loops become SPECIAL group/local ids; grouped reductions go
                       # through local memory and a barrier (loop-running renderers: nothing)
  "devectorize",       # nothing in the core (scalar lanes are correct): vectorizing passes turn lanes into vector
                       # UOps of the widths the renderer declares (`Renderer.vector_widths`)
  "decompositions",    # ops the renderer lacks (`Renderer.native_ops`) in terms of ops it has: always core
  "symbolic_final",    # nothing in the core: last simplification before rendering
  "final",             # the renderer's own `extra_matcher`, if it has one
  "linearize",         # REDUCEs become accumulators and loops; the graph becomes the linear program (a list)
)

# Stable ids of the scheduler's stages, in order (`tinyplug.schedule` runs them on the tensor-level graph before it is
# cut into kernels). All are empty in the core: it cuts correct kernels without them; pass sets make fewer or better
# shaped ones (first-party: `split_reduce` at tensor_graph, `fuse_rows` at fusion, `materialize` at materialize).
SCHEDULE_STAGES: tuple[str, ...] = (
  "tensor_graph",  # value-preserving rewrites of the tensor graph (a PatternMatcher: the core keeps track of which
                   # node became which, so realized tensors find their buffers)
  "fusion",        # which reductions are computed inside their consumer's kernel instead of a kernel of their own
                   # (a FusionPass calling graph.fuse); everything else the core decides
  "materialize",   # which more nodes get a kernel of their own, computed once instead of inside every consumer
                   # (a FusionPass calling graph.realize)
)


class FusionRefusal(NamedTuple):
  """Why a fusion pass left a candidate reduction a kernel of its own (the visualizer shows it). `by_limit`: the pass
  would fuse it but for a limit or setting of its own; then `rule` names the decision, else `detail` is appended to the
  core's reason."""
  rule: str
  detail: str
  by_limit: bool = False


class FusionPass(ABC):
  """What the `rewrite` factory of a pass at the scheduler's `fusion` stage returns.

  The core first decides what must get a kernel of its own (outputs, contiguous/assign/copy, reductions used by more
  than elementwise math on the way to one output). A fusion pass may then move some of those reductions, the
  graph's `candidates`, into their consumer's kernel by calling `graph.fuse(reduction, rule, detail)`: recomputing a
  reduction inside another kernel is always correct, so a pass only changes speed. At the `materialize` stage (after
  fusion) a pass may instead give more nodes a kernel of their own with `graph.realize(node, rule, detail)`, equally
  correct. Passes run in pipeline order, each seeing the decisions of the ones before.
  """

  @abstractmethod
  def fuse(self, graph: "FusionGraph") -> None:
    """Make this pass's decisions: `graph.fuse(r, rule, detail)` for each candidate reduction r to compute inside its
    consumer's kernel (fusion stage), `graph.realize(n, rule, detail)` for each node to give a kernel (materialize)."""

  def why_not(self, graph: "FusionGraph", r: "UOp") -> FusionRefusal | None:
    """Why candidate `r` was left a kernel of its own, for the visualizer; None: this pass has nothing to say."""
    return None


def passes_for(stages: Iterable[str], plugin_passes: "PluginPasses") -> list["tuple[PassSpec, str]"]:
  """The `(spec, plugin)` pairs of `plugin_passes` that belong to the pipeline of `stages`: placed at one of them, or
  anchored only to them and to passes already found to belong."""
  ids = set(stages)
  pairs = list(plugin_passes.values() if isinstance(plugin_passes, Mapping) else plugin_passes)
  chosen: dict[str, tuple[PassSpec, str]] = {}
  changed = True
  while changed:
    changed = False
    for spec, plugin in pairs:
      if spec.name in chosen: continue
      anchors = (*spec.after, *spec.before)
      if spec.stage in ids or (spec.stage is None and anchors and all(a in ids or a in chosen for a in anchors)):
        chosen[spec.name] = (spec, plugin)
        changed = True
  return list(chosen.values())


@hookspec
def tinyplug_register_passes(register: Callable[[PassSpec], None]) -> None:
  """Register rewrite passes by calling `register(PassSpec(name=..., rewrite=..., stage=... or after=...))`.

  `stage` is a codegen stage (`CORE_STAGES`) or a scheduler stage (`SCHEDULE_STAGES`).

  When: once per process, while plugins load; the pipeline order is computed from all passes afterwards.
  Receives: `register`, a callback recording the spec and the plugin that registered it.
  Returns: nothing.
  Several plugins: all passes are collected and placed by `order_passes` (anchors, then plugin id and
  pass name as tie-break). Two passes with the same name is a conflict (first plugin id wins). Each
  pass's name and version enter `pipeline_fingerprint`, part of every compile- and search-cache key.
  `rewrite` is a factory (or "module:attr") called when the pipeline is built, not at registration.
  """


@dataclass(frozen=True)
class PipelineStep:
  """One step of the ordered pipeline: a core stage (spec is None) or a plugin pass."""
  name: str
  plugin: str | None = None  # None for core stages
  spec: PassSpec | None = None

  @property
  def is_core(self) -> bool: return self.spec is None

  @property
  def version(self) -> str: return "core" if self.spec is None else self.spec.version


PluginPasses = Union[Mapping[str, "tuple[PassSpec, str]"], Iterable["tuple[PassSpec, str]"]]


def order_passes(core_stages: Iterable[str], plugin_passes: PluginPasses) -> list[PipelineStep]:
  """Place plugin passes among the core stages and return the whole pipeline in run order.

  `plugin_passes` is an iterable of `(PassSpec, plugin_id)` pairs, or a mapping whose values are such pairs
  (as `PluginManager.passes`). Rules:
  - core stages keep their order;
  - `stage=S` means after S and before the stage following S;
  - a pass whose anchors are all `before` core stages runs right before the earliest of them;
  - otherwise a pass runs as soon as all its `after` anchors have run;
  - passes ready at the same point run in (plugin id, pass name) order.
  Raises ValueError for an unknown anchor (naming the plugin and listing valid ids), for a pass named like
  a core stage, and for a cycle (printing it).
  """
  stages = list(core_stages)
  pairs = list(plugin_passes.values() if isinstance(plugin_passes, Mapping) else plugin_passes)
  passes: dict[str, tuple[PassSpec, str]] = {}
  for spec, plugin in sorted(pairs, key=lambda p: (p[1], p[0].name)):
    if spec.name in stages:
      raise ValueError(f"pass {spec.name!r} from plugin {plugin!r} has the name of a core stage; rename it")
    if spec.name in passes:
      raise ValueError(f"pass {spec.name!r} is registered by both plugin {passes[spec.name][1]!r} and {plugin!r}")
    passes[spec.name] = (spec, plugin)

  stage_index = {s: i for i, s in enumerate(stages)}
  edges: dict[str, set[str]] = {n: set() for n in [*stages, *passes]}  # node -> nodes that must come after it
  for a, b in zip(stages, stages[1:]): edges[a].add(b)
  for name, (spec, plugin) in passes.items():
    for anchor in (*spec.after, *spec.before, *((spec.stage,) if spec.stage else ())):
      if anchor not in edges or (anchor == spec.stage and anchor not in stage_index):
        valid = "core stages: " + ", ".join(stages) + ("; plugin passes: " + ", ".join(sorted(passes)) if passes else "")
        what = "stage" if anchor == spec.stage else "anchor"
        raise ValueError(f"pass {name!r} from plugin {plugin!r} names unknown {what} {anchor!r}; valid ids are {valid}")
    for anchor in spec.after: edges[anchor].add(name)
    for anchor in spec.before: edges[name].add(anchor)
    if spec.stage is not None:
      edges[spec.stage].add(name)
      if (i := stage_index[spec.stage]) + 1 < len(stages): edges[name].add(stages[i + 1])
    elif not spec.after and all(b in stage_index for b in spec.before):
      first = min(stage_index[b] for b in spec.before)  # "right before" the earliest anchor, not at the very start
      if first > 0: edges[stages[first - 1]].add(name)

  def sort_key(node: str) -> tuple:
    # plugin passes that are ready run before the next core stage; among themselves by (plugin id, name)
    return (1, stage_index[node], "") if node in stage_index else (0, passes[node][1], node)

  indegree = {n: 0 for n in edges}
  for targets in edges.values():
    for t in targets: indegree[t] += 1
  ready = [sort_key(n) + (n,) for n, d in indegree.items() if d == 0]
  heapq.heapify(ready)
  order: list[str] = []
  while ready:
    node = heapq.heappop(ready)[-1]
    order.append(node)
    for t in edges[node]:
      indegree[t] -= 1
      if indegree[t] == 0: heapq.heappush(ready, sort_key(t) + (t,))
  if len(order) != len(edges):
    raise ValueError("pass ordering has a cycle: " + _describe_cycle(edges, set(edges) - set(order), passes))
  return [PipelineStep(n) if n in stage_index else PipelineStep(n, passes[n][1], passes[n][0]) for n in order]


def _describe_cycle(edges: dict[str, set[str]], stuck: set[str], passes: dict[str, tuple[PassSpec, str]]) -> str:
  """Print one loop among the nodes that could not be placed (each of them waits on another stuck node)."""
  def label(n: str) -> str: return f"{n} (plugin {passes[n][1]})" if n in passes else f"{n} (core stage)"
  preds = {n: sorted(m for m in stuck if n in edges[m]) for n in stuck}
  node, path = min(stuck), []
  while node not in path:  # walk backwards along "must come after" edges until a node repeats
    path.append(node)
    node = preds[node][0]
  loop = path[path.index(node):][::-1]
  return " -> ".join(label(n) for n in loop + [loop[0]])


def pipeline_fingerprint(ordered: Iterable[PipelineStep]) -> str:
  """A stable hash of the ordered pipeline (step names, owning plugins and versions) for cache keys."""
  import hashlib
  text = "\n".join(f"{s.plugin or 'core'}/{s.name}@{s.version}" for s in ordered)
  return hashlib.sha256(text.encode()).hexdigest()[:16]
