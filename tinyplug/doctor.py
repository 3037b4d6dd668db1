"""`tinyplug doctor`: a short health report of this installation.

Python and core versions, each plugin's status and reason, each device's availability and whether it can allocate
memory and run a 1-element kernel, the disk cache directory (is it safe; is every entry intact) and the default device. `doctor_report` returns the
facts as a dict (the `--json` document); `format_report` turns it into text. A problem is anything that stops work:
a plugin that failed, is incompatible or conflicts, a requested plugin that is missing, a device that says it is
available but cannot run, an unsafe cache directory, a damaged cache entry, a cache over its size limit
(CACHE_MAX_MB; the disk fills up), or no default device.
"""
from __future__ import annotations

import os
import platform
import sys
import time
from typing import Any

from tinyplug import cache_limit
from tinyplug.diskcache import check_cache_tree
from tinyplug.helpers import CACHELEVEL, cache_dir, env_str
from tinyplug.plugins import API_VERSION, PROBLEM_STATUSES, PluginManager, PluginTimeout, call_guarded, host_version

DOCTOR_SCHEMA_VERSION = 1


def check_device(pm: PluginManager, name: str) -> dict[str, Any]:
  """{"name", "plugin", "status": ok | unavailable | failed, "reason"}: probe, open, allocate, run `x + 1`."""
  plugin = pm.devices[name][1]
  ok, reason = pm.device_available(name)
  if not ok: return {"name": name, "plugin": plugin, "status": "unavailable", "reason": reason}
  step = "open"
  start = time.perf_counter()
  try:
    import numpy as np

    from tinyplug.device import Buffer, Device
    from tinyplug.tensor import Tensor
    from tinyplug.uop.dtype import dtypes
    about = Device[name].describe()
    step = "allocate"
    buf = Buffer(name, 1, dtypes.float32).ensure_allocated().copyin(np.array([1.5], dtype=np.float32))
    if buf.numpy().tolist() != [1.5]: raise RuntimeError(f"copied 1.5 in, read {buf.numpy().tolist()} back")
    step = "run"
    got = (Tensor([1.5], device=name) + 1).numpy().tolist()
    if got != [2.5]: raise RuntimeError(f"1.5 + 1 gave {got}")
  except Exception as e:
    return {"name": name, "plugin": plugin, "status": "failed", "reason": f"{step}: {type(e).__name__}: {e}"}
  ms = (time.perf_counter() - start) * 1e3
  return {"name": name, "plugin": plugin, "status": "ok",
          "reason": f"allocated and ran a 1-element kernel ({ms:.0f} ms)" + (f"; {about}" if about else "")}


def check_timeout(pm: PluginManager) -> float | None:
  """Seconds for one device check: TINY_DOCTOR_CHECK_TIMEOUT, else the manager's bound (the CLI's TINY_PLUGINS_TIMEOUT).
  A check compiles a kernel cold, which can take far longer than a plugin's import or probe."""
  raw = env_str("TINY_DOCTOR_CHECK_TIMEOUT")
  return float(raw) if raw else pm.timeout


def _bounded_check(pm: PluginManager, name: str) -> dict[str, Any]:
  """check_device, within check_timeout(pm): a device that hangs is named."""
  try: return call_guarded(lambda: check_device(pm, name), f"checking device {name}", check_timeout(pm))
  except PluginTimeout as e: return {"name": name, "plugin": pm.devices[name][1], "status": "failed", "reason": str(e)}


def _default_device() -> dict[str, Any]:
  from tinyplug.device import Device
  source = f"DEV={env_str('DEV')}" if env_str("DEV") else "automatic: the available device of highest priority"
  try: return {"name": Device.DEFAULT, "source": source, "error": None}
  except Exception as e: return {"name": None, "source": source, "error": f"{type(e).__name__}: {e}"}


def _cache_info() -> dict[str, Any]:
  path = cache_dir()
  exists = os.path.isdir(path)
  parent = path if exists else os.path.dirname(path)
  checked = check_cache_tree(path)
  try: limit, limit_error = cache_limit.limit_bytes(), None
  except ValueError as e: limit, limit_error = 0, str(e)
  try: size = cache_limit.measure(path).counted if exists else 0
  except OSError: size = 0
  return {"dir": path, "exists": exists, "writable": os.access(parent, os.W_OK), "cachelevel": CACHELEVEL.value,
          "unsafe": checked["unsafe"], "entries": checked["entries"], "bad_entries": checked["bad"],
          "bytes": size, "limit_bytes": limit, "limit_error": limit_error}


