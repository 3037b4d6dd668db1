"""Schedule templates: a tensor graph seen before, on other buffers, gets its kernels without scheduling again.

The scheduler's output depends only on the graph's structure: ops, dtypes, args (constants included), shapes and
which inputs are the same buffer. `structure()` writes that down as a key with the buffers left out (each BUFFER is
known by its position in the graph), and a template records the schedule in terms of positions: the kernel ASTs
(which name buffers only as DEFINE_GLOBAL parameters) are shared, the output buffers are made fresh each time.
So `t = (t + 1).realize()` in a loop schedules once. Templates hold no buffers, so they keep no memory alive."""
from __future__ import annotations
import itertools
from dataclasses import dataclass
from typing import Any
from tinyplug.caches import BoundedCache
from tinyplug.uop.dtype import DType, dtypes
from tinyplug.uop.ops import GroupOp, Ops, UOp, _canonical_dtype, uop_maker

# graphs with other ops (AFTER/KERNEL from kernelize(), ...) are scheduled every time
_CACHEABLE = GroupOp.Elementwise | GroupOp.Movement | {Ops.SINK, Ops.BUFFER, Ops.UNIQUE, Ops.DEVICE, Ops.CONST,
  Ops.COPY, Ops.ASSIGN, Ops.CONTIGUOUS, Ops.DETACH, Ops.REDUCE_AXIS, Ops.DEFINE_VAR, Ops.BIND, Ops.CUSTOM_GRAD,
  Ops.SCATTER_ADD}
_CACHEABLE_VALUES = frozenset(op._value_ for op in _CACHEABLE)   # an Enum hashes through a Python call, an int not
_ALU_VALUES = frozenset(op._value_ for op in GroupOp.ALU)
MAX_TEMPLATES = 4096

def _arg_key(arg: Any) -> Any:
  # 0.0 == -0.0, 1 == 1.0 == True and nan != nan: keep the type and the bits apart (a miss is safe, a false hit not)
  t = type(arg)
  if t is float: return ("f", arg.hex())
  if t is bool: return ("b", arg)
  return arg

_UNSET: Any = object()

class KeptKey(tuple):
  """A structure key that is kept and looked up again and again (a graph template's, a gradient recipe's): its hash
  is worked out once (a tuple's is not kept: ~12 us for a 140-node gradient graph's key, on every lookup). Equal to,
  and hashed as, the plain tuple."""
  def __new__(cls, key: tuple) -> KeptKey:
    self = super().__new__(cls, key)
    self._hash = tuple.__hash__(self)
    return self
  def __hash__(self) -> int: return self._hash
  def __reduce__(self):   # a plain tuple elsewhere: a string's hash differs between processes
    return tuple, (tuple(self),)

# one KeptKey per key: a graph template's, a gradient recipe's hint and the schedule template's entry hold the same
# object, so a lookup's key compares by identity (two equal keys of a ~140-node graph compared part by part: ~6 us)
_kept: BoundedCache = BoundedCache("schedule.kept_keys", MAX_TEMPLATES)

def kept_key(key: tuple) -> tuple:
  """`key` with its hash worked out once (for a key kept and looked up on every call): the one object for all equal
  keys kept (while the table holds it)."""
  if type(key) is KeptKey: return key
  if (hit := _kept.get(key)) is not None: return hit
  return _kept.put(key, KeptKey(key))

def structure(sink: UOp, shallow: Any = _UNSET) -> tuple[tuple, list[UOp]] | None:
  """(key, the graph's nodes in toposort order), or None when the graph holds an op templates do not cover.
  `shallow`: shallow_key(the single target) when the caller worked it out already.

  A graph template's output (tensor_ops/template.py) realized as it is brings its key along: no walk then."""
  if len(sink.src) == 1 and sink.arg is None and (c := sink.src[0]._cache) is not None and \
     (hint := c.get("sink_structure")) is not None:
    return hint[0], [*hint[1], sink.src[0], sink]
  # several gradients of one backward() realized together, in the order they were derived (gradient_template.py)
  if len(sink.src) > 1 and sink.arg is None and (c := sink.src[0]._cache) is not None and \
     (hint := c.get("sinks_structure")) is not None and len(hint[0]) == len(sink.src) and \
     all(a is b for a, b in zip(hint[0], sink.src)):
    return hint[1], [*hint[2], sink]
  if len(sink.src) == 1 and sink.arg is None and \
     (shallow := _shallow_key(sink.src[0]) if shallow is _UNSET else shallow) is not None:
    if (known := _shallow.get(shallow)) is not None: return known[0], _nodes_from(known[1], sink.src[0], sink)
    if (found := _walk(sink)) is not None and (recipe := _recipe_of(found[1], sink.src[0])) is not None:
      _shallow.put(shallow, (found[0], recipe))
    return found
  return _walk(sink)

