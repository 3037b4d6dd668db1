"""Graphs of a trace: replaying a rewrite step match by match, text renderings, diffs and exports.

A step stores its input graph and, per match, which node was replaced by which. The graph after match k is the
input with the first k replacements applied everywhere (consumers rebuilt on top of the new nodes). `replay`
computes it incrementally: only the consumers of the replaced node are recomputed, and what changed is returned as
a delta (node ids added and removed), so the browser gets the input graph once plus small deltas."""
from __future__ import annotations
import difflib
from dataclasses import dataclass, field
from tinyplug_viz_web.reader import Node, Step, Trace

class ReplayError(Exception):
  pass

@dataclass
class Replay:
  base: list[int]                       # node ids of the input graph
  deltas: list[tuple[list[int], list[int]]]   # per match: (added, removed)
  roots: list[int]                      # graph root after each match (roots[0]: the input)
  extra: dict[int, Node] = field(default_factory=dict)   # rebuilt nodes the trace never recorded (negative ids)

  def graph_at(self, k: int) -> set[int]:
    """Node ids of the graph after the first k matches."""
    g = set(self.base)
    for added, removed in self.deltas[:k]:
      g.difference_update(removed)
      g.update(added)
    return g

def reachable(nodes: dict[int, Node], extra: dict[int, Node], root: int) -> list[int]:
  seen, stack, order = {root}, [root], []
  while stack:
    n = stack.pop()
    order.append(n)
    node = nodes.get(n) or extra[n]
    for s in node.src:
      if s not in seen: seen.add(s); stack.append(s)
  return order

def replay(trace: Trace, step: Step) -> Replay:
  nodes, key_index = trace.nodes, trace.key_index
  extra: dict[int, Node] = {}
  extra_keys: dict[tuple, int] = {}
  def get(n: int) -> Node: return nodes[n] if n >= 0 else extra[n]
  def intern(op: str, dtype: str, src: tuple[int, ...], arg: str) -> int:
    key = (op, dtype, src, arg)
    if (i := key_index.get(key)) is not None: return i
    if (i := extra_keys.get(key)) is None:
      i = extra_keys[key] = -1 - len(extra)
      extra[i] = Node(op, dtype, src, arg)
    return i

  replace: dict[int, int] = {}
  memo: dict[int, int] = {}                  # evaluated node -> its form in the current graph
  users: dict[int, set[int]] = {}            # node -> evaluated nodes whose form was computed from it

  def use(x: int, by: int) -> None: users.setdefault(x, set()).add(by)

  def evaluate(root: int) -> int:
    stack: list[tuple[int, int, int]] = [(root, 0, 0)]
    active: set[int] = set()
    while stack:
      n, stage, via = stack.pop()
      if stage == 0:
        if n in memo: continue
        if n in active: raise ReplayError(f"node {n} is rewritten into a graph containing itself")
        active.add(n)
        if n in replace:
          t = replace[n]; use(t, n)
          stack.append((n, 2, t))
          if t not in memo: stack.append((t, 0, 0))
          continue
        node = get(n)
        stack.append((n, 1, 0))
        for s in node.src:
          use(s, n)
          if s not in memo: stack.append((s, 0, 0))
      elif stage == 1:
        node = get(n)
        new_src = tuple(memo[s] for s in node.src)
        r = n if new_src == node.src else intern(node.op, node.dtype, new_src, node.arg)
        if r != n:
          use(r, n)
          if r in replace:
            t = replace[r]; use(t, n)
            stack.append((n, 2, t))
            if t not in memo: stack.append((t, 0, 0))
            continue
        memo[n] = r; active.discard(n)
      else:
        memo[n] = memo[via]; active.discard(n)
    return memo[root]

  def invalidate(x: int) -> None:
    stack, seen = [x], {x}
    while stack:
      y = stack.pop()
      memo.pop(y, None)
      for u in users.get(y, ()):
        if u not in seen: seen.add(u); stack.append(u)

  # reference counts of the current graph, so a delta costs what changed, not the size of the graph
  refs: dict[int, int] = {}
  def incref(root: int, added: list[int]) -> None:
    stack = [root]
    while stack:
      n = stack.pop()
      refs[n] = refs.get(n, 0) + 1
      if refs[n] == 1:
        added.append(n); stack.extend(get(n).src)
  def decref(root: int, removed: list[int]) -> None:
    stack = [root]
    while stack:
      n = stack.pop()
      refs[n] -= 1
      if refs[n] == 0:
        del refs[n]; removed.append(n); stack.extend(get(n).src)

  root = evaluate(step.input)
  base: list[int] = []
  incref(root, base)
  roots, deltas = [root], []
  for m in step.matches:
    if m.before in replace and replace[m.before] == m.after:
      deltas.append(([], [])); roots.append(root); continue
    replace[m.before] = m.after
    invalidate(m.before)
    new_root = evaluate(step.input)
    added: list[int] = []
    removed: list[int] = []
    if new_root != root:
      incref(new_root, added)
      decref(root, removed)
    both = set(added) & set(removed)   # a node that left and came back in one step did not change
    deltas.append(([n for n in added if n not in both], [n for n in removed if n not in both]))
    roots.append(root := new_root)
  return Replay(base, deltas, roots, extra)

# ---- text ----

def node_label(n: Node) -> str:
  return f"{n.op} {n.dtype}" + (f" {n.arg}" if n.arg else "")

def render_expr(get, root: int, max_lines: int = 400) -> list[str]:
  """An indented tree of the expression at `root`; a node seen before is printed as a reference (`^x3`)."""
  names: dict[int, str] = {}
  shared: set[int] = set()
  count: dict[int, int] = {}
  for n in _topo(get, root):
    for s in get(n).src: count[s] = count.get(s, 0) + 1
  shared = {n for n, c in count.items() if c > 1}
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
  def get(n: int) -> Node: return trace.nodes[n] if n >= 0 else rep.extra[n]
  m = step.matches[k - 1]
  before = render_expr(get, m.before)
  after = render_expr(get, m.after)
  return list(difflib.unified_diff(before, after, "before", "after", lineterm="", n=max(len(before), len(after))))

def source_lines(file: str, line: int, context: int = 3) -> list[tuple[int, str]]:
  """The lines around a pattern's location, read from disk (python files only), for the right sidebar."""
  if not file.endswith(".py"): return []
  try:
    with open(file, encoding="utf-8", errors="replace") as f: text = f.read().splitlines()
  except OSError: return []
  lo, hi = max(1, line - context), min(len(text), line + context + 6)
  return [(i, text[i - 1]) for i in range(lo, hi + 1)]

# ---- exports ----

def graph_json(trace: Trace, rep: Replay, k: int) -> dict:
  ids = sorted(rep.graph_at(k))
  def get(n: int) -> Node: return trace.nodes[n] if n >= 0 else rep.extra[n]
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
