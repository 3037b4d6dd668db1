"""A/B of opts lists for conv2d b8 64->64 56x56 k3 p1's kernel (K1=1: the 1x1 64->256 conv), interleaved in one
process: per-thread CPU time of the compiled program alone, p10/median per variant, and each variant's output
against the first's. Opts as in gather_ab.py (`heuristic` for the current decision; THREAD opts are dropped, so run
with CPU_THREADS=1).
  CPU_THREADS=1 python benchmarks/conv_row_ab.py 12 "PADTO3:32 UPCAST3:32 UPCAST1:8" heuristic
S2=1: conv2d b8 64->128 56x56 k3 s2 p1 instead; CONVT=1: conv_transpose2d b8 64->32 28x28 k4 s2 p1 (CONVT=n: nxn); KERNEL=i picks the
schedule's i-th kernel (default the last); CNN=1: the strided CNN's conv2d b64 32->64 26x26 k3 s2 (train_bench's
`strided` model: r_64_64_12_12_32_3_3); CONV=b,cin,cout,side,stride,pad: any 3x3 conv2d."""
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
  one, s2, ct = bool(os.environ.get("K1")), bool(os.environ.get("S2")), bool(os.environ.get("CONVT"))
  x, w = Tensor.empty(8, 64, 56, 56), Tensor.empty(*((256, 64, 1, 1) if one else (128 if s2 else 64, 64, 3, 3)))
  side = int(os.environ.get("CONVT", "0") or 0)
  side = 28 if side in (0, 1) else side
  out = Tensor.empty(8, 64, side, side).conv_transpose2d(Tensor.empty(64, 32, 4, 4), stride=2, padding=1) if ct else \
    Tensor.empty(64, 32, 26, 26).conv2d(Tensor.empty(64, 32, 3, 3), stride=2) if os.environ.get("CNN") else \
    Tensor.empty(*(c := [int(v) for v in os.environ["CONV"].split(",")])[:2], c[3], c[3]).conv2d(
      Tensor.empty(c[2], c[1], 3, 3), stride=c[4], padding=c[5]) if os.environ.get("CONV") else \
    x.conv2d(w, padding=0 if one else 1, stride=2 if s2 else 1)
  asts = [it.ast for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK]
  ast = asts[int(os.environ.get("KERNEL", -1))]
  for v, p10, median, diff, _ in time_variants(ast, int(sys.argv[1]), sys.argv[2:]):
    print(f"{v:>40s} p10 {p10:.2f} ms median {median:.2f} ms  max diff from the first {diff:.2e}")

def time_variants(ast, reps: int, variants: list[str]) -> list[tuple[str, float, float, float, str]]:
  """Each opts list (gather_ab's syntax) of the kernel `ast` compiled and run `reps` times in turns on the same random
  buffers: (opts text, p10 ms, median ms, the output's largest difference from the first variant's, kernel name)."""
  dev = Device["CPU"]
  k = Kernel(ast, dev.renderer)
  gl = sorted((u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
  rng = np.random.default_rng(0)
  bufs = [Buffer("CPU", g.dtype.size, g.dtype.base).ensure_allocated() for g in gl]
  for b in bufs: b.copyin(rng.standard_normal(b.size).astype(np.float32))
  progs = []
  for v in variants:
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
  rows = []
  for (v, spec, prg, times), o in zip(progs, outs):
    ts = np.array(times) * 1e3
    rows.append((v, float(np.percentile(ts, 10)), float(np.median(ts)), float(np.abs(o - outs[0]).max()), spec.name))
  return rows

if __name__ == "__main__":
  main()
