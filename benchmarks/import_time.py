"""How long `import tinyplug` takes next to `import tinygrad` (and numpy, torch for scale).

Each import runs in a fresh interpreter, several times; the table shows the median and best wall time of the
whole `python -c "import X"` process, the same minus the bare interpreter start-up, and the ratio to tinygrad.

    python benchmarks/import_time.py [--runs 15]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

MODULES = ("tinyplug", "tinygrad", "numpy", "torch")


def time_import(code: str, runs: int) -> list[float] | None:
  """Wall-clock seconds of `python -c code` for each run, or None when the import fails."""
  times = []
  for _ in range(runs):
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True)
    times.append(time.perf_counter() - start)
    if done.returncode != 0: return None
  return times


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--runs", type=int, default=15)
  parser.add_argument("--modules", nargs="*", default=list(MODULES))
  args = parser.parse_args()

  baseline = time_import("pass", args.runs)
  assert baseline is not None
  base = statistics.median(baseline)
  results = {m: time_import(f"import {m}", args.runs) for m in args.modules}
  reference = statistics.median(results["tinygrad"]) - base if results.get("tinygrad") else None

  print(f"python {sys.version.split()[0]}, {args.runs} runs each; interpreter start-up {base * 1e3:.1f} ms (median)")
  print(f"{'import':10} {'median ms':>10} {'best ms':>10} {'import-only ms':>15} {'vs tinygrad':>12}")
  for module, times in results.items():
    if times is None:
      print(f"{module:10} {'not installed / failed':>49}")
      continue
    median, best = statistics.median(times), min(times)
    only = max(median - base, 0.0)  # below the noise of interpreter start-up
    ratio = f"{only / reference:.2f}x" if reference else "-"
    print(f"{module:10} {median * 1e3:10.1f} {best * 1e3:10.1f} {only * 1e3:15.1f} {ratio:>12}")


if __name__ == "__main__":
  main()
