"""Graph templates for composite Tensor methods: the UOp graph a method builds depends only on its inputs' shapes,
dtypes, devices and gradient flags and on its other arguments, so it is built once, over placeholder inputs, and
later calls rebuild it over their own inputs: one UOp per node instead of a chain of Tensor methods (conv2d: ~25
of them, validation and all).

A template also knows the scheduler's structure key of its graph (schedule/cache.py), so when the rebuilt output is
realized as it is, over inputs shaped like the placeholders, the scheduler need not walk the graph to find it.

Only for methods whose graph does not look at their inputs beyond that (not, say, whether an input is a buffer
already). Placeholders are unallocated BUFFER views, so a template holds no memory."""
from __future__ import annotations
import functools, itertools, threading, weakref
from dataclasses import dataclass, field
from typing import Any, Callable
from tinyplug.caches import BoundedCache
from tinyplug.helpers import TRAINING
from tinyplug.uop.dtype import dtypes
from tinyplug.uop.ops import GroupOp, Ops, UOp, uop_finder, uop_maker

MAX_TEMPLATES = 1024
_MISSING = object()
_ELEMENTWISE = frozenset(GroupOp.Elementwise)

@dataclass(frozen=True)
class Built:
  holders: tuple[UOp, ...]          # the placeholder inputs
  order: tuple[UOp, ...]            # every node of the graph, toposorted (the placeholders' own nodes included)
  requires_grad: bool | None
  # the nodes that depend on an input, in order: where in `order`, how to make one, where in `order` its sources are
  steps: tuple[tuple[int, Callable[[tuple], UOp], tuple[int, ...]], ...]   # (position, maker, positions of sources)
  holder_pos: tuple[int, ...]       # position of each placeholder in `order`
  # the scheduler's structure of SINK(output): its key and, for each node of it below the output, where the node is:
  # (-1, position in `order`) or (k, position in input k's own toposort)
  structure: tuple[tuple, tuple[tuple[int, int], ...]] | None
  view_keys: tuple[tuple, ...]      # the structure key of each placeholder on its own (an input must match it)
  # the nodes right over the inputs (made of inputs and input-free nodes only): (finder of the live one, its sources,
  # an int k meaning input k). Every node of the graph that depends on an input holds one of them, so when none is
  # alive for some inputs, nothing anywhere holds a node of the graph over those inputs (engine/plan.py asks)
  probes: tuple[tuple[Callable[[tuple], UOp | None], tuple], ...] = ()
  # positions in `order` of the graph's own nodes over real inputs: all but the output and the placeholders' own
  # (their views, BUFFERs and UNIQUEs, replaced by the inputs' graphs); and this template's identity in a composite
  # key (a new Built, e.g. after an eviction, gets a new one: a miss, never a false hit)
  own: tuple[int, ...] = ()
  token: object = field(default_factory=object, compare=False)
  # set when the template leaves `_templates` (evicted, replaced, reset): a wrapper's memo of its last call drops it
  evicted: bool = field(default=False, compare=False)

  def nodes_over(self, inputs: list[UOp] | tuple[UOp, ...]) -> list[UOp]:
    """Each node of the graph over `inputs`, where its placeholder graph's node is in `order`."""
    vals = list(self.order)
    for p, u in zip(self.holder_pos, inputs): vals[p] = u
    for p, make, srcs in self.steps: vals[p] = make(tuple([vals[i] for i in srcs]))
    return vals

  def nodes_alive(self, inputs: list[UOp] | tuple[UOp, ...]) -> list[UOp]:
    """The live nodes of the graph right over `inputs` (`probes`); none: no node of the graph over them exists
    anywhere (so none was realized, and none is held)."""
    alive = []
    for find, spec in self.probes:
      # (a node over one input, the usual probe: no comprehension)
      src = (inputs[s],) if len(spec) == 1 and type(s := spec[0]) is int else \
        tuple([inputs[s] if type(s) is int else s for s in spec])
      if (n := find(src)) is not None: alive.append(n)
    return alive

