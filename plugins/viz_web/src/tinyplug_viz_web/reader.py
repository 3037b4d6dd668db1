"""Reading a trace folder (or one trace file) into plain Python objects; shared by the web UI and the text viewer.

Files of one run (one per process) are merged: each file's node, context and rewrite ids are shifted so they are
unique across the run, and timestamps are moved onto the first file's clock. Reading never executes anything."""
from __future__ import annotations
import glob, json, os, re, zlib
from dataclasses import dataclass, field
from typing import Any
from tinyplug_viz_web.nodes import Node, NodeTable
from tinyplug_viz_web.trace_format import FILE_PREFIX, FILE_SUFFIX, FORMAT_NAME, FORMAT_VERSION, PLAIN_SUFFIX

CONTEXT_KINDS = ("schedule", "kernel", "other")

class TraceError(Exception):
  """A trace that is missing, empty, corrupt or of an unknown version; the message says which and where."""

@dataclass
class Match:
  before: int
  after: int
  file: str
  line: int
  owner: str
  time_ns: int
  @property
  def location(self) -> str: return f"{self.file}:{self.line}"

@dataclass
class Step:
  """One graph_rewrite call."""
  id: int
  ctx: int
  pass_name: str | None
  name: str
  caller: str
  start: int
  end: int
  input: int
  output: int
  matches: list[Match]
  index: int = 0                 # position within its context
  @property
  def title(self) -> str:
    return self.name if self.pass_name in (None, self.name) else f"{self.pass_name}: {self.name}"

@dataclass
class Context:
  """A schedule, a kernel, or the rewrites that happened outside both."""
  id: int
  kind: str
  name: str
  parent: int | None
  loc: str | None
  start: int
  pid: int
  end: int | None = None
  display: str = ""              # unique name shown in the UI ("E_3", "E_3 n2", "schedule 1")
  steps: list[Step] = field(default_factory=list)
  kernel: dict | None = None     # kernel record: device, ast, uops, src, opts
  schedule: dict | None = None   # schedule record: sink, items (ast ids, with the kernel context each became)
  children: list[int] = field(default_factory=list)

@dataclass
class Span:
  kind: str
  name: str
  device: str
  start: int
  end: int
  info: dict
  pid: int
  ctx: int | None = None         # the kernel context this span belongs to (codegen/compile/run), if known
  loc: str | None = None         # file:line of the user code that caused it (realize, backward, step, item...)

@dataclass
class Trace:
  path: str
  files: list[str]
  run: str
  nodes: NodeTable
  contexts: list[Context]
  spans: list[Span]
  t0: int
  warnings: list[str]
  headers: list[dict]
  incomplete: list[int] = field(default_factory=list)     # pids whose file has no `end` record (the process died)
  sources: dict[str, dict[int, str]] = field(default_factory=dict)   # file -> line -> text, as captured when recording

  def source_lines(self, file: str, line: int, before: int = 3, after: int = 9) -> list[tuple[int, str]]:
    """The captured lines around file:line (never read from disk: a trace may name any file)."""
    text = self.sources.get(file, {})
    return [(n, text[n]) for n in range(max(1, line - before), line + after + 1) if n in text]

  def source_line(self, loc: str) -> str:
    file, _, line = (loc or "").rpartition(":")
    return self.sources.get(file, {}).get(int(line), "").strip() if line.isdigit() else ""

  def context(self, ctx: int) -> Context:
    if not isinstance(ctx, int) or not 0 <= ctx < len(self.contexts): raise KeyError(f"no context {ctx!r}")
    return self.contexts[ctx]

  def step(self, ctx: int, step: int) -> Step:
    c = self.context(ctx)
    if not isinstance(step, int) or not 0 <= step < len(c.steps):
      raise KeyError(f"context {ctx} ({c.display}) has no step {step!r}; it has {len(c.steps)}")
    return c.steps[step]

