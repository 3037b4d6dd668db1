"""Causal attention, jitted: the replay time of scaled_dot_product_attention(is_causal=True) forward, or forward and
backward with the three gradients realized, against torch's in the same process (best of --rounds).

    CPU_THREADS=1 python benchmarks/causal_attention.py --shape 1x8x1024x64 --backward   # per-thread CPU time
    chrt -f 10 python benchmarks/causal_attention.py --shape 8x4x128x64 --wall            # all cores, wall clock

Each framework runs in a process of its own (on 2 threads the other's idle workers spin after its ops and take a
core). Run two checkouts' copies in turns (PYTHONPATH=<checkout>:<checkout>/plugins/cpu_llvm/src) to compare them."""
from __future__ import annotations
import argparse, json, os, subprocess, sys, time
import numpy as np

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--shape", default="8x4x128x64", help="batch x heads x tokens x head size")
  ap.add_argument("--backward", action="store_true", help="forward and backward (sum of squares)")
  ap.add_argument("--wall", action="store_true", help="wall clock instead of the calling thread's CPU time")
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--worker", choices=("tinyplug", "torch"), help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.worker:
    print(json.dumps(_best(args)))
    return
  flags = [f"--shape={args.shape}", f"--rounds={args.rounds}"] + ["--backward"] * args.backward + ["--wall"] * args.wall
  best = {w: json.loads(subprocess.run([sys.executable, __file__, "--worker", w, *flags], check=True, capture_output=True,
                                       text=True).stdout.strip().splitlines()[-1]) for w in ("tinyplug", "torch")}
  print(f"{args.shape} {'fwd+bwd' if args.backward else 'fwd'} ({'wall' if args.wall else 'thread CPU time'}): "
        f"tinyplug {best['tinyplug'][0] * 1e3:.2f} ms ({best['tinyplug'][1]} launches), torch {best['torch'][0] * 1e3:.2f} ms")

def _best(args) -> tuple[float, int]:
  """The best time of one framework's step, and how many launches it replays (tinyplug) or 0."""
  clock = time.perf_counter if args.wall else time.thread_time
  shape = tuple(int(v) for v in args.shape.split("x"))
  data = [np.random.default_rng(i).standard_normal(shape).astype(np.float32) for i in range(3)]
  if args.worker == "tinyplug":
    from tinyplug.engine.jit import TinyJit
    from tinyplug.tensor import Tensor
    ts = [Tensor(a, requires_grad=args.backward).realize() for a in data]
    def step(q, k, v):
      out = q.scaled_dot_product_attention(k, v, is_causal=True)
      if not args.backward: return out.realize()
      out.square().sum().backward()
      grads = [q.grad, k.grad, v.grad]
      q.grad = k.grad = v.grad = None
      return Tensor.realize(*grads)
    jit = TinyJit(step)
    run = lambda: jit(*ts)
  else:
    import torch
    torch.set_num_threads(int(os.environ.get("CPU_THREADS", "0") or 0) or os.cpu_count() or 1)
    ps = [torch.tensor(a, requires_grad=args.backward) for a in data]
    def run() -> None:
      for p in ps: p.grad = None
      out = torch.nn.functional.scaled_dot_product_attention(*ps, is_causal=True)
      if args.backward: out.square().sum().backward()
  for _ in range(3): run()   # the third call replays
  best = float("inf")
  for _ in range(args.rounds):
    st = clock(); run(); best = min(best, clock() - st)
  return best, len(jit.captured.launches) if args.worker == "tinyplug" else 0

if __name__ == "__main__": main()