# One op over buffers (or reshaped buffers) and constants, the usual small realize (`t + 1`, `a * b`), is known
# without a walk: a node with no buffer below it (a constant: graph.const's CONST/RESHAPE/EXPAND chain) is its own
# structure, as hash-consing makes it the same object each time, so the key names it (keeping it alive, with the
# DEVICE nodes); a buffer counts by its dtype, size, device, the view over it and which other operand is the same
# buffer. Such a key maps to the walked key and to where each node of the walk comes from.
_shallow: BoundedCache = BoundedCache("schedule.shallow_structures", 4096)
_VIEW_BUDGET = 16   # a buffer-free operand is looked at up to this many nodes deep (constants are a few)

def _buffer_of_view(u: UOp) -> UOp | None:
  if u.op is Ops.RESHAPE: u = u.src[0]
  return u if u.op is Ops.BUFFER and len(u.src) == 2 and u.src[0].op is Ops.UNIQUE else None

def _buffer_free(u: UOp) -> bool:
  """Whether u's graph holds no buffer and only ops templates cover (remembered on u)."""
  if (c := u._cache) is not None and (known := c.get("buffer_free")) is not None: return known
  seen, stack, free = set(), [u], True
  while stack:
    n = stack.pop()
    if n in seen: continue
    seen.add(n)
    if len(seen) > _VIEW_BUDGET or n.op is Ops.BUFFER or n.op is Ops.UNIQUE or n.op._value_ not in _CACHEABLE_VALUES:
      free = False
      break
    stack.extend(reversed(n.src))   # first sources first: `x * c` meets x's buffer before c's constant chain
  u._cached("buffer_free", lambda: free)
  return free

RESHAPE, BUFFER, UNIQUE = Ops.RESHAPE, Ops.BUFFER, Ops.UNIQUE

def _shallow_key(x: UOp) -> tuple | None:
  if x.op._value_ not in _CACHEABLE_VALUES or not x.src: return None
  parts: list = []
  bufs: list[UOp] = []
  for s in x.src:
    # (_buffer_of_view, inline: this runs on every small realize)
    b = s.src[0] if (op := s.op) is RESHAPE else s
    if b.op is BUFFER and len(b.src) == 2 and b.src[0].op is UNIQUE:
      same = bufs.index(b) if b in bufs else -1
      bufs.append(b)
      parts.append((id(b.dtype), b.arg, b.src[1], s.arg if s is not b else None, same))
    elif (c := s._cache) is not None and c.get("buffer_free") is True:   # (a constant asked for before)
      bufs.append(None)
      parts.append(s)
    elif op._value_ in _ALU_VALUES and (c is None or not c.get("buffer_free")):
      # an operand that computes something holds a buffer below (constants are CONST/RESHAPE/EXPAND chains): finding
      # out would walk down to it under every op of a new graph, so only a known answer is taken
      return None
    elif _buffer_free(s):
      bufs.append(None)
      parts.append(s)
    else: return None
  arg = x.arg
  if (t := type(arg)) is float: arg = ("f", arg.hex())
  elif t is bool: arg = ("b", arg)
  return (x.op._value_, id(x.dtype), arg, tuple(parts))

def _recipe_of(nodes: list[UOp], x: UOp) -> tuple | None:
  """Where each node of the walk comes from: (i, k) is part k of operand i (0: the UNIQUE, 1: the BUFFER, 2: the
  reshape over it), a UOp is that very node (buffer-free, or a DEVICE), None is the op and then the SINK."""
  parts: dict[UOp, tuple[int, int]] = {}
  for i, s in enumerate(x.src):
    if (b := _buffer_of_view(s)) is not None:
      for k, n in enumerate((b.src[0], b) + ((s,) if s is not b else ())): parts.setdefault(n, (i, k))
  recipe = []
  for n in nodes[:-2]:
    if n in parts: recipe.append(parts[n])
    elif n.op is Ops.UNIQUE or n.op is Ops.BUFFER: return None
    else: recipe.append(n)
  return tuple(recipe)

