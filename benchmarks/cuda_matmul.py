"""fp16 matmul on a CUDA GPU: tinyplug with and without tensor cores (and with BEAM, if asked), beside torch.matmul
(cuBLAS) on the same GPU, in one run.

  python benchmarks/cuda_matmul.py                 # 4096x4096x4096 fp16 (fp32 accumulate), TC on and TC=0
  python benchmarks/cuda_matmul.py --beam 2        # ... and the kernel BEAM=2 picks (searching takes minutes)
  python benchmarks/cuda_matmul.py --n 2048 --reps 20

Needs DEV=CUDA to work (a GPU, its driver, the cuda plugin) and torch with CUDA; exits with the reason otherwise.
Kernel times are GPU times from CUDA events (tinyplug: the runtime's per-launch events; torch: torch.cuda.Event),
best of `--reps` runs after a warm-up; compile and search time are excluded and printed apart. TFLOP/s counts
2*N^3 flops. Every variant's result is checked against torch's before it is timed."""
from __future__ import annotations
import argparse, sys, time

def _fail(why: str) -> None:
  print(f"cuda_matmul: {why}", file=sys.stderr)
  sys.exit(2)

def _tinyplug_kernel(n: int, settings: dict, reps: int, a_np, b_np, device: str = "CUDA"):
  """(best GPU seconds, the kernel's actions, seconds to search+compile, result) of one fp16 matmul kernel."""
  from tinyplug import Tensor, dtypes
  from tinyplug.engine.realize import get_runner
  from tinyplug.helpers import Context
  from tinyplug.schedule import create_schedule
  a = Tensor(a_np, device=device).cast(dtypes.half).realize()
  b = Tensor(b_np, device=device).cast(dtypes.half).realize()
  out = a.matmul(b)
  (item,), _ = create_schedule([out.uop])
  with Context(**settings):
    st = time.perf_counter()
    runner = get_runner(device, item.ast)
    build = time.perf_counter() - st
  bufs = [buf.ensure_allocated() for buf in item.bufs]
  times = [runner(bufs, {}, wait=True) for _ in range(reps + 1)][1:]
  result = bufs[0].numpy().reshape(n, n)
  return min(times), runner.spec.applied_opts, build, result

def _torch(n: int, reps: int, a_np, b_np):
  import torch
  a, b = torch.from_numpy(a_np).cuda().half(), torch.from_numpy(b_np).cuda().half()
  torch.matmul(a, b); torch.cuda.synchronize()
  times = []
  for _ in range(reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); c = torch.matmul(a, b); end.record(); torch.cuda.synchronize()
    times.append(start.elapsed_time(end) / 1e3)
  return min(times), c.float().cpu().numpy(), torch.cuda.get_device_name()

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--n", type=int, default=4096)
  ap.add_argument("--reps", type=int, default=10)
  ap.add_argument("--beam", type=int, default=0, help="also time the kernel BEAM=<width> picks (0: skip)")
  args = ap.parse_args()
  import numpy as np
  try: import torch
  except ImportError: _fail("needs torch (with CUDA) for the reference")
  if not torch.cuda.is_available(): _fail("torch sees no CUDA GPU")
  from tinyplug.device import Device
  if "CUDA" not in Device.available():
    _fail("tinyplug's CUDA device is unavailable here (`tinyplug list-plugins --all` says why); it needs a GPU")
  n, rng = args.n, np.random.default_rng(0)
  a_np, b_np = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
  t_torch, ref, gpu = _torch(n, args.reps, a_np, b_np)
  variants = [("tinyplug, tensor cores (TC=1)", {"TC": 1, "BEAM": 0}),
              ("tinyplug, no tensor cores (TC=0)", {"TC": 0, "BEAM": 0})]
  if args.beam: variants.append((f"tinyplug, BEAM={args.beam}", {"TC": 1, "BEAM": args.beam, "IGNORE_BEAM_CACHE": 1}))
  flops = 2 * n ** 3
  print(f"GPU: {gpu}; fp16 matmul {n}x{n}x{n}, fp32 accumulate; best of {args.reps}, GPU time")
  print(f"{'variant':36s} {'time':>10s} {'TFLOP/s':>8s} {'of torch':>9s} {'build':>8s}  actions")
  print(f"{'torch.matmul (cuBLAS)':36s} {t_torch * 1e3:8.3f}ms {flops / t_torch / 1e12:8.1f} {1.0:9.2f} {'':>8s}")
  scale = max(1.0, float(np.abs(ref).max()))
  for name, settings in variants:
    t, opts, build, got = _tinyplug_kernel(n, settings, args.reps, a_np, b_np)
    err = float(np.abs(got.astype(np.float32) - ref).max())
    ok = "" if err <= 2e-2 * scale else f"  WRONG: max error {err:.3g}"
    uses_tc = any(getattr(o.op, "name", "") == "TC" for o in opts)
    print(f"{name:36s} {t * 1e3:8.3f}ms {flops / t / 1e12:8.1f} {t_torch / t:9.2f} {build:7.1f}s  "
          f"{'TC ' if uses_tc else ''}{list(opts)}{ok}")

if __name__ == "__main__":
  main()
