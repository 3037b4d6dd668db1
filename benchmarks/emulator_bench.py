"""How fast the GPU emulator (DEV=MOCK+CL) runs kernels: launches per second and work-items per second.

Workloads (hand-written OpenCL C, compiled once, then launched in a loop):
  reduce   a work-group sum through local memory: 64 work-items, 7 barriers (every work-item a fiber)
  ewise    y = x*2+1, no barrier (work-items are plain calls, no fibers)
For each: 1 group (launch overhead), 64 groups and 1024 groups (throughput). `--orders` also times the reverse and
shuffled orders of the reduction. With PoCL installed, the same kernels on DEV=CL are shown for scale (PoCL runs
in this process too, so the CPU-second column compares them on a busy machine).

  python benchmarks/emulator_bench.py [--seconds 1.0] [--orders] [--threads N]
"""
from __future__ import annotations
import argparse, time
import numpy as np
from tinyplug.device import Device, ProgramSpec
from tinyplug.helpers import Context

REDUCE = """__kernel void r_group_sum(__global float* restrict data0, __global const float* restrict data1) {
  __local float temp0[64];
  int lidx0 = get_local_id(0);
  int gidx0 = get_group_id(0);
  temp0[lidx0] = data1[gidx0*64 + lidx0];
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = 32; s > 0; s >>= 1) {
    if (lidx0 < s) temp0[lidx0] += temp0[lidx0 + s];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lidx0 == 0) data0[gidx0] = temp0[0];
}
"""
EWISE = """__kernel void e_affine(__global float* restrict data0, __global const float* restrict data1) {
  int g = get_group_id(0)*64 + get_local_id(0);
  data0[g] = data1[g]*2.0f + 1.0f;
}
"""

def prepare(device: str, src: str, groups: int):
  dev = Device[device]
  x = np.random.default_rng(0).standard_normal(groups * 64).astype(np.float32)
  out_n = groups if "r_group_sum" in src else groups * 64
  bufs = [dev.allocator.alloc(out_n * 4), dev.allocator.alloc(x.nbytes)]
  dev.allocator._copyin(bufs[1], memoryview(x).cast("B"))
  spec = ProgramSpec(name=src.split("void", 1)[1].split("(", 1)[0].strip(), uops=(), src=src, global_size=(groups, 1, 1),
                     local_size=(64, 1, 1))
  prg = dev.make_program(spec, dev.compiler.compile_cached(src))
  def run() -> None: prg(*bufs, global_size=(groups, 1, 1), local_size=(64, 1, 1))
  def check() -> None:
    out = np.empty(out_n, np.float32)
    dev.synchronize()
    dev.allocator._copyout(memoryview(out).cast("B"), bufs[0])
    want = x.reshape(groups, 64).sum(axis=1) if "r_group_sum" in src else x * 2 + 1
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
  return run, check, dev

def rate(run, dev, seconds: float) -> tuple[float, float]:
  """(launches per wall second, launches per CPU second of this process): on a shared machine the second is steadier."""
  run(); dev.synchronize()
  n, start, cpu = 0, time.perf_counter(), time.process_time()
  while time.perf_counter() - start < seconds or n < 3:
    run(); n += 1
  dev.synchronize()
  return n / (time.perf_counter() - start), n / max(time.process_time() - cpu, 1e-9)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--seconds", type=float, default=1.0)
  ap.add_argument("--orders", action="store_true")
  ap.add_argument("--threads", type=int, default=0, help="EMU_THREADS (0: the emulator's default)")
  args = ap.parse_args()
  devices = ["MOCK+CL"] + [d for d in ("CL",) if d in Device.available()]
  orders = ["forward", "reverse", "shuffle"] if args.orders else ["forward"]
  print("| device | kernel | order | groups x work-items | launches/s | work-items/s | work-items per CPU-s |")
  print("|---|---|---|---|---|---|---|")
  for name, src in (("reduce (local memory, 7 barriers)", REDUCE), ("ewise (no barrier)", EWISE)):
    for groups in (1, 64, 1024):
      for device in devices:
        for order in (orders if device == "MOCK+CL" and src is REDUCE else ["forward"]):
          with Context(EMU_ORDER=order, EMU_THREADS=args.threads):
            run, check, dev = prepare(device, src, groups)
            r, r_cpu = rate(run, dev, args.seconds)
            check()
          order_text = order if device == "MOCK+CL" else "-"
          print(f"| {device} | {name} | {order_text} | {groups} x 64 | {r:,.0f} | {r * groups * 64:,.0f} | "
                f"{r_cpu * groups * 64:,.0f} |")

if __name__ == "__main__":
  main()
