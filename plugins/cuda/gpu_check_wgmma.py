"""The wgmma kernels (tinyplug_cuda/wgmma.py) on a real Hopper GPU, in one call (issue 16):

  DEV=CUDA python plugins/cuda/gpu_check_wgmma.py [--reps 20] [--quick] [--beam 2]

1. each variant's ptxas report (registers, spills, "wgmma serialized" warnings) from NVRTC for sm_90a;
2. correctness against torch (fp32 matmul of the same fp16/bf16 inputs, TF32 off) for small shapes and 4096^3;
3. fp16 4096^3 (fp32 accumulate) timing by CUDA events, best of --reps after a warm-up: torch.matmul (cuBLAS), the
   optimiser's kernels (session 9's mma.sync tile, the heuristic with the wgmma cores on, wgmma tiles through STAGE's
   descriptor mode; with --beam, BEAM's pick) and every generated wgmma variant, as one table with TFLOP/s and the
   ratio to cuBLAS; then the best.
Needs an sm_90 GPU (H100/H200), the cuda plugin and torch with CUDA; exits with the reason otherwise."""
from __future__ import annotations
import argparse, ctypes, os, sys, time
import numpy as np

# (label, keyword arguments of matmul_kernel); 4096 fits every one
VARIANTS = [
  ("128x128 s4 f0", dict(bm=128, bn=128, stages=4, inflight=0)),
  ("128x128 s4 f1", dict(bm=128, bn=128, stages=4, inflight=1)),
  ("128x128 s3 f0", dict(bm=128, bn=128, stages=3, inflight=0)),
  ("128x128 s5 f1", dict(bm=128, bn=128, stages=5, inflight=1)),
  ("128x256 s3 f0", dict(bm=128, bn=256, stages=3, inflight=0)),
  ("128x256 s4 f0", dict(bm=128, bn=256, stages=4, inflight=0)),
  ("128x256 s4 f1", dict(bm=128, bn=256, stages=4, inflight=1)),
  ("256x128 s4 f0", dict(bm=256, bn=128, stages=4, inflight=0)),
  ("256x128 s4 f1", dict(bm=256, bn=128, stages=4, inflight=1)),
  ("64x256 s4 f1", dict(bm=64, bn=256, stages=4, inflight=1)),
  ("128x256 s4 f0 ungrouped", dict(bm=128, bn=256, stages=4, inflight=0, grouped=False)),
  ("128x128 s4 f1 half out", dict(bm=128, bn=128, stages=4, inflight=1, out="half")),
  ("128x256 s4 f0 half out", dict(bm=128, bn=256, stages=4, inflight=0, out="half")),
]
SHAPES = [(128, 128, 128), (256, 512, 192), (512, 256, 1024), (4096, 4096, 4096)]
# the optimiser's kernels, as action lists (benchmarks/cuda_matmul.py's spelling; "" = the heuristic's choice): the
# session 9 mma.sync tile, and wgmma (TC 3) through STAGE's descriptor mode (2048 + 16 + 32 per stage past 2 + 256
# grouped): 128x128 of 2 warpgroups in 3/4 stages, grouped or not; 128x256; 256x128 of 4 warpgroups or of 2 doing 2 each
OPTIMISER = [
  ("mma.sync, session 9 heuristic", "TC0:0 UPCAST1:8 UPCAST0:4 UNROLL0:2 LOCAL1:2 LOCAL0:2 STAGE:304"),
  ("heuristic (wgmma on)", ""),
  ("opt wgmma 128x128 s3 grouped", "TC0:3 UNROLL0:4 LOCAL0:2 STAGE:2352"),
  ("opt wgmma 128x128 s4 grouped", "TC0:3 UNROLL0:4 LOCAL0:2 STAGE:2384"),
  ("opt wgmma 128x128 s3", "TC0:3 UNROLL0:4 LOCAL0:2 STAGE:2096"),
  ("opt wgmma 128x256 s3 grouped", "TC0:3 UNROLL0:4 UPCAST1:2 LOCAL0:2 STAGE:2352"),
  ("opt wgmma 128x256 s4 grouped", "TC0:3 UNROLL0:4 UPCAST1:2 LOCAL0:2 STAGE:2384"),
  ("opt wgmma 256x128 4wg s3 grouped", "TC0:3 UNROLL0:4 LOCAL0:4 STAGE:2352"),
  ("opt wgmma 256x128 2x2 s3 grouped", "TC0:3 UNROLL0:4 UPCAST0:2 LOCAL0:2 STAGE:2352"),
  # K steps of 128 (UNROLL 8: 8 wgmmas per wait, half the trips; 64 KB a stage for 128x128)
  ("opt wgmma 128x128 K128 s2 grouped", "TC0:3 UNROLL0:8 LOCAL0:2 STAGE:2320"),
  ("opt wgmma 128x128 K128 s3 grouped", "TC0:3 UNROLL0:8 LOCAL0:2 STAGE:2352"),
  ("opt wgmma 128x256 K128 s2 grouped", "TC0:3 UNROLL0:8 UPCAST1:2 LOCAL0:2 STAGE:2320"),
]