def _is_trace_file(name: str) -> bool:
  base = os.path.basename(name)
  return base.startswith(FILE_PREFIX) and (base.endswith(FILE_SUFFIX) or base.endswith(PLAIN_SUFFIX))

def run_files(folder: str) -> list[str]:
  """The trace files of a run folder (version 2 `.jsonl.z` and version 1 `.jsonl`)."""
  return sorted(f for f in glob.glob(os.path.join(folder, f"{FILE_PREFIX}*")) if _is_trace_file(f))

def trace_files(path: str) -> list[str]:
  if not os.path.exists(path): raise TraceError(f"trace not found: {path}")
  if os.path.isfile(path): return [path]
  files = run_files(path)
  if not files: raise TraceError(f"{path} holds no trace files ({FILE_PREFIX}<pid>{FILE_SUFFIX}); is it a VIZ run folder?")
  return files

def run_mtime(folder: str) -> float:
  """When a run last wrote anything: its newest trace file's modification time."""
  return max((os.path.getmtime(f) for f in run_files(folder)), default=0.0)

def latest_run(runs_dir: str) -> str:
  """The run that finished (last wrote) most recently under `runs_dir`."""
  candidates = [d for d in glob.glob(os.path.join(runs_dir, "*")) if os.path.isdir(d) and run_files(d)]
  if not candidates: raise TraceError(f"no recorded runs under {runs_dir}; record one with VIZ=1 python your_script.py")
  return max(candidates, key=run_mtime)

def _decompress(data: bytes, name: str, warnings: list[str], chunk: int = 1 << 10) -> bytes:
  """A zlib stream (or several, one after another), as far as it is intact: fed in chunks, so damage loses only
  what comes after it."""
  out: list[bytes] = []
  pos = 0
  d = zlib.decompressobj()
  while pos < len(data):
    piece = data[pos:pos + chunk]
    try: out.append(d.decompress(piece))
    except zlib.error:
      warnings.append(f"{name}: compressed data is damaged within bytes {pos}..{pos + len(piece)}; "
                      "the rest of the file was skipped")
      break
    pos += len(piece)
    if d.eof:                     # a finished stream; another may follow (a second writer with the same pid)
      rest = d.unused_data
      pos -= len(rest)
      if not rest.strip(b"\0"): break
      d = zlib.decompressobj()
  return b"".join(out)

def check_trace(path: str) -> dict:
  """The header of a trace's first file, read from its first bytes only: a quick check that `path` is a readable trace
  (the page is served at once while the whole trace loads). Raises TraceError as load_trace would."""
  first = trace_files(os.path.abspath(path))[0]
  try:
    with open(first, "rb") as f: data = f.read(1 << 16)
  except OSError as e: raise TraceError(f"cannot read {first}: {e.strerror}") from None
  if not data: raise TraceError(f"{first} is empty: the program wrote no trace records")
  if first.endswith(FILE_SUFFIX) or data[:1] == b"\x78":
    try: data = zlib.decompressobj().decompress(data)
    except zlib.error: data = b""
    if not data: raise TraceError(f"{first} is not a tinyplug trace (no readable compressed data)")
  line, nl, _ = data.partition(b"\n")
  try: header = json.loads(line) if nl else None
  except (ValueError, UnicodeDecodeError): header = None
  if not isinstance(header, dict) or header.get("t") != "header" or header.get("format") != FORMAT_NAME:
    raise TraceError(f"{first} is not a tinyplug trace (line 1 is not a JSON trace header)")
  version = header.get("version")
  if not isinstance(version, int) or version > FORMAT_VERSION:
    raise TraceError(f"{first} is trace format version {version!r}; this viewer reads versions up to {FORMAT_VERSION}: "
                     "upgrade tinyplug-viz-web")
  return header

_NODES_HEAD = re.compile(rb'\{"t":"nodes","id":(\d+),"k":(\d+),"n":\[')