def buffer_free(u: UOp) -> bool:
  """Whether `u` is a small graph with no buffer in it (a constant: the same node every time it is made)."""
  return _buffer_free(u)

# shallow_key(x): the key of a one-op graph over buffers and constants (`t + 1`) that stands for its walked structure,
# without a walk; None for any other graph (the function itself: every tiny op asks)
shallow_key = _shallow_key

def shallow_recipe(shallow: tuple) -> tuple | None:
  """Where each node of a known one-op graph comes from (for nodes_of), None if that graph was not walked yet."""
  return None if (known := _shallow.get(shallow)) is None else known[1]

def nodes_of(recipe: tuple, x: UOp) -> list[UOp]:
  """The nodes of the one-op graph of target `x` in structure() order, its SINK left out (None in its place)."""
  return _nodes_from(recipe, x, None)

def _nodes_from(recipe: tuple, x: UOp, sink: UOp | None) -> list[UOp]:
  out = []
  for r in recipe:
    if type(r) is tuple:
      s = x.src[r[0]]
      b = s if s.op is Ops.BUFFER else s.src[0]
      out.append(b.src[0] if r[1] == 0 else b if r[1] == 1 else s)
    else: out.append(r)
  out.append(x)
  out.append(sink)
  return out

def _walk(sink: UOp) -> tuple[tuple, list[UOp]] | None:
  # one walk for the toposort (the order of UOp.toposort: sources first, left to right) and the key; called per
  # realize, so _arg_key is inlined, each node is pushed once with an iterator over its sources (no second visit) and
  # an op templates do not cover stops the walk where it is met
  pos: dict[UOp, int] = {}
  nodes: list[UOp] = []
  key: list[tuple] = []
  unique, cacheable = Ops.UNIQUE._value_, _CACHEABLE_VALUES
  if sink.op._value_ not in cacheable: return None
  at = pos.__getitem__
  stack = [(sink, iter(sink.src))]
  while stack:
    n, srcs = stack[-1]
    for s in srcs:
      if s not in pos:   # (a graph has no cycles: a node on the stack is not met again below itself)
        if s.op._value_ not in cacheable: return None
        stack.append((s, iter(s.src)))
        break
    else:
      stack.pop()
      op, arg, src = n.op._value_, n.arg, n.src
      if op == unique: arg = None
      elif (t := type(arg)) is float: arg = ("f", arg.hex())
      elif t is bool: arg = ("b", arg)
      pos[n] = len(nodes)
      nodes.append(n)
      key.append((op, id(n.dtype), arg, (at(src[0]),) if len(src) == 1 else tuple(map(at, src))))
  return tuple(key), nodes

# A graph's skeleton: its structure with each buffer (BUFFER and UNIQUE node) and float32 constant (CONST node) left
# out as a leaf, worked out bottom-up and kept on each node, so a graph made anew over old nodes (a new constant's
# `((x * k) + 1).exp()`) is known from its new nodes alone, without a walk. A node's skeleton is a number for (op,
# dtype, arg, its sources' numbers) and its leaves below it, left to right with repeats (the tree's order). Two graphs
# whose targets have the same number and whose leaves repeat alike are the same graph up to those leaves (nodes are
# hash-consed: equal parts over the same leaves are one node), so structure() of either gives one masked key and
# lists the leaves at the same positions. Small graphs only: a skeleton with more leaves or new nodes than below has
# none (the walk does it).
_SKELETON_LEAVES, _SKELETON_NEW_NODES = 16, 32
_skeleton_ids: dict[tuple, int] = {}
_next_skeleton_id = itertools.count().__next__   # (numbers are never reused: a forgotten one cannot alias)
_F32_ID, _CONST_V, _BUFFER_V, _UNIQUE_V = id(_canonical_dtype(dtypes.float32)), Ops.CONST._value_, Ops.BUFFER._value_, \
  Ops.UNIQUE._value_

def skeleton(x: UOp) -> tuple[int, tuple[UOp, ...]] | None:
  """(x's skeleton number, its leaves), or None when x's graph is no small one of the ops templates cover (or a graph
  template's output, which brings its structure key along: structure() has no walk to do for it)."""
  if (c := x._cache) is not None and c.get("sink_structure") is not None: return None
  if not (got := _skeleton(x, [_SKELETON_NEW_NODES])): return None
  sid, below, leaf = got
  return sid, ((x,) + below if leaf else below)

