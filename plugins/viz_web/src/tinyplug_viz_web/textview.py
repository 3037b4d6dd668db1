"""`tinyplug viz cli`: the trace as text. Works with or without a profile.

  tinyplug viz cli                         schedules, kernels (with run times) and profile tracks
  tinyplug viz cli -s "schedule 1"         the kernels of a schedule and its steps
  tinyplug viz cli -s E_3 -i gpudims       a step: graph before, each match with its diff, graph after, UOps, code
  tinyplug viz cli -s TINY -i E_3 gpudims  the same, choosing the context with -i (as in tinygrad's VIZ)
  tinyplug viz cli -s "schedule 1" --why r_4_8 E_4_8   why two kernels of a schedule were not fused
  tinyplug viz cli -s PYTHON               the timeline of one profile track
  tinyplug viz cli -k [gflops]             every kernel as DEBUG=2 prints it (launch size, time, GFLOP/s, GB/s), sorted
  tinyplug viz cli -s "schedule 1" -k      the same for one schedule's kernels, this schedule's run of each
  tinyplug viz cli --json                  JSON lines: one per kernel, with timings, AST and code
Colours are ANSI unless NO_COLOR is set."""
from __future__ import annotations
import json, sys
from tinyplug.helpers import colored, suggest
from tinyplug_viz_web.fusion import boundaries, find_kernel
from tinyplug_viz_web.graph import node_label, render_expr, replay
from tinyplug_viz_web.model import TraceView, short_path
from tinyplug_viz_web.reader import Context, Step, TraceError

ALL_CONTEXTS = ("tiny", "all", "rewrites")
GROUP_MIN = 3   # this many consecutive steps of one pass get a header (the web UI's GROUP_MIN)

def _us(ns: float) -> str: return f"{ns / 1e3:9.2f}us" if ns < 1e7 else f"{ns / 1e6:9.2f}ms"

def _find_context(view: TraceView, name: str) -> Context | None:
  low = name.lower().strip()
  ctxs = view.trace.contexts
  for c in ctxs:
    if c.display.lower() == low: return c
  for c in ctxs:
    if c.name.lower() == low: return c
  hits = [c for c in ctxs if low in c.display.lower()]
  return hits[0] if len(hits) == 1 else None

def _find_step(c: Context, name: str) -> Step | None:
  low = name.lower().strip()
  if low.isdigit() and int(low) < len(c.steps): return c.steps[int(low)]
  for key in (lambda s: s.title, lambda s: s.pass_name or "", lambda s: s.name):
    hits = [s for s in c.steps if key(s).lower() == low]
    if hits: return hits[0]
  hits = [s for s in c.steps if low in s.title.lower()]
  return hits[0] if hits else None

def _kernel_times(view: TraceView) -> dict[int, list[int]]:
  times: dict[int, list[int]] = {}
  for sp in view.trace.spans:
    if sp.kind == "run" and sp.ctx is not None: times.setdefault(sp.ctx, []).append(sp.end - sp.start)
  return times

def list_contexts(view: TraceView, out) -> None:
  t = view.trace
  times = _kernel_times(view)
  info = view.contexts()["contexts"]
  print(f"run {t.run}: {t.path} ({len(t.files)} file{'s' if len(t.files) != 1 else ''}, {len(t.nodes)} nodes, "
        f"{len(t.spans)} profile spans)", file=out)
  for w in t.warnings: print(colored(f"warning: {w}", "yellow", stream=out), file=out)
  for c in t.contexts:
    if c.parent is not None: continue
    n_matches = sum(len(s.matches) for s in c.steps)
    extra = ""
    if c.id in times: extra = f"  runs {len(times[c.id])}  tm {_us(sum(times[c.id])).strip()}"
    dev = f"  {c.kernel['device']}" if c.kernel else ""
    color = "cyan" if c.kind == "kernel" else "magenta" if c.kind == "schedule" else "white"
    print(f"{colored(f'{c.display:28s}', color, stream=out)} {c.kind:8s}{dev}  {len(c.steps)} steps  {n_matches} matches{extra}"
          + (f"  {c.loc}" if c.loc else ""), file=out)
    if c.schedule:
      for k in info[c.id]["kernels"]: print(f"    kernel {k['name']}", file=out)
  tracks = view.profile()["tracks"]
  if tracks:
    print("profile tracks: " + ", ".join(f"{tr['name']} ({len(tr['events'])})" for tr in tracks), file=out)