def _read_records(path: str, warnings: list[str]) -> tuple[dict, list]:
  try:
    with open(path, "rb") as f: data = f.read()
  except OSError as e: raise TraceError(f"cannot read {path}: {e.strerror}") from None
  name = os.path.basename(path)
  if not data: raise TraceError(f"{path} is empty: the program wrote no trace records")
  if path.endswith(FILE_SUFFIX) or data[:1] == b"\x78":
    data = _decompress(data, name, warnings)
    if not data: raise TraceError(f"{path} is not a tinyplug trace (no readable compressed data)")
  lines = data.split(b"\n")
  torn = lines[-1] != b""
  records: list = []
  bad: list[int] = []
  for n, raw in enumerate(lines, 1):
    if not raw.strip(): continue
    if (m := _NODES_HEAD.match(raw)) is not None and raw.endswith(b"]]}"):   # decoded later, when needed
      records.append((int(m[1]), int(m[2]), raw))
      continue
    try:
      rec = json.loads(raw)
      if not isinstance(rec, dict) or not isinstance(rec.get("t"), str): raise ValueError("not a trace record")
    except (ValueError, UnicodeDecodeError):
      if n == 1: raise TraceError(f"{path} is not a tinyplug trace (line 1 is not a JSON trace header)") from None
      if n == len(lines) and torn:   # the program died while writing this line: keep everything before it
        warnings.append(f"{name}: the last line is cut off (the program was killed?); it was skipped")
      else: bad.append(n)
      continue
    records.append(rec)
  if bad:
    warnings.append(f"{name}: {len(bad)} damaged line{'s' if len(bad) > 1 else ''} skipped (first at line {bad[0]})")
  if not records: raise TraceError(f"{path} holds no complete trace record")
  header = records[0]
  if header.get("t") != "header" or header.get("format") != FORMAT_NAME:
    raise TraceError(f"{path} is not a tinyplug trace (its first record is not a {FORMAT_NAME!r} header)")
  version = header.get("version")
  if not isinstance(version, int) or version > FORMAT_VERSION:
    raise TraceError(f"{path} is trace format version {version!r}; this viewer reads versions up to {FORMAT_VERSION}: "
                     "upgrade tinyplug-viz-web")
  if not isinstance(header.get("clock"), dict): header["clock"] = {"perf_ns": 0, "unix_ns": 0}
  return header, records[1:]

def _opt_int(x: Any) -> int | None: return None if x is None else int(x)
def _dims(x: Any) -> list[int] | None: return None if x is None else [int(d) for d in x]

class _Missing(KeyError):
  """A record refers to a node the trace does not hold (lost lines): the record is skipped."""