# what a node keeps: (its number, its leaves below it, whether it is a leaf itself). Never itself among its leaves: a
# node whose cache refers to it would live until the cyclic collector runs, and a BUFFER node's memory with it
def _skeleton(n: UOp, budget: list[int]) -> Any:
  if (c := n._cache) is not None and (known := c.get("skeleton")) is not None: return known
  if budget[0] <= 0: return False   # (not remembered: with more budget it may have one)
  budget[0] -= 1
  op = n.op._value_
  if op not in _CACHEABLE_VALUES: got = False
  else:
    # the key: [op] for a leaf that is a buffer's UNIQUE or a float32 constant (which one: by its leaf), else [op,
    # dtype, arg]; then the sources' numbers (the two forms differ in length for each op: no key stands for both)
    if op == _UNIQUE_V or (op == _CONST_V and id(n.dtype) == _F32_ID): key, leaf = [op], True
    else:
      arg = n.arg
      if (t := type(arg)) is float: arg = ("f", arg.hex())
      elif t is bool: arg = ("b", arg)
      key, leaf = [op, id(n.dtype), arg], op == _BUFFER_V
    below = ()
    for s in n.src:   # (a source known already, the usual one, without a call)
      if (sc := s._cache) is None or (got := sc.get("skeleton")) is None: got = _skeleton(s, budget)
      if not got: break
      key.append(got[0])
      below += (s,) + got[1] if got[2] else got[1]
    else: got = None
    if got is False or len(below) >= _SKELETON_LEAVES: got = False
    else:
      key = tuple(key)
      if (sid := _skeleton_ids.get(key)) is None:
        if len(_skeleton_ids) > 65536: _skeleton_ids.clear(); _f32_chains.clear()
        sid = _skeleton_ids[key] = _next_skeleton_id()
      got = (sid, below, leaf)
  if got is False and budget[0] <= 0: return False   # (out of budget somewhere below: not known for good)
  return n._remember("skeleton", got)

# A float32 constant's chain (graph.const's CONST -> RESHAPE [-> EXPAND]) has the same skeleton numbers for every value
# at one shape on one device (the CONST is a leaf): worked out once per chain kind, then given to each new chain as it is
# made (a new k's `x * k` would otherwise walk its three new nodes on the first realize). (DEVICE node, shape) -> the
# CONST's, the RESHAPE's and the EXPAND's number (None: no EXPAND); dropped with _skeleton_ids
_f32_chains: dict[tuple, tuple] = {}

def remember_const_skeleton(c: UOp, reshaped: UOp, expanded: UOp | None) -> None:
  """Give a new float32 constant's chain (c a CONST over a DEVICE node, `reshaped` its RESHAPE to ones, `expanded` the
  EXPAND over that or None) the skeletons _skeleton would work out for it."""
  kind = (c.src[0], reshaped.arg if expanded is None else expanded.arg)
  if (sids := _f32_chains.get(kind)) is None:
    if not (top := _skeleton(reshaped if expanded is None else expanded, [8])): return
    if len(_f32_chains) > 1024: _f32_chains.clear()
    _f32_chains[kind] = (c._cache["skeleton"][0], reshaped._cache["skeleton"][0], None if expanded is None else top[0])
    return
  c._remember("skeleton", (sids[0], (), True))
  leaves = (c,)
  reshaped._remember("skeleton", (sids[1], leaves, False))
  if expanded is not None: expanded._remember("skeleton", (sids[2], leaves, False))

def repeats(leaves: tuple) -> tuple | None:
  """Which leaves are the same node: None when all differ, else each leaf's first position."""
  if len(set(leaves)) == len(leaves): return None   # (a UOp hashes and compares by identity)
  first: dict[int, int] = {}
  return tuple([first.setdefault(id(n), i) for i, n in enumerate(leaves)])

# A reference to a buffer or node: r >= 0 is the node at position r of the graph, r < 0 the new buffer number -r-1.
# A recipe rebuilds a UOp from references: each step is a reference (int) or (maker of the node, indices of earlier
# steps, and the node's op, dtype and arg).

