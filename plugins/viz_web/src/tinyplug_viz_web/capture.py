"""The recorder: listeners on the core event bus that write a trace while the program runs.

Graphs are stored as a table of nodes with stable integer ids (one "node" record per distinct UOp, ever); a rewrite
record names its input and output by id and lists its matches as (before id, after id, pattern file:line, plugin,
time). No live UOp is kept, so tracing never keeps a buffer alive."""
from __future__ import annotations
import linecache, os, re, sys, threading, time
from typing import Any
from tinyplug import events
from tinyplug.helpers import cache_dir, env_str
from tinyplug.uop import UOpMap
from tinyplug_viz_web.trace_format import MAX_ARG_CHARS, TraceWriter, json_safe

RUN_ENV = "TINYPLUG_VIZ_RUN"   # set by the first process of a run; worker processes inherit it and join the run

_ENUM_REPR = re.compile(r"<([A-Za-z_][\w.]*): [^<>]*>")

def arg_text(arg: Any) -> str:
  if arg is None: return ""
  text = repr(arg)
  if "<" in text: text = _ENUM_REPR.sub(r"\1", text)   # <Ops.ADD: 54> -> Ops.ADD
  return text if len(text) <= MAX_ARG_CHARS else text[:MAX_ARG_CHARS - 3] + "..."

def dtype_text(dtype: Any) -> str:
  text = repr(dtype)
  return text[7:] if text.startswith("dtypes.") else text

_PKG_DIRS = (os.path.dirname(os.path.abspath(events.__file__)) + os.sep, os.path.dirname(os.path.abspath(__file__)) + os.sep)

def user_location(depth: int = 2) -> str | None:
  """file:line of the innermost frame outside tinyplug and this plugin: the user code that caused the work."""
  frame = sys._getframe(depth)
  while frame is not None:
    fn = frame.f_code.co_filename
    if not fn.startswith(_PKG_DIRS) and not fn.startswith("<frozen") and "contextlib" not in fn:
      return f"{fn}:{frame.f_lineno}"
    frame = frame.f_back
  return None

MEMORY_KINDS = ("alloc", "free")     # many and cheap: no call site walk for these

SOURCE_BEFORE, SOURCE_AFTER = 3, 9    # lines kept around a pattern's location (the viewer shows no other source)

