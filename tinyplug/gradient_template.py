"""Gradient templates: the gradient graph of a forward graph seen before is rebuilt over the new graph's nodes instead
of derived again through the rules' Tensor methods (an eager training step builds the same loss graph every call).

The gradient graph depends only on the forward graph's structure (the scheduler's key of it, schedule/cache.py: ops,
dtypes, args, shapes, which nodes are the same, buffers left out), on which of its nodes are the targets and on the
few settings Tensor methods read (default dtypes and device, TRAINING). So it is derived over the real graph the
second time a key is seen and written down as a recipe: each node of the gradient graph is a node of the forward
graph (by its position in the walk), a node that depends on none (a constant, kept as it is), or a new node made from
earlier ones. Later calls replay the recipe: one UOp per new node. Hash-consing makes the result the very nodes a
derivation would give. A recipe keeps no forward node, so a template holds no buffer; a gradient that makes a buffer of
its own (a custom gradient drawing random numbers) is derived every time. Custom gradient functions must depend only
on their arguments, as the built-in rules do."""
from __future__ import annotations
import operator
from typing import Any, Callable
from tinyplug.caches import BoundedCache
from tinyplug.helpers import DEFAULT_FLOAT, DEFAULT_INT, GRADIENT_TEMPLATES, TRAINING
from tinyplug.uop.dtype import dtypes
from tinyplug.schedule.cache import buffer_free, kept_key, structure
from tinyplug.uop.ops import Ops, UOp, uop_maker

MAX_TEMPLATES = 1024
_templates: BoundedCache = BoundedCache("gradient.templates", MAX_TEMPLATES)
_seen: BoundedCache = BoundedCache("gradient.keys_seen", 4 * MAX_TEMPLATES)   # keys derived once, not recorded yet
_REFUSED = object()   # a key whose gradient cannot be written as a recipe: derived every time, not looked at again

Derive = Callable[[UOp, UOp, set], dict]

def graph_of(root: UOp) -> dict[UOp, Any]:
  """The nodes of root's graph (backward() looks for its targets there): the walk a template needs, kept on root."""
  return _walk(root)[2] if GRADIENT_TEMPLATES.value else root.toposort()

def _walk(root: UOp) -> tuple[tuple | None, list[UOp], dict[UOp, int]]:
  # (the structure key of root's graph or None where it has none, its nodes in the key's order, root last, and where
  # each is). A graph template's output brings its key along (no walk then)
  if (c := root._cache) is not None:
    if (known := c.get("gradient_walk")) is not None:
      key, below, where = known
      (where := dict(where))[root] = len(below)
      return key, [*below, root], where
    # a graph template's output over inputs that are not plain buffers: its key from the template's and theirs
    if (make := c.get("gradient_walk_of")) is not None and (walk := make(root)) is not None: return _keep(root, walk)
  # (shallow=None: a loss is never the one-op graph that key stands for)
  if (found := structure(UOp(Ops.SINK, dtypes.void, (root,)), shallow=None)) is None:
    key, nodes = None, list(root.toposort())
  else: key, nodes = found[0], found[1][:-1]
  return _keep(root, (key, nodes, dict(zip(nodes, range(len(nodes))))))

def _keep(root: UOp, walk: tuple) -> tuple:
  # kept on root without root itself: a node whose cache refers to it lives until the cyclic GC runs, and with it its
  # graph's buffers (every training step's loss graph and label buffers; the collections took ~40 us a step)
  key, nodes, pos = walk
  # every walk lists root last and each node at its place (pos): the others' places are pos less root (a copy of a
  # dict is a block copy, no hashing: ~7 us less than building it again over ~135 nodes)
  below = pos.copy()
  del below[root]
  root._remember("gradient_walk", (key, nodes[:-1], below))
  return walk

def gradient(root: UOp, root_grad: UOp, targets: set[UOp], derive: Derive) -> dict[UOp, UOp]:
  """derive(root, root_grad, targets), from a template when a graph of this structure was differentiated before."""
  if not GRADIENT_TEMPLATES.value: return derive(root, root_grad, targets)
  key, nodes, pos = _walk(root)
  if key is None: return derive(root, root_grad, targets)
  if buffer_free(root_grad): seed = root_grad   # the usual 1.0: the same node each time, so it is part of the key
  else:   # a gradient of the caller's: its graph is walked with the forward's (it may share nodes with it)
    if (found := structure(UOp(Ops.SINK, dtypes.void, (root, root_grad)))) is None:
      return derive(root, root_grad, targets)
    key, nodes, seed = found[0], found[1][:-1], None
    pos = {n: i for i, n in enumerate(nodes)}
  where = tuple(sorted({pos[t] for t in targets if t in pos}))
  full = _recipe_key(key, seed, where)
  if (hit := _templates.get(full)) is not None:
    return derive(root, root_grad, targets) if hit is _REFUSED else _replay(hit, nodes)
  grads = derive(root, root_grad, targets)
  if full not in _seen: _seen.put(full, True)   # recorded the second time: a graph made once would only pay for it
  else: _templates.put(full, _record(grads, pos) or _REFUSED)
  return grads

