"""graph_rewrite: apply a PatternMatcher to a whole graph until nothing matches (iteratively: no recursion limit)."""
from __future__ import annotations
import sys, time
from typing import Any
from tinyplug import events
from tinyplug.uop.ops import UOp
from tinyplug.uop.upat import PatternMatcher

class RewriteLoopError(RuntimeError):
  pass

def graph_rewrite(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False, name: str | None = None,
                  walk: bool = False, memo: dict[UOp, UOp] | None = None) -> UOp:
  """Rewrite `sink` with `pm` to a fixed point and return the new graph.

  By default a node's sources are rewritten before the node itself (children first). With `bottom_up=True`
  the patterns are tried on a node before its sources are visited, so a rule sees the graph above the leaves
  unchanged. Every node is rewritten once per call; results are shared across the graph.

  `walk=True` makes one pass: what a rule returns is used as it is, neither rewritten again nor walked into.

  `memo`: what earlier calls with the same matcher (children first, no ctx, no walk) found, updated by this one: a
  node's final form then depends on the node alone, so sub-graphs shared between calls are rewritten once. Not used
  while rewrites are recorded (the visualizer must see every match)."""
  if memo is not None and (ctx is not None or bottom_up or walk): raise ValueError("memo needs a context-free rewrite")
  if memo is None or events.enabled("rewrite"): memo = {}
  return _run(sink, pm, ctx, bottom_up, name, memo, sys._getframe(1), walk)

def graph_rewrite_map(sink: UOp, pm: PatternMatcher, ctx: Any = None, bottom_up: bool = False,
                      name: str | None = None, walk: bool = False) -> dict[UOp, UOp]:
  """Like graph_rewrite, but returns what each node of the input graph became."""
  replace: dict[UOp, UOp] = {}
  _run(sink, pm, ctx, bottom_up, name, replace, sys._getframe(1), walk)
  return {u: replace[u] for u in sink.toposort() if u in replace}

def _run(sink: UOp, pm: PatternMatcher, ctx: Any, bottom_up: bool, name: str | None, replace: dict[UOp, UOp], frame,
         walk: bool = False) -> UOp:
  if not events.enabled("rewrite"): return _rewrite(sink, None, pm.pdict, ctx, bottom_up, replace, walk)
  matches: list[events.RewriteMatch] = []
  # a substitute's only rule is "look the node up in the mapping": the change belongs to the code that built the
  # mapping, so both the step's caller and its matches name the line that called substitute
  sub = frame.f_code is UOp.substitute.__code__ and frame.f_back is not None
  if sub: frame = frame.f_back
  where = (frame.f_code.co_filename, frame.f_lineno) if sub else None
  def tracked(u: UOp, c: Any) -> UOp | None:
    t0 = time.perf_counter_ns()
    ret, row = pm.rewrite_tracked(u, c)
    if row is not None and ret is not u:
      file, line = where or (row.file, row.line)
      matches.append(events.RewriteMatch(u, ret, file, line, row.owner, time.perf_counter_ns() - t0))
    return ret
  caller = f"{frame.f_code.co_filename}:{frame.f_lineno}"
  start = time.perf_counter_ns()
  out = _rewrite(sink, tracked, None, ctx, bottom_up, replace, walk)
  events.emit("rewrite", events.RewriteEvent(name or "graph_rewrite", sink, out, tuple(matches), events.current_scope(),
                                             start, time.perf_counter_ns(), caller))
  return out

def _rewrite(root: UOp, rewrite_fn, pdict, ctx: Any, bottom_up: bool, replace: dict[UOp, UOp],
             walk: bool = False) -> UOp:
  """The engine. Either `rewrite_fn(u, ctx)` (tracing) or `pdict` (op -> one compiled matcher for all its rows)."""
  # replace[n] is n's final form. Every value in it is a fixed point: its sources are final and no rule matches it.
  in_progress: set[UOp] = set()
  # stack frames: (node, stage, extra). stage 0: first visit; 1: sources done, rebuild; 2: node became extra[0]
  stack: list[tuple[UOp, int, Any]] = [(root, 0, None)]
  push, pop = stack.append, stack.pop
  by_value = pdict.by_value if pdict is not None else None
  while stack:
    n, stage, extra = pop()
    if stage == 0:
      if n in replace: continue
      if n in in_progress: raise RewriteLoopError(f"graph_rewrite loops: {n.op} is rewritten into a graph containing itself")
      in_progress.add(n)
      if bottom_up:
        if rewrite_fn is not None: new = rewrite_fn(n, ctx)
        else: new = (by_value[n.op._value_] or pdict[n.op])(n, ctx)
        if new is not None and new is not n:
          if walk: replace[n] = new; in_progress.discard(n); continue   # one pass: the result as it is
          push((n, 2, (new, n))); push((new, 0, None))
          continue
      push((n, 1, None))
      for s in reversed(n.src):
        if s not in replace: push((s, 0, None))
    elif stage == 1:
      src = n.src
      new_src = tuple([replace[s] for s in src])
      if new_src == src: rebuilt = n  # tuples of UOps compare by identity (UOp has no __eq__)
      else:
        rebuilt = UOp(n.op, n.dtype, new_src, n.arg)
        if rebuilt in replace:
          replace[n] = replace[rebuilt]; in_progress.discard(n); continue
      if bottom_up and rebuilt is n: new = None
      elif rewrite_fn is not None: new = rewrite_fn(rebuilt, ctx)
      else: new = (by_value[rebuilt.op._value_] or pdict[rebuilt.op])(rebuilt, ctx)
      if new is None or new is rebuilt:
        replace[n] = replace[rebuilt] = rebuilt; in_progress.discard(n)
      elif walk: replace[n] = new; in_progress.discard(n)
      else:
        in_progress.add(rebuilt)
        push((n, 2, (new, rebuilt))); push((new, 0, None))
    else:
      new, rebuilt = extra
      replace[n] = replace[new]
      if rebuilt is not n: replace[rebuilt] = replace[new]
      in_progress.discard(n); in_progress.discard(rebuilt)
  return replace[root]