class Recorder:
  """Turns bus events into trace records. One per process (a forked child reuses it with its own file)."""
  def __init__(self, folder: str, run_id: str, worker: bool):
    self.writer = TraceWriter(folder, run_id)
    self.worker = worker
    self.lock = threading.RLock()
    self.node_ids: UOpMap[int] = UOpMap()                                 # a node's id in this trace
    self.by_key: dict[tuple, int] = {}                                    # (op, dtype, src ids, arg) -> node id
    self.next_node = 0
    self.next_ctx = 0
    self.next_rewrite = 0
    self.open_ctx: dict[tuple[int, tuple[str, ...]], int] = {}            # (thread, scope path) -> context id
    self.last_kernel: dict[tuple[int, str], int] = {}                     # (thread, kernel name) -> context id
    self.default_ctx: int | None = None
    self.sources_seen: set[tuple[str, int]] = set()
    self.pid = os.getpid()

  def _check_fork(self) -> None:
    if os.getpid() != self.pid:  # a forked worker: same ids would clash with the parent's file, so start over
      self.pid, self.worker = os.getpid(), True
      self.node_ids = UOpMap()
      self.by_key, self.open_ctx, self.last_kernel, self.sources_seen = {}, {}, {}, set()
      self.next_node = self.next_ctx = self.next_rewrite = 0
      self.default_ctx = None

  # ---- nodes ----
  def intern(self, root: Any, out: list) -> int:
    """The id of `root`, appending a node (a list) to `out` for every node not seen before (sources first).

    A node's id is remembered in this recorder's UOpMap: it keeps nothing alive and goes away with the UOp."""
    known = self.node_ids.get
    if (nid := known(root)) is not None: return nid
    stack = [(root, False)]
    while stack:
      u, ready = stack.pop()
      if known(u) is not None: continue
      if not ready:
        stack.append((u, True))
        stack.extend((s, False) for s in u.src if known(s) is None)
        continue
      src = tuple(known(s) for s in u.src)
      arg = arg_text(u.arg)
      key = (u.op.name, dtype_text(u.dtype), src, arg)
      if (nid := self.by_key.get(key)) is None:
        nid = self.by_key[key] = self.next_node
        self.next_node += 1
        # a node is [op, dtype, [its id minus each source's id], arg]: small numbers, no keys (see _write)
        out.append([key[0], key[1], [nid - s for s in src], arg] if arg else [key[0], key[1], [nid - s for s in src]])
      self.node_ids[u] = nid
    return known(root)  # type: ignore[return-value]

  def _write(self, first: int, out: list) -> None:
    """Write one event's records: its new nodes (ids first, first+1, ...) as one `nodes` record, then the rest."""
    nodes = [x for x in out if type(x) is list]
    recs = [x for x in out if type(x) is not list]
    self.writer.write_many(([{"t": "nodes", "id": first, "k": len(nodes), "n": nodes}] if nodes else []) + recs)

  # ---- source text: the viewer never reads files, it shows the lines captured here ----
  def source(self, file: str, line: int, out: list, before: int = SOURCE_BEFORE, after: int = SOURCE_AFTER) -> None:
    if (file, line) in self.sources_seen or not file.endswith(".py"): return
    self.sources_seen.add((file, line))
    lo = max(1, line - before)
    lines = [linecache.getline(file, n).rstrip("\n") for n in range(lo, line + after + 1)]
    while lines and not lines[-1]: lines.pop()
    if lines: out.append({"t": "source", "file": file, "start": lo, "lines": lines})

  def caller_source(self, loc: str | None, out: list) -> None:
    if not loc: return
    file, _, line = loc.rpartition(":")
    if line.isdigit(): self.source(file, int(line), out, 0, 0)

  # ---- contexts ----
  def _ctx_for(self, path: tuple[str, ...]) -> tuple[int, str | None]:
    """The innermost open context of this scope path, and the pass name below it (if any)."""
    tid = threading.get_ident()
    for n in range(len(path), 0, -1):
      if (cid := self.open_ctx.get((tid, path[:n]))) is not None:
        return cid, (path[n] if n < len(path) else None)
    if self.default_ctx is None:
      self.default_ctx = self._new_ctx("other", "rewrites outside a schedule or kernel", None, time.perf_counter_ns())
    return self.default_ctx, (path[-1] if path else None)

  def _new_ctx(self, kind: str, name: str, parent: int | None, start: int, loc: str | None = None) -> int:
    cid = self.next_ctx
    self.next_ctx += 1
    self.writer.write({"t": "ctx", "id": cid, "kind": kind, "name": name, "parent": parent, "loc": loc, "start": start})
    return cid

  def on_scope(self, e: events.ScopeEvent) -> None:
    if e.kind not in ("schedule", "kernel"): return
    with self.lock:
      self._check_fork()
      tid = threading.get_ident()
      if e.entered:
        parent = self._ctx_for(e.path[:-1])[0] if len(e.path) > 1 else None
        self.open_ctx[(tid, e.path)] = self._new_ctx(e.kind, e.name, parent, e.time_ns, user_location(3))
      elif (cid := self.open_ctx.pop((tid, e.path), None)) is not None:
        self.writer.write({"t": "ctx_end", "id": cid, "end": e.time_ns})
        if e.kind == "kernel": self.last_kernel[(tid, e.name)] = cid

  def on_rewrite(self, e: events.RewriteEvent) -> None:
    with self.lock:
      self._check_fork()
      first, out = self.next_node, []
      inp, outp = self.intern(e.input, out), self.intern(e.output, out)
      matches = [[self.intern(m.before, out), self.intern(m.after, out), m.file, m.line, m.owner, m.time_ns]
                 for m in e.matches]
      for m in e.matches: self.source(m.file, m.line, out)
      self.caller_source(e.caller, out)
      ctx, pass_name = self._ctx_for(e.scope)
      rid = self.next_rewrite
      self.next_rewrite += 1
      out.append({"t": "rewrite", "id": rid, "ctx": ctx, "pass": pass_name, "name": e.name, "caller": e.caller,
                  "start": e.start_ns, "end": e.end_ns, "input": inp, "output": outp, "matches": matches})
      self._write(first, out)

  def on_schedule(self, e: dict) -> None:
    with self.lock:
      self._check_fork()
      first, out = self.next_node, []
      sink = self.intern(e["sink"], out)
      items = [{"ast": self.intern(it.ast, out), "bufs": len(it.buf_uops)} for it in e["items"]]
      for item, node in zip(items, e.get("item_nodes", ())):
        if node is not None: item["node"] = self.intern(node, out)
      decisions = []
      for d in e.get("decisions", ()):   # why each kernel boundary is where it is (tinyplug.schedule.explain)
        decisions.append([self.intern(d.node, out), int(d.realized), d.rule, d.detail, d.file, d.line])
        self.source(d.file, d.line, out)
      ctx, _ = self._ctx_for(tuple(e.get("scope", ())))
      rec = {"t": "schedule", "ctx": ctx, "sink": sink, "items": items}
      if decisions: rec["decisions"] = decisions
      out.append(rec)
      self._write(first, out)

  def on_kernel(self, e: dict) -> None:
    with self.lock:
      self._check_fork()
      first, out = self.next_node, []
      ast = self.intern(e["ast"], out)
      uops = [self.intern(u, out) for u in e["uops"]]
      ctx = self.last_kernel.get((threading.get_ident(), e["name"]))
      out.append({"t": "kernel", "ctx": ctx, "name": e["name"], "device": str(e.get("device", "")), "ast": ast,
                  "uops": uops, "src": str(e.get("src", "")), "opts": json_safe(e.get("opts", ()))})
      est = e.get("estimates") or {}
      if est: out[-1].update(ops=int(est.get("ops", 0)), mem=int(est.get("mem", 0)))
      if e.get("global_size") is not None: out[-1]["global"] = [int(x) for x in e["global_size"]]
      if e.get("local_size") is not None: out[-1]["local"] = [int(x) for x in e["local_size"]]
      self._write(first, out)

  def on_profile(self, e: events.ProfileEvent) -> None:
    with self.lock:
      self._check_fork()
      scope = events.current_scope()
      ctx = self._ctx_for(scope)[0] if scope and e.kind == "codegen" else None
      rec = {"t": "span", "kind": e.kind, "name": e.name, "device": e.device, "start": e.start_ns,
             "end": e.end_ns, "info": json_safe(e.info), "ctx": ctx}
      out: list = []
      if e.kind not in MEMORY_KINDS and (loc := user_location(2)) is not None:   # the user's line behind the work
        rec["loc"] = loc
        self.caller_source(loc, out)
      out.append(rec)
      self.writer.write_many(out)

