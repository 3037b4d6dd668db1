"""The web UI's Starlette app: one page, static assets, and a small JSON API over a trace.

Loading a trace and replaying a step are CPU work: they run in worker threads (`run_in_threadpool`), so a big
graph never blocks other requests. Errors are JSON `{"error": message}` with a 4xx status, never a traceback."""
from __future__ import annotations
import json, os, threading
from typing import Any, Callable
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from tinyplug_viz_web.model import TraceView
from tinyplug_viz_web.reader import TraceError, check_trace
from tinyplug_viz_web.security import LOOPBACK_NAMES, SecurityMiddleware

HERE = os.path.dirname(os.path.abspath(__file__))
STATIC_DIR = os.path.join(HERE, "static")
STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
TEMPLATES = Environment(loader=FileSystemLoader(os.path.join(HERE, "templates")), autoescape=select_autoescape(["html"]))

class TraceHolder:
  """Loads the trace once, in a background thread started with the app (so it is read while the browser starts);
  remembers a load error to report it on every request."""
  def __init__(self, path: str):
    self.path = path
    self.lock = threading.Lock()
    self.view: TraceView | None = None
    self.error: str | None = None

  def start(self) -> None:
    threading.Thread(target=self._load_quietly, name="viz-trace-load", daemon=True).start()

  def _load_quietly(self) -> None:
    try: self._load()
    except TraceError: pass   # kept in self.error, reported on each request

  def _load(self) -> TraceView:
    with self.lock:
      if self.view is None and self.error is None:
        try: self.view = TraceView.open(self.path)
        except TraceError as e: self.error = str(e)
        except Exception as e: self.error = f"cannot read trace {self.path}: {type(e).__name__}: {e}"
      if self.error is not None: raise TraceError(self.error)
      assert self.view is not None
      return self.view

  async def get(self) -> TraceView: return await run_in_threadpool(self._load)

def _int(request: Request, name: str, default: int | None = None) -> int:
  raw = request.query_params.get(name)
  if raw is None:
    if default is None: raise HTTPException(400, f"missing query parameter {name!r}")
    return default
  try: return int(raw)
  except ValueError: raise HTTPException(400, f"query parameter {name}={raw!r} is not an integer") from None

def create_app(trace_path: str, allowed_hosts: frozenset[str] = LOOPBACK_NAMES) -> Starlette:
  """The app serving one trace; it answers only requests for `allowed_hosts` (loopback names)."""
  holder = TraceHolder(trace_path)
  holder.start()

  def api(fn: Callable[[TraceView, Request], Any]) -> Callable:
    """A JSON endpoint: fn runs in a worker thread; KeyError -> 404, TraceError -> 422, ValueError -> 400."""
    async def endpoint(request: Request) -> Response:
      view = await holder.get()
      try: result = await run_in_threadpool(fn, view, request)
      except KeyError as e: raise HTTPException(404, str(e.args[0]) if e.args else "not found") from None
      except ValueError as e: raise HTTPException(400, str(e)) from None
      return result if isinstance(result, Response) else JSONResponse(result)
    return endpoint

  async def index(request: Request) -> Response:
    # the page does not wait for the whole trace: its scripts and styles load while the trace does, and the page
    # asks /api/trace (which waits) for the contents. A trace that is not one at all is refused here at once.
    error, run = holder.error, ""
    if holder.view is not None: run = holder.view.trace.run
    elif error is None:
      try: run = str((await run_in_threadpool(check_trace, trace_path)).get("run", ""))
      except TraceError as e: error = str(e)
    html = TEMPLATES.get_template("index.html").render(trace_path=trace_path, error=error, run=run)
    return HTMLResponse(html, status_code=200 if error is None else 422)

  def step(view: TraceView, r: Request):
    upto = r.query_params.get("upto")
    return view.step_graph(_int(r, "ctx"), _int(r, "step"), _int(r, "from", 0), None if upto is None else _int(r, "upto"))
  def match(view: TraceView, r: Request): return view.match_detail(_int(r, "ctx"), _int(r, "step"), _int(r, "match"))
  def code(view: TraceView, r: Request): return view.code(_int(r, "ctx"))
  def profile(view: TraceView, r: Request): return view.profile()
  def search(view: TraceView, r: Request): return view.search(r.query_params.get("q", ""))
  def hot(view: TraceView, r: Request): return view.hot_rules()
  def contexts(view: TraceView, r: Request): return view.contexts()
  def why(view: TraceView, r: Request): return view.why(_int(r, "ctx"), _int(r, "a"), _int(r, "b"))
  def kernels(view: TraceView, r: Request):
    return view.kernel_table(None if r.query_params.get("ctx") is None else _int(r, "ctx"))

  def chrome(view: TraceView, r: Request) -> Response:
    body = json.dumps(view.chrome_trace(), separators=(",", ":"))
    return Response(body, media_type="application/json",
                    headers={"Content-Disposition": f'attachment; filename="{view.trace.run or "trace"}.chrome.json"'})

  def export(view: TraceView, r: Request) -> Response:
    fmt = r.path_params["fmt"]
    ctx, st, m = _int(r, "ctx"), _int(r, "step"), _int(r, "match", 0)
    out = view.export_graph(ctx, st, m, fmt)
    name = f"{view.trace.contexts[ctx].display}-{st}-{m}".replace(" ", "_")
    if fmt == "dot":
      return Response(out, media_type="text/vnd.graphviz", headers={"Content-Disposition": f'attachment; filename="{name}.dot"'})
    return Response(json.dumps(out), media_type="application/json",
                    headers={"Content-Disposition": f'attachment; filename="{name}.json"'})

  async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if request.url.path.startswith("/api/"): return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
    return Response(f"{exc.status_code}: {exc.detail}\n", status_code=exc.status_code, media_type="text/plain")

  async def on_trace_error(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": str(exc)}, status_code=422)

  async def on_error(request: Request, exc: Exception) -> Response:
    return JSONResponse({"error": f"internal error: {type(exc).__name__}: {exc}"}, status_code=500)

  # the page's few small assets, read once and served from memory on the event loop: no file or thread-pool work
  # competes with the trace loading in the background when the page opens
  assets = {name: (open(os.path.join(STATIC_DIR, name), "rb").read(), STATIC_TYPES[os.path.splitext(name)[1]])
            for name in sorted(os.listdir(STATIC_DIR)) if os.path.splitext(name)[1] in STATIC_TYPES}
  async def static(request: Request) -> Response:
    hit = assets.get(request.path_params["name"])
    if hit is None: raise HTTPException(404, "not found")
    return Response(hit[0], media_type=hit[1], headers={"Cache-Control": "no-cache"})

  routes = [
    Route("/", index),
    Route("/api/trace", api(contexts)),
    Route("/api/step", api(step)),
    Route("/api/match", api(match)),
    Route("/api/code", api(code)),
    Route("/api/profile", api(profile)),
    Route("/api/profile.chrome.json", api(chrome)),
    Route("/api/search", api(search)),
    Route("/api/hot", api(hot)),
    Route("/api/why", api(why)),
    Route("/api/kernels", api(kernels)),
    Route("/api/export/graph.{fmt:str}", api(export)),
    Route("/static/{name:path}", static),
  ]
  app = Starlette(routes=routes, exception_handlers={HTTPException: on_http_error, TraceError: on_trace_error,
                                                      Exception: on_error},
                  middleware=[Middleware(SecurityMiddleware, allowed_hosts=allowed_hosts)])
  app.state.trace_path = trace_path
  return app
