"""Recorded runs pile up under `<cache>/viz`: keep the newest VIZ_KEEP runs (default 20) within VIZ_KEEP_MB
megabytes (default 1000), pruned when a new run starts; `tinyplug viz clean` removes them on demand.

Only run folders are touched: a folder directly under the runs directory whose files are all trace files. Their
files are deleted one by one and the folder removed (never a recursive delete of anything else)."""
from __future__ import annotations
import glob, os
from tinyplug_viz_web.reader import _is_trace_file, run_files, run_mtime

DEFAULT_KEEP, DEFAULT_KEEP_MB = 20, 1000

def recorded_runs(runs_dir: str) -> list[str]:
  """Run folders under `runs_dir`, newest (last written) first."""
  runs = []
  for d in glob.glob(os.path.join(runs_dir, "*")):
    if os.path.islink(d) or not os.path.isdir(d): continue
    names = os.listdir(d)
    if names and all(_is_trace_file(n) for n in names): runs.append(d)
  return sorted(runs, key=run_mtime, reverse=True)

def run_size(folder: str) -> int: return sum(os.path.getsize(f) for f in run_files(folder))

def remove_run(folder: str) -> int:
  """Delete a run's trace files and its folder; returns the bytes freed."""
  freed = 0
  for f in run_files(folder):
    freed += os.path.getsize(f)
    os.unlink(f)
  try: os.rmdir(folder)
  except OSError: pass   # something else appeared in it meanwhile: leave it
  return freed

def prune(runs_dir: str, keep: int = DEFAULT_KEEP, keep_bytes: int = DEFAULT_KEEP_MB * 10**6,
          spare: str | None = None) -> list[str]:
  """Remove the oldest runs beyond the newest `keep`, then the oldest while all of them hold more than
  `keep_bytes`; `spare` (the run being recorded) is never removed. Returns the removed folders."""
  every = recorded_runs(runs_dir)
  runs = [r for r in every if spare is None or os.path.abspath(r) != os.path.abspath(spare)]
  budget = keep - (1 if spare else 0)
  removed = []
  sizes = {r: run_size(r) for r in every}
  total = sum(sizes.values())   # the spared run counts toward the size cap
  for n, r in enumerate(runs):
    if n >= budget or total > keep_bytes:
      total -= sizes[r]
      remove_run(r)
      removed.append(r)
  return removed

def limits_from_env() -> tuple[int, int]:
  """(runs, bytes) from VIZ_KEEP and VIZ_KEEP_MB; a bad value is an error naming the variable."""
  from tinyplug.helpers import env_str
  out = []
  for name, default in (("VIZ_KEEP", DEFAULT_KEEP), ("VIZ_KEEP_MB", DEFAULT_KEEP_MB)):
    raw = env_str(name).strip()
    if raw and not raw.isdigit(): raise ValueError(f"{name}={raw!r} is not a whole number")
    out.append(int(raw) if raw else default)
  return out[0], out[1] * 10**6
