"""What a fusion pass (the scheduler's `fusion` stage, `tinyplug.hookspecs.FusionPass`) sees and may change: the tensor
graph, the nodes the core decided to give kernels of their own, and which of those reductions it may move into their
consumer's kernel instead."""
from __future__ import annotations
from typing import Any, Callable, Iterable
from tinyplug.caches import BoundedCache
from tinyplug.uop.ops import GroupOp, Ops, UOp

GO = object()   # a consumer-walk step's answer: walk on through this consumer

# a walk step: (node, one of its consumers) -> GO, a node where this path ends, or None (the consumer refuses)
Step = Callable[[UOp, UOp], Any]

# ops a reduction's result may flow through and still be computed inside the consumer's kernel
_FUSE_THROUGH = GroupOp.Elementwise | {Ops.RESHAPE, Ops.PERMUTE, Ops.FLIP, Ops.SHRINK, Ops.DETACH}

def fuse_step(must: set[UOp]) -> Callable[[UOp, UOp], Any]:
  """The consumer rule of a reduction computed inside its consumer's kernel: elementwise math up to one output."""
  def step(x: UOp, c: UOp) -> UOp | object | None:
    if c.op is Ops.SINK: return x
    if c.op not in _FUSE_THROUGH and c.op is not Ops.CONTIGUOUS: return None
    return c if c in must else GO
  return step

_loop_devices: BoundedCache = BoundedCache("schedule.loop_devices", 64)

def runs_loops(device: Any) -> bool:
  """Whether kernels on `device` run as loops (CPU-style), where one kernel can walk a row of data several times."""
  if not isinstance(device, str): return False
  if (known := _loop_devices.get(device)) is not None: return known
  from tinyplug.device import Device   # the renderer's launch model decides; asked once per device
  try: loops = Device[device].renderer.runs_loops
  except (RuntimeError, ValueError): loops = False
  return _loop_devices.put(device, loops)

class FusionGraph:
  """The tensor graph being cut into kernels, as fusion passes see it.

  `nodes`: every node, producers before consumers. `realized`: the nodes that get a kernel (or a copy) of their own
  now. `candidates`: the reductions among them that a pass may still fuse into their consumer's kernel."""
  def __init__(self, nodes: list[UOp], children: dict[UOp, list[UOp]], realized: set[UOp], candidates: set[UOp]):
    self.nodes, self._children = nodes, children
    self._realized, self._candidates = realized, candidates
    self.reasons: dict[UOp, tuple[str, str, str]] = {}   # fused reduction -> (pass name, rule id, sentence)
    self.current_pass = ""

  @property
  def realized(self) -> frozenset[UOp]: return frozenset(self._realized)
  @property
  def candidates(self) -> frozenset[UOp]: return frozenset(self._candidates)
  def is_realized(self, u: UOp) -> bool: return u in self._realized
  def children(self, u: UOp) -> list[UOp]: return self._children.get(u, [])
  def runs_loops(self, device: Any) -> bool: return runs_loops(device)

  def fuse(self, r: UOp, rule: str, detail: str) -> None:
    """Compute reduction `r` inside its consumer's kernel instead of a kernel of its own; `rule` (an id) and `detail`
    (a sentence) say why, for the visualizer."""
    if r not in self._candidates:
      what = "it is not realized" if r not in self._realized else "the core realizes it for correctness"
      raise ValueError(f"fusion pass {self.current_pass!r} asked to fuse {r.op.name} {tuple(r.shape)}, which is not a "
                       f"candidate ({what}); only reductions in graph.candidates can be fused")
    self._candidates.discard(r)
    self._realized.discard(r)
    self.reasons[r] = (self.current_pass, rule, detail)

  def realize(self, n: UOp, rule: str, detail: str) -> None:
    """Give `n` (an elementwise node computed inside its consumers' kernels) a kernel of its own: computed once, read
    by every consumer."""
    if n in self._realized: return
    if n.op not in GroupOp.Elementwise or not n.shape:
      raise ValueError(f"pass {self.current_pass!r} asked to realize {n.op.name}: only elementwise nodes with a shape "
                       "can be given a kernel of their own")
    self._realized.add(n)
    self.reasons[n] = (self.current_pass, rule, detail)

  def consumer_walk(self, r: UOp, step: Step, every_end: bool = False) -> tuple[dict[UOp, None], UOp | None]:
    """Walk the graph up from r: for each consumer c of a node x, `step(x, c)` says GO (walk on through c), a node
    (a path ends there) or None (c refuses). Returns (the ends reached, the refusing consumer or None); it stops at a
    refusal, and at a second end unless `every_end` (the visualizer wants them all to name them)."""
    ends: dict[UOp, None] = {}
    stack, seen = [r], set()
    while stack:
      x = stack.pop()
      for c in self._children.get(x, []):
        if c in seen: continue
        seen.add(c)
        if (res := step(x, c)) is None: return ends, c
        if res is GO: stack.append(c)
        else: ends[res] = None
      if len(ends) > 1 and not every_end: return ends, None
    return ends, None

  def one_end(self, r: UOp, step: Step) -> dict[UOp, None] | None:
    """The one place the paths from r end (or none), or None if a consumer refused or they end in two places."""
    ends, refused = self.consumer_walk(r, step)
    return None if refused is not None or len(ends) > 1 else ends

  def fuses_into(self, r: UOp) -> UOp | None:
    """The one realized node that reduction r's value reaches through elementwise math (the core's fusion rule),
    now that passes may have realized more nodes; None if it reaches more than one or goes anywhere else."""
    ends = self.one_end(r, fuse_step(self._realized))
    return next(iter(ends)) if ends and len(ends) == 1 else None

  def unrealized_inputs(self, r: UOp) -> Iterable[UOp]:
    """The nodes computed inside r's kernel along with r (its inputs up to realized nodes)."""
    return r.src[0].toposort(gate=lambda u: u not in self._realized)

__all__ = ["GO", "FusionGraph", "fuse_step", "runs_loops"]