@dataclass(frozen=True)
class Template:
  outs: tuple[tuple[str, int, DType], ...]                 # device, size, dtype of each buffer the schedule makes
  # ast (None: a COPY), buffers, metadata, COPY arg, the values of the kernel's bound variables
  items: tuple[tuple[UOp | None, tuple[int, ...], dict, Any, dict], ...]
  becomes: tuple[tuple[int, tuple], ...]                   # (position of a realized node, recipe of its value)

  def instantiate(self, nodes: list[UOp]) -> tuple[list, dict[UOp, UOp]]:
    global ScheduleItem
    if ScheduleItem is None: from tinyplug.schedule import ScheduleItem   # (it imports this module)
    outs = [UOp.new_buffer(dev, size, dtype) for dev, size, dtype in self.outs]
    items = []
    for ast, refs, meta, copy_arg, var_vals in self.items:
      bufs = tuple([nodes[r] if r >= 0 else outs[-r - 1] for r in refs])
      if ast is None: ast = UOp(Ops.COPY, bufs[0].dtype, (bufs[1], bufs[0]), copy_arg)
      items.append(ScheduleItem(ast, bufs, dict(meta) if meta else {}, var_vals=dict(var_vals) if var_vals else {}))
    return items, self.becomes_over(nodes, outs)

  def becomes_over(self, nodes: list[UOp], outs: list[UOp]) -> dict[UOp, UOp]:
    """What each realized node of the graph `nodes` becomes, with `outs` the buffers made for the schedule."""
    def ref(r: int) -> UOp: return nodes[r] if r >= 0 else outs[-r - 1]
    built: dict[tuple, UOp] = {}   # a realized node and the view over it often become the same
    becomes = {}
    for p, recipe in self.becomes:
      if len(recipe) == 1: v = nodes[recipe[0]] if recipe[0] >= 0 else outs[-recipe[0] - 1]   # a buffer as it is
      elif (v := built.get(recipe)) is None: v = built[recipe] = _replay(recipe, ref)
      becomes[nodes[p]] = v
    return becomes

ScheduleItem: Any = None   # tinyplug.schedule's, bound on first use

def _replay(recipe: tuple, ref) -> UOp:
  if len(recipe) == 1: return ref(recipe[0])
  built: list[UOp] = []
  for step in recipe:
    if type(step) is int: built.append(ref(step))
    else: built.append(step[0](tuple([built[i] for i in step[1]])))   # (maker, sources, op, dtype, arg)
  return built[-1]

def make_template(nodes: list[UOp], items: list, becomes: dict[UOp, UOp]) -> Template | None:
  """The schedule (items, becomes) of the graph `nodes` in terms of positions; None if something is not expressible."""
  pos = {n: i for i, n in enumerate(nodes)}
  outs: dict[UOp, int] = {}
  def ref(b: UOp) -> int | None:
    if b in pos: return pos[b]
    if b.op is not Ops.BUFFER or b.src[0].op is not Ops.UNIQUE: return None
    if b not in outs: outs[b] = len(outs)
    return -outs[b] - 1
  titems = []
  for it in items:
    refs = [ref(b) for b in it.buf_uops]
    if None in refs: return None
    ast, copy_arg = it.ast, None
    if ast.op is Ops.COPY:   # a COPY's "ast" names its buffers: rebuilt from them
      if ast.src != (it.buf_uops[1], it.buf_uops[0]): return None
      ast, copy_arg = None, it.ast.arg
    elif any(u.op is Ops.BUFFER for u in ast.toposort()): return None
    titems.append((ast, tuple(refs), dict(it.metadata), copy_arg, dict(it.var_vals)))
  tbecomes = []
  for node, value in becomes.items():
    if node not in pos or (recipe := _recipe(value, pos, outs)) is None: return None
    tbecomes.append((pos[node], recipe))
  return Template(tuple((b.src[1].arg, b.arg, b.dtype) for b in outs), tuple(titems), tuple(tbecomes))

def _recipe(value: UOp, pos: dict[UOp, int], outs: dict[UOp, int]) -> tuple | None:
  def leaf(u: UOp) -> int | None: return pos[u] if u in pos else (-outs[u] - 1 if u in outs else None)
  steps: list = []
  index: dict[UOp, int] = {}
  for u in value.toposort(gate=lambda u: leaf(u) is None):
    if (r := leaf(u)) is not None: steps.append(r)
    elif u.op in (Ops.BUFFER, Ops.UNIQUE): return None   # a buffer the template would not know how to make
    else:   # its cache key worked out once (the maker); what it makes, for the disk (template_cache.py)
      steps.append((uop_maker(u.op, u.dtype, u.arg), tuple(index[s] for s in u.src), u.op, u.dtype, u.arg))
    index[u] = len(steps) - 1
  return tuple(steps)
