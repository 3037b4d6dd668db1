"""fp16 matmul on a CUDA GPU: tinyplug with and without tensor cores (and with BEAM, if asked), beside torch.matmul
(cuBLAS) on the same GPU, in one run.

  python benchmarks/cuda_matmul.py                 # 4096x4096x4096 fp16 (fp32 accumulate), TC on and TC=0
  python benchmarks/cuda_matmul.py --beam 2        # ... and the kernel BEAM=2 picks, and the search's wall time
  PARALLEL=14 python benchmarks/cuda_matmul.py --beam 2   # candidates built by 14 worker processes (default: 1 per core)
  python benchmarks/cuda_matmul.py --n 2048 --reps 20
  python benchmarks/cuda_matmul.py --variants      # ... and each built-in action list (VARIANTS) beside them
  python benchmarks/cuda_matmul.py --variants "TC0:0 UPCAST1:4 UPCAST0:4 UNROLL0:2 LOCAL1:4 LOCAL0:2 STAGE; TC0:0 STAGE:15"

A variant is actions separated by spaces, each `NAME[axis[:arg]]` (an OptOps name: TC, UPCAST, UNROLL, LOCAL, PADTO,
STAGE, ...); variants are separated by ';'. An action list the kernel refuses prints why and the run goes on.

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

# explicit action lists for the tensor-core kernel, timed beside the heuristic's with --variants: register tiles of
# WMMAs per warp (UPCAST of the N and M tile axes), warps per work-group (LOCAL), the K step (UNROLL of 16-deep
# K-tiles), with and without staging A and B through shared memory (STAGE; STAGE:1 also prefetches the next K step)
VARIANTS = [
  "TC0:0 UPCAST1:4 UPCAST0:2 UNROLL0:2 LOCAL1:2 LOCAL0:2",                # main before STAGE: 32x32/warp, 64x64 block
  "TC0:0 UPCAST1:4 UPCAST0:4 UNROLL0:2 LOCAL1:4 LOCAL0:2",                # 64x32/warp, 128x128 block, not staged
  "TC0:0 UPCAST1:4 UPCAST0:4 UNROLL0:2 LOCAL1:4 LOCAL0:2 STAGE",          # ... staged
  "TC0:0 UPCAST1:4 UPCAST0:4 UNROLL0:2 LOCAL1:4 LOCAL0:2 STAGE:1",        # ... staged, next K step prefetched (default)
  "TC0:0 UPCAST1:4 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:2 STAGE:1",        # 64x32/warp, 128x64 block, 4 warps
  "TC0:0 UPCAST1:4 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:4 STAGE:1",        # 64x32/warp, 256x64 block
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:2 STAGE",          # 64x64/warp, 128x128 block
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:2 STAGE:1",
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:4 LOCAL0:2 STAGE:1",        # 64x64/warp, 128x256 block (48 KB shared)
  "TC0:0 UPCAST1:8 UPCAST0:2 UNROLL0:2 LOCAL1:2 LOCAL0:4 STAGE:1",        # 32x64/warp, 128x128 block
  "TC0:0 UPCAST1:4 UPCAST0:2 UNROLL0:2 LOCAL1:4 LOCAL0:4 STAGE:1",        # 32x32/warp, 128x128 block, 16 warps
  "TC0:0 UPCAST1:4 UPCAST0:4 UNROLL0:4 LOCAL1:2 LOCAL0:2 STAGE:1",        # K step 64, 4 warps
  "TC0:0 UPCAST1:2 UPCAST0:4 UNROLL0:2 LOCAL1:4 LOCAL0:2 STAGE:1",        # 64x16/warp
  # the default tile with vector fills (STAGE bits: 1 prefetch, 2 B in 16-byte loads, 4 A so, 8 padded shared tiles)
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:2 STAGE:3",        # B by 16 bytes (its stores: bank conflicts)
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:2 STAGE:11",       # ... padded: B's stores conflict-free
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:2 STAGE:7",        # A and B by 16 bytes
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:2 STAGE:15",       # ... padded
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:4 LOCAL0:2 STAGE:7",        # 128x256 block (48 KB: no room to pad)
  "TC0:0 UPCAST1:4 UPCAST0:4 UNROLL0:2 LOCAL1:4 LOCAL0:2 STAGE:15",       # 64x32/warp, 128x128 block, 8 warps
  "TC0:0 UPCAST1:4 UPCAST0:4 UNROLL0:4 LOCAL1:2 LOCAL0:2 STAGE:7",        # K step 64, 4 warps (48 KB: no pad)
  "TC0:0 UPCAST1:8 UPCAST0:2 UNROLL0:2 LOCAL1:2 LOCAL0:4 STAGE:15",       # 32x64/warp, 128x128 block
  # the asynchronous mode (STAGE bit 16: row-major swizzled tiles, cp.async, ldmatrix; + 32 per stage past 2, +128
  # unswizzled): the default tile in 2-5 stages, unswizzled, K step 64, and 128x256 / 256x128 blocks of 8 warps
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:2 STAGE:16",
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:2 STAGE:48",       # the heuristic's default
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:2 STAGE:80",
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:2 STAGE:112",
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:2 STAGE:176",
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:4 LOCAL1:2 LOCAL0:2 STAGE:48",
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:4 LOCAL0:2 STAGE:48",
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:4 LOCAL0:2 STAGE:80",
  "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:4 STAGE:80",
]

def parse_variant(text: str) -> list:
  """`"TC0:0 UPCAST1:4 STAGE:1"` -> [Opt(TC, 0, 0), Opt(UPCAST, 1, 4), Opt(STAGE, None, 1)]."""
  from tinyplug.codegen.kernel import Opt, OptOps
  opts = []
  for tok in text.split():
    name = tok.rstrip("0123456789:")
    if name not in OptOps.__members__:
      raise ValueError(f"{tok!r}: {name!r} is not an action ({', '.join(OptOps.__members__)})")
    axis, _, arg = tok[len(name):].partition(":")   # "UPCAST1:4", "STAGE:1" (no axis), "STAGE"
    opts.append(Opt(OptOps[name], int(axis) if axis else None, int(arg) if arg else None))
  return opts

def actions_text(opts) -> str:
  """The spelling `parse_variant` reads: `TC0:0 UPCAST1:4 STAGE`."""
  def one(o) -> str: return o.op.name + ("" if o.axis is None else str(o.axis)) + ("" if o.arg is None else f":{o.arg}")
  return " ".join(one(o) for o in opts)

def matmul_item(a_np, b_np, device: str = "CUDA"):
  """The one kernel of the fp16 matmul of `a_np` and `b_np` on `device`, and its buffers (inputs filled)."""
  from tinyplug import Tensor, dtypes
  from tinyplug.schedule import create_schedule
  a = Tensor(a_np, device=device).cast(dtypes.half).realize()
  b = Tensor(b_np, device=device).cast(dtypes.half).realize()
  (item,), _ = create_schedule([a.matmul(b).uop])
  return item, [buf.ensure_allocated() for buf in item.bufs]

def _variant_kernel(n: int, opts: list, reps: int, item, bufs, device: str = "CUDA"):
  """`_tinyplug_kernel` with explicit actions, on `matmul_item`'s kernel and buffers: (best GPU seconds, the actions,
  seconds to build, result)."""
  from tinyplug.codegen import get_program
  from tinyplug.device import Device
  dev = Device[device]
  st = time.perf_counter()
  spec = get_program(item.ast, dev.renderer, opts=opts)
  prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
  build = time.perf_counter() - st
  run = lambda: prg(*[x.handle for x in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
  times = [run() for _ in range(reps + 1)][1:]
  best = min(t if t is not None else float("inf") for t in times)
  return best, spec.applied_opts, build, bufs[0].numpy().reshape(n, n)

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
  ap.add_argument("--variants", nargs="?", const="builtin", default="",
                  help="also time explicit action lists: ';'-separated, or none given: the built-in VARIANTS")
  ap.add_argument("--device", default="CUDA", help="tinyplug's device (MOCK+CUDA: a smoke test on the emulator)")
  args = ap.parse_args()
  text = ";".join(VARIANTS) if args.variants == "builtin" else args.variants
  variants = [v.strip() for v in text.split(";") if v.strip()]
  for v in variants: parse_variant(v)   # a misspelt action stops the run before anything is timed
  import numpy as np
  from tinyplug.codegen.kernel import KernelOptError
  from tinyplug.device import Device
  n, rng, on_gpu = args.n, np.random.default_rng(0), args.device == "CUDA"
  a_np, b_np = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
  if on_gpu:
    try: import torch
    except ImportError: _fail("needs torch (with CUDA) for the reference")
    if not torch.cuda.is_available(): _fail("torch sees no CUDA GPU")
    if "CUDA" not in Device.available():
      _fail("tinyplug's CUDA device is unavailable here (`tinyplug list-plugins --all` says why); it needs a GPU")
    t_torch, ref, gpu = _torch(n, args.reps, a_np, b_np)
  else:   # a smoke test of the script off a GPU: numpy's product is the reference, nothing to compare times with
    t_torch, gpu = float("nan"), args.device
    def half(x): return x.astype(np.float16).astype(np.float32)
    ref = half(half(a_np) @ half(b_np))
  fixed = [("tinyplug, tensor cores (TC=1)", {"TC": 1, "BEAM": 0}),
           ("tinyplug, no tensor cores (TC=0)", {"TC": 0, "BEAM": 0})]
  if args.beam: fixed.append((f"tinyplug, BEAM={args.beam}", {"TC": 1, "BEAM": args.beam, "IGNORE_BEAM_CACHE": 1}))
  flops = 2 * n ** 3
  print(f"GPU: {gpu}; fp16 matmul {n}x{n}x{n}, fp32 accumulate; best of {args.reps}, GPU time")
  print(f"{'variant':36s} {'time':>10s} {'TFLOP/s':>8s} {'of torch':>9s} {'build':>8s}  {'check':4s}  actions")
  print(f"{'torch.matmul (cuBLAS)':36s} {t_torch * 1e3:8.3f}ms {flops / t_torch / 1e12:8.1f} {1.0:9.2f} {'':>8s}")
  scale = max(1.0, float(np.abs(ref).max()))
  def row(name: str, t: float, opts, build: float, got) -> None:
    err = float(np.abs(got.astype(np.float32) - ref).max())
    ok = "ok" if err <= 2e-2 * scale else f"WRONG: max error {err:.3g}"
    print(f"{name:36s} {t * 1e3:8.3f}ms {flops / t / 1e12:8.1f} {t_torch / t:9.2f} {build:7.1f}s  {ok:4s}  "
          f"{actions_text(opts) or '(none)'}", flush=True)
  from tinyplug import events
  searches: list[dict] = []
  events.subscribe("search", searches.append)
  for name, settings in fixed:
    row(name, *_tinyplug_kernel(n, settings, args.reps, a_np, b_np, args.device))
    for ev in searches:   # what BEAM cost: the wall time of the search, and what happened to its candidates
      from tinyplug.search.runner import parallel_workers
      print(f"{'':36s} search: {ev['seconds']:.1f}s wall, PARALLEL={parallel_workers()}: {ev['timed']} timed, "
            f"{ev['refused']} refused, {ev['failed']} failed, {ev['built_in_workers']} built by workers", flush=True)
    searches.clear()
  item, bufs = matmul_item(a_np, b_np, args.device) if variants else (None, None)
  for i, text in enumerate(variants):
    try: row(f"variant {i}", *_variant_kernel(n, parse_variant(text), args.reps, item, bufs, args.device))
    except KernelOptError as e: print(f"{f'variant {i}':36s} refused: {e}  [{text}]", flush=True)

if __name__ == "__main__":
  main()
