"""exp2/log2 on the CPU, side by side in one process: "libmvec" (exp2 and log2 as bare libmvec calls, the renderer
before session 13), "before" (exp2 from the core's polynomial as it was at --before, a git ref; log2 a bare libmvec
call) and "now" (this tree: the polynomial now, log2 by libmvec with its special lanes kept from it). Each kernel compiled each way, the ways called alternately,
per-thread CPU time of the compiled kernels, p10 / median of --reps.

  CPU_THREADS=1 python benchmarks/exp2_ab.py [--before 0b50264] [--reps 20] [--only softmax]"""
from __future__ import annotations
import argparse, os, subprocess, sys, time, types
os.environ["CACHELEVEL"] = "0"    # the variants differ in code the disk cache's key cannot see
import numpy as np
from tinyplug import Tensor
from tinyplug.codegen import decompositions, get_program
from tinyplug.device import Device
from tinyplug.schedule import create_schedule
from tinyplug.uop.ops import Ops

def _module_at(ref: str, path: str) -> types.ModuleType:
  src = subprocess.run(["git", "show", f"{ref}:{path}"], capture_output=True, text=True, check=True).stdout
  mod = types.ModuleType(f"before_{path.replace('/', '_')}")
  exec(compile(src, f"{ref}:{path}", "exec"), mod.__dict__)
  return mod

def workloads(rng: np.random.Generator) -> dict:
  f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)
  big = np.where(rng.random(1 << 22) < 0.5, -np.inf, rng.uniform(90, 200, 1 << 22)).astype(np.float32)
  masked = f32(2048, 2048)
  masked[:, 1024:] = -np.inf
  zeros = np.zeros(1 << 22, np.float32)
  zeros[::3] = rng.random(len(zeros[::3])).astype(np.float32)
  T = lambda a: Tensor(a, device="CPU").realize()
  return {
    "exp 4M": (T(f32(1 << 22)), lambda t: t.exp()),
    "exp 2M float64": (T(rng.standard_normal(1 << 21)), lambda t: t.exp()),
    "softmax 4096^2": (T(f32(4096, 4096)), lambda t: t.softmax(-1)),
    "logsumexp(1) 4096^2": (T(f32(4096, 4096)), lambda t: t.logsumexp(1)),
    "gelu 4M": (T(f32(1 << 22)), lambda t: t.gelu()),
    "silu 4M": (T(f32(1 << 22)), lambda t: t.silu()),
    "tanh 4M": (T(f32(1 << 22)), lambda t: t.tanh()),
    "masked softmax 2048^2": (T(masked), lambda t: t.softmax(-1)),
    "exp of large/-inf 4M": (T(big), lambda t: t.exp()),
    "log 4M": (T(np.abs(f32(1 << 22)) + 0.1), lambda t: t.log()),
    "log of zeros 4M": (T(zeros), lambda t: t.log()),
  }

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--before", default="0b50264")
  ap.add_argument("--reps", type=int, default=20)
  ap.add_argument("--only", default="")
  args = ap.parse_args()
  dev = Device["CPU"]
  renderer = dev.renderer
  before = _module_at(args.before, "tinyplug/codegen/decompositions.py")
  native, builder = type(renderer).native_ops, renderer.builder
  now = (decompositions.exp2_float, builder.log2_guarded)
  bare = lambda self, dt, x, log2: log2(x)
  variants = {"libmvec": (native | {Ops.EXP2}, (now[0], bare)), "before": (native, (before.exp2_float, bare)),
              "now": (native, now)}
  print(f"{dev.describe()}; per-thread CPU time of the kernels, p10 / median of {args.reps}; load {os.getloadavg()}")
  for name, (x, build) in workloads(np.random.default_rng(0)).items():
    if args.only and args.only not in name: continue
    items = [it for it in create_schedule([build(x).uop])[0] if it.ast.op is Ops.SINK]
    progs = {}
    for label, (ops, (exp2_fn, log2_fn)) in variants.items():
      type(renderer).native_ops, decompositions.exp2_float, builder.log2_guarded = ops, exp2_fn, log2_fn
      try:
        specs = [get_program(it.ast, renderer) for it in items]
        progs[label] = [(dev.make_program(s, dev.compiler.compile_cached(s.src)), [b.ensure_allocated().handle for b in it.bufs])
                        for s, it in zip(specs, items)]
      finally: type(renderer).native_ops, (decompositions.exp2_float, builder.log2_guarded) = native, now
    times: dict[str, list[float]] = {label: [] for label in progs}
    for _ in range(args.reps):
      for label, chain in progs.items():
        st = time.thread_time()
        for prg, handles in chain: prg(*handles)
        times[label].append(time.thread_time() - st)
    cells = "   ".join(f"{label}: {np.percentile(t, 10) * 1e3:6.2f} / {np.median(t) * 1e3:6.2f}" for label, t in times.items())
    print(f"{name:22s} {cells}", flush=True)
  print(f"load {os.getloadavg()}")

if __name__ == "__main__":
  sys.exit(main())
