"""Per-thread CPU time of stride-2 3x3 convolutions b8 64->128 p1 at input sides the other benchmarks do not cover:
the forward alone, and forward + both gradients (a grad_sweep-style step, no TinyJit); p10 / median of REPS. Run it
under each tree in turns to compare them (PYTHONPATH=<tree>:<tree>/plugins/cpu_llvm/src):
  CPU_THREADS=1 python benchmarks/strided_conv_shapes.py REPS FORWARD_SIDES [TRAINING_SIDES]
  CPU_THREADS=1 python benchmarks/strided_conv_shapes.py 7 16,32,48,64,84,112 72,84"""
from __future__ import annotations
import os, sys, time
import numpy as np
from tinyplug import Tensor

def timed(fn, reps: int) -> tuple[float, float]:
  ts = []
  for _ in range(reps):
    st = time.thread_time(); fn(); ts.append(time.thread_time() - st)
  return float(np.percentile(ts, 10)) * 1e3, float(np.median(ts)) * 1e3

def main() -> None:
  reps, sides = int(sys.argv[1]), [int(s) for s in sys.argv[2].split(",")]
  train = [int(s) for s in sys.argv[3].split(",")] if len(sys.argv) > 3 else []
  rng = np.random.default_rng(0)
  for side, grads in [(s, False) for s in sides] + [(s, True) for s in train]:
    x = Tensor(rng.standard_normal((8, 64, side, side)).astype(np.float32), requires_grad=grads).realize()
    w = Tensor(rng.standard_normal((128, 64, 3, 3)).astype(np.float32), requires_grad=grads).realize()
    def step() -> None:
      if not grads:
        x.conv2d(w, stride=2, padding=1).realize()
        return
      x.grad = w.grad = None
      x.conv2d(w, stride=2, padding=1).square().sum().backward()
      Tensor.realize(x.grad, w.grad)
    for _ in range(2): step()
    p10, med = timed(step, reps if not grads else max(3, reps // 2))
    print(f"{'fwd+bwd' if grads else 'forward'} {side}x{side} -> {side // 2}: p10 {p10:8.2f} med {med:8.2f} ms")
  print(f"load {os.getloadavg()[0]:.1f}")

if __name__ == "__main__":
  main()
