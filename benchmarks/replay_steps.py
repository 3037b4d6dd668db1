#!/usr/bin/env python3
"""A jitted training step's replay over many steps in one process, with a profile of where it goes.

    python benchmarks/replay_steps.py [--model mlp] [--steps 200] [--keep-inputs] [--profile]

first_step.py's models and step (TinyJit, cross-entropy, backward, Adam); each step makes `Tensor(x), Tensor(y)` from
numpy as a training loop does. `--keep-inputs` makes every batch's Tensors up front and keeps them alive (until
session 11 each realize then looked at every live tensor newer than the realized input; benchmarks/README.md).
Prints the median and p10 of the replayed steps.
"""
from __future__ import annotations
import argparse, cProfile, os, pstats, sys, time
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import first_step as fs

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--model", default="mlp", choices=("mlp", "cnn", "strided"))
  ap.add_argument("--steps", type=int, default=200)
  ap.add_argument("--keep-inputs", action="store_true")
  ap.add_argument("--profile", action="store_true", help="then profile as many steps again (cProfile, by own time)")
  args = ap.parse_args()
  from tinyplug import Tensor, nn
  from tinyplug.nn.optim import Adam
  from tinyplug.nn.state import get_parameters
  m = fs._make_model(args.model, nn)
  step = fs.tinyplug_step(m, Adam(get_parameters(m), lr=1e-3))
  batches = fs._batches(args.model, 5 + 2 * args.steps)
  for x, y in batches[:5]: step(Tensor(x), Tensor(y)).item()   # compile, capture
  kept = [(Tensor(x), Tensor(y)) for x, y in batches[5:]] if args.keep_inputs else None
  def run(lo: int, hi: int) -> list[float]:
    times = []
    for i in range(lo, hi):
      st = time.perf_counter()
      (step(*kept[i - 5]) if kept else step(Tensor(batches[i][0]), Tensor(batches[i][1]))).item()
      times.append(time.perf_counter() - st)
    return times
  times = run(5, 5 + args.steps)
  print(f"{args.model}: replayed step median {np.median(times) * 1e6:.0f} us, p10 {np.percentile(times, 10) * 1e6:.0f} us "
        f"over {args.steps} steps{' (inputs kept alive)' if kept else ''}")
  if args.profile:
    prof = cProfile.Profile()
    prof.enable()
    run(5 + args.steps, 5 + 2 * args.steps)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(20)

if __name__ == "__main__": main()