def _evicted(b: Built) -> None: object.__setattr__(b, "evicted", True)
_templates: BoundedCache = BoundedCache("tensor.graph_templates", MAX_TEMPLATES, on_evict=_evicted)
_seen: BoundedCache = BoundedCache("tensor.graph_template_keys_seen", 4 * MAX_TEMPLATES)   # signatures called once

def _frozen(x: Any) -> Any:
  """x as a hashable key part (lists become tuples); a TypeError says it cannot be one."""
  if (t := type(x)) is int or t is str or x is None: return x
  # 1 == 1.0 == True and 0.0 == -0.0, but `x * 1` and `x * 1.0` differ on an int tensor: floats and bools keep their
  # type (and a float its bits) in the key
  if t is float: return ("f", x.hex())
  if t is bool: return ("b", x)
  if isinstance(x, (list, tuple)): return tuple(_frozen(v) for v in x)
  hash(x)
  return x

def view_key(u: UOp) -> tuple | None:
  """The scheduler's structure key of `u` alone (its buffers left out), kept on the node: inputs are long-lived."""
  if (c := u._cache) is not None and (k := c.get("view_key", _MISSING)) is not _MISSING: return k
  from tinyplug.schedule.cache import structure
  def key() -> tuple | None:
    found = structure(UOp(Ops.SINK, dtypes.void, (u,)))
    return None if found is None else found[0]
  return u._cached("view_key", key)

def _build(holders: tuple[UOp, ...], out: UOp, requires_grad: bool | None) -> Built:
  order = tuple(out.toposort())
  index = {u: i for i, u in enumerate(order)}
  holder_pos = tuple(index[h] for h in holders)
  dependent, steps, probes = set(holder_pos), [], []
  for i, u in enumerate(order):
    if i in dependent or not any(index[s] in dependent for s in u.src): continue
    if all(index[s] in holder_pos or index[s] not in dependent for s in u.src):
      probes.append((uop_finder(u.op, u.dtype, u.arg),
                     tuple(holder_pos.index(index[s]) if index[s] in holder_pos else s for s in u.src)))
    dependent.add(i)
    steps.append((i, uop_maker(u.op, u.dtype, u.arg), tuple(index[s] for s in u.src)))
  placeholder_own = {u for h in holders for u in h.toposort() if u.op is not Ops.DEVICE}
  own = tuple(i for i, u in enumerate(order[:-1]) if u not in placeholder_own)
  return Built(holders, order, requires_grad, tuple(steps), holder_pos, *_structure_of(holders, out, index),
               probes=tuple(probes), own=own)

def _structure_of(holders: tuple[UOp, ...], out: UOp, index: dict[UOp, int]):
  from tinyplug.schedule.cache import kept_key, structure
  found = structure(UOp(Ops.SINK, dtypes.void, (out,)))
  keys = tuple(view_key(h) for h in holders)
  if found is None or None in keys or len({h.base for h in holders}) != len(holders): return None, keys
  key, nodes = found
  own = {}   # a placeholder's own nodes (its BUFFER, ...) are found in the matching input's toposort
  for k, h in enumerate(holders):
    for j, u in enumerate(h.toposort()):
      if u.op is not Ops.DEVICE: own.setdefault(u, (k, j))
  return (kept_key(key), tuple(own.get(u, (-1, index[u])) for u in nodes[:-2])), keys

def _rebuild(t: Built, inputs: list[UOp], views: bool | None = None) -> UOp:
  """The template's graph over `inputs`; with the structure hint attached to its output where the inputs allow
  (`views`: whether they are views of distinct buffers, when the caller knows)."""
  vals = t.nodes_over(inputs)
  out = vals[-1]
  # a new output has the template's shape and device: known without a walk down its graph (realize asks at once)
  if out is not (ref := t.order[-1]): out.with_known_shape_and_device(ref.shape, ref.device)
  # inputs that are views of buffers only (a lazy input's graph is not walked: in a long lazy chain that would be
  # a walk of everything before it per call)
  if t.structure is not None and (_buffer_views(inputs) if views is None else views) and \
     all(view_key(u) == k for u, k in zip(inputs, t.view_keys)):
    key, where = t.structure
    tops = [tuple(u.toposort()) for u in inputs]
    # the nodes below the output, in the key's order (the output itself is not kept: it would refer to itself)
    below = tuple([vals[j] if k < 0 else tops[k][j] for k, j in where])
    out._cached("sink_structure", lambda: (key, below))
  elif out is not t.order[-1]:
    # over another input (a label tensor just made from data is a copy of a host buffer), backward() still need not
    # walk the whole graph: the gradient template's key is this template with each input's own structure
    # (given the output when asked: kept on it, it must not refer to it)
    token, own = t.token, [vals[i] for i in t.own]
    out._cached("gradient_walk_of", lambda: lambda root: composite_walk(token, inputs, own, root))
  return out