def load_trace(path: str) -> Trace:
  """Read and merge every file of a run. Raises TraceError with a readable message for a trace that cannot be read
  at all; damaged parts (garbage lines, records that refer to lost nodes) are skipped and listed in `warnings`."""
  path = os.path.abspath(path)
  files = trace_files(path)
  warnings: list[str] = []
  loaded = [(f, *_read_records(f, warnings)) for f in files]
  pids = {h.get("pid") for _, h, _ in loaded}
  loaded.sort(key=lambda x: (x[1].get("ppid") in pids, x[1]["clock"].get("unix_ns", 0)))
  base_clock = loaded[0][1]["clock"]
  nodes = NodeTable()
  contexts: list[Context] = []
  spans: list[Span] = []
  rewrites: list[tuple[Context | None, Step]] = []
  kernels: list[tuple[dict, int | None, int]] = []
  schedules: list[tuple[dict, int | None]] = []
  sources: dict[str, dict[int, str]] = {}
  incomplete: list[int] = []
  for fname, header, records in loaded:
    pid = int(header.get("pid", 0) or 0)
    clock = header["clock"]
    # this file's clock, moved onto the first file's: perf counters of different processes may not agree
    shift = (int(clock.get("unix_ns", 0)) - int(base_clock.get("unix_ns", 0))) - \
            (int(clock.get("perf_ns", 0)) - int(base_clock.get("perf_ns", 0)))
    node_base = nodes.max_id() + 1
    ctx_map: dict[int, int] = {}
    skipped: dict[str, int] = {}
    def cid(x: Any) -> int | None: return None if x is None else ctx_map.get(int(x))
    def nid(x: Any) -> int:
      n = node_base + int(x)
      if not nodes.has_id(n): raise _Missing(n)
      return n
    ended = False
    for r in records:
      if type(r) is tuple:
        try: nodes.add_batch(node_base + r[0], r[1], r[2])
        except ValueError: skipped["nodes"] = skipped.get("nodes", 0) + 1   # overlaps an earlier batch: damaged
        continue
      t = r["t"]
      try:
        if t == "nodes":   # version 2: [op, dtype, [id - src id, ...], arg?] for ids first, first+1, ...
          first = node_base + int(r["id"])
          for k, a in enumerate(r["n"]):
            n = first + k
            src = tuple(n - int(d) for d in a[2])
            if all(x in nodes for x in src): nodes[n] = Node(str(a[0]), str(a[1]), src, str(a[3]) if len(a) > 3 else "")
            else: skipped["node"] = skipped.get("node", 0) + 1
        elif t == "node":   # version 1
          src = tuple(nid(x) for x in r["src"])
          nodes[node_base + int(r["id"])] = Node(str(r["op"]), str(r["dtype"]), src, str(r.get("arg", "")))
        elif t == "ctx":
          ctx_map[int(r["id"])] = len(contexts)
          kind = str(r["kind"]) if r["kind"] in CONTEXT_KINDS else "other"
          contexts.append(Context(len(contexts), kind, str(r["name"]), cid(r.get("parent")), r.get("loc"),
                                  int(r["start"]) + shift, pid))
        elif t == "ctx_end":
          if (c := cid(r["id"])) is not None: contexts[c].end = int(r["end"]) + shift
        elif t == "rewrite":
          c = cid(r["ctx"])
          m = [Match(nid(b), nid(a), str(f), int(ln), str(o), int(ns)) for b, a, f, ln, o, ns in r["matches"]]
          step = Step(int(r["id"]), -1 if c is None else c, r.get("pass"), str(r["name"]), str(r.get("caller", "")),
                      int(r["start"]) + shift, int(r["end"]) + shift, nid(r["input"]), nid(r["output"]), m)
          rewrites.append((contexts[c] if c is not None else None, step))
        elif t == "schedule":
          schedules.append(({"sink": nid(r["sink"]),
                             "items": [{"ast": nid(i["ast"]), "bufs": int(i.get("bufs", 0)), "ctx": None,
                                        "node": None if i.get("node") is None else nid(i["node"])} for i in r["items"]],
                             "decisions": [{"node": nid(n), "realized": bool(real), "rule": str(rule),
                                            "detail": str(detail), "file": str(f), "line": int(ln)}
                                           for n, real, rule, detail, f, ln in r.get("decisions", ())]},
                            cid(r.get("ctx"))))
        elif t == "kernel":
          kernels.append(({"name": str(r["name"]), "device": str(r.get("device", "")), "ast": nid(r["ast"]),
                           "uops": [nid(u) for u in r["uops"]], "src": str(r.get("src", "")),
                           "opts": r.get("opts"), "ops": _opt_int(r.get("ops")), "mem": _opt_int(r.get("mem")),
                           "global": _dims(r.get("global")), "local": _dims(r.get("local"))}, cid(r.get("ctx")), pid))
        elif t == "span":
          spans.append(Span(str(r["kind"]), str(r["name"]), str(r.get("device", "HOST")), int(r["start"]) + shift,
                            int(r["end"]) + shift, r.get("info") if isinstance(r.get("info"), dict) else {}, pid,
                            cid(r.get("ctx")), str(r["loc"]) if r.get("loc") else None))
        elif t == "source":
          start, text = int(r["start"]), sources.setdefault(str(r["file"]), {})
          for n, ln in enumerate(r["lines"]): text.setdefault(start + n, str(ln))
        elif t == "end": ended = True
        # unknown record types are skipped: newer minor additions stay readable
      except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        skipped[t] = skipped.get(t, 0) + 1
    name = os.path.basename(fname)
    if skipped:
      warnings.append(f"{name}: skipped " + ", ".join(f"{v} {k} record{'s' if v > 1 else ''}" for k, v in skipped.items())
                      + " that are malformed or refer to lost records")
    if not ended and header.get("version", 1) >= 2 and header.get("ppid") not in pids:
      incomplete.append(pid)
      warnings.append(f"{name}: process {pid} did not finish (killed, or still running): this run is incomplete")
  trace = _assemble(path, files, loaded, nodes, contexts, spans, rewrites, kernels, schedules, warnings)
  trace.sources, trace.incomplete = sources, incomplete
  return trace

