"""Time one kernel of a workload under several explicit action lists beside the heuristic's, on one device, so a single
run on a lent GPU shows which actions a heuristic should pick. Times are the runtime's own per-launch timing (CUDA
events on CUDA), best of `--reps`; every variant's result is checked against the heuristic's.

  DEV=CUDA python tools/device/kernel_variants.py                       # every workload, its default variants
  python tools/device/kernel_variants.py --device MOCK+CUDA --small     # a smoke test on the emulator
  python tools/device/kernel_variants.py --only sum --variants "G256 U4;U4 G256 U4;G512 U8"

A variant is actions separated by spaces: a letter for the action, an optional `axis:`, then the amount. G GROUP,
T GROUPTOP, U UNROLL, P UPCAST, L LOCAL (e.g. `P4 L1:32`). An action the kernel refuses prints why."""
from __future__ import annotations
import argparse, os, sys, time
import numpy as np

LETTERS = {"G": "GROUP", "T": "GROUPTOP", "U": "UNROLL", "P": "UPCAST", "L": "LOCAL"}

def parse(variant: str) -> list:
  from tinyplug.codegen.kernel import Opt, OptOps
  opts = []
  for tok in variant.split():
    op, rest = LETTERS[tok[0].upper()], tok[1:]
    axis, arg = rest.split(":") if ":" in rest else ("0", rest)
    opts.append(Opt(OptOps[op], int(axis), int(arg)))
  return opts

def workloads(small: bool) -> dict:
  """name: (build(Tensor, device) -> output tensor with its inputs realized, index of the kernel to vary, bytes the
  kernel moves, default variants)."""
  n = 1 << 20 if small else 1 << 28
  sm = 256 if small else 8192
  def rand(T, dev, *shape): return T.rand(*shape, device=dev).realize()
  return {
    "copy": (lambda T, d: rand(T, d, n) + 1.0, 0, 8 * n, ["P4 L256", "P4 L128", "P4 L512", "P8 L256", "P8 L128",
                                                           "P16 L128", "P4 L1024"]),
    "chain": (lambda T, d: ((lambda a, b, c: ((a * b) + c).relu() * 0.5)(rand(T, d, n), rand(T, d, n), rand(T, d, n))),
              0, 16 * n, ["P4 L256", "P4 L128", "P4 L512", "P8 L256", "P8 L128", "P16 L128", "P8 L512", "P4 L1024"]),
    "sum": (lambda T, d: rand(T, d, n).sum(), 0, 4 * n,
            ["G256 U4", "U4 G256", "U4 G256 U4", "U4 G256 U2", "G256 U8", "G256 U16", "G128 U8", "U4 G128 U4",
             "G512 U4", "U4 G512 U2", "G1024 U4", "U4 G1024"]),
    "softmax_max": (lambda T, d: rand(T, d, sm, sm).softmax(-1), 0, 4 * sm * sm,
                    ["G256 U4", "U4 G256", "U4 G256 U2", "G512 U4", "U4 G512", "G1024 U2", "U4 G128 U4", "G128 U8"]),
  }

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--device", default=os.environ.get("DEV", "CUDA"))
  ap.add_argument("--only", default="", help="comma-separated workload names")
  ap.add_argument("--variants", default="", help="';'-separated variants (replaces the defaults)")
  ap.add_argument("--reps", type=int, default=10)
  ap.add_argument("--small", action="store_true", help="small sizes (emulator smoke test)")
  args = ap.parse_args()
  from tinyplug import Tensor
  from tinyplug.codegen import get_program
  from tinyplug.codegen.kernel import KernelOptError
  from tinyplug.device import Device
  from tinyplug.schedule import create_schedule
  dev = Device[args.device]
  for name, (build, index, nbytes, defaults) in workloads(args.small).items():
    if args.only and name not in args.only.split(","): continue
    out = build(Tensor, args.device)
    items, _ = create_schedule([out.uop])
    items = [it for it in items if it.ast.op.name == "SINK"]
    item = items[index]
    bufs = [b.ensure_allocated() for b in item.bufs]
    print(f"== {name} ({len(items)} kernels; kernel {index}, {nbytes / 1e6:.0f} MB moved)")
    ref = None
    variants = [v for v in args.variants.split(";") if v.strip()] if args.variants else defaults
    for label in ["heuristic"] + variants:
      try:
        spec = get_program(item.ast, dev.renderer, opts=None if label == "heuristic" else parse(label))
      except KernelOptError as e:
        print(f"  {label:16s} refused: {e}"); continue
      st = time.perf_counter()
      prg = dev.make_program(spec, dev.compiler.compile_cached(spec.src))
      build_s = time.perf_counter() - st
      run = lambda: prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, wait=True)
      run()
      got = bufs[0].numpy().astype(np.float64)
      if ref is None: ref = got
      ok = np.allclose(got, ref, rtol=1e-3, atol=1e-3 * max(1.0, float(np.abs(ref).max())))
      t = min(run() or float("inf") for _ in range(args.reps))
      print(f"  {label:16s} {t * 1e3:9.4f} ms {nbytes / t / 1e12:6.2f} TB/s  grid {tuple(spec.global_size)} "
            f"block {tuple(spec.local_size or ())} build {build_s:.1f}s {'' if ok else 'WRONG'}  "
            f"{list(spec.applied_opts) if label == 'heuristic' else ''}")
    sys.stdout.flush()

if __name__ == "__main__":
  main()