def _recipe_key(key: tuple, seed: UOp | None, where: tuple) -> tuple:
  """A recipe's key in _templates: the graph's structure, the starting gradient (None: walked with the graph), the
  targets' places, and the settings a derivation depends on."""
  return (key, seed, where, DEFAULT_FLOAT.value, DEFAULT_INT.value, TRAINING.value, _device().DEFAULT)

def _device() -> Any:
  global _Device
  if _Device is None: from tinyplug.device import Device as _Device
  return _Device
_Device: Any = None

# A recipe: (steps, outs, hint). A step is an int (the forward node at that position), a UOp (a node that depends on no
# forward node, kept) or (maker, indices of earlier steps); outs: each target's position, its gradient's step, shape and
# device.
# hint: the scheduler's structure of the new gradients realized together (a single parameter's on its own, or every
# parameter's, `Tensor.realize(*[p.grad for p in params])`, in the targets' forward order or its reverse), one per order:
# (steps of the gradients, their key, a function picking the walk's nodes out of the steps' values followed by the
# forward nodes: one C call, not a comprehension over ~140 positions), so realize need not walk them (as a graph template's output brings its key; conv 64->128 28x28 s2 fwd + bwd: a 0.17 ms
# walk per step). None where some gradient is not a new node (the realize's graph then has others).
Recipe = tuple[tuple[Any, ...], tuple[tuple[int, int, tuple, Any], ...], tuple | None]

def _record(grads: dict[UOp, UOp], pos: dict[UOp, int]) -> Recipe | None:
  if not grads: return ((), (), None)
  sink = UOp(Ops.SINK, dtypes.void, tuple(grads.values()))
  steps: list[Any] = []
  index: dict[UOp, int] = {}
  dependent: set[UOp] = set()
  for u in sink.toposort(gate=lambda u: u not in pos):
    if u is sink: break
    if (p := pos.get(u)) is not None: steps.append(p)
    elif any(s in pos or s in dependent for s in u.src):
      dependent.add(u)
      steps.append((uop_maker(u.op, u.dtype, u.arg), tuple(index[s] for s in u.src)))
    elif u.op is Ops.BUFFER or u.op is Ops.UNIQUE: return None   # shared by every replay: not what a derivation gives
    else: steps.append(u)
    index[u] = len(steps) - 1
  # each gradient's shape and device too: known at once on a replay (backward() and realize ask), not node by node
  outs = tuple((pos[t], index[g], g.shape, g.device) for t, g in grads.items())
  return tuple(steps), outs, _hint_of(grads, dependent, index, pos, len(steps))

def _picker(where: list[int]) -> Callable[[list], tuple]:
  """seq -> tuple(seq[i] for i in where), in C."""
  if len(where) > 1: return operator.itemgetter(*where)
  return (lambda seq: (seq[where[0]],)) if where else (lambda seq: ())

def _hint_of(grads: dict[UOp, UOp], dependent: set[UOp], index: dict[UOp, int], pos: dict[UOp, int],
             n_steps: int) -> tuple | None:
  # (the gradient the loss itself starts from is a constant: it does not count)
  made = [g for g in dict.fromkeys(grads[t] for t in sorted(grads, key=lambda t: pos[t])) if not buffer_free(g)]
  new = [g for g in made if g in dependent]
  if not new or (len(new) > 1 and len(new) != len(made)): return None
  hints = []
  # several: in the targets' order in the forward graph (parameters as the model uses them) and the reverse
  for order in ((new,) if len(new) == 1 else (new, new[::-1])):
    if (found := structure(UOp(Ops.SINK, dtypes.void, tuple(order)), shallow=None)) is None: return None
    key, nodes = found
    where = []
    # (one gradient: it and the SINK are not kept, structure() adds them; several: only the SINK)
    for n in nodes[:-2] if len(order) == 1 else nodes[:-1]:
      if (i := index.get(n)) is not None: where.append(i)
      elif (p := pos.get(n)) is not None: where.append(n_steps + p)   # (step values first, then the forward nodes)
      else: return None
    hints.append((tuple(index[g] for g in order), kept_key(key), _picker(where), tuple(where)))
  return tuple(hints)

def _replay(recipe: Recipe, nodes: list[UOp]) -> dict[UOp, UOp]:
  steps, outs, hint = recipe
  vals: list[UOp] = []
  add = vals.append
  for s in steps:
    if type(s) is int: add(nodes[s])
    elif type(s) is tuple: add(s[0](tuple([vals[i] for i in s[1]])))
    else: add(s)
  for roots, key, pick, _ in hint or ():
    g = vals[roots[0]]
    name = "sink_structure" if len(roots) == 1 else "sinks_structure"
    if (c := g._cache) is None or name not in c:
      below = pick(vals + nodes)
      if len(roots) == 1: g._cached(name, lambda: (key, below))
      else:
        gs = tuple([vals[i] for i in roots])
        g._cached(name, lambda: (gs, key, below))
  return {nodes[p]: vals[i].with_known_shape_and_device(shape, device) for p, i, shape, device in outs}