def composite_walk(token: object, inputs: list[UOp], own: list[UOp], out: UOp) -> tuple | None:
  """(key, nodes, where each node is) of the graph of `out`, a template's output over `inputs` (`own`: its other
  nodes), for gradient templates: the key is the template's identity and each input's structure key, the nodes each
  input's graph in turn, then the template's own nodes, then `out`. Where two inputs' graphs, or an input's and the
  template's nodes, share a node that holds a buffer (batchnorm's x, its mean and its variance: x's buffer in each),
  the key also lists each such repeat (where in the walk, the place of the node it repeats): equal keys then tell
  equal graphs. A node without a buffer is the same object wherever its structure is the same, by hash-consing, so
  sharing it is part of the parts' keys. None where an input's graph has no key."""
  if (walked := _inputs_walk(inputs)) is None: return None
  repeats: list[tuple[int, int]] = []
  nodes, pos = _placed(itertools.chain(*walked[1], own, (out,)), repeats)
  key = ((_COMPOSITE, token), *walked[0])
  return (key + ((_REPEATS, tuple(repeats)),) if repeats else key), nodes, pos

def _inputs_walk(inputs: list[UOp]) -> tuple[list[tuple], list[list[UOp]]] | None:
  """(each input's structure key, each input's graph's nodes); None where one has none."""
  keys: list[tuple] = []
  parts: list[list[UOp]] = []
  for u in inputs:
    if (found := _op_over_templates(u)) is None and (found := _input_walk(u)) is None: return None
    keys.append(found[0])
    parts.append(found[1])
  return keys, parts

def _placed(walk, repeats: list[tuple[int, int]] | None = None) -> Any:
  """(the nodes of `walk` without repeats, where each is). A node holding a buffer met again: None, or with `repeats`
  given, (where in `walk`, its place) appended to it."""
  from tinyplug.schedule.cache import buffer_free
  pos: dict[UOp, int] = {}
  nodes: list[UOp] = []
  met_again = 0   # (where in `walk` n is: len(nodes) + met_again, with no count kept in the usual loop)
  for n in walk:
    if n not in pos:
      pos[n] = len(nodes)
      nodes.append(n)
      continue
    if not buffer_free(n):
      if repeats is None: return None
      repeats.append((len(nodes) + met_again, pos[n]))
    met_again += 1
  return nodes, pos

def _input_walk(u: UOp) -> tuple[tuple, list[UOp]] | None:
  """(structure key, nodes ending with u) of an input's graph; kept on a buffer view (a long-lived input, a model's
  parameter: the same walk every step), without u itself (a node whose cache refers to it lives until the cyclic
  collector runs)."""
  from tinyplug.schedule.cache import structure
  if (c := u._cache) is not None and (known := c.get("input_walk")) is not None: return known[0], [*known[1], u]
  if (walked := structure(UOp(Ops.SINK, dtypes.void, (u,)))) is None: return None
  key, nodes = walked[0], walked[1][:-1]
  if u.op is _BUFFER or (u.op is _RESHAPE and u.src[0].op is _BUFFER): u._remember("input_walk", (key, nodes[:-1]))
  return key, nodes

