"""Forward + backward of single ops beside PyTorch (issue 20: training, not only forward passes): each workload builds
a loss from one op, runs `backward()` and realizes every input's gradient; PyTorch runs the same expression.

  python benchmarks/grad_sweep.py                  # both on all cores, wall time, best of --reps
  CPU_THREADS=1 python benchmarks/grad_sweep.py --one-thread   # per-thread CPU time on one core: steady under load
  python benchmarks/grad_sweep.py --only pool,conv

Each framework runs in a process of its own (idle worker threads of one spin and take a core from the other).
Per-thread CPU time (`--one-thread`, PyTorch
with one thread, tinyplug with CPU_THREADS=1 so its kernels run on the calling thread) compares the code each runs per
core; it stays put when other work shares the machine, wall time does not. Each tinyplug step pays its Python (graph,
gradient, schedule) too: no TinyJit here."""
from __future__ import annotations
import argparse, json, os, subprocess, sys, time
from typing import Callable
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

def workloads(Tensor, torch, F) -> dict[str, tuple[list[tuple[int, ...]], Callable, Callable]]:
  """name -> (input shapes, tinyplug loss, torch loss); every input gets a gradient."""
  rng = np.random.default_rng(1)
  idx = rng.integers(0, 10000, (8, 128))
  rows = rng.integers(0, 50000, 4096)
  labels = np.arange(512) % 1000
  return {
    "layernorm 4096x1024": ([(4096, 1024)], lambda x: x.layernorm().square().sum(),
                            lambda x: F.layer_norm(x, (1024,)).square().sum()),
    "softmax 4096x1024": ([(4096, 1024)], lambda x: (x.softmax(-1) * x).sum(), lambda x: (x.softmax(-1) * x).sum()),
    "cross_entropy 512x1000": ([(512, 1000)],
                               lambda x: x.sparse_categorical_crossentropy(Tensor(labels.astype(np.int32))),
                               lambda x: F.cross_entropy(x, torch.tensor(labels))),
    "matmul 1024": ([(1024, 1024)] * 2, lambda a, b: (a @ b).square().sum(), lambda a, b: (a @ b).square().sum()),
    "linear 64x9216 -> 128": ([(64, 9216), (9216, 128)], lambda x, w: (x @ w).relu().square().sum(),
                              lambda x, w: (x @ w).relu().square().sum()),
    "max_pool2d k2, 8x64x56x56": ([(8, 64, 56, 56)], lambda x: x.max_pool2d(2).square().sum(),
                                  lambda x: F.max_pool2d(x, 2).square().sum()),
    "max_pool2d k3 s2 p1, 8x64x56x56": ([(8, 64, 56, 56)], lambda x: x.max_pool2d(3, 2, padding=1).square().sum(),
                                        lambda x: F.max_pool2d(x, 3, 2, 1).square().sum()),
    "avg_pool2d k3 s2 p1, 8x64x56x56": ([(8, 64, 56, 56)], lambda x: x.avg_pool2d(3, 2, padding=1).square().sum(),
                                        lambda x: F.avg_pool2d(x, 3, 2, 1).square().sum()),
    **{f"conv2d b8 64->{cout} {hw}x{hw} k3{' s2' if s > 1 else ''} p1": (
        [(8, 64, hw, hw), (cout, 64, 3, 3)],
        lambda x, w, s=s: x.conv2d(w, stride=s, padding=1).square().sum(),
        lambda x, w, s=s: F.conv2d(x, w, stride=s, padding=1).square().sum())
       for hw in (28, 56) for cout, s in ((64, 1), (128, 2))},
    # a later stage of a residual network: many channels on a short output (Winograd's shapes, WINO)
    **{f"conv2d b8 {c}->{c} {hw}x{hw} k3 p1": (
        [(8, c, hw, hw), (c, c, 3, 3)],
        lambda x, w: x.conv2d(w, padding=1).square().sum(),
        lambda x, w: F.conv2d(x, w, padding=1).square().sum())
       for c, hw in ((256, 14), (512, 7))},
    "conv_transpose2d b8 64->32 28x28 k4 s2 p1": ([(8, 64, 28, 28), (64, 32, 4, 4)],
                                                  lambda x, w: x.conv_transpose2d(w, stride=2, padding=1).square().sum(),
                                                  lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1).square().sum()),
    "depthwise conv2d b8 64 56x56 k3 p1": ([(8, 64, 56, 56), (64, 1, 3, 3)],
                                           lambda x, w: x.conv2d(w, padding=1, groups=64).square().sum(),
                                           lambda x, w: F.conv2d(x, w, padding=1, groups=64).square().sum()),
    "batchnorm statistics 16x64x32x32": ([(16, 64, 32, 32)],
                                         lambda x: x.batchnorm(None, None, x.mean((0, 2, 3)),
                                                               x.var((0, 2, 3), correction=0).add(1e-5).rsqrt()).square().sum(),
                                         lambda x: F.batch_norm(x, None, None, training=True).square().sum()),
    "gelu 4M": ([(4 << 20,)], lambda x: x.gelu().square().sum(), lambda x: F.gelu(x, approximate="tanh").square().sum()),
    "embedding 10000x128, 8x128 ids": ([(10000, 128)], lambda w: w[Tensor(idx.astype(np.int32))].square().sum(),
                                       lambda w: w[torch.tensor(idx)].square().sum()),
    "x[idx] 4096 rows of 50000x512": ([(50000, 512)], lambda w: w[Tensor(rows.astype(np.int32))].square().sum(),
                                      lambda w: w[torch.tensor(rows)].square().sum()),
    "sdpa 8x12x128x64": ([(8, 12, 128, 64)] * 3, lambda q, k, v: q.scaled_dot_product_attention(k, v).square().sum(),
                         lambda q, k, v: F.scaled_dot_product_attention(q, k, v).square().sum()),
    "sdpa causal 8x4x128x64": ([(8, 4, 128, 64)] * 3,
                               lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True).square().sum(),
                               lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True).square().sum()),
    "sdpa causal 1x8x1024x64": ([(1, 8, 1024, 64)] * 3,
                                lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True).square().sum(),
                                lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True).square().sum()),
    "cumsum(1) 1024x1024": ([(1024, 1024)], lambda x: (x.cumsum(1) * x).sum(), lambda x: (x.cumsum(1) * x).sum()),
    "cumprod(1) 1024x1024": ([(1024, 1024)], lambda x: (x.cumprod(1) * x).sum(), lambda x: (x.cumprod(1) * x).sum()),
    "cummax(1) 1024x1024": ([(1024, 1024)], lambda x: (x.cummax(1)[0] * x).sum(), lambda x: (x.cummax(1)[0] * x).sum()),
    "bilinear resize 8x64x56x56 -> 112": ([(8, 64, 56, 56)],
                                          lambda x: x.interpolate((112, 112), mode="linear").square().sum(),
                                          lambda x: F.interpolate(x, (112, 112), mode="bilinear").square().sum()),
    "mse 4096x1024": ([(4096, 1024)] * 2, lambda a, b: ((a - b) ** 2).mean(), lambda a, b: ((a - b) ** 2).mean()),
  }

