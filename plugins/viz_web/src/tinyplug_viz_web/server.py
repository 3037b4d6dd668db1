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
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from tinyplug_viz_web.model import TraceView
from tinyplug_viz_web.reader import TraceError
from tinyplug_viz_web.security import LOOPBACK_NAMES, SecurityMiddleware

HERE = os.path.dirname(os.path.abspath(__file__))
STATIC_DIR = os.path.join(HERE, "static")
TEMPLATES = Environment(loader=FileSystemLoader(os.path.join(HERE, "templates")), autoescape=select_autoescape(["html"]))

class TraceHolder:
  """Loads the trace once, on first use, in a worker thread; remembers a load error to report it on every request."""
  def __init__(self, path: str):
    self.path = path
    self.lock = threading.Lock()
    self.view: TraceView | None = None
    self.error: str | None = None

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
    error = None
    try: view = await holder.get()
    except TraceError as e: error, view = str(e), None
    html = TEMPLATES.get_template("index.html").render(trace_path=trace_path, error=error,
                                                       run=view.trace.run if view else "")
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
    Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
  ]
  app = Starlette(routes=routes, exception_handlers={HTTPException: on_http_error, TraceError: on_trace_error,
                                                      Exception: on_error},
                  middleware=[Middleware(SecurityMiddleware, allowed_hosts=allowed_hosts)])
  app.state.trace_path = trace_path
  return app
