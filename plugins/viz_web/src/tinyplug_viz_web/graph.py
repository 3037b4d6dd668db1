"""Graphs of a trace: replaying a rewrite step match by match, text renderings, diffs and exports.

A step stores its input graph and, per match, which node was replaced by which. The graph after match k is the
input with the first k replacements applied everywhere (consumers rebuilt on top of the new nodes). `replay`
computes it incrementally: only the consumers of the replaced node are recomputed, and what changed is returned as
a delta (node ids added and removed), so the browser gets the input graph once plus small deltas."""
from __future__ import annotations
import difflib, re
from tinyplug_viz_web.nodes import Node
from tinyplug_viz_web.reader import Step, Trace

class ReplayError(Exception):
  pass

class Replay:
  """The graphs of one step, computed match by match on demand (`advance`), in two id spaces:

  - real ids: the trace's node ids (negative for rebuilt nodes the trace never recorded): exact, used for exports
    and diffs (`roots[k]` is the root after k matches);
  - display ids: a node rebuilt only because one of its sources changed keeps the display id of the node it was
    rebuilt from, so the browser sees "this node's sources changed" instead of "this node was replaced". A match
    then costs a few records to send, however deep the graph is."""
  def __init__(self, trace: Trace, step: Step):
    self.trace, self.step = trace, step
    self.nodes = trace.nodes
    # a rebuilt node equal to one the trace recorded for this step gets that node's id (exports and the final root
    # then use the recorded ids); only this step's nodes can be such a node
    self.key_index = {self.nodes[n]: n for n in _step_nodes(trace, step)}
    self.extra: dict[int, Node] = {}
    self.extra_keys: dict[tuple, int] = {}
    self.replace: dict[int, int] = {}
    self.memo: dict[int, int] = {}
    self.users: dict[int, set[int]] = {}
    self.origin: dict[int, int] = {}               # rebuilt real node -> the node it was rebuilt from
    self.refs: dict[int, int] = {}
    self.disp_of: dict[int, int] = {}              # real -> display id (kept after the node leaves the graph)
    self.live: dict[int, int] = {}                 # display id -> real node currently showing it
    self.next_fresh = trace.nodes.max_id() + 1
    self.deltas: list[tuple[list[int], list[int]]] = []       # real-id deltas per match
    self.display: list[dict] = []                              # display deltas per match
    root = self._evaluate(step.input)
    added: list[int] = []
    self._incref(root, added)
    for n in added: self.disp_of[n] = self.live_set(n, n)
    self.base = added
    self.roots = [root]

  def live_set(self, real: int, disp: int) -> int:
    self.live[disp] = real
    return disp

  def get(self, n: int) -> Node: return self.nodes[n] if n >= 0 else self.extra[n]

  def _intern(self, op: str, dtype: str, src: tuple[int, ...], arg: str) -> int:
    key = (op, dtype, src, arg)
    if (i := self.key_index.get(key)) is not None: return i
    if (i := self.extra_keys.get(key)) is None:
      i = self.extra_keys[key] = -1 - len(self.extra)
      self.extra[i] = Node(op, dtype, src, arg)
    return i

  def _evaluate(self, root: int) -> int:
    memo, replace, users, get = self.memo, self.replace, self.users, self.get
    stack: list[tuple[int, int, int]] = [(root, 0, 0)]
    active: set[int] = set()
    while stack:
      n, stage, via = stack.pop()
      if stage == 0:
        if n in memo: continue
        if n in active: raise ReplayError(f"node {n} is rewritten into a graph containing itself")
        active.add(n)
        if n in replace:
          t = replace[n]; users.setdefault(t, set()).add(n)
          stack.append((n, 2, t))
          if t not in memo: stack.append((t, 0, 0))
          continue
        stack.append((n, 1, 0))
        for s in get(n).src:
          users.setdefault(s, set()).add(n)
          if s not in memo: stack.append((s, 0, 0))
      elif stage == 1:
        node = get(n)
        new_src = tuple([memo[s] for s in node.src])
        r = n if new_src == node.src else self._intern(node.op, node.dtype, new_src, node.arg)
        if r != n:
          users.setdefault(r, set()).add(n)
          self.origin.setdefault(r, n)
          if r in replace:
            t = replace[r]; users.setdefault(t, set()).add(n)
            stack.append((n, 2, t))
            if t not in memo: stack.append((t, 0, 0))
            continue
        memo[n] = r; active.discard(n)
      else:
        memo[n] = memo[via]; active.discard(n)
    return memo[root]

  def _invalidate(self, x: int) -> None:
    memo, users = self.memo, self.users
    stack, seen = [x], {x}
    while stack:
      y = stack.pop()
      if memo.pop(y, None) is None and y != x: continue   # not computed, so nothing was computed from it
      for u in users.get(y, ()):
        if u not in seen: seen.add(u); stack.append(u)

  def _incref(self, root: int, added: list[int]) -> None:
    refs, stack = self.refs, [root]
    while stack:
      n = stack.pop()
      c = refs.get(n, 0) + 1
      refs[n] = c
      if c == 1: added.append(n); stack.extend(self.get(n).src)

  def _decref(self, root: int, removed: list[int]) -> None:
    refs, stack = self.refs, [root]
    while stack:
      n = stack.pop()
      refs[n] -= 1
      if refs[n] == 0: del refs[n]; removed.append(n); stack.extend(self.get(n).src)

  def _record(self, real: int) -> list:
    n = self.get(real)
    return [n.op, n.dtype, n.arg, [self.disp_of[s] for s in n.src]]

  def advance(self, k: int) -> None:
    """Compute the graphs up to and including match k."""
    matches = self.step.matches
    while len(self.deltas) < min(k, len(matches)):
      m = matches[len(self.deltas)]
      root = self.roots[-1]
      added: list[int] = []
      removed: list[int] = []
      if self.replace.get(m.before) != m.after:
        self.replace[m.before] = m.after
        self._invalidate(m.before)
        new_root = self._evaluate(self.step.input)
        if new_root != root:
          self._incref(new_root, added)
          self._decref(root, removed)
          root = new_root
      both = set(added) & set(removed)
      added = [n for n in added if n not in both]
      removed = [n for n in removed if n not in both]
      self.deltas.append((added, removed))
      self.roots.append(root)
      # display ids: free those of removed nodes, then give each added node its origin's id when that is free
      before_disp = {self.disp_of[n]: self._record(n) for n in removed}
      for n in removed:
        d = self.disp_of[n]
        if self.live.get(d) == n: del self.live[d]
      for n in added:
        cand = self.disp_of.get(self.origin[n]) if n in self.origin else None
        if cand is None or cand in self.live:   # not a rebuild (or its origin's id is taken): its own id
          cand = self.disp_of.get(n, n if n >= 0 else None)
          if cand is None or cand in self.live: cand, self.next_fresh = self.next_fresh, self.next_fresh + 1
        self.disp_of[n] = self.live_set(n, cand)
      new_nodes, changed = {}, {}
      for n in added:
        d, rec = self.disp_of[n], self._record(n)
        old = before_disp.get(d)
        if old is None or old[:3] != rec[:3]: new_nodes[d] = rec
        elif old[3] != rec[3]: changed[d] = rec[3]
      gone = [d for d in before_disp if d not in self.live]
      after = self.disp_of.get(self.memo.get(m.after, m.after))
      self.display.append({"added": new_nodes, "removed": gone, "changed": changed, "after": after})

  def graph_at(self, k: int) -> set[int]:
    """Real node ids of the graph after the first k matches."""
    self.advance(k)
    g = set(self.base)
    for added, removed in self.deltas[:k]:
      g.difference_update(removed)
      g.update(added)
    return g

  def base_records(self) -> dict[int, list]:
    return {self.disp_of[n]: [self.get(n).op, self.get(n).dtype, self.get(n).arg, list(self.get(n).src)] for n in self.base}

