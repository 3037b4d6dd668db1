"""A/B of one kernel's opts, interleaved in one process: per-thread CPU time of the compiled program alone (issue 20's
`x[idx]`, 4096 rows of a 50k x 512 table). Each variant is an opts list (`heuristic` for the current decision);
`CPU_THREADS=1` times one thread. Prints p10/median per variant.
  CPU_THREADS=1 python benchmarks/gather_ab.py --reps 200 "UPCAST1:4" "UPCAST1:16" heuristic"""
from __future__ import annotations
import argparse, time
import numpy as np
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Buffer, Device
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops

def parse(text: str, k: Kernel) -> list[Opt]:
  if text == "heuristic": return heuristic_opts(k)
  if not text: return []
  return [Opt(OptOps[(p := part.split(":"))[0].rstrip("0123456789")], int(p[0][len(p[0].rstrip("0123456789")):]),
              int(p[1])) for part in text.split()]

def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("variants", nargs="+")
  ap.add_argument("--reps", type=int, default=200)
  ap.add_argument("--rows", type=int, default=50000)
  ap.add_argument("--width", type=int, default=512)
  ap.add_argument("--n", type=int, default=4096)
  ap.add_argument("--dtype", default="int32")
  args = ap.parse_args()
  rng = np.random.default_rng(0)
  table = rng.standard_normal((args.rows, args.width)).astype(np.float32)
  idx = rng.integers(0, args.rows, args.n).astype(args.dtype)
  t, i = Tensor(table).realize(), Tensor(idx).realize()
  out = t[i]
  items, _ = create_schedule([out.uop])
  ast = [it.ast for it in items if it.ast.op is Ops.SINK][-1]
  dev = Device["CPU"]
  k = Kernel(ast, dev.renderer)
  gl = sorted((u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
  bufs = [Buffer("CPU", max(g.dtype.size, 1), g.dtype.base).ensure_allocated() for g in gl]
  bufs[0].copyin(memoryview(bytearray(bufs[0].nbytes)))
  bufs[1].copyin(memoryview(np.ascontiguousarray(idx).view(np.uint8)))   # the indices read by the gather kernel
  bufs[2].copyin(memoryview(table.view(np.uint8)))
  want = table[idx]
  progs = []
  for v in args.variants:
    opts = parse(v, k)
    spec = get_program(ast, dev.renderer, opts=opts)
    prg = dev.make_program(spec, dev.compiler.compile_program(spec))
    progs.append((v, opts, spec, prg, []))
  for _ in range(args.reps):
    for v, opts, spec, prg, times in progs:
      st = time.process_time()
      prg(*[b.handle for b in bufs], global_size=spec.global_size, local_size=spec.local_size, vals=(), wait=True)
      times.append(time.process_time() - st)
  for v, opts, spec, prg, times in progs:
    got = np.empty_like(want)
    bufs[0].copyout(memoryview(got.reshape(-1)).cast("B"))
    ok = np.array_equal(got, want)
    ts = np.array(times) * 1e3
    print(f"{v:>28s} {str([f'{o.op.name}{o.axis}:{o.arg}' for o in opts]):40s} p10 {np.percentile(ts, 10):.3f} ms  "
          f"median {np.median(ts):.3f} ms  {'ok' if ok else 'WRONG'}")

if __name__ == "__main__":
  main()
