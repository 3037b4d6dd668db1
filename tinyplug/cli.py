"""`tinyplug` command line: core commands (list-plugins, env, doctor) plus the subcommands plugins register.

Building the parser loads plugin registration modules only; a plugin command's `run` is imported when it runs.
`list-plugins --no-import` loads none: it reads entry-point metadata only.
Exit codes: 0 success, 1 a command failed (or `--strict` / `doctor` found a problem), 2 usage error.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from tinyplug.helpers import CACHELEVEL, DEBUG, ENV_VARS, ContextVar, ansilen, cache_dir, colored, env_str, getenv
from tinyplug.plugins import (API_VERSION, CORE_COMMANDS, PROBLEM_STATUSES, PluginManager, get_plugin_manager,
                              host_version)

JSON_SCHEMA_VERSION = 1
STATUS_COLORS = {"builtin": "cyan", "active": "green", "opt-in": "yellow", "disabled": "white",
                 "unavailable": "yellow", "failed": "red", "incompatible": "red", "conflict": "red", "installed": "white"}
HIDDEN_STATUSES = ("disabled", "unavailable")   # the table shows these only with --all
PROVIDES_KEYS = ("devices", "renderers", "passes", "search", "listeners", "commands")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
  """Left-aligned columns separated by two spaces; widths ignore ANSI colour codes."""
  widths = [max([ansilen(h), *(ansilen(r[i]) for r in rows)]) for i, h in enumerate(headers)]
  def line(cells: Sequence[str]) -> str:
    return "  ".join(c + " " * (w - ansilen(c)) for c, w in zip(cells, widths)).rstrip()
  return "\n".join([line(headers), *(line(r) for r in rows)])


def _provides_text(provides: dict[str, list[str]]) -> str:
  return "; ".join(f"{k}: {', '.join(dict.fromkeys(v))}" for k, v in provides.items() if v) or "-"


def plugin_report(pm: PluginManager) -> dict[str, Any]:
  """The stable `list-plugins --json` document (schema_version 1)."""
  plugins = []
  for info in pm.plugins:
    plugins.append({
      "id": info.id, "distribution": info.distribution, "version": info.version, "entry_point": info.module,
      "builtin": info.builtin, "activation": info.activation, "api": info.api, "status": info.status,
      "reason": info.reason, "description": info.description,
      "error": None if info.error is None else {"type": info.error.type, "message": info.error.message,
                                                "phase": info.error.phase},
      "provides": {k: list(info.provides.get(k, [])) for k in PROVIDES_KEYS},
      "devices": [{"name": n, "available": ok, "reason": r} for n, (ok, r) in info.devices.items()],
      "load_ms": round(info.load_ms, 3),
    })
  return {
    "schema_version": JSON_SCHEMA_VERSION,
    "host": {"name": "tinyplug", "version": host_version(), "api": API_VERSION},
    "env": {k: env_str(k) for k in ("TINY_PLUGINS", "TINY_PLUGINS_AUTOLOAD", "TINY_PLUGINS_STRICT", "VIZ")},
    "plugins": plugins,
    "errors": list(pm.request_errors),
  }


def cmd_list_plugins(args: argparse.Namespace, pm: PluginManager) -> int:
  if args.json: print(json.dumps(plugin_report(pm), indent=2))
  else: _print_plugin_table(pm, show_all=args.all or args.no_import, entry_points=args.no_import)
  for error in pm.request_errors: print(f"error: {error}", file=sys.stderr)
  if not args.strict: return 0
  problems = [i for i in pm.plugins if i.status in PROBLEM_STATUSES]
  for info in problems: print(f"error: plugin {info.id!r} is {info.status}: {info.reason} (--strict)", file=sys.stderr)
  return 1 if problems or pm.request_errors else 0


def _print_plugin_table(pm: PluginManager, show_all: bool, entry_points: bool) -> None:
  """The plugin table; with `entry_points` (nothing imported, nothing provided yet) the ENTRY POINT column replaces
  PROVIDES."""
  shown = [i for i in pm.plugins if show_all or i.status not in HIDDEN_STATUSES]
  hidden = [i for i in pm.plugins if i not in shown]
  rows = []
  for info in shown:
    status = colored(info.status, STATUS_COLORS.get(info.status))
    note = " ".join(info.reason.split())
    what = info.module if entry_points else _provides_text(info.provides)
    rows.append([info.id, info.distribution or "?", info.version or "?", status, what, note])
  headers = ["NAME", "DISTRIBUTION", "VERSION", "STATUS", "ENTRY POINT" if entry_points else "PROVIDES", "NOTE"]
  if rows: print(format_table(headers, rows))
  elif not hidden: print("no tinyplug plugins are installed (entry-point group 'tinyplug')")
  if hidden:
    names = ", ".join(f"{i.id} ({i.status})" for i in hidden)
    print(f"{len(hidden)} more not shown: {names}; `tinyplug list-plugins --all` shows them with the reasons")


def cmd_doctor(args: argparse.Namespace, pm: PluginManager) -> int:
  from tinyplug.doctor import doctor_report, format_report
  report = doctor_report(pm)
  print(json.dumps(report, indent=2) if args.json else format_report(report, format_table))
  return 1 if report["problems"] else 0


def _size(n: float) -> str:
  if n < 1024: return f"{n:.0f} B"
  for unit in ("KiB", "MiB", "GiB"):
    n /= 1024
    if n < 1024 or unit == "GiB": break
  return f"{n:.1f} {unit}"


def _dec(n: float) -> str:
  """Bytes in decimal units, as CACHE_MAX_MB counts them."""
  for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
    if n >= scale: return f"{n / scale:.1f} {unit}"
  return f"{n:.0f} B"


def _limit_text(limit: int) -> str:
  return f"limit {_dec(limit)} (CACHE_MAX_MB={limit // 10**6})" if limit else "no limit (CACHE_MAX_MB=0)"


def cmd_cache(args: argparse.Namespace, pm: PluginManager | None) -> int:
  from tinyplug import cache_limit
  from tinyplug.diskcache import clear_cache
  try: limit = args.max_mb * 10**6 if args.max_mb is not None else cache_limit.limit_bytes()
  except ValueError as e:
    print(f"tinyplug: {e}", file=sys.stderr)
    return 2
  if args.action == "trim":
    if not limit:
      print(f"{cache_dir()}: no limit to trim to (CACHE_MAX_MB=0; give one with --max-mb)")
      return 0
    try: res = cache_limit.trim(limit)
    except OSError as e:
      print(f"tinyplug: {e}", file=sys.stderr)
      return 1
    if res.before <= limit and res.rows + res.files + res.folders == 0:
      print(f"{cache_dir()}: {_dec(res.before)}, within its {_limit_text(limit)}: nothing to trim")
    else:
      print(f"trimmed {cache_dir()} from {_dec(res.before)} to {_dec(res.after)} ({_limit_text(limit)}): evicted "
            f"{res.rows} rows, {res.files} files, {res.folders} folders (the least recently written or used)")
    for s in res.skipped: print(f"  skipped {s}")
    return 0
  if args.action == "clear":
    try: freed = clear_cache()
    except OSError as e:
      print(f"tinyplug: {e}", file=sys.stderr)
      return 1
    print(f"cleared {cache_dir()} ({_size(freed)} freed; it fills again as kernels are compiled)")
    return 0
  u = cache_limit.measure()
  if args.json:
    print(json.dumps({"dir": u.root, "exists": u.exists, "bytes": u.bytes, "parts": u.parts, "counted_bytes": u.counted,
                      "limit_bytes": limit, "over_limit": bool(limit) and u.counted > limit}, indent=2))
    return 0
  if not u.exists:
    print(f"{u.root}: not created yet ({_limit_text(limit)})")
    return 0
  over = " OVER THE LIMIT: `tinyplug cache trim` trims it" if limit and u.counted > limit else ""
  print(f"{u.root}: {_dec(u.counted)} of {_limit_text(limit)}{over}")
  print(f"  CACHELEVEL={CACHELEVEL.value}; `tinyplug cache trim` evicts the least recently used entries down to "
        f"{cache_limit.TRIM_TO:.0%} of the limit, `tinyplug cache clear` empties it")
  if u.parts:
    rows = [[name, _dec(n) + ("" if name not in cache_limit.KEPT_PARTS else " (kept; not counted)")]
            for name, n in sorted(u.parts.items(), key=lambda x: -x[1]) if not name.startswith(".")]
    print(format_table(["PART", "SIZE"], rows))
  return 0


def _env_value(name: str) -> str:
  if name in ContextVar.registry: return repr(ContextVar.registry[name].value)
  value = env_str(name, "\0")
  return "(unset)" if value == "\0" else repr(value)


def cmd_env(args: argparse.Namespace, pm: PluginManager | None) -> int:
  docs = sorted(ENV_VARS.values(), key=lambda d: d.name)
  if args.json:
    print(json.dumps([{"name": d.name, "value": _env_value(d.name), "default": d.default, "kind": d.kind, "doc": d.doc}
                      for d in docs], indent=2, default=str))
    return 0
  print(format_table(["NAME", "VALUE", "DEFAULT", "MEANING"], [[d.name, _env_value(d.name), repr(d.default), d.doc]
                                                             for d in docs]))
  return 0


def build_parser(pm: PluginManager) -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(prog="tinyplug", description="tinyplug: a tensor compiler whose backends are plugins")
  parser.add_argument("--version", action="version", version=f"tinyplug {host_version()} (plugin API {API_VERSION})")
  sub = parser.add_subparsers(dest="command", metavar="COMMAND")

  p = sub.add_parser("list-plugins", help="show the installed plugins, their status and what they provide")
  p.add_argument("--json", action="store_true", help="print a JSON document (every plugin) instead of a table")
  p.add_argument("--all", action="store_true", help="also show disabled and unavailable plugins, with the reasons")
  p.add_argument("--no-import", action="store_true",
                 help="list entry points from package metadata only, importing no plugin code")
  p.add_argument("--strict", action="store_true",
                 help="exit 1 when a plugin failed, is incompatible or conflicts (or a requested one is missing)")
  p.set_defaults(handler=cmd_list_plugins)
  p = sub.add_parser("doctor", help="health report: versions, plugins, whether each device runs a kernel, cache dir")
  p.add_argument("--json", action="store_true", help="print a JSON document instead of text")
  p.set_defaults(handler=cmd_doctor)
  p = sub.add_parser("cache", help="the disk cache: its size per part and limit (default), `trim` to evict the least "
                     "recently used entries to fit the limit, or `clear` to empty it")
  p.add_argument("action", nargs="?", choices=("info", "trim", "clear"), default="info")
  p.add_argument("--json", action="store_true", help="print JSON instead of a table (info)")
  p.add_argument("--max-mb", type=int, default=None, metavar="MB",
                 help="the limit (megabytes) to show or trim to, instead of CACHE_MAX_MB")
  p.set_defaults(handler=cmd_cache)
  p = sub.add_parser("env", help="show every environment variable tinyplug reads, with its current value")
  p.add_argument("--json", action="store_true", help="print JSON instead of a table")
  p.set_defaults(handler=cmd_env)

  for name in sorted(pm.commands):
    spec, plugin_id = pm.commands[name]
    assert name not in CORE_COMMANDS  # the plugin manager reports those as conflicts
    p = sub.add_parser(name, help=f"{spec.help} [plugin {plugin_id}]", description=spec.help)
    p.set_defaults(handler=_run_plugin_command, plugin_command=name)
    if spec.add_arguments is not None:
      try: spec.add_arguments(p)
      except Exception as e:
        print(f"tinyplug: plugin {plugin_id!r} failed to add the arguments of command {name!r}: "
              f"{type(e).__name__}: {e}", file=sys.stderr)
        p.set_defaults(broken_arguments=f"{type(e).__name__}: {e}")
  return parser


def _run_plugin_command(args: argparse.Namespace, pm: PluginManager) -> int:
  spec, plugin_id = pm.commands[args.plugin_command]
  if getattr(args, "broken_arguments", None):
    print(f"tinyplug: command {spec.name!r} is unusable: its arguments failed ({args.broken_arguments})", file=sys.stderr)
    return 1
  for error in pm.request_errors: print(f"tinyplug: error: {error}", file=sys.stderr)
  if pm.request_errors: return 1
  try:
    run = pm.load_factory(spec.run)
    result = run(args)
  except Exception as e:
    print(f"tinyplug: command {spec.name!r} of plugin {plugin_id!r} failed: {type(e).__name__}: {e}", file=sys.stderr)
    if DEBUG >= 1: raise
    return 1
  return int(result or 0)


def _cli_plugin_manager(quiet: bool) -> PluginManager:
  """The plugin manager, loaded (if this is the first use) with each plugin's import and device probe bounded by
  TINY_PLUGINS_TIMEOUT seconds: a plugin that hangs is reported as failed instead of hanging the command.
  Commands show plugin failures themselves, so list-plugins and doctor load quietly."""
  return get_plugin_manager(check=False, quiet=quiet, timeout=float(getenv("TINY_PLUGINS_TIMEOUT", 20.0)))


def _first_positional(argv: Sequence[str]) -> str | None:
  return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  command = _first_positional(argv)
  if command is None and "--version" in argv:   # no plugin code runs for the version (a broken one cannot hang it)
    print(f"tinyplug {host_version()} (plugin API {API_VERSION})")
    return 0
  # listing entry points, or the disk cache, needs no plugin code (a broken plugin cannot stop either)
  if (command == "list-plugins" and "--no-import" in argv) or command == "cache": pm = PluginManager(quiet=True).scan()
  else: pm = _cli_plugin_manager(quiet=command in ("list-plugins", "doctor"))
  parser = build_parser(pm)
  try:
    args = parser.parse_args(argv)
  except SystemExit as e:  # argparse: 0 after --help/--version, 2 for usage errors
    return int(e.code or 0) if not isinstance(e.code, str) else 2
  if args.command is None:
    parser.print_help(sys.stderr)
    return 2
  try:
    return args.handler(args, pm)
  except BrokenPipeError:  # `tinyplug env | head`: the reader left, which is not an error
    sys.stdout = open(os.devnull, "w")
    return 0


if __name__ == "__main__":
  sys.exit(main())