def _fail(why: str) -> None:
  print(f"gpu_check_wgmma: {why}", file=sys.stderr)
  sys.exit(2)

def _kwargs(kw: dict) -> dict:
  from tinyplug.uop.dtype import dtypes
  kw = dict(kw)
  if kw.get("out") == "half": kw["out"] = dtypes.float16
  return kw

def ptxas_report(src: str) -> str:
  """Registers, spills and ptxas's performance warnings of `src` for sm_90a."""
  from tinyplug_cuda import nvrtc
  L, prog = nvrtc.lib(), ctypes.c_void_p()
  L.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"k.cu", 0, None, None)
  opts = nvrtc.options("sm_90a") + ["--ptxas-options=-v"]
  try:
    L.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts]))
    log = nvrtc._log(prog)
  finally: L.nvrtcDestroyProgram(ctypes.byref(prog))
  keep = [line.split(":", 1)[-1].strip() for line in log.splitlines()
          if "Used" in line or "spill" in line or "C7514" in line or "C7515" in line or "C7510" in line or "error" in line]
  return "; ".join(keep)

def run_variant(kw: dict, m: int, n: int, k: int, a_np, b_np, reps: int = 0, device: str = "CUDA"):
  """(result as float32 numpy, best seconds or None) of one variant on `device`."""
  from tinyplug.device import Buffer
  from tinyplug.uop.dtype import dtypes
  from tinyplug_cuda.wgmma import matmul_kernel, program
  kernel = matmul_kernel(m, n, k, **_kwargs(kw))
  out = _kwargs(kw).get("out", dtypes.float32)
  A = Buffer(device, m * k, dtypes.half).copyin(a_np.astype(np.float16))
  B = Buffer(device, k * n, dtypes.half).copyin(b_np.astype(np.float16))
  C = Buffer(device, m * n, out)
  prg = program(kernel, device)
  prg(C, A, B)
  times = [prg(C, A, B, wait=True) for _ in range(reps)] if reps else []
  return C.numpy().reshape(m, n).astype(np.float32), (min(times) if times else None)

# where the generated kernel disagrees with the GPU: the same kernel with one assumption about the PTX ISA's layouts
# changed at a time (the emulator implements the unchanged reading); whichever edit makes the GPU agree names the fix
ALTERNATIVES = {
  "B's LBO and SBO swapped": ("kk * 2048, 8192, 1024, 1)", "kk * 2048, 1024, 8192, 1)"),
  "A's LBO 0 instead of 16": ("kk * 32, 16, 1024, 1)", "kk * 32, 0, 1024, 1)"),
  "A's LBO = SBO": ("kk * 32, 16, 1024, 1)", "kk * 32, 1024, 1024, 1)"),
  "no async-proxy fence": ("    tp_fence_proxy_async();\n", "\n"),
}

def diagnose(device: str = "CUDA") -> None:
  import dataclasses
  from tinyplug.device import Buffer
  from tinyplug.uop.dtype import dtypes
  from tinyplug_cuda.wgmma import matmul_kernel, program
  print("\n## diagnosis: the 256x256x256 kernel (128x128, 3 stages) with one layout assumption changed")
  rng = np.random.default_rng(1)
  a_np, b_np = (rng.standard_normal(s).astype(np.float16) for s in ((256, 256), (256, 256)))
  ref = a_np.astype(np.float32) @ b_np.astype(np.float32)
  base = matmul_kernel(256, 256, 256, stages=3)
  for label, (old, new) in {"as generated": ("", ""), **ALTERNATIVES}.items():
    kernel = dataclasses.replace(base, src=base.src.replace(old, new) if old else base.src)
    A = Buffer(device, a_np.size, dtypes.half).copyin(a_np)
    B = Buffer(device, b_np.size, dtypes.half).copyin(b_np)
    C = Buffer(device, 256 * 256, dtypes.float)
    try:
      program(kernel, device)(C, A, B)
      err = float(np.abs(C.numpy().reshape(256, 256) - ref).max())
      print(f"{label:28s} max |err| {err:.3g} {'ok' if err < 1e-2 else 'wrong'}")
    except Exception as e: print(f"{label:28s} {type(e).__name__}: {str(e)[:200]}")