def print_context(view: TraceView, c: Context, out) -> None:
  print(f"{colored(c.display, 'cyan', stream=out)}  {c.kind}" + (f"  at {c.loc}" if c.loc else ""), file=out)
  if c.schedule:
    print(f"kernels ({len(c.schedule['items'])}):", file=out)
    print_kernel_table(view.kernel_table(c.id)["rows"], out)
    if (split := view.splits.get(c.id)) is not None:
      print("why each is a kernel of its own:", file=out)
      for k in split.kernels:
        print(f"  {k['i']:3d} {k['name']:20s} [{colored(k['rule'], 'yellow', stream=out)}] {k['detail']}  ({short_path(k['loc'])})",
              file=out)
      print(f"kernel boundaries (producer -> consumer): {len(boundaries(split))}", file=out)
      for b in boundaries(split):
        print(f"  {split.kernels[b['a']]['name']} -> {split.kernels[b['b']]['name']}: {b['rule']}", file=out)
  print("steps:", file=out)
  groups: list[list[Step]] = []
  for s in c.steps:   # consecutive steps of one pass under one header, as the web UI groups them
    if groups and (groups[-1][0].pass_name or groups[-1][0].title) == (s.pass_name or s.title): groups[-1].append(s)
    else: groups.append([s])
  for g in groups:
    pad = "  "
    if len(g) >= GROUP_MIN:
      print(f"  {g[0].pass_name or g[0].title}: {len(g)} steps, {sum(len(s.matches) for s in g)} matches", file=out)
      pad = "    "
    for s in g:
      print(f"{pad}{s.index:3d} {s.title:40s} {len(s.matches):5d} matches  {_us(s.end - s.start)}  {short_path(s.caller)}", file=out)

def _dims(d: list[int] | None) -> str: return "x".join(map(str, d)) if d else "-"

def print_kernel_table(rows: list[dict], out, sort: str | None = None) -> None:
  """The kernels as DEBUG=2 prints them: one line each with launch size, time, GFLOP/s and GB/s."""
  if sort: rows = sorted(rows, key=lambda r: (r.get(sort) is None, -(r.get(sort) or 0) if sort != "name" else r["name"]))
  print(f"  {'#':>3s} {'kernel':26s} {'device':8s} {'global':>12s} {'local':>10s} {'args':>4s} {'runs':>4s} "
        f"{'time':>11s} {'GFLOP/s':>9s} {'GB/s':>8s}", file=out)
  for r in rows:
    tm = _us(r["time_ns"]) if r["time_ns"] is not None else f"{'-':>11s}"
    gf = f"{r['gflops']:9.2f}" if r["gflops"] is not None else f"{'-':>9s}"
    gb = f"{r['gbs']:8.2f}" if r["gbs"] is not None else f"{'-':>8s}"
    name = colored(f"{r['name']:26s}", "cyan", stream=out)
    print(f"  {r['i']:3d} {name} {r['device']:8s} {_dims(r['global']):>12s} "
          f"{_dims(r['local']):>10s} {r['bufs'] if r['bufs'] is not None else '-':>4} {r['runs']:4d} {tm:>11s} {gf} {gb}", file=out)

def print_kernels(view: TraceView, c: Context | None, sort: str, as_json: bool, out) -> int:
  table = view.kernel_table(None if c is None else c.id)
  if as_json:
    for r in table["rows"]: print(json.dumps({"type": "kernel_row", "table": table["title"], **r}), file=out)
    return 0
  print(colored(f"--- kernels of {table['title']}, by {sort}", "yellow", stream=out), file=out)
  print_kernel_table(table["rows"], out, sort)
  return 0

def print_step(view: TraceView, c: Context, s: Step, match: int | None, out) -> None:
  t = view.trace
  rep = replay(t, s)
  get = rep.get
  print(colored(f"{c.display} / {s.title}", "cyan", stream=out) + f"  ({len(s.matches)} matches, {_us(s.end - s.start).strip()}, "
        f"called at {s.caller})", file=out)
  if match is None:
    print(colored("--- graph before", "yellow", stream=out), file=out)
    print("\n".join(render_expr(get, s.input)), file=out)
  for k, m in enumerate(s.matches, 1):
    if match is not None and k != match: continue
    print(colored(f"--- match {k}: {m.location} ({m.owner}) {_us(m.time_ns).strip()}", "yellow", stream=out), file=out)
    for line in view.match_detail(c.id, s.index, k)["diff"][2:]:
      color = "green" if line.startswith("+") else "red" if line.startswith("-") else None
      print(colored(line, color, stream=out), file=out)
  root = rep.roots[match if match is not None else -1]
  print(colored("--- graph after" + (f" match {match}" if match is not None else ""), "yellow", stream=out), file=out)
  print("\n".join(render_expr(get, root)), file=out)
  if c.kernel is not None and match is None: print_code(view, c, out)

def print_code(view: TraceView, c: Context, out) -> None:
  code = view.code(c.id)
  print(colored(f"--- UOp list of {c.display} ({len(code['uops'])} uops)", "yellow", stream=out), file=out)
  for i, op, dtype, src, arg in code["uops"]:
    print(f"{i:4d} {op:16s} {dtype:24s} {str(src):16s} {arg}", file=out)
  print(colored(f"--- code of {c.display} for {code['device']}", "yellow", stream=out), file=out)
  print(code["src"], file=out)

