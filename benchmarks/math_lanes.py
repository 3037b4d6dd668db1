"""Elementwise kernels with costly math, 4 lanes (the rule before `heuristic.math_lanes`) against one vector register
wide, in one process: each kernel compiled both ways, the two called alternately, per-thread CPU time (robust on a
loaded machine), p10 of --reps.

  CPU_THREADS=1 python benchmarks/math_lanes.py [--n 4194304] [--reps 30]"""
from __future__ import annotations
import argparse, time
import numpy as np
from tinyplug import Tensor
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel
from tinyplug.device import Device
from tinyplug.passes import heuristic
from tinyplug.schedule import create_schedule

KERNELS = {"tanh": lambda t: t.tanh(), "sigmoid": lambda t: t.sigmoid(), "gelu": lambda t: t.gelu(),
           "silu": lambda t: t.silu(), "exp": lambda t: t.exp(), "chain (cheap)": lambda t: (t * 2 + 1).relu() * 0.5}

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--n", type=int, default=1 << 22)
  ap.add_argument("--reps", type=int, default=30)
  args = ap.parse_args()
  dev = Device["CPU"]
  x = Tensor(np.random.default_rng(0).standard_normal(args.n).astype(np.float32), device="CPU").realize()
  rule = heuristic.math_lanes
  print(f"{dev.describe()}; {args.n} floats, per-thread CPU time, p10 of {args.reps}")
  for name, build in KERNELS.items():
    (item,) = create_schedule([build(x).uop])[0][-1:]
    progs = {}
    for label, lanes in (("4 lanes", lambda k: 0), ("register wide", rule)):
      heuristic.math_lanes = lanes
      try: opts = heuristic.heuristic_opts(Kernel(item.ast, dev.renderer))
      finally: heuristic.math_lanes = rule
      spec = get_program(item.ast, dev.renderer, opts=opts)
      progs[label] = (dev.make_program(spec, dev.compiler.compile_cached(spec.src)), opts[-1].arg if opts else 1)
    handles = [b.ensure_allocated().handle for b in item.bufs]
    times: dict[str, list[float]] = {label: [] for label in progs}
    for _ in range(args.reps):
      for label, (prg, _) in progs.items():
        st = time.process_time(); prg(*handles); times[label].append(time.process_time() - st)
    (a, la), (b, lb) = [(np.percentile(times[label], 10), progs[label][1]) for label in progs]
    print(f"{name:14s} by {la:2d}: {a * 1e3:7.2f} ms   by {lb:2d}: {b * 1e3:7.2f} ms   {a / b:4.2f}x")

if __name__ == "__main__":
  main()