# ---------------- lazy gradients: backward() of a graph seen before, its gradients not built until used ----------------
# A replayed gradient realized as it is (`loss.backward(); x.grad.realize()`) needs none of its new nodes: its kernels
# run from the graph plan of its schedule (engine/plan.py) over forward nodes. So backward() may hand out each
# gradient as a deferred tensor holding the recipe and the forward nodes; reading its `uop` replays the recipe then
# (once for all of one backward's gradients), as backward() would have.

class LazyReplay:
  """One backward()'s recipe over its forward nodes (the walk's, the loss last), replayed on first use. For a loss
  that is a deferred graph template output (`source`: its template and inputs, `build` making its graph), `nodes` are
  the walk's first ones only (the inputs' graphs) and the first use builds the loss and differentiates it as
  backward() would have (the same recipe, found by the same key)."""
  __slots__ = ("recipe", "nodes", "grads", "source", "build", "seed", "targets")
  def __init__(self, recipe: Recipe, nodes: list[UOp], source: tuple | None = None, build: Callable[[], UOp] | None = None,
               seed: UOp | None = None, targets: set[UOp] | None = None):
    self.recipe, self.nodes, self.grads = recipe, nodes, None
    self.source, self.build, self.seed, self.targets = source, build, seed, targets
  def replayed(self) -> dict[UOp, UOp]:
    if self.grads is None:
      if self.build is None: self.grads = _replay(self.recipe, self.nodes)
      else:
        from tinyplug.gradient import derive_gradient
        self.grads = gradient(self.build(), self.seed, self.targets, derive_gradient)
    return self.grads

class LazyGradient:
  """A deferred tensor's builder (Tensor._defer = (this, the forward nodes or the loss's inputs)): the gradient of
  forward node `target`, step `step` of the recipe."""
  __slots__ = ("replay", "target", "step")
  def __init__(self, replay: LazyReplay, target: UOp, step: int):
    self.replay, self.target, self.step = replay, target, step
  def build(self) -> UOp: return self.replay.replayed()[self.target]

def lazy_gradients(root: UOp, root_grad: UOp, targets: list[UOp]) -> list[tuple[LazyGradient, tuple]] | None:
  """(builder, shape) of each target's gradient when backward() of `root` from the seed `root_grad` replays a recipe
  (a graph of this structure, these targets and settings differentiated twice before); None: derive or replay now."""
  if not GRADIENT_TEMPLATES.value or not buffer_free(root_grad): return None
  key, nodes, pos = _walk(root)
  if key is None: return None
  return _lazy(key, nodes, pos, root_grad, targets)

def lazy_gradients_of(walk: tuple, source: tuple, build: Callable[[], UOp], root_grad: UOp, targets: list[UOp],
                      root_too: bool) -> list[tuple[LazyGradient, tuple]] | None:
  """lazy_gradients of a deferred graph template output, its graph not built: `walk` is (key, nodes, places, the
  output's place) of its inputs' part of the walk (template.deferred_walk), `source` (template, inputs), `build`
  makes the graph; `root_too`: the output is a target as well (its gradient is the seed: the caller's to set)."""
  if not GRADIENT_TEMPLATES.value or not buffer_free(root_grad): return None
  key, nodes, pos, out_pos = walk
  return _lazy(key, nodes, pos, root_grad, targets, source, build, out_pos if root_too else None)

def _lazy(key: tuple, nodes: list[UOp], pos: dict[UOp, int], root_grad: UOp, targets: list[UOp], source: tuple | None = None,
          build: Callable[[], UOp] | None = None, root_pos: int | None = None) -> list[tuple[LazyGradient, tuple]] | None:
  if any(t not in pos for t in targets): return None
  where = tuple(sorted({pos[t] for t in targets} | ({root_pos} if root_pos is not None else set())))
  full = _recipe_key(key, root_grad, where)
  if (recipe := _templates.get(full)) is None or recipe is _REFUSED: return None
  # only one new gradient (a single parameter's) can run from a plan on its own: several are built when realized
  # together, so handing them out deferred would only add to their build
  if not any(len(h[0]) == 1 for h in recipe[2] or ()): return None
  steps_of = {p: (i, shape) for p, i, shape, _ in recipe[1]}
  if any(pos[t] not in steps_of for t in targets): return None   # (a target without a gradient gets zeros)
  replay = LazyReplay(recipe, nodes, source, build, root_grad, set(targets))
  return [(LazyGradient(replay, t, steps_of[pos[t]][0]), steps_of[pos[t]][1]) for t in targets]