def _times(which: str, args) -> dict[str, float]:
  """Best time of each selected workload for one framework ("tinyplug" or "torch")."""
  import torch
  import torch.nn.functional as F
  from tinyplug.tensor import Tensor
  if args.one_thread: torch.set_num_threads(1)
  clock = time.thread_time if args.one_thread else time.perf_counter
  words = [w for w in args.only.split(",") if w]
  rng, out = np.random.default_rng(0), {}
  for name, (shapes, ours, theirs) in workloads(Tensor, torch, F).items():
    if words and not any(w in name for w in words): continue
    data = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    if which == "tinyplug":
      tp = [Tensor(a, requires_grad=True).realize() for a in data]
      def run() -> None:
        for t in tp: t.grad = None
        ours(*tp).backward()
        Tensor.realize(*[t.grad for t in tp])   # realized gradients in device memory, as torch's .grad
    else:
      th = [torch.tensor(a, requires_grad=True) for a in data]
      def run() -> None:
        for t in th: t.grad = None
        theirs(*th).backward()
    best = float("inf")
    for i in range(args.reps + 2):
      st = clock(); run(); took = clock() - st
      if i >= 2: best = min(best, took)
    out[name] = best
  return out

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--one-thread", action="store_true", help="torch on one thread, per-thread CPU time (set CPU_THREADS=1)")
  ap.add_argument("--reps", type=int, default=7)
  ap.add_argument("--only", default="", help="comma list of words; run the workloads whose name contains one")
  ap.add_argument("--worker", choices=("tinyplug", "torch"), help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.one_thread and os.environ.get("CPU_THREADS") != "1":
    sys.exit("--one-thread measures the calling thread: run it with CPU_THREADS=1")
  if args.worker:
    print(json.dumps(_times(args.worker, args)))
    return
  from first_step import _cpu_name
  # each framework in a process of its own: the other's idle worker threads spin for a while after each of its ops
  # (OpenMP's, tinyplug's), and on a 2-core machine they took a core from the one timed (a depthwise conv's step
  # 5.8 ms alone, 12.7 ms taking turns with torch's in one process)
  flags = [f"--reps={args.reps}", f"--only={args.only}"] + (["--one-thread"] if args.one_thread else [])
  times = {w: json.loads(subprocess.run([sys.executable, __file__, "--worker", w, *flags], check=True,
                                        capture_output=True, text=True).stdout.strip().splitlines()[-1])
           for w in ("tinyplug", "torch")}
  print(f"CPU: {_cpu_name()}; {'per-thread CPU time, one thread each' if args.one_thread else 'wall time, all cores'}; "
        f"best of {args.reps}, each framework in its own process; load average {os.getloadavg()[0]:.1f}\n")
  print("| fwd + bwd | tinyplug | torch | torch / tinyplug |\n|---|---:|---:|---:|")
  for name, ours in times["tinyplug"].items():
    theirs = times["torch"][name]
    print(f"| {name} | {ours * 1e3:.2f} ms | {theirs * 1e3:.2f} ms | {theirs / ours:.2f}x |", flush=True)

if __name__ == "__main__": main()