def print_track(view: TraceView, track: dict, out) -> None:
  print(colored(f"--- {track['name']}", "yellow", stream=out), file=out)
  if track["type"] == "memory":
    print(f"peak {track['peak']} bytes", file=out)
    for ts, total, kind, name, nbytes in track["events"]:
      print(f"{_us(ts)} {kind:5s} {name:20s} {nbytes:10d} B  total {total} B", file=out)
    return
  depths = track.get("depth") or [0] * len(track["events"])
  for (start, dur, name, kind, ctx, info), depth in zip(track["events"], depths):
    link = f"  -> {view.trace.contexts[ctx].display}" if ctx is not None else ""
    at = f"  at {short_path(info['loc'])}" if info.get("loc") else ""
    label = ("  " * depth + name)[:40]   # nested spans indented under the span they run in (the flame view's rows)
    print(f"*** {track['name']:8s} {colored(f'{label:40s}', 'cyan', stream=out)} {kind:8s} tm {_us(dur)}/{_us(start).strip()}{link}{at}",
          file=out)

def kernels_json(view: TraceView, out) -> None:
  t = view.trace
  for c in t.contexts:
    if c.kernel is None: continue
    runs = [sp for sp in t.spans if sp.ctx == c.id and sp.kind == "run"]
    k = c.kernel
    print(json.dumps({
      "type": "kernel", "name": c.display, "ctx": c.id, "device": k["device"], "runs": len(runs),
      "time_s": sum(sp.end - sp.start for sp in runs) / 1e9,
      "device_time_s": [sp.info.get("device_time_s") for sp in runs], "start_s": [(sp.start - t.t0) / 1e9 for sp in runs],
      "ast": "\n".join(render_expr(lambda n: t.nodes[n], k["ast"])), "ast_id": k["ast"],
      "steps": [{"title": s.title, "matches": len(s.matches)} for s in c.steps], "src": k["src"], "loc": c.loc,
    }), file=out)

def step_json(view: TraceView, c: Context, s: Step, out) -> None:
  g = view.step_graph(c.id, s.index)
  print(json.dumps({"type": "step", "context": c.display, **g}), file=out)

def print_why(view: TraceView, c: Context, a: str, b: str, as_json: bool, out) -> None:
  split = view.splits.get(c.id)
  if split is None:
    raise TraceError(f"{c.display} has no recorded scheduler decisions (not a schedule, or one reused from the cache)")
  try: ka, kb = find_kernel(split, a), find_kernel(split, b)
  except KeyError as e: raise TraceError(str(e.args[0])) from None
  d = view.why(c.id, ka, kb)
  if as_json: print(json.dumps({"type": "why", "context": c.display, **d}), file=out)
  else: print(d["text"] + (f"\nrule: {d['loc']}" if d["loc"] else ""), file=out)

def main(path: str, src: str | None, items: list[str], as_json: bool = False, list_only: bool = False, out=None,
         why: list[str] | None = None, kernels: str | None = None) -> int:
  out = out or sys.stdout
  view = TraceView.open(path)
  if kernels is not None and (src is None or src.lower() in ALL_CONTEXTS) and not items:
    return print_kernels(view, None, kernels, as_json, out)
  if src is None and not items:
    if as_json: kernels_json(view, out)
    else: list_contexts(view, out)
    return 0
  items = list(items)
  ctx: Context | None = None
  if src is not None and src.lower() not in ALL_CONTEXTS:
    ctx = _find_context(view, src)
    if ctx is None:
      tracks = {tr["name"].lower(): tr for tr in view.profile()["tracks"]}
      if src.lower() in tracks:
        print_track(view, tracks[src.lower()], out)
        return 0
      names = [c.display for c in view.trace.contexts] + [tr["name"] for tr in tracks.values()] + ["TINY"]
      raise TraceError(f"no context or profile track named {src!r}{suggest(src, names)}")
  if ctx is None:
    if not items:
      list_contexts(view, out)
      return 0
    name = items.pop(0)
    ctx = _find_context(view, name)
    if ctx is None:
      raise TraceError(f"no context named {name!r}{suggest(name, [c.display for c in view.trace.contexts])}")
  if why:
    print_why(view, ctx, why[0], why[1], as_json, out)
    return 0
  if kernels is not None:
    if ctx.schedule is None: raise TraceError(f"{ctx.display} is not a schedule: -k shows a schedule's kernels or all kernels")
    return print_kernels(view, ctx, kernels, as_json, out)
  if not items or list_only:
    if as_json: print(json.dumps({"type": "context", **view.contexts()["contexts"][ctx.id]}), file=out)
    else: print_context(view, ctx, out)
    return 0
  step = _find_step(ctx, items[0])
  if step is None:
    raise TraceError(f"{ctx.display} has no step {items[0]!r}{suggest(items[0], [s.title for s in ctx.steps])}; "
                     f"steps: {', '.join(s.title for s in ctx.steps) or 'none'}")
  match = None
  if len(items) > 1:
    if not items[1].isdigit() or not 1 <= int(items[1]) <= len(step.matches):
      raise TraceError(f"{ctx.display} / {step.title} has matches 1..{len(step.matches)}, not {items[1]!r}")
    match = int(items[1])
  if as_json: step_json(view, ctx, step, out)
  else: print_step(view, ctx, step, match, out)
  return 0

__all__ = ["main", "node_label"]