def cache_problems(cache: dict[str, Any]) -> list[str]:
  """What is wrong with the disk cache (`_cache_info`'s facts): unsafe, damaged entries, over its size limit."""
  problems = [f"the cache directory is not used: {cache['unsafe']}"] if cache["unsafe"] else []
  problems += [f"damaged cache entry (dropped and rebuilt when next used): {b}" for b in cache["bad_entries"]]
  if cache["limit_error"]: problems.append(f"the disk cache has no size limit: {cache['limit_error']}")
  elif cache["limit_bytes"] and cache["bytes"] > cache["limit_bytes"]:
    problems.append(f"the disk cache holds {cache['bytes'] / 1e6:.0f} MB, over its limit of "
                    f"{cache['limit_bytes'] / 1e6:.0f} MB (CACHE_MAX_MB): run `tinyplug cache trim` (it is also "
                    "trimmed when tinyplug next writes to it)")
  return problems


def doctor_report(pm: PluginManager) -> dict[str, Any]:
  """Every fact `tinyplug doctor` prints, and the list of problems found."""
  plugins = [{"id": i.id, "distribution": i.distribution, "version": i.version, "status": i.status, "reason": i.reason}
             for i in pm.plugins]
  devices = [_bounded_check(pm, name) for name in pm.devices_by_priority()]
  default = _default_device()
  problems = [f"plugin {p['id']!r} is {p['status']}: {p['reason']}" for p in plugins if p["status"] in PROBLEM_STATUSES]
  problems += [f"plugin {i.id!r}: {c}" for i in pm.plugins if i.status not in PROBLEM_STATUSES for c in i.conflicts]
  problems += list(pm.request_errors)
  problems += [f"device {d['name']} is available but does not work ({d['reason']})" for d in devices
               if d["status"] == "failed"]
  cache = _cache_info()
  problems += cache_problems(cache)
  if default["error"]: problems.append(f"no default device: {default['error']}")
  elif not any(d["name"] == default["name"].partition(":")[0] and d["status"] == "ok" for d in devices):
    problems.append(f"the default device {default['name']} does not work")
  return {"schema_version": DOCTOR_SCHEMA_VERSION,
          "python": {"version": platform.python_version(), "executable": sys.executable},
          "tinyplug": {"version": host_version(), "api": API_VERSION},
          "cache": cache, "default_device": default, "plugins": plugins, "devices": devices,
          "problems": problems}


def format_report(report: dict[str, Any], table: Any) -> str:
  """The report as text; `table(headers, rows)` formats the plugin and device tables."""
  cache, default = report["cache"], report["default_device"]
  cache_state = ("exists" if cache["exists"] else "not created yet") + (", writable" if cache["writable"] else ", NOT writable")
  if cache["exists"]: cache_state += f", {cache['entries']} entries checked, {len(cache['bad_entries'])} damaged"
  if cache["exists"]: cache_state += f", {cache['bytes'] / 1e6:.0f} MB" + (
    f" of {cache['limit_bytes'] / 1e6:.0f} MB allowed" if cache["limit_bytes"] else " (no size limit)")
  lines = [f"python     {report['python']['version']} ({report['python']['executable']})",
           f"tinyplug   {report['tinyplug']['version']} (plugin API {report['tinyplug']['api']})",
           f"cache dir  {cache['dir']} ({cache_state}; CACHELEVEL={cache['cachelevel']})",
           f"default    {default['name'] or default['error']} ({default['source']})", "", "plugins:"]
  lines += ["  " + r for r in table(["NAME", "STATUS", "NOTE"], [[p["id"], p["status"], " ".join(p["reason"].split()) or "-"]
                                                                for p in report["plugins"]]).splitlines()]
  lines += ["", "devices:"]
  lines += ["  " + r for r in table(["NAME", "PLUGIN", "STATUS", "NOTE"], [[d["name"], d["plugin"], d["status"],
                                                                          " ".join(d["reason"].split()) or "-"]
                                                                         for d in report["devices"]]).splitlines()]
  lines.append("")
  if report["problems"]: lines += [f"{len(report['problems'])} problem(s):", *(f"  - {p}" for p in report["problems"])]
  else: lines.append("no problems found")
  return "\n".join(lines)