def deferred_walk(built: Built, inputs: list[UOp]) -> tuple[tuple, list[UOp], dict[UOp, int], int] | None:
  """(key, nodes, places, the output's place) of the walk composite_walk gives the graph of a deferred output of
  `built` over `inputs`, without building that graph: its first nodes only (the inputs' graphs; the template's own
  nodes and the output come after them). None where the output's graph has no composite key: it brings its structure
  key along (inputs all views shaped like the placeholders), two inputs' graphs share a node holding a buffer, or the
  template holds buffers of its own (an input may be a view of one)."""
  if built.structure is not None and _buffer_views(inputs) and _views_match(inputs, built.view_keys): return None
  holds_buffers, constants = _own_info(built)
  if holds_buffers or (walked := _inputs_walk(inputs)) is None or (placed := _placed(itertools.chain(*walked[1]))) is None:
    return None
  keys, (nodes, pos) = walked[0], placed
  # the own nodes follow, less those the inputs' graphs hold already: only input-free ones (a DEVICE) can be, as a
  # node over an input shared with another input's graph would share that input's buffer (refused above)
  out_pos = len(nodes) + len(built.own) - sum([n in pos for n in constants])
  return ((_COMPOSITE, built.token), *keys), nodes, pos, out_pos

_own_info_of: BoundedCache = BoundedCache("tensor.graph_template_own_info", MAX_TEMPLATES)

def _own_info(built: Built) -> tuple[bool, tuple[UOp, ...]]:
  """(whether the template's graph holds a buffer besides its placeholders' (a resize's weights), its own nodes that
  depend on no input: the same objects over any inputs)."""
  if (hit := _own_info_of.get(id(built))) is None or hit[0] is not built:
    dependent = {p for p, _, _ in built.steps}
    info = (sum(u.op is _BUFFER for u in built.order) != len(built.holders),
            tuple(built.order[i] for i in built.own if i not in dependent))
    hit = _own_info_of.put(id(built), (built, info))
  return hit[1]

def _copies_and_views(inputs: list[UOp]) -> bool:
  """Whether some input is a copy of a buffer (a tensor just made from data) and every other one a view of a buffer,
  no buffer twice."""
  bufs, copies = [], False
  for u in inputs:
    if u.op is _COPY: u, copies = u.src[0], True
    if (b := u.src[0] if u.op is _RESHAPE else u).op is not _BUFFER or b in bufs: return False
    bufs.append(b)
  return copies

_COMPOSITE = "graph template"   # (a structure key's parts are 4-tuples: a composite key never equals one)
_OP_OVER = "op over graph templates"
_REPEATS = "nodes holding a buffer met again"

def _known_walk(u: UOp) -> tuple[tuple, list[UOp]] | None:
  """(key, nodes ending with u) of a graph template's output that knows its structure, without a walk; else None."""
  if (c := u._cache) is None: return None
  if (hint := c.get("sink_structure")) is not None: return hint[0], [*hint[1], u]
  if (known := c.get("gradient_walk")) is not None: return known[0], [*known[1], u]
  if (make := c.get("gradient_walk_of")) is not None and (walk := make(u)) is not None: return walk[0], walk[1]
  return None

_CONSTANT = "constant under an op over graph templates"
_OP_OVER_DEPTH = 3   # elementwise ops over ops over ... graph-template outputs: `var.add(eps).rsqrt()`

