"""Eager (no TinyJit) forward + backward with gradient templates on and off, interleaved in one process (issue 20).

  CPU_THREADS=1 python benchmarks/grad_template_ab.py [--reps 40] [--only cross,mlp]

Rows: grad_sweep.py's cross_entropy, layernorm and mse (backward() and every input's gradient realized) and an eager
training step of first_step.py's MLP (32-64-64-10, batch 128, Adam: zero_grad, loss, backward, step). Each repetition
runs one step with GRADIENT_TEMPLATES=1 and one with 0, in alternating order; the time is per-thread CPU time (with
CPU_THREADS=1 the kernels run on the calling thread), so it stays put when other work shares the machine. Prints p10
and median of the whole step and of backward() alone."""
from __future__ import annotations
import argparse, os, sys, time
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--reps", type=int, default=40)
  ap.add_argument("--only", default="")
  args = ap.parse_args()
  if os.environ.get("CPU_THREADS") != "1": sys.exit("run with CPU_THREADS=1 (per-thread CPU time)")
  from tinyplug import Tensor, nn
  from tinyplug.helpers import Context
  from tinyplug.nn.optim import Adam
  from tinyplug.nn.state import get_parameters
  import first_step as fs
  rng = np.random.default_rng(0)
  clock = time.thread_time

  def sweep_row(shapes, loss):
    xs = [Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True).realize() for s in shapes]
    def step() -> float:
      for x in xs: x.grad = None
      out = loss(*xs)
      st = clock(); out.backward(); took = clock() - st
      Tensor.realize(*[x.grad for x in xs])
      xs[0].grad.numpy()
      return took
    return step

  labels = Tensor((np.arange(512) % 1000).astype(np.int32)).realize()
  m = fs._make_model("mlp", nn)
  opt = Adam(get_parameters(m), lr=1e-3)
  batches = fs._batches("mlp", 8)
  seen = [0]
  def mlp_step() -> float:
    x, y = batches[seen[0] % len(batches)]
    seen[0] += 1
    with Tensor.train():
      opt.zero_grad()
      loss = m(Tensor(x)).sparse_categorical_crossentropy(Tensor(y))
      st = clock(); loss.backward(); took = clock() - st
      loss.realize(*opt.schedule_step())
    return took

  rows = {
    "cross_entropy 512x1000": sweep_row([(512, 1000)], lambda x: x.sparse_categorical_crossentropy(labels)),
    "layernorm 4096x1024": sweep_row([(4096, 1024)], lambda x: x.layernorm().square().sum()),
    "mse 4096x1024": sweep_row([(4096, 1024)] * 2, lambda a, b: ((a - b) ** 2).mean()),
    "MLP 32-64-64-10 step, Adam, eager": mlp_step,
  }
  words = [w for w in args.only.split(",") if w]
  print(f"CPU: {fs._cpu_name()}; per-thread CPU time, CPU_THREADS=1; {args.reps} reps a side, interleaved; "
        f"load average {os.getloadavg()[0]:.1f}\n")
  print("| eager fwd + bwd | templates | step p10 / median | backward() p10 / median |\n|---|---|---:|---:|")
  for name, step in rows.items():
    if words and not any(w in name.lower() for w in words): continue
    times = {0: [], 1: []}
    for i in range(args.reps + 3):
      for on in ((1, 0) if i % 2 else (0, 1)):
        with Context(GRADIENT_TEMPLATES=on):
          st = clock(); bwd = step(); total = clock() - st
        if i >= 3: times[on].append((total, bwd))
    for on in (0, 1):
      t = np.array(times[on]) * 1e3
      print(f"| {name} | {'on' if on else 'off'} | {np.percentile(t[:, 0], 10):.2f} / {np.median(t[:, 0]):.2f} ms | "
            f"{np.percentile(t[:, 1], 10):.3f} / {np.median(t[:, 1]):.3f} ms |", flush=True)
  print(f"\nload average at the end {os.getloadavg()[0]:.1f}")

if __name__ == "__main__": main()
