"""A/B of opts lists for a padded copy (`x.pad(pads).contiguous()`), interleaved in one process: CPU time of the
compiled program alone, p10/median per variant, and each variant's output against the first's. Opts as in
gather_ab.py (`heuristic` for the current decision; THREAD opts are dropped, so run with CPU_THREADS=1):
  CPU_THREADS=1 python benchmarks/pad_row_ab.py 40 heuristic "UPCAST3:58"
SHAPE=b,c,h,w (default 8,64,56,56) and PADS=left,right,top,bottom (default 1,1,1,1) pick the copy."""
from __future__ import annotations
import os, sys, time
import numpy as np
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, OptOps
from tinyplug.device import Buffer, Device
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops
sys.path.insert(0, os.path.dirname(__file__))
from gather_ab import parse

def main() -> None:
  shape = [int(v) for v in os.environ.get("SHAPE", "8,64,56,56").split(",")]
  pads = tuple(int(v) for v in os.environ.get("PADS", "1,1,1,1").split(","))
  out = Tensor.empty(*shape).pad(pads).contiguous()
  ast = [it.ast for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK][-1]
  dev = Device["CPU"]
  k = Kernel(ast, dev.renderer)
  gl = sorted((u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
  rng = np.random.default_rng(0)
  bufs = [Buffer("CPU", g.dtype.size, g.dtype.base).ensure_allocated() for g in gl]
  for b in bufs: b.copyin(rng.standard_normal(b.size).astype(np.float32))
  reps, progs = int(sys.argv[1]), []
  for v in sys.argv[2:]:
    opts = [o for o in parse(v, k) if o.op is not OptOps.THREAD]
    spec = get_program(ast, dev.renderer, opts=opts)
    progs.append((v, spec, dev.make_program(spec, dev.compiler.compile_program(spec)), []))
  outs = []
  for v, spec, prg, times in progs:
    prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, vals=(), wait=True)
    outs.append(bufs[0].numpy().copy())
  for _ in range(reps):
    for v, spec, prg, times in progs:
      st = time.process_time()
      prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, vals=(), wait=True)
      times.append(time.process_time() - st)
  print(f"{ast.arg if isinstance(ast.arg, str) else ''} shape {shape} pads {pads}")
  for (v, spec, prg, times), o in zip(progs, outs):
    ts = np.array(times) * 1e3
    print(f"{v:>40s} {spec.name:20s} p10 {np.percentile(ts, 10):.3f} ms median {np.median(ts):.3f} ms  "
          f"max diff from the first {np.abs(o - outs[0]).max():.2e}")

if __name__ == "__main__":
  main()