def _op_over_templates(u: UOp, depth: int = _OP_OVER_DEPTH) -> tuple[tuple, list[UOp]] | None:
  """(key, nodes ending with u) of one elementwise op whose sources are graph-template outputs that know their
  structure, constants, or (up to `depth` ops deep) such ops themselves, one source at least not a constant
  (`w[idx].square()` under a sum: the gather's one-hot graph, ~120 nodes, is not walked again every step; batchnorm's
  `var.add(1e-5).rsqrt()`); None for any other node. A constant (a graph without buffers) is its own key part: the same
  node every time, by hash-consing. As in composite_walk, the parts may share only nodes without a buffer."""
  if u.op not in _ELEMENTWISE or not u.src: return None
  from tinyplug.schedule.cache import buffer_free
  distinct: list[UOp] = []
  which, keys, pos, nodes, computed = [], [], {}, [], False
  for s in u.src:
    if s in distinct:   # `x * x`: the same source twice is part of the key
      which.append(distinct.index(s))
      continue
    if (walk := _known_walk(s)) is not None or \
       (depth > 1 and s.op in _ELEMENTWISE and (walk := _op_over_templates(s, depth - 1)) is not None): computed = True
    elif buffer_free(s): walk = (_CONSTANT, s), list(s.toposort())
    else: return None
    which.append(len(distinct))
    distinct.append(s)
    keys.append(walk[0])
    if not nodes:   # the first source's nodes are distinct already (`x * x`, `x.square()`: the only one)
      pos = dict.fromkeys(walk[1])
      nodes = list(walk[1])
      continue
    for n in walk[1]:
      if n not in pos:
        pos[n] = None
        nodes.append(n)
      elif not buffer_free(n): return None
  if not computed: return None
  nodes.append(u)
  arg = u.arg if type(u.arg) not in (float, bool) else (type(u.arg).__name__, repr(u.arg))
  return ((_OP_OVER, u.op._value_, id(u.dtype), arg, tuple(which)), *keys), nodes

rebuild = _rebuild   # (Tensor.uop builds a deferred output with it)

def _may_defer() -> bool:
  global _plan
  if _plan is None:   # loaded through tinyplug.tensor, which hands it its registries of live tensors
    from tinyplug.tensor import _plan as load
    _plan = load()
  return _plan.may_defer()
_plan: Any = None

def _buffer_views(inputs: list[UOp]) -> bool:
  """Whether every input is a view of a buffer, each of another buffer."""
  if len(inputs) == 1: return inputs[0].base.op is Ops.BUFFER
  bases = [u.base for u in inputs]
  return all(b.op is Ops.BUFFER for b in bases) and len(set(bases)) == len(bases)

_BUFFER, _RESHAPE, _COPY = Ops.BUFFER, Ops.RESHAPE, Ops.COPY

# a tensor argument's place in a key: not None, so `batchnorm(w, None, ...)` and `batchnorm(None, w, ...)` differ
_TENSOR_ARG = object()

def _args_key(args: tuple, tt: type) -> tuple:
  """The positional arguments as key parts, tensors as _TENSOR_ARG."""
  if not args: return ()
  if len(args) == 1 and type(args[0]) is int: return args   # the usual axis
  return tuple([_TENSOR_ARG if isinstance(a, tt) else _frozen(a) for a in args])

def _views_match(inputs: list[UOp], keys: tuple) -> bool:
  """Whether each input looks like its placeholder (the same view over a buffer)."""
  if len(inputs) == 1: return view_key(inputs[0]) == keys[0]
  return all([view_key(u) == k for u, k in zip(inputs, keys)])

class _Building(threading.local):
  depth = 0   # > 0 while a template's method runs over its placeholders (in this thread)
_building = _Building()

# arguments a wrapper's memo compares by identity: immutable, so the same object is the same value
_MEMO_ARGS = frozenset((int, str, type(None)))

def _memo_args(args: tuple) -> bool:
  return len(args) < 3 and all([type(a) in _MEMO_ARGS for a in args])

