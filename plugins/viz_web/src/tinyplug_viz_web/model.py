"""What the web UI and the text viewer show, computed from a loaded trace: the context tree, step graphs with
deltas, match details, kernel code, the profile timeline, search, hot rules and the Chrome trace export.

Everything here is plain data in, plain data (JSON-ready) out; the server runs it in worker threads."""
from __future__ import annotations
import os, threading, time
from collections import OrderedDict
from typing import Any
from tinyplug_viz_web.graph import Replay, graph_dot, graph_json, match_diff, reachable
from tinyplug_viz_web.fusion import SHARED, Split, boundaries, schedule_split, why_not_fused
from tinyplug_viz_web.nodes import Node
from tinyplug_viz_web.reader import Context, Match, Step, Trace, TraceError, load_trace

HOST_KINDS = ("schedule", "codegen", "compile")     # host work; run and copy spans go on their device's track
MEMORY_KINDS = ("alloc", "free")

def short_path(path: str) -> str:
  """`.../tinyplug/codegen/__init__.py` -> `codegen/__init__.py` (the last two parts), for labels."""
  parts = path.replace("\\", "/").split("/")
  return "/".join(parts[-2:])

class TraceView:
  """A loaded trace plus caches of replays; thread-safe."""
  def __init__(self, trace: Trace):
    self.trace = trace
    self.lock = threading.Lock()
    self.replays: OrderedDict[tuple[int, int], Replay] = OrderedDict()
    self._node_index: dict[int, tuple[int, int, int]] | None = None
    self._add_synthetic_steps()

  @classmethod
  def open(cls, path: str) -> TraceView: return cls(load_trace(path))

  def _add_synthetic_steps(self) -> None:
    """Schedules get 'tensor graph' (coloured by kernel), 'split into kernels' (one match per scheduler decision)
    and one 'kernel AST' view per kernel, so one can see how the graph was split and why."""
    self.splits: dict[int, Split] = {}
    for c in self.trace.contexts:
      if c.schedule is None: continue
      names = self.kernel_names(c)
      by_ast = {item["ast"]: kname for item, kname in zip(c.schedule["items"], names)}
      for s in c.steps:   # a step that made a kernel's AST (e.g. "simplify kernel") is named after that kernel
        if (kname := by_ast.get(s.output)) is not None and kname not in s.name: s.name = f"{s.name}: {kname}"
      views = [Step(-1, c.id, None, "View tensor graph", c.loc or "", c.start, c.start, c.schedule["sink"],
                    c.schedule["sink"], [])]
      if (split := schedule_split(self.trace, c, names)) is not None:
        self.splits[c.id] = split
        views.append(self._split_step(c, split))
      for item, kname in zip(c.schedule["items"], names):
        views.append(Step(-1, c.id, None, f"View AST of {kname}", c.loc or "", c.start, c.start, item["ast"],
                          item["ast"], []))
      c.steps[:0] = views
      for i, s in enumerate(c.steps): s.index = i

  def kernel_names(self, c: Context) -> list[str]:
    assert c.schedule is not None
    return [self.trace.contexts[i["ctx"]].display if i["ctx"] is not None else self._item_name(i, n)
            for n, i in enumerate(c.schedule["items"])]

  def _split_step(self, c: Context, split: Split) -> Step:
    """The scheduler's decisions as rewrite matches: each node that became a kernel is replaced by a KERNEL node
    naming the kernel and its rule; each reduction computed as a row kernel is marked as such."""
    nodes = self.trace.nodes
    next_id = nodes.max_id() + 1
    kernel_of = {k["node"]: k for k in split.kernels if k["node"] is not None}
    matches = []
    for d in split.decisions:
      n = nodes[d["node"]]
      if d["realized"] and d["node"] in kernel_of:
        new = Node("KERNEL", n.dtype, n.src, f"{kernel_of[d['node']]['name']} <- {n.op}: {d['rule']}")
      else: new = Node(n.op, n.dtype, n.src, f"{n.arg} [{d['rule']}]".strip())
      nodes[next_id] = new
      split.alias[next_id] = d["node"]
      matches.append(Match(d["node"], next_id, d["file"], d["line"], "schedule", 0))
      next_id += 1
    sink = c.schedule["sink"]   # type: ignore[index]
    return Step(-1, c.id, "schedule", f"split into {len(split.kernels)} kernels", c.loc or "", c.start, c.start,
                sink, sink, matches)

  def _item_name(self, item: dict, n: int) -> str:
    """A schedule item that was not compiled in this trace: a copy, or a kernel compiled before tracing began."""
    op = self.trace.nodes[item["ast"]].op
    return op.lower() if op != "SINK" else f"kernel {n} (compiled before tracing)"

  # ---- contexts ----
  def contexts(self) -> dict:
    t = self.trace
    out = []
    for c in t.contexts:
      out.append({
        "id": c.id, "kind": c.kind, "name": c.name, "display": c.display, "parent": c.parent, "loc": c.loc,
        "start": c.start - t.t0, "end": None if c.end is None else c.end - t.t0, "children": c.children, "pid": c.pid,
        "has_code": c.kernel is not None, "device": c.kernel["device"] if c.kernel else None,
        "kernels": [{"ctx": i["ctx"], "name": name} for i, name in zip(c.schedule["items"], self.kernel_names(c))]
                   if c.schedule else [],
        "has_split": c.id in self.splits,
        "steps": [{"i": s.index, "title": s.title, "pass": s.pass_name, "name": s.name, "caller": s.caller,
                   "matches": len(s.matches), "time_ns": s.end - s.start} for s in c.steps],
      })
    return {"path": t.path, "run": t.run, "files": [os.path.basename(f) for f in t.files], "warnings": t.warnings,
            "contexts": out, "spans": len(t.spans), "nodes": len(t.nodes)}

  # ---- steps ----
  def replay(self, ctx: int, step: int) -> tuple[Step, Replay]:
    """The cached replay of a step (computed lazily: call `advance` under its lock, or use `replayed`)."""
    s = self.trace.step(ctx, step)
    key = (ctx, step)
    with self.lock:
      if key in self.replays:
        self.replays.move_to_end(key)
        return s, self.replays[key]
    rep = Replay(self.trace, s)
    rep.lock = threading.Lock()   # type: ignore[attr-defined]
    with self.lock:
      rep = self.replays.setdefault(key, rep)
      while len(self.replays) > 64: self.replays.popitem(last=False)
    return s, rep

  def replayed(self, ctx: int, step: int, k: int) -> tuple[Step, Replay]:
    s, rep = self.replay(ctx, step)
    with rep.lock: rep.advance(k)   # type: ignore[attr-defined]
    return s, rep

  def node(self, rep: Replay, n: int) -> Node: return self.trace.nodes[n] if n >= 0 else rep.extra[n]

  def step_graph(self, ctx: int, step: int, start: int = 0, upto: int | None = None, budget_s: float = 0.35) -> dict:
    """The input graph (when start is 0) plus display deltas for matches start+1..upto: what the browser needs.

    Without `upto`, as many matches as fit in `budget_s` of replay (at least 100) are sent; the page asks for the
    rest as the user steps on, so a step with thousands of matches opens as fast as a small one."""
    s, rep = self.replay(ctx, step)
    total = len(s.matches)
    if not 0 <= start <= total: raise KeyError(f"step {s.title!r} has matches 0..{total}, not {start}")
    with rep.lock:   # type: ignore[attr-defined]
      if upto is None:
        deadline = time.perf_counter() + budget_s
        k = max(start, len(rep.deltas))
        while k < total and (k < start + 100 or time.perf_counter() < deadline):
          k = min(total, k + 10)
          rep.advance(k)
        upto = max(k, start)
      upto = max(start, min(upto, total))
      rep.advance(upto)
      out = {"ctx": ctx, "step": step, "title": s.title, "total": total, "start": start, "upto": upto,
             "deltas": rep.display[start:upto]}
      if start == 0:
        out.update({"caller": s.caller, "caller_src": self.trace.source_line(s.caller), "time_ns": s.end - s.start,
                    "nodes": rep.base_records(),
                    "matches": [{"loc": m.location, "short": f"{short_path(m.file)}:{m.line}", "owner": m.owner,
                                 "time_ns": m.time_ns} for m in s.matches]})
        if (split := self.splits.get(ctx)) is not None and s.input == self.trace.contexts[ctx].schedule["sink"]:
          out["split"] = self.split_json(split, rep)
    return out

  def split_json(self, split: Split, rep: Replay) -> dict:
    """A schedule's kernels, which kernel each shown node belongs to (by display id), and the kernel boundaries."""
    groups = {rep.disp_of.get(real, real): g for real, g in split.group.items()}
    return {"kernels": split.kernels, "groups": groups, "boundaries": boundaries(split), "shared": SHARED}

  def why(self, ctx: int, a: int, b: int) -> dict:
    c = self.trace.context(ctx)
    if ctx not in self.splits: raise KeyError(f"{c.display} has no recorded scheduler decisions")
    return why_not_fused(self.splits[ctx], a, b)

  def match_detail(self, ctx: int, step: int, match: int) -> dict:
    s, rep = self.replayed(ctx, step, match)
    if not 1 <= match <= len(s.matches): raise KeyError(f"step {s.title!r} has matches 1..{len(s.matches)}, not {match}")
    m = s.matches[match - 1]
    return {"match": match, "loc": m.location, "file": m.file, "line": m.line, "owner": m.owner, "time_ns": m.time_ns,
            "source": self.trace.source_lines(m.file, m.line), "diff": match_diff(self.trace, rep, s, match)}

  def export_graph(self, ctx: int, step: int, match: int, fmt: str) -> str | dict:
    if fmt not in ("json", "dot"): raise KeyError(f"unknown graph export format {fmt!r}: use json or dot")
    s, rep = self.replayed(ctx, step, match)
    if not 0 <= match <= len(s.matches): raise KeyError(f"step {s.title!r} has matches 0..{len(s.matches)}, not {match}")
    if fmt == "dot": return graph_dot(self.trace, rep, match, f"{self.trace.contexts[ctx].display} {s.title} {match}")
    return graph_json(self.trace, rep, match)

  # ---- kernel tables (what DEBUG=2 prints, as a table) ----
  def _kernel_row(self, kctx: int | None, name: str, runs: list, bufs: int | None = None) -> dict:
    k = self.trace.contexts[kctx].kernel if kctx is not None else None
    ops, mem = (k.get("ops"), k.get("mem")) if k else (None, None)
    if k is None and runs and runs[0].kind == "copy": mem = int(runs[0].info.get("nbytes", 0) or 0) or None
    tm = sum(sp.end - sp.start for sp in runs) if runs else None
    dev_s = [sp.info.get("device_time_s") for sp in runs]
    # GFLOP/s and GB/s from the device's own time when every run has one (as DEBUG=2 does), else the span's
    t_s = sum(dev_s) if runs and all(isinstance(x, (int, float)) and x > 0 for x in dev_s) else (tm or 0) / 1e9
    rate = lambda n: n * len(runs) / t_s / 1e9 if n is not None and runs and t_s > 0 else None
    return {"ctx": kctx, "name": name, "device": (k or {}).get("device") or (runs[0].device if runs else ""),
            "global": (k or {}).get("global"), "local": (k or {}).get("local"), "bufs": bufs, "ops": ops, "mem": mem,
            "runs": len(runs), "time_ns": tm, "gflops": rate(ops), "gbs": rate(mem)}

  def kernel_table(self, ctx: int | None = None) -> dict:
    """One row per kernel: launch dims, estimated work, time, GFLOP/s, GB/s. For a schedule (`ctx`), its items in run
    order with the runs that followed it; without `ctx`, every kernel of the trace with all of its runs."""
    t = self.trace
    runs_of: dict[int, list] = {}
    for sp in sorted(t.spans, key=lambda x: x.start):
      if sp.kind == "run" and sp.ctx is not None: runs_of.setdefault(sp.ctx, []).append(sp)
    if ctx is None:
      rows = [self._kernel_row(c.id, c.display, runs_of.get(c.id, [])) for c in t.contexts if c.kernel is not None]
      for i, r in enumerate(rows): r["i"] = i
      return {"ctx": None, "title": "the trace", "rows": rows}
    c = t.context(ctx)
    if c.schedule is None: raise KeyError(f"{c.display} is not a schedule: it has no kernel table")
    taken: set[int] = set()
    copies = [sp for sp in sorted(t.spans, key=lambda x: x.start) if sp.kind == "copy" and sp.start >= c.start]
    rows = []
    for i, (item, name) in enumerate(zip(c.schedule["items"], self.kernel_names(c))):
      kctx, run = item["ctx"], []
      pool = runs_of.get(kctx, []) if kctx is not None else (copies if t.nodes[item["ast"]].op == "COPY" else [])
      for sp in pool:   # this schedule's run of the item: the first one after the schedule began, not yet claimed
        if sp.start >= c.start and id(sp) not in taken:
          taken.add(id(sp))
          run = [sp]
          break
      r = self._kernel_row(kctx, name, run, item["bufs"])
      r["i"] = i
      rows.append(r)
    return {"ctx": ctx, "title": c.display, "rows": rows}

  # ---- code ----
  def code(self, ctx: int) -> dict:
    c = self.trace.context(ctx)
    if c.kernel is None: raise KeyError(f"context {ctx} ({c.display}) is not a compiled kernel: it has no code")
    k = self.trace.contexts[ctx].kernel
    assert k is not None
    index = {u: i for i, u in enumerate(k["uops"])}
    rows = []
    for i, u in enumerate(k["uops"]):
      n = self.trace.nodes[u]
      rows.append([i, n.op, n.dtype, [index.get(s, -1) for s in n.src], n.arg])
    runs = [sp for sp in self.trace.spans if sp.ctx == ctx and sp.kind == "run"]
    return {"ctx": ctx, "name": c.display, "device": k["device"], "src": k["src"], "lang": _language(k["src"]),
            "uops": rows, "opts": k.get("opts"), "runs": len(runs),
            "run_ns": sum(sp.end - sp.start for sp in runs)}

  # ---- profile ----
  def profile(self) -> dict:
    t = self.trace
    pids = sorted({sp.pid for sp in t.spans})
    main_pid = t.headers[0].get("pid") if t.headers else None
    tracks: dict[str, list] = {}
    memory: dict[str, list] = {}
    user: dict[str, list] = {}
    for sp in sorted(t.spans, key=lambda x: (x.start, x.start - x.end)):   # a span before the spans it contains
      if sp.loc is not None: user.setdefault("USER" + (f" (pid {sp.pid})" if sp.pid != main_pid and len(pids) > 1 else ""), []).append(sp)
      if sp.kind in MEMORY_KINDS:   # one memory track per device and process: their buffers are not shared
        memory.setdefault(sp.device + (f" (pid {sp.pid})" if sp.pid != main_pid and len(pids) > 1 else ""), []).append(sp)
        continue
      track = "HOST" if sp.kind in HOST_KINDS or sp.device == "HOST" else sp.device
      if sp.pid != main_pid and len(pids) > 1: track += f" (pid {sp.pid})"
      info = dict(sp.info, loc=sp.loc) if sp.loc else sp.info
      tracks.setdefault(track, []).append([sp.start - t.t0, sp.end - sp.start, sp.name, sp.kind, sp.ctx, info])
    for name, sps in user.items(): tracks[name] = self._user_spans(sps)
    order = sorted(tracks, key=lambda k: (not k.startswith("USER"), not k.startswith("HOST"), k))
    out_tracks = [{"name": k, "type": "spans", "events": tracks[k], "depth": _nesting(tracks[k])} for k in order]
    peak = 0
    for dev, evs in sorted(memory.items()):
      total, points, live = 0, [], {}
      for sp in evs:
        nbytes = int(sp.info.get("nbytes", 0) or 0)
        if sp.kind == "alloc": total += nbytes; live[sp.info.get("buf")] = nbytes
        else: total -= live.pop(sp.info.get("buf"), nbytes)
        points.append([sp.end - t.t0, total, sp.kind, sp.name, nbytes])
        peak = max(peak, total)
      out_tracks.append({"name": f"{dev} memory", "type": "memory", "events": points,
                         "peak": max((p[1] for p in points), default=0)})
    end = max([sp.end for sp in t.spans] + [t.t0]) - t.t0
    return {"t0": t.t0, "duration_ns": end, "tracks": out_tracks, "peak_bytes": peak}

  def _user_spans(self, sps: list) -> list:
    """The USER track: one span per stretch of work caused by one line of user code (consecutive spans with the same
    call site; a loop's next step comes after other lines' work, so it starts a new one), named by that line's source
    text, e.g. `opt.step()` at train.py:31."""
    out: list = []
    for sp in sps:
      last = out[-1] if out else None
      if last is not None and last[5]["loc"] == sp.loc:
        last[1] = max(last[1], sp.end - self.trace.t0 - last[0])
        last[5]["spans"] += 1
        continue
      text = self.trace.source_line(sp.loc) or short_path(sp.loc)
      out.append([sp.start - self.trace.t0, sp.end - sp.start, text, "user", None, {"loc": sp.loc, "spans": 1}])
    return out

  def chrome_trace(self) -> dict:
    """The profile as Chrome trace-event JSON (what Perfetto and chrome://tracing open). Times are microseconds."""
    prof = self.profile()
    events: list[dict] = []
    for tid, track in enumerate(prof["tracks"], 1):
      events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": track["name"]}})
      events.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tid, "args": {"sort_index": tid}})
      if track["type"] == "spans":
        for start, dur, name, kind, ctx, info in track["events"]:
          args = dict(info)
          if ctx is not None: args["kernel"] = self.trace.contexts[ctx].display
          events.append({"ph": "X", "name": name, "cat": kind, "ts": start / 1e3, "dur": dur / 1e3, "pid": 1, "tid": tid,
                         "args": args})
      else:
        for ts, total, kind, name, nbytes in track["events"]:
          events.append({"ph": "C", "name": track["name"], "ts": ts / 1e3, "pid": 1, "tid": tid, "args": {"bytes": total}})
    events.append({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"tinyplug {self.trace.run}"}})
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"trace": self.trace.path}}

  # ---- search and hot rules ----
  def node_index(self) -> dict[int, tuple[int, int, int]]:
    """Node id -> the first (context, step, match) where it is in the graph."""
    with self.lock:
      if self._node_index is not None: return self._node_index
    index: dict[int, tuple[int, int, int]] = {}
    for c in self.trace.contexts:
      for s in c.steps:
        for n in reachable(self.trace.nodes, {}, s.input): index.setdefault(n, (c.id, s.index, 0))
        for k, m in enumerate(s.matches, 1):
          if m.after not in index:
            for n in reachable(self.trace.nodes, {}, m.after): index.setdefault(n, (c.id, s.index, k))
    with self.lock: self._node_index = index
    return index

  def search(self, query: str, limit: int = 100) -> dict:
    q = query.strip().lower()
    if not q: return {"query": query, "results": []}
    t, results = self.trace, []
    def add(kind: str, label: str, detail: str, **target: Any) -> bool:
      results.append({"kind": kind, "label": label, "detail": detail, "target": target})
      return len(results) >= limit
    for c in t.contexts:
      if q in c.display.lower() or q in c.name.lower():
        if add(c.kind, c.display, c.loc or "", ctx=c.id): break
    for c in t.contexts:
      for s in c.steps:
        if q in s.title.lower() and len(results) < limit: add("pass", s.title, c.display, ctx=c.id, step=s.index)
    seen_loc: set[tuple[int, int, str]] = set()
    for c in t.contexts:
      for s in c.steps:
        for k, m in enumerate(s.matches, 1):
          loc = f"{m.file}:{m.line}".lower()
          if (q in loc or q in m.owner.lower()) and (c.id, s.index, loc) not in seen_loc and len(results) < limit:
            seen_loc.add((c.id, s.index, loc))
            add("pattern", f"{short_path(m.file)}:{m.line}", f"{c.display} / {s.title} #{k} ({m.owner})",
                ctx=c.id, step=s.index, match=k)
    if len(results) < limit:
      index = self.node_index()
      for nid, n in t.nodes.items():
        if (q == n.op.lower() or q in n.arg.lower() or q == str(nid)) and nid in index:
          ctx, step, match = index[nid]
          if add("node", f"{n.op} {n.dtype} {n.arg}".strip(), f"#{nid} in {t.contexts[ctx].display} / "
                 f"{t.contexts[ctx].steps[step].title}", ctx=ctx, step=step, match=match, node=nid): break
    return {"query": query, "results": results}

  def hot_rules(self) -> dict:
    rows: dict[str, dict] = {}
    for c in self.trace.contexts:
      for s in c.steps:
        for k, m in enumerate(s.matches, 1):
          r = rows.setdefault(m.location, {"loc": m.location, "short": f"{short_path(m.file)}:{m.line}", "owner": m.owner,
                                           "matches": 0, "time_ns": 0, "contexts": set(), "first": [c.id, s.index, k]})
          r["matches"] += 1
          r["time_ns"] += m.time_ns
          r["contexts"].add(c.id)
    out = sorted(rows.values(), key=lambda r: -r["time_ns"])
    for r in out:
      r["contexts"] = len(r["contexts"])
      r["source"] = self.trace.source_line(r["loc"])
    return {"rows": out}

def _nesting(events: list) -> list[int]:
  """Each span's depth in a flame view: spans sorted by start (longer first) sit one below the open span they start in."""
  depth, open_ends = [], []
  for start, dur, *_ in events:
    while open_ends and open_ends[-1] <= start: open_ends.pop()
    depth.append(len(open_ends))
    open_ends.append(start + dur)
  return depth

def _language(src: str) -> str:
  head = src.lstrip()[:200]
  if head.startswith(("define", "; ModuleID", "target ")) or "define " in head: return "llvm"
  if head.startswith("#") and "%0" in src[:400]: return "uops"
  return "c"

__all__ = ["TraceView", "TraceError", "Context"]
