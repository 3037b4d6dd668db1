#!/usr/bin/env python3
"""The phase-interleave kernels (a strided convolution's input gradient, conv_transpose2d's output: every other
element of a row from another buffer, gated by `% stride`) under this checkout's heuristic and another's, one thread,
thread CPU time, taking turns in one process.

    CPU_THREADS=1 python benchmarks/phase_interleave.py --before /tmp/parity-base [--rounds 40]

Prints per kernel: the opts, program UOps, remainders (`srem`) and vector loads left in the LLVM IR, p10 and median.
"""
from __future__ import annotations
import argparse, importlib.util, os, re, time
import numpy as np
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel
from tinyplug.device import Buffer, Device
from tinyplug.passes.heuristic import _gated_by_parity, heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor

def phase_asts(t: Tensor) -> list:
  items, _ = create_schedule([t.uop])
  asts = [it.ast for it in items if it.ast.op.name == "SINK"]
  return [a for a in asts if (k := Kernel(a, Device["CPU"].renderer)).loop_axes and not k.reduce_axes and _gated_by_parity(k)]

def workloads() -> dict[str, list]:
  out = {}
  x, w = Tensor.randn(8, 64, 28, 28).realize(), Tensor.randn(64, 32, 4, 4).realize()
  out["conv_transpose2d b8 64->32 28x28 k4 s2 p1"] = phase_asts(x.conv_transpose2d(w, stride=2, padding=1))
  for name, shape, wshape, pad in (("strided CNN's conv2 input grad (64x32x26x26, k3 s2)", (64, 32, 26, 26), (64, 32, 3, 3), 0),
                                   ("conv2d input grad 8x64x56x56 k3 s2 p1", (8, 64, 56, 56), (128, 64, 3, 3), 1)):
    x = Tensor.randn(*shape, requires_grad=True).realize()
    x.conv2d(Tensor.randn(*wshape).realize(), stride=2, padding=pad).relu().sum().backward()
    out[name] = phase_asts(x.grad)
  return out

def load_heuristic(root: str):
  spec = importlib.util.spec_from_file_location("before_heuristic", os.path.join(root, "tinyplug/passes/heuristic.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod.heuristic_opts

def build(ast, opts, inputs: list[np.ndarray] | None):
  r, dev = Device["CPU"].renderer, Device["CPU"]
  spec = get_program(ast, r, opts=opts)
  prg = dev.make_program(spec, dev.compiler.compile_program(spec))
  globals_ = sorted((u for u in ast.toposort() if u.op.name == "DEFINE_GLOBAL"), key=lambda u: u.arg)
  bufs = [Buffer("CPU", max(g.dtype.size, 1), g.dtype.base).ensure_allocated() for g in globals_]
  inputs = inputs or [np.random.rand(b.size).astype(np.float32) for b in bufs[1:]]
  for b, v in zip(bufs[1:], inputs): b.copyin(v)
  return spec, prg, bufs, inputs

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--before", required=True, help="another checkout whose heuristic_opts is timed beside this one's")
  ap.add_argument("--rounds", type=int, default=40)
  args = ap.parse_args()
  before = load_heuristic(args.before)
  print(f"load average {os.getloadavg()[0]:.2f}")
  for name, asts in workloads().items():
    for ast in asts:
      inputs, built = None, {}
      for label, fn in (("before", before), ("after", heuristic_opts)):
        spec, prg, bufs, inputs = build(ast, fn(Kernel(ast, Device["CPU"].renderer)), inputs)
        prg(*[b.handle for b in bufs])
        built[label] = (spec, prg, bufs)
      np.testing.assert_allclose(built["after"][2][0].numpy(), built["before"][2][0].numpy(), rtol=1e-6)
      times: dict[str, list[int]] = {k: [] for k in built}
      for _ in range(args.rounds):
        for label, (_, prg, bufs) in built.items():
          handles = [b.handle for b in bufs]
          st = time.thread_time_ns(); prg(*handles); times[label].append(time.thread_time_ns() - st)
      print(f"{name}: {built['after'][0].name}")
      for label, (spec, _, _) in built.items():
        t = times[label]
        print(f"  {label:6s} {np.percentile(t, 10) / 1e6:6.3f} ms p10 {np.median(t) / 1e6:6.3f} ms median  "
              f"uops {len(spec.uops):4d} srem {spec.src.count('srem'):2d} vector loads {len(re.findall(r'load <', spec.src)):2d}  "
              f"{[(o.op.name, o.axis, o.arg) for o in spec.applied_opts]}")
  print(f"load average {os.getloadavg()[0]:.2f}")

if __name__ == "__main__": main()