# ---- the one recorder of this process, created by the first listener factory ----

_recorder: Recorder | None = None
_recorder_lock = threading.Lock()
_disabled = False

def new_run_id() -> str:
  return time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"

def runs_dir() -> str: return os.path.join(cache_dir(), "viz")

def recorder() -> Recorder:
  global _recorder
  with _recorder_lock:
    if _recorder is None:
      inherited = env_str(RUN_ENV)
      if inherited:
        folder, worker = inherited, True
      else:
        folder, worker = env_str("VIZ_TRACE") or os.path.join(runs_dir(), new_run_id()), False
        os.environ[RUN_ENV] = os.path.abspath(folder)   # worker processes started from here join this run
        _prune_old_runs(folder)
      _recorder = Recorder(os.path.abspath(folder), os.path.basename(os.path.normpath(folder)), worker)
    return _recorder

def _prune_old_runs(current: str) -> None:
  """Keep the cache's runs within VIZ_KEEP / VIZ_KEEP_MB when a new run starts there (never fatal)."""
  from tinyplug_viz_web.retention import limits_from_env, prune
  try:
    keep, keep_bytes = limits_from_env()
    if os.path.isdir(runs_dir()): prune(runs_dir(), keep, keep_bytes, spare=current)
  except (OSError, ValueError) as e: print(f"viz: cannot prune old runs: {e}", file=sys.stderr)

def disable() -> None:
  """Stop recording in this process (the `tinyplug viz` viewer calls it so that VIZ=1 there records nothing)."""
  global _disabled
  _disabled = True

def _listener(method: str):
  rec = recorder()
  fn = getattr(rec, method)
  def listen(event: Any) -> None:
    if not _disabled: fn(event)
  return listen

def scope_listener(): return _listener("on_scope")
def rewrite_listener(): return _listener("on_rewrite")
def schedule_listener(): return _listener("on_schedule")
def kernel_listener(): return _listener("on_kernel")
def profile_listener(): return _listener("on_profile")

def finish() -> None:
  """At exit: close the trace; in the run's first process, serve it (interactive) or say how to open it."""
  rec = _recorder
  if rec is None or _disabled: return
  rec.writer.close()
  if rec.worker or rec.pid != os.getpid() or rec.writer.records == 0: return
  folder = rec.writer.folder
  interactive = sys.stdin is not None and sys.stdout is not None and sys.stdin.isatty() and sys.stdout.isatty()
  if interactive and env_str("VIZ_SERVE", "1").strip() not in ("0", "false", "no"):
    from tinyplug_viz_web.commands import serve_trace
    serve_trace(folder)
  else:
    print(f"viz: trace written to {folder}\nviz: open it with: tinyplug viz serve {folder}   "
          f"(or: tinyplug viz cli {folder})", file=sys.stderr)
