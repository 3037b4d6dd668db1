"""BEAM's wall time with its candidates built in one process (PARALLEL=0) and by worker processes (PARALLEL=n), side
by side in one run: each setting searches the same matmul kernel in a fresh process with an empty disk cache (so
every candidate is lowered and compiled), and prints the search's wall time, what happened to its candidates, the
actions it found and that kernel's time.

  python benchmarks/beam_search.py                                  # CPU, 512x512x512 float32, BEAM=2, PARALLEL=0 and cores
  python benchmarks/beam_search.py --device CUDA --dtype half --n 4096 --parallel 0,14
  python benchmarks/beam_search.py --fixed-timings                  # each kernel "runs" in a time made from its source

With `--fixed-timings` no kernel runs: each candidate's time is a function of its source, so every setting searches
exactly the same candidates and the wall times compare only what PARALLEL changes (building); without it the runs
time real kernels, and a different timing can send a search down another path (the candidate counts say so)."""
from __future__ import annotations
import argparse, json, os, subprocess, sys, tempfile

CHILD = r"""
import json, sys, time, zlib
import numpy as np
from tinyplug import Tensor, dtypes, events
from tinyplug.helpers import Context
from tinyplug.search import runner
n, device, dtype, width, fixed = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
if fixed: runner.Timer.run_once = lambda self, prg, spec: 1e-3 * (1 + zlib.crc32(spec.src.encode()) % 1000)
seen = []
events.subscribe("search", seen.append)
rng = np.random.default_rng(0)
a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
ta = Tensor(a, device=device).cast(getattr(dtypes, dtype)).realize()
tb = Tensor(b, device=device).cast(getattr(dtypes, dtype)).realize()
st = time.perf_counter()
with Context(BEAM=width, IGNORE_BEAM_CACHE=1): out = (ta @ tb).realize()
wall = time.perf_counter() - st
from tinyplug.engine.realize import get_runner
from tinyplug.schedule import create_schedule
(item,), _ = create_schedule([(ta @ tb).uop])
with Context(BEAM=width): prg = get_runner(device, item.ast)   # the search's answer, from the cache
bufs = [x.ensure_allocated() for x in item.bufs]
kernel = min(prg(bufs, {}, wait=True) for _ in range(5))
ev = seen[0]
print(json.dumps({"wall": wall, "search": ev["seconds"], "timed": ev["timed"], "refused": ev["refused"],
                  "failed": ev["failed"], "workers_built": ev["built_in_workers"], "kernel_s": kernel,
                  "opts": " ".join(f"{o.op.name}{'' if o.axis is None else o.axis}{'' if o.arg is None else f':{o.arg}'}"
                                   for o in ev["opts"])}))
"""

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--device", default="CPU")
  ap.add_argument("--dtype", default="float32")
  ap.add_argument("--n", type=int, default=512)
  ap.add_argument("--beam", type=int, default=2)
  ap.add_argument("--parallel", default=f"0,{len(os.sched_getaffinity(0))}", help="comma list of PARALLEL values")
  ap.add_argument("--fixed-timings", action="store_true", help="time kernels by their source: the same search each run")
  args = ap.parse_args()
  load = os.getloadavg()[0]
  print(f"BEAM={args.beam} on {args.device} {args.dtype} matmul {args.n}^3, {len(os.sched_getaffinity(0))} cores, "
        f"load {load:.2f} at the start{'; fixed timings (no kernel runs)' if args.fixed_timings else ''}")
  print(f"{'PARALLEL':>8s} {'wall':>8s} {'search':>8s} {'timed':>6s} {'refused':>7s} {'failed':>6s} {'kernel':>10s}  actions")
  for p in [int(x) for x in args.parallel.split(",")]:
    with tempfile.TemporaryDirectory() as cache:
      env = {**os.environ, "PARALLEL": str(p), "XDG_CACHE_HOME": cache}
      out = subprocess.run([sys.executable, "-c", CHILD, str(args.n), args.device, args.dtype, str(args.beam),
                            "1" if args.fixed_timings else "0"], capture_output=True, text=True, env=env)
    if out.returncode != 0:
      print(f"{p:8d} failed: {out.stderr.strip().splitlines()[-1:]}", flush=True)
      continue
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{p:8d} {r['wall']:7.1f}s {r['search']:7.1f}s {r['timed']:6d} {r['refused']:7d} {r['failed']:6d} "
          f"{r['kernel_s'] * 1e3:8.3f}ms  {r['opts']}", flush=True)
  print(f"load {os.getloadavg()[0]:.2f} at the end")

if __name__ == "__main__":
  main()
