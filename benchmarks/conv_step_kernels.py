"""Per-kernel per-thread CPU time of a 3x3 conv2d's forward + both gradients as one jitted step, each kernel run in the
step's order on the step's own buffers (so each reads what the kernel before it left in the caches, as in a real
step; benchmarks/conv_grad_kernels.py gives each kernel fresh buffers instead). p10/median per kernel over the rounds
and the sum of the p10s. Run it under two trees in turns to compare them (PYTHONPATH=<tree>:<tree>/plugins/cpu_llvm/src).
  CPU_THREADS=1 python benchmarks/conv_step_kernels.py 8,64,128,28,2,1 20
  CPU_THREADS=1 python benchmarks/conv_step_kernels.py 8,64,128,28,2,1 20 5 heuristic "UPCAST2:7 UPCAST3:32"
The shape is b,cin,cout,side,stride,pad[,k[,t]] (k: the kernel size, 3; t: a conv_transpose2d, weight (cin, cout, k, k));
the optional kernel index and opts lists run variants of that kernel in turns where it stands (the first variant
reads the inputs as the step leaves them, later ones warmer).
  CPU_THREADS=1 python benchmarks/conv_step_kernels.py 8,64,32,28,2,1,4,t 20   # conv_transpose2d k4 s2 p1"""
from __future__ import annotations
import os, sys, time
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gather_ab import parse
from tinyplug import Tensor, TinyJit
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, OptOps
from tinyplug.device import Device

def main() -> None:
  fields = sys.argv[1].split(",")
  transposed = fields[-1] == "t"
  b, cin, cout, side, stride, pad, *rest = [int(v) for v in fields[:-1 if transposed else None]]
  k = rest[0] if rest else 3
  rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
  pick, variants = (int(sys.argv[3]), sys.argv[4:]) if len(sys.argv) > 3 else (None, [])
  rng = np.random.default_rng(0)
  x = Tensor(rng.standard_normal((b, cin, side, side)).astype(np.float32), requires_grad=True).realize()
  w = Tensor(rng.standard_normal((cin, cout, k, k) if transposed else (cout, cin, k, k)).astype(np.float32),
             requires_grad=True).realize()
  @TinyJit
  def step(x, w):
    x.grad = w.grad = None
    out = x.conv_transpose2d(w, stride=stride, padding=pad) if transposed else x.conv2d(w, stride=stride, padding=pad)
    out.square().sum().backward()
    return Tensor.realize(x.grad, w.grad)
  for _ in range(3): step(x, w)
  dev, runs = Device["CPU"], []
  for i, l in enumerate(l for l in step.captured.launches if not l.is_copy):
    if i != pick:
      runs.append((f"{i} {l.name}", l.prg, l, l.global_size, l.local_size))
      continue
    k = Kernel(l.ast, dev.renderer)
    for v in variants:
      opts = [o for o in parse(v, k) if o.op is not OptOps.THREAD]
      spec = get_program(l.ast, dev.renderer, opts=opts)
      prg = dev.make_program(spec, dev.compiler.compile_program(spec))
      shown = " ".join(f"{o.op.name}{o.axis}:{o.arg}" for o in opts)
      runs.append((f"{i} {spec.name} {shown}", prg, l, spec.global_size, spec.local_size))
  times: list[list[float]] = [[] for _ in runs]
  for _ in range(rounds):
    for (_, prg, l, gs, ls), ts in zip(runs, times):
      st = time.thread_time()
      prg(*l.handles, global_size=gs, local_size=ls, vals=l.vals, wait=True)
      ts.append(time.thread_time() - st)
  total = 0.0
  for (name, *_), ts in zip(runs, times):
    total += (p10 := float(np.percentile(ts, 10)) * 1e3)
    print(f"{p10:8.3f} ms p10 {float(np.median(ts)) * 1e3:8.3f} ms median  {name}")
  print(f"sum of p10s {total:.2f} ms (each variant counted)")

if __name__ == "__main__":
  main()