def _step_nodes(trace: Trace, step: Step) -> set[int]:
  roots = [step.input, step.output] + [x for m in step.matches for x in (m.before, m.after)]
  seen: set[int] = set()
  for r in roots:
    if r in seen: continue
    seen.add(r)
    stack = [r]
    while stack:
      for s in trace.nodes[stack.pop()].src:
        if s not in seen: seen.add(s); stack.append(s)
  return seen

def reachable(nodes: dict[int, Node], extra: dict[int, Node], root: int) -> list[int]:
  seen, stack, order = {root}, [root], []
  while stack:
    n = stack.pop()
    order.append(n)
    node = nodes.get(n) or extra[n]
    for s in node.src:
      if s not in seen: seen.add(s); stack.append(s)
  return order

def replay(trace: Trace, step: Step, upto: int | None = None) -> Replay:
  """The step's graphs, computed up to match `upto` (default: all of them)."""
  rep = Replay(trace, step)
  rep.advance(len(step.matches) if upto is None else upto)
  return rep

# ---- text ----

_ENUM_REPR = re.compile(r"<([A-Za-z_][\w.]*): [^<>]*>")
INLINE_OPS = frozenset({"CONST", "VCONST", "DEVICE", "UNIQUE", "LUNIQUE"})   # leaves printed where used, not named

def node_label(n: Node) -> str:
  arg = _ENUM_REPR.sub(r"\1", n.arg) if "<" in n.arg else n.arg   # traces from before the recorder cleaned enums
  return f"{n.op} {n.dtype}" + (f" {arg}" if arg else "")

