"""`tinyplug viz serve|cli|export|list`, and serving a trace at program exit."""
from __future__ import annotations
import json, os, socket, sys
from tinyplug.helpers import env_str
from tinyplug_viz_web.reader import TraceError, latest_run, trace_files

def resolve_trace(path: str | None) -> str:
  """The trace to open: the given path, else the latest run under the cache. Raises TraceError."""
  from tinyplug_viz_web.capture import runs_dir
  path = path or latest_run(runs_dir())
  trace_files(path)   # raises a readable TraceError for a missing or empty path
  return path

def bind_socket(port: int | None) -> socket.socket:
  """A listening socket on 127.0.0.1 (never other interfaces): `port`, VIZ_PORT, or a free one."""
  if port is None:
    raw = env_str("VIZ_PORT").strip()
    if raw and not raw.isdigit(): raise ValueError(f"VIZ_PORT={raw!r} is not a port number")
    port = int(raw) if raw else 0
  sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
  sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
  try: sock.bind(("127.0.0.1", port))
  except OSError as e:
    sock.close()
    raise ValueError(f"cannot listen on 127.0.0.1:{port}: {e.strerror}; pick another with --port or VIZ_PORT") from None
  sock.listen(128)
  return sock

def serve_trace(path: str, port: int | None = None) -> int:
  """Serve a trace until Ctrl-C. Prints the URL first."""
  import uvicorn
  from tinyplug_viz_web.server import create_app
  sock = bind_socket(port)
  host, real_port = sock.getsockname()[:2]
  print(f"viz: serving {path}\nviz: open http://{host}:{real_port}/   (Ctrl-C to stop)", flush=True)
  config = uvicorn.Config(create_app(path), log_level="warning", lifespan="off")
  server = uvicorn.Server(config)
  try: server.run(sockets=[sock])
  except KeyboardInterrupt: pass
  finally: sock.close()
  return 0

def run(args) -> int:
  from tinyplug_viz_web import capture
  capture.disable()   # the viewer itself records nothing, even when VIZ=1 is set
  sub = getattr(args, "viz_command", None)
  if sub is None:
    print("usage: tinyplug viz {serve,cli,export,list,clean} [TRACE] (see tinyplug viz --help)", file=sys.stderr)
    return 2
  try:
    if sub == "list": return list_runs()
    if sub == "clean": return clean_runs(args.keep)
    path = resolve_trace(args.trace)
    if sub == "serve": return serve_trace(path, args.port)
    if sub == "cli":
      from tinyplug_viz_web.textview import main as cli_main
      return cli_main(path, args.src, args.item, as_json=args.json, list_only=args.list, why=getattr(args, "why", None),
                      kernels=getattr(args, "kernels", None))
    if sub == "export": return export_chrome(path, args.output)
  except (TraceError, ValueError) as e:
    print(f"viz: error: {e}", file=sys.stderr)
    return 1
  except BrokenPipeError:   # `tinyplug viz cli | head`: the reader left, which is not an error
    sys.stdout = open(os.devnull, "w")
    return 0
  return 2

def export_chrome(path: str, output: str) -> int:
  from tinyplug_viz_web.model import TraceView
  data = json.dumps(TraceView.open(path).chrome_trace())
  if output == "-": print(data)
  else:
    with open(output, "w") as f: f.write(data)
    print(f"viz: wrote {output} (open it in https://ui.perfetto.dev or chrome://tracing)", file=sys.stderr)
  return 0

def list_runs() -> int:
  import glob
  from tinyplug_viz_web.capture import runs_dir
  from tinyplug_viz_web.reader import run_files, run_mtime
  runs = sorted((d for d in glob.glob(os.path.join(runs_dir(), "*")) if os.path.isdir(d) and run_files(d)),
                key=run_mtime, reverse=True)
  if not runs: print(f"no runs under {runs_dir()}")
  for d in runs:
    files = run_files(d)
    size = sum(os.path.getsize(f) for f in files)
    print(f"{d}  {len(files)} file{'s' if len(files) != 1 else ''}  {size / 1e3:.1f} KB")
  return 0

def clean_runs(keep: int) -> int:
  from tinyplug_viz_web.capture import runs_dir
  from tinyplug_viz_web.retention import recorded_runs, remove_run
  if keep < 0: raise ValueError(f"--keep {keep}: give a number of runs, 0 or more")
  runs = recorded_runs(runs_dir())
  freed = sum(remove_run(r) for r in runs[keep:])
  n = len(runs[keep:])
  print(f"viz: removed {n} run{'s' if n != 1 else ''} ({freed / 1e6:.1f} MB) from {runs_dir()}; kept {len(runs[:keep])}")
  return 0
