"""tinyplug on CL (OpenCL, e.g. PoCL on the CPU) beside tinygrad's CL backend on the same OpenCL device, in one run.

  python benchmarks/cl_bench.py                 # every workload, both frameworks, a table of ratios
  python benchmarks/cl_bench.py --quick         # smaller sizes, one repetition (a smoke test)
  python benchmarks/cl_bench.py --only matmul   # workloads whose name contains a word

Each framework runs in its own subprocess (tinygrad with DEV=CL), so neither sees the other's caches or threads.
Times are wall-clock seconds from building the graph to the result being on the device (synchronized), best of
several runs after a warm-up (compile excluded), except "first result", which is the cold path: a graph never seen
before, scheduled, compiled and run. The ratio is tinyplug / tinygrad: below 1 means tinyplug is faster."""
from __future__ import annotations
import argparse, sys
import numpy as np
from device_workloads import best, common_row, report_rows, run_child

def workloads(quick: bool) -> list[tuple[str, dict]]:
  mm = (256, 512) if quick else (512, 1024, 2048)
  n = 1 << 20 if quick else 1 << 24
  sm = 1024 if quick else 4096
  return [(f"matmul fp32 {s}", {"kind": "matmul", "n": s}) for s in mm] + [
    (f"fused ((a*b)+c).relu()*0.5, {n >> 20}M", {"kind": "chain", "n": n}),
    (f"sum of {n >> 20}M floats", {"kind": "sum", "n": n}),
    (f"row softmax {sm}x{sm}", {"kind": "softmax", "n": sm}),
    ("conv2d b32 3->32 32x32 3x3", {"kind": "conv", "b": 8 if quick else 32}),
    ("first result of a new elementwise graph", {"kind": "first"}),
    ("tiny realized op (16 floats)", {"kind": "tiny"}),
  ]

# ---------------- running one framework (in a subprocess) ----------------

def _framework(name: str):
  if name == "tinygrad":
    from tinygrad import Tensor, Device
    dev = Device.DEFAULT
    return Tensor, dev, lambda: Device[dev].synchronize()
  from tinyplug import Tensor
  from tinyplug.device import Device
  return Tensor, "CL", lambda: Device["CL"].synchronize()

def run_one(framework: str, cfg: dict, reps: int) -> float:
  Tensor, dev, sync = _framework(framework)
  rng = np.random.default_rng(0)
  def tensor(*shape, half=False):
    return Tensor(rng.standard_normal(shape, dtype=np.float32), device=dev).realize()
  if (t := common_row(cfg, tensor, sync, reps)) is not None: return t
  if cfg["kind"] == "conv":
    x, w = tensor(cfg["b"], 3, 32, 32), tensor(32, 3, 3, 3)
    return best(lambda: x.conv2d(w).realize(), sync, reps)
  raise ValueError(cfg["kind"])

def child(framework: str, quick: bool, only: str | None, reps: int) -> None:
  report_rows(workloads(quick), lambda cfg: run_one(framework, cfg, reps), only)

# ---------------- the parent: both frameworks, one table ----------------

def measure(framework: str, args) -> dict:
  results, error = run_child(__file__, framework, "CL", args, timeout=3600)
  if error is not None and not results: results["(failed)"] = error
  return results

def _fmt(t) -> str:
  if isinstance(t, str): return "error"
  return f"{t * 1e3:10.2f} ms" if t >= 1e-3 else f"{t * 1e6:10.1f} us"

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
  ap.add_argument("--only", default=None, help="run the workloads whose name contains this")
  ap.add_argument("--reps", type=int, default=5, help="timed repetitions after the warm-up (best is kept)")
  ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.child: return child(args.child, args.quick, args.only, args.reps)
  from tinyplug.device import Device
  if "CL" not in Device.available():
    sys.exit(f"CL is unavailable: {Device._manager().device_available('CL')[1]}")
  from tinyplug_opencl import cl as clapi
  p, d = clapi.all_devices()[0]
  print(f"device: {clapi.device_str(d, clapi.CL_DEVICE_NAME)} ({clapi.platform_str(p, clapi.CL_PLATFORM_VERSION)})")
  tp, tg = measure("tinyplug", args), measure("tinygrad", args)
  print(f"{'workload':44s} {'tinyplug':>13s} {'tinygrad':>13s} {'ratio':>7s}")
  for name in dict.fromkeys(list(tp) + list(tg)):
    a, b = tp.get(name, "missing"), tg.get(name, "missing")
    ratio = f"{a / b:7.2f}" if isinstance(a, float) and isinstance(b, float) and b > 0 else "      -"
    print(f"{name:44s} {_fmt(a):>13s} {_fmt(b):>13s} {ratio}")
    for who, v in (("tinyplug", a), ("tinygrad", b)):
      if isinstance(v, str) and v != "missing": print(f"    {who}: {v}")
  print("ratio = tinyplug time / tinygrad time (below 1: tinyplug is faster)")

if __name__ == "__main__":
  main()