def render_expr(get, root: int, max_lines: int = 400) -> list[str]:
  """An indented tree of the expression at `root`; a node seen before is printed as a reference (`^x3`)."""
  names: dict[int, str] = {}
  shared: set[int] = set()
  count: dict[int, int] = {}
  for n in _topo(get, root):
    for s in get(n).src: count[s] = count.get(s, 0) + 1
  shared = {n for n, c in count.items() if c > 1 and not (get(n).op in INLINE_OPS and not get(n).src)}
  lines: list[str] = []
  stack: list[tuple[int, int]] = [(root, 0)]
  while stack and len(lines) < max_lines:
    n, depth = stack.pop()
    pad = "  " * depth
    if n in names:
      lines.append(f"{pad}^{names[n]}")
      continue
    node = get(n)
    tag = ""
    if n in shared:
      names[n] = f"x{len(names)}"
      tag = f"{names[n]} = "
    lines.append(f"{pad}{tag}{node_label(node)}")
    stack.extend((s, depth + 1) for s in reversed(node.src))
  if stack: lines.append("...")
  return lines

def _topo(get, root: int) -> list[int]:
  seen, stack, order = {root}, [root], []
  while stack:
    n = stack.pop(); order.append(n)
    for s in get(n).src:
      if s not in seen: seen.add(s); stack.append(s)
  return order

def match_diff(trace: Trace, rep: Replay, step: Step, k: int) -> list[str]:
  """A unified diff of the replaced expression: its form before match k (1-based) and what replaced it."""
  rep.advance(k)
  get = rep.get
  m = step.matches[k - 1]
  before = render_expr(get, m.before)
  after = render_expr(get, m.after)
  return list(difflib.unified_diff(before, after, "before", "after", lineterm="", n=max(len(before), len(after))))

# ---- exports ----

def graph_json(trace: Trace, rep: Replay, k: int) -> dict:
  ids = sorted(rep.graph_at(k))
  get = rep.get
  return {"format": "tinyplug-graph", "version": 1, "root": rep.roots[k],
          "nodes": [{"id": i, "op": get(i).op, "dtype": get(i).dtype, "arg": get(i).arg, "src": list(get(i).src)}
                    for i in ids]}

def _dot_escape(s: str) -> str: return s.replace("\\", "\\\\").replace('"', '\\"')

def graph_dot(trace: Trace, rep: Replay, k: int, name: str = "uops") -> str:
  g = graph_json(trace, rep, k)
  out = [f'digraph "{_dot_escape(name)}" {{', "  rankdir=LR;", '  node [shape=box, style="rounded,filled", fontname="monospace"];']
  for n in g["nodes"]:
    label = "\\n".join(_dot_escape(x) for x in (n["op"], n["dtype"], n["arg"][:60]) if x)
    out.append(f'  n{n["id"] if n["id"] >= 0 else "m" + str(-n["id"])} [label="{label}", fillcolor="{op_color(n["op"])}"];')
  def nid(i: int) -> str: return f"n{i}" if i >= 0 else f"nm{-i}"
  for n in g["nodes"]:
    for port, s in enumerate(n["src"]): out.append(f"  {nid(s)} -> {nid(n['id'])} [label=\"{port}\"];")
  out.append("}")
  return "\n".join(out) + "\n"

OP_GROUPS = {
  "#ffffc0": ("ADD", "MUL", "SUB", "FDIV", "IDIV", "MOD", "MAX", "POW", "CMPLT", "CMPNE", "CMPEQ", "AND", "OR", "XOR",
              "SHL", "SHR", "THREEFRY", "WHERE", "MULACC", "EXP2", "LOG2", "SIN", "SQRT", "RECIPROCAL", "NEG", "TRUNC"),
  "#c8f9d4": ("RESHAPE", "PERMUTE", "EXPAND", "PAD", "SHRINK", "FLIP"),
  "#ffc0c0": ("LOAD",), "#87ceeb": ("STORE",), "#c4a0f0": ("RANGE", "END", "SPECIAL"), "#ff7070": ("REDUCE", "REDUCE_AXIS"),
  "#a0c0ff": ("BUFFER", "DEFINE_GLOBAL", "DEFINE_LOCAL", "DEFINE_REG", "DEFINE_VAR", "BIND"),
  "#e0e0e0": ("CONST", "VCONST"), "#ffb060": ("CONTIGUOUS", "COPY", "ASSIGN", "AFTER", "KERNEL"),
  "#b0e0e0": ("INDEX",), "#d0b090": ("CAST", "BITCAST"), "#ffffff": ("SINK",),
}
_OP_COLOR = {op: color for color, ops in OP_GROUPS.items() for op in ops}

def op_color(op: str) -> str: return _OP_COLOR.get(op, "#f0f0f0")