def _assemble(path, files, loaded, nodes, contexts, spans, rewrites, kernels, schedules, warnings) -> Trace:
  for c in contexts:
    if c.parent is not None: contexts[c.parent].children.append(c.id)
  orphans = [s for c, s in rewrites if c is None]
  if orphans:
    other = Context(len(contexts), "other", "rewrites outside a schedule or kernel", None, None, orphans[0].start, 0)
    contexts.append(other)
  for c, s in rewrites:
    ctx = c if c is not None else contexts[-1]
    s.ctx, s.index = ctx.id, len(ctx.steps)
    ctx.steps.append(s)
  for k, c, pid in kernels:
    if c is None:  # older writers: attach to the last kernel context of this name in this process
      c = next((x.id for x in reversed(contexts) if x.kind == "kernel" and x.name == k["name"] and x.pid == pid), None)
    if c is None:
      c = len(contexts)
      contexts.append(Context(c, "kernel", k["name"], None, None, 0, pid))
    contexts[c].kernel = k
  by_ast: dict[int, int] = {}
  for c in contexts:
    if c.kernel is not None: by_ast.setdefault(c.kernel["ast"], c.id)
  for s, c in schedules:
    for item in s["items"]: item["ctx"] = by_ast.get(item["ast"])
    if c is not None: contexts[c].schedule = s
  # display names: unique, numbered like the user stories ("schedule 1", "E_3", "E_3 n2")
  seen: dict[str, int] = {}
  n_sched = 0
  for c in contexts:
    if c.kind == "schedule":
      n_sched += 1
      k = len(c.schedule["items"]) if c.schedule else 0
      c.display = f"schedule {n_sched} ({k} kernel{'s' if k != 1 else ''})"
    else:
      seen[c.name] = seen.get(c.name, 0) + 1
      c.display = c.name if seen[c.name] == 1 else f"{c.name} n{seen[c.name]}"
  # profile spans -> kernel contexts: by name (and process), the latest kernel compiled before the span
  kernel_ctx: dict[tuple[int, str], list[Context]] = {}
  for c in contexts:
    if c.kind == "kernel": kernel_ctx.setdefault((c.pid, c.name), []).append(c)
  for sp in spans:
    if sp.ctx is None and sp.kind in ("run", "compile", "codegen") and (cands := kernel_ctx.get((sp.pid, sp.name))):
      before = [c for c in cands if c.start <= sp.start]
      sp.ctx = (before[-1] if before else cands[0]).id
  starts = [c.start for c in contexts if c.start] + [sp.start for sp in spans] + [s.start for _, s in rewrites]
  headers = [h for _, h, _ in loaded]
  trace = Trace(path, files, str(headers[0].get("run", "")), nodes, contexts, spans, min(starts) if starts else 0,
                warnings, headers)
  return trace
