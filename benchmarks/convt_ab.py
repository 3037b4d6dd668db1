"""conv_transpose2d b8 64->32 28x28 k4 s2 p1 (cpu_bench's `convt`) three ways in one process, taking turns: as one
sub-pixel convolution (the current `conv_transpose2d`), as session 12's four phase convolutions and their interleave
(`nn._phased_conv_transpose`, kept as the fallback), and torch. Wall time per realized call (the whole op: its
copies, kernels and launches), p10/median over the rounds; outputs checked against torch first. With CPU_THREADS=1
torch gets one thread too and the times are the calling thread's CPU time (what a busy shared machine leaves
comparable; with 2 threads a loaded second core stretches every split kernel). BACKWARD=1: the output's sum against a
fixed output gradient, differentiated to both inputs (the forward included; outputs are then the input gradients).
  CPU_THREADS=1 python benchmarks/convt_ab.py 40"""
from __future__ import annotations
import os, sys, time
import numpy as np
import torch
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops import nn

def main() -> None:
  one = os.environ.get("CPU_THREADS") == "1"
  if one: torch.set_num_threads(1)
  clock = time.thread_time if one else time.perf_counter
  rounds, rng = int(sys.argv[1]) if len(sys.argv) > 1 else 40, np.random.default_rng(0)
  xn, wn = rng.standard_normal((8, 64, 28, 28)).astype(np.float32), rng.standard_normal((64, 32, 4, 4)).astype(np.float32)
  x, w = Tensor(xn).realize(), Tensor(wn).realize()
  tx, tw = torch.tensor(xn), torch.tensor(wn)
  s, d = (2, 2), (1, 1)
  runs = {"subpixel (now)": lambda: x.conv_transpose2d(w, stride=2, padding=1).realize(),
          "phases (session 12)": lambda: nn._phased_conv_transpose(x, w, 1, s, d, d, (0, 0)).realize(),
          "torch": lambda: torch.nn.functional.conv_transpose2d(tx, tw, stride=2, padding=1)}
  if os.environ.get("BACKWARD"):
    gy = rng.standard_normal((8, 32, 56, 56)).astype(np.float32)
    g, tg = Tensor(gy).realize(), torch.tensor(gy)
    x.requires_grad, w.requires_grad, tx.requires_grad, tw.requires_grad = True, True, True, True
    def grads(out):
      gx, gw = (out * g).sum().gradient(x, w)
      Tensor.realize(gx, gw)
      return gx
    def torch_grads():
      tx.grad = tw.grad = None
      (torch.nn.functional.conv_transpose2d(tx, tw, stride=2, padding=1) * tg).sum().backward()
      return tx.grad
    runs = {"subpixel (now)": lambda: grads(x.conv_transpose2d(w, stride=2, padding=1)),
            "phases (session 12)": lambda: grads(nn._phased_conv_transpose(x, w, 1, s, d, d, (0, 0))),
            "torch": torch_grads}
  want = runs["torch"]().numpy()
  for name, fn in runs.items():
    got = fn()
    got = got.numpy() if hasattr(got, "numpy") else got
    print(f"{name:>20s} max diff from torch {np.abs(got - want).max():.2e}")
  times: dict[str, list[float]] = {n: [] for n in runs}
  for _ in range(3):
    for fn in runs.values(): fn()
  for _ in range(rounds):
    for name, fn in runs.items():
      st = clock(); fn(); times[name].append(clock() - st)
  for name, ts in times.items():
    t = np.array(ts) * 1e3
    print(f"{name:>20s} p10 {np.percentile(t, 10):.2f} ms median {np.median(t):.2f} ms")

if __name__ == "__main__":
  main()