def _reference(torch, a_np, b_np) -> np.ndarray:
  """fp32 matmul of the 16-bit inputs: torch on the GPU (TF32 off), numpy for an emulator dry run."""
  if torch is None: return a_np.astype(np.float32) @ b_np.astype(np.float32)
  return (torch.from_numpy(a_np).cuda().float() @ torch.from_numpy(b_np).cuda().float()).cpu().numpy()

def _cublas(torch, a_np, b_np, reps: int) -> float:
  """Best seconds of torch.matmul (cuBLAS, half out) by CUDA events; nan off a GPU."""
  if torch is None: return float("nan")
  ta, tb = torch.from_numpy(a_np).cuda(), torch.from_numpy(b_np).cuda()
  torch.matmul(ta, tb); torch.cuda.synchronize()
  times = []
  for _ in range(reps):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); torch.matmul(ta, tb); e.record(); torch.cuda.synchronize()
    times.append(s.elapsed_time(e) / 1e3)
  return min(times)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--reps", type=int, default=20)
  ap.add_argument("--quick", action="store_true", help="the first 4 variants only")
  ap.add_argument("--beam", type=int, default=0, help="also the kernel BEAM=<width> picks, with the wgmma cores on")
  ap.add_argument("--device", default="CUDA", help="MOCK+CUDA: a dry run of this script on the emulator (numpy "
                  "references, times meaningless; use --n 256 --reps 1)")
  ap.add_argument("--n", type=int, default=4096, help="the timed matmul's size")
  args = ap.parse_args()
  from tinyplug.device import Device
  torch = None
  if args.device == "CUDA":
    try: import torch
    except ImportError: _fail("needs torch (with CUDA) for the reference and cuBLAS")
    if not torch.cuda.is_available(): _fail("torch sees no CUDA GPU")
    cc = torch.cuda.get_device_capability()
    if cc != (9, 0): _fail(f"{torch.cuda.get_device_name()} is sm_{cc[0]}{cc[1]}: wgmma needs sm_90 (H100/H200)")
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = Device["CUDA"]
    print(f"{torch.cuda.get_device_name()} (sm_90, compiled for sm_90a), torch {torch.__version__}, {dev.describe()}")
  else:
    dev = Device[args.device]
    dev.renderer.arch, dev.renderer.shared_max = "sm_90", 232448   # the emulator renders as for an H100
    print(f"dry run on {args.device}: {dev.describe()}")
  variants = VARIANTS[:4] if args.quick else VARIANTS
  from tinyplug_cuda.wgmma import matmul_kernel
  print("\n## ptxas (sm_90a)")
  for label, kw in variants:
    print(f"{label:28s} {ptxas_report(matmul_kernel(4096, 4096, 4096, **_kwargs(kw)).src)}")

  print("\n## correctness against torch (fp32 matmul of the fp16 inputs)")
  rng = np.random.default_rng(0)
  bad = 0
  for m, n, k in SHAPES if args.device == "CUDA" else SHAPES[:2]:
    a_np = rng.standard_normal((m, k)).astype(np.float16)
    b_np = rng.standard_normal((k, n)).astype(np.float16)
    ref = _reference(torch, a_np, b_np)
    for label, kw in variants:
      try: matmul_kernel(m, n, k, **_kwargs(kw))
      except ValueError: continue   # the shape does not tile by this block
      got, _ = run_variant(kw, m, n, k, a_np, b_np, device=args.device)
      tol = 2e-2 * np.sqrt(k) if kw.get("out") == "half" else 1e-3 * np.sqrt(k)
      err = float(np.abs(got - ref).max())
      ok = err <= tol
      bad += not ok
      print(f"{m}x{n}x{k:<6d} {label:28s} max |err| {err:.3g} {'ok' if ok else 'FAIL'}")

  if bad: diagnose(args.device)

  n = args.n
  print(f"\n## fp16 {n}^3, fp32 accumulate: best of {args.reps} by CUDA events")
  a_np = rng.standard_normal((n, n)).astype(np.float16)
  b_np = rng.standard_normal((n, n)).astype(np.float16)
  t_torch = _cublas(torch, a_np, b_np, args.reps)
  ref = _reference(torch, a_np, b_np)
  flops = 2 * n ** 3
  print(f"{'kernel':34s} {'time':>10s} {'TFLOP/s':>8s} {'of cuBLAS':>9s}  check  (the generator's: fp32 out; the "
        "optimiser's: fp16 out, as torch)")
  print(f"{'torch.matmul (cuBLAS, half out)':34s} {t_torch * 1e3:8.3f}ms {flops / t_torch / 1e12:8.1f} {1.0:9.2f}")
  # the optimiser's kernels (the same matmul graph: fp16 in, fp32 accumulate, fp16 out), by their actions
  sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
  from cuda_matmul import _tinyplug_kernel, _variant_kernel, actions_text, matmul_item, parse_variant
  dev.renderer.wgmma = True   # the wgmma cores (TC 3 and 4) and the heuristic's preference for them
  item, bufs = matmul_item(a_np.astype(np.float32), b_np.astype(np.float32), args.device)
  best = None
  for label, text in OPTIMISER:
    try: t, opts, build, got = _variant_kernel(n, parse_variant(text) if text else None, args.reps, item, bufs,
                                               args.device)
    except Exception as e:
      print(f"{label:34s} {type(e).__name__}: {str(e)[:300]}")
      bad += args.device == "CUDA" or n == 4096   # a dry run's small matmul may not tile as 4096 does
      continue
    err = float(np.abs(got.astype(np.float32) - ref).max())
    ok = err < 2.0
    bad += not ok
    if ok and "wgmma" in label and (best is None or t < best[1]): best = (label, t)
    print(f"{label:34s} {t * 1e3:8.3f}ms {flops / t / 1e12:8.1f} {t_torch / t:9.2f}  {'ok' if ok else f'FAIL {err:.3g}'}  "
          f"[{actions_text(opts)}] ({build:.1f}s)")
  # the same product with B stored N x K (x @ W.T, as nn.Linear does): wgmma's K-major B (imm-trans-b 0)
  from tinyplug import Tensor, dtypes
  from tinyplug.schedule import create_schedule
  ta_ = Tensor(a_np.astype(np.float32), device=args.device).cast(dtypes.half).realize()
  tbt = Tensor(np.ascontiguousarray(b_np.T).astype(np.float32), device=args.device).cast(dtypes.half).realize()
  (item_t,), _ = create_schedule([ta_.matmul(tbt.T).uop])
  bufs_t = [x.ensure_allocated() for x in item_t.bufs]
  for label, text in (("heuristic, B stored N x K", ""), ("opt wgmma 128x256 B N x K", OPTIMISER[5][1])):
    try: t, opts, build, got = _variant_kernel(n, parse_variant(text) if text else None, args.reps, item_t, bufs_t,
                                               args.device)
    except Exception as e:
      print(f"{label:34s} {type(e).__name__}: {str(e)[:300]}")
      bad += args.device == "CUDA" or n == 4096
      continue
    err = float(np.abs(got.astype(np.float32) - ref).max())
    bad += err >= 2.0
    print(f"{label:34s} {t * 1e3:8.3f}ms {flops / t / 1e12:8.1f} {t_torch / t:9.2f}  "
          f"{'ok' if err < 2.0 else f'FAIL {err:.3g}'}  [{actions_text(opts)}] ({build:.1f}s)")
  if args.beam:
    t, opts, build, got = _tinyplug_kernel(n, {"BEAM": args.beam, "IGNORE_BEAM_CACHE": 1}, args.reps,
                                           a_np.astype(np.float32), b_np.astype(np.float32), args.device)
    err = float(np.abs(got.astype(np.float32) - ref).max())
    bad += err >= 2.0
    print(f"{'BEAM=' + str(args.beam):34s} {t * 1e3:8.3f}ms {flops / t / 1e12:8.1f} {t_torch / t:9.2f}  "
          f"{'ok' if err < 2.0 else f'FAIL {err:.3g}'}  [{actions_text(opts)}] (search {build:.1f}s)")
  for label, kw in variants:
    try: matmul_kernel(n, n, n, **_kwargs(kw))
    except ValueError: continue
    st = time.perf_counter()
    got, t = run_variant(kw, n, n, n, a_np, b_np, args.reps, args.device)
    err = float(np.abs(got - ref).max())
    ok = err <= (2.0 if kw.get("out") == "half" else 0.1)
    bad += not ok
    if ok and (best is None or t < best[1]): best = (label, t)
    print(f"{'wgmma ' + label:34s} {t * 1e3:8.3f}ms {flops / t / 1e12:8.1f} {t_torch / t:9.2f}  "
          f"{'ok' if ok else f'FAIL {err:.3g}'}  ({time.perf_counter() - st:.1f}s)")
  if best: print(f"\nbest wgmma: {best[0]} {best[1] * 1e3:.3f} ms = {t_torch / best[1]:.2f}x cuBLAS")
  print(f"{bad} failed check(s)")
  sys.exit(1 if bad else 0)

if __name__ == "__main__":
  main()