def graph_template(fn: Callable) -> Callable:
  """Decorate a Tensor method; its tensor arguments (positional or keyword) become the template's inputs, every other
  argument is part of the key (an unhashable one just skips the template)."""
  # the last call that returned a deferred output over one buffer view: (the view, weakly; the tensor type, the
  # arguments, the gradient flag, no_grad, TRAINING, the template). The same call again (a loop's `x.sum(1)`) takes
  # the template without its key: every part of the key is compared, and so the view's match to the placeholder (a
  # fact of the view node, which never changes); an evicted template is not used
  memo: list = [None]
  @functools.wraps(fn)
  def wrapper(self, *args, **kwargs):
    # inside another template's build the graph is the builder's: a template of its own would be built for nothing
    if _building.depth: return fn(self, *args, **kwargs)
    tt = type(self)
    if not kwargs and (m := memo[0]) is not None and (u := self._uop) is not None and m[0]() is u and m[1] is tt and \
       len(m[2]) == len(args) and all([a is b for a, b in zip(m[2], args)]) and m[3] is self.requires_grad and \
       m[4] is tt.no_grad and m[5] == TRAINING.value and not (hit := m[6]).evicted and _may_defer():
      return tt._deferred(hit, [u], hit.requires_grad)
    names = sorted(k for k, v in kwargs.items() if isinstance(v, tt)) if kwargs else ()
    tensors = [self]
    for a in args:   # (a loop, not a comprehension: most calls pass an axis or two)
      if isinstance(a, tt): tensors.append(a)
    if names: tensors += [kwargs[k] for k in names]
    sig, inputs, kept = [], [], 0
    for t in tensors:   # (shape, dtype, device, gradient flag) of each tensor input, read off its node once
      if (u := t._uop) is None: u = t._build()
      if (c := u._cache) is not None and (part := c.get("template_sig")) is not None: kept += 1
      else:
        shape, device = u.shape, u.device
        part = (shape, id(u.dtype), device) if type(device) is str and shape is not None and \
          all([type(s) is int for s in shape]) else False
        # kept on a buffer view (a long-lived input); a lazy node is new every call
        if u.op is _BUFFER or (u.op is _RESHAPE and u.src[0].op is _BUFFER): u._cached("template_sig", lambda: part)
      if part is False: return fn(self, *args, **kwargs)
      sig.append((part, t.requires_grad))
      inputs.append(u)
    try:
      key = (fn, tuple(sig), _args_key(args, tt),
             tuple([(k, _TENSOR_ARG if isinstance(v, tt) else _frozen(v)) for k, v in sorted(kwargs.items())]) if kwargs else (),
             tt.no_grad, bool(TRAINING.value))   # (TRAINING is what Tensor.training reads)
    except TypeError: return fn(self, *args, **kwargs)
    if (hit := _templates.get(key)) is None:
      # built on the second call with a signature: a graph made once (a first training step's many shapes) would pay
      # for the build and the rebuild and never get them back
      if key not in _seen:
        _seen.put(key, True)
        return fn(self, *args, **kwargs)
      from tinyplug.engine import realize as engine   # (a layer above uop/, below this one; loaded by any realize)
      if engine.capturing is not None: return fn(self, *args, **kwargs)   # TinyJit's capture: replays build no graphs
      if any(t.numel() == 0 for t in tensors): return fn(self, *args, **kwargs)
      holders = [tt.from_uop(UOp.new_buffer(t.device, t.numel(), t.dtype).reshape(t.shape), t.requires_grad)
                 for t in tensors]
      pos = iter(holders[1:1 + len(tensors) - 1 - len(names)])
      by_name = dict(zip(names, holders[len(holders) - len(names):]))
      _building.depth += 1
      try:
        out = fn(holders[0], *[next(pos) if isinstance(a, tt) else a for a in args],
                 **{k: by_name.get(k, v) for k, v in kwargs.items()})
      finally: _building.depth -= 1
      hit = _templates.put(key, _build(tuple(h.uop for h in holders), out.uop, out.requires_grad))
    # over plain buffers shaped like the placeholders, the graph is built only when used: realize() may run the
    # kernels from a plan without it (engine/plan.py)
    # (a signature kept on the node is a buffer view's: one such input needs no look at its base)
    if (views := (len(inputs) == 1 and kept == 1) or _buffer_views(inputs)) and None not in hit.view_keys and \
       _views_match(inputs, hit.view_keys) and _may_defer():
      if len(inputs) == 1 and not kwargs and _memo_args(args):
        memo[0] = (weakref.ref(inputs[0]), tt, args, self.requires_grad, tt.no_grad, TRAINING.value, hit)
      return tt._deferred(hit, inputs, hit.requires_grad)
    # over data just made (a loss's labels: a copy of a host buffer), deferred too: backward() may then find the
    # gradient's recipe by the composite key without the graph (its realize is the usual way: a plan takes views only)
    if not views and _copies_and_views(inputs) and _may_defer(): return tt._deferred(hit, inputs, hit.requires_grad)
    return tt.from_uop(_rebuild(hit, inputs, views), hit.requires_grad)
  return wrapper
