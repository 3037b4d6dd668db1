"""A 3x3 conv2d's forward per thread, tinyplug's realize and torch's F.conv2d in turns in one process: process CPU time
per call (p10 and median), so both see the same moments of a shared machine. Run with CPU_THREADS=1 (torch is set to
one thread here); pass b,cin,cout,side,stride,pad and the number of turns:
  CPU_THREADS=1 python benchmarks/conv_forward_turns.py 8,64,128,56,2,1 12
Another checkout in turns: PYTHONPATH=<checkout>:<checkout>/plugins/cpu_llvm/src."""
from __future__ import annotations
import sys, time
import numpy as np
import torch
from tinyplug.tensor import Tensor

def main() -> None:
  torch.set_num_threads(1)
  bs, cin, cout, side, stride, pad = (int(v) for v in sys.argv[1].split(","))
  rng = np.random.default_rng(0)
  xn = rng.standard_normal((bs, cin, side, side)).astype(np.float32)
  wn = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32)
  x, w, tx, tw = Tensor(xn).realize(), Tensor(wn).realize(), torch.from_numpy(xn), torch.from_numpy(wn)
  fns = {"tinyplug": lambda: x.conv2d(w, stride=stride, padding=pad).realize(),
         "torch": lambda: torch.nn.functional.conv2d(tx, tw, stride=stride, padding=pad)}
  times: dict[str, list[float]] = {k: [] for k in fns}
  for f in fns.values(): f(); f()
  for _ in range(int(sys.argv[2])):
    for name, f in fns.items():
      st = time.process_time(); f(); times[name].append(time.process_time() - st)
  print(sys.argv[1], "  ".join(f"{k} p10 {np.percentile(np.array(v) * 1e3, 10):.2f} median {np.median(np.array(v) * 1e3):.2f} ms"
                               for k, v in times.items()))

if __name__ == "__main__":
  main()
