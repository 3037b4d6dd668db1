"""The small and skinny matmuls of training steps, one kernel at a time on one thread: the heuristic's actions against
other action lists, interleaved, in thread CPU time.

  python benchmarks/small_matmuls.py                       # every shape below: heuristic, its UOps, time, GFLOP/s
  python benchmarks/small_matmuls.py --shape wgrad:64x64x128 --opts "[Opt(OptOps.UPCAST,1,16),Opt(OptOps.UPCAST,0,4)]"
  python benchmarks/small_matmuls.py --before /tmp/smallmm-base   # main's heuristic beside this checkout's

A shape is KIND:MxNxK for a Linear layer of a batch: `fwd` x @ W.T (x: M x K, W: N x K), `wgrad` g.T @ x (g: K x M,
x: K x N; the batch is K), `igrad` g @ W (g: M x K, W: K x N); `fwdrelu` and `wgradrelu` with a ReLU fused into x. Each round runs every config's kernel `--reps` times back
to back (caches warm, as in a replayed step) and keeps the median; a config's time is the p10 / median over rounds.
`--before` loads another checkout's heuristic module (its heuristic_opts) and times its actions in the same rounds.
CPU_THREADS=1 is set: the kernels run on this thread. Never run from tests."""
from __future__ import annotations
import argparse, importlib.util, os, statistics, sys, time
os.environ["CPU_THREADS"] = "1"
import numpy as np
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Buffer, Device
from tinyplug.passes.heuristic import expanded_size, heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor

SHAPES = ("fwd:128x64x32", "fwd:128x64x64", "fwd:128x10x64", "fwd:64x10x9216", "fwd:128x128x784",
          "wgrad:64x32x128", "wgrad:64x64x128", "wgrad:10x64x128", "wgrad:10x9216x64", "wgrad:128x784x64",
          "wgrad:64x784x128", "wgrad:32x64x256",
          "igrad:128x64x64", "igrad:128x32x64", "igrad:128x64x10", "igrad:64x9216x10", "igrad:64x784x128")

def matmul_ast(kind: str, m: int, n: int, k: int):
  if kind == "fwd": out = Tensor.empty(m, k) @ Tensor.empty(n, k).T
  elif kind == "fwdrelu": out = Tensor.empty(m, k).relu() @ Tensor.empty(n, k).T
  elif kind == "wgradrelu": out = Tensor.empty(k, m).T @ Tensor.empty(k, n).relu()
  elif kind == "wgrad": out = Tensor.empty(k, m).T @ Tensor.empty(k, n)
  elif kind == "igrad": out = Tensor.empty(m, k) @ Tensor.empty(k, n)
  else: raise ValueError(f"unknown matmul kind {kind!r}: fwd, wgrad, igrad, fwdrelu or wgradrelu")
  items, _ = create_schedule([out.uop])
  return items[-1].ast

def load_heuristic(root: str):
  spec = importlib.util.spec_from_file_location("before_heuristic", os.path.join(root, "tinyplug/passes/heuristic.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod.heuristic_opts

def build(ast, opts):
  renderer, dev = Device["CPU"].renderer, Device["CPU"]
  spec = get_program(ast, renderer, opts=opts)
  prg = dev.make_program(spec, dev.compiler.compile_program(spec))
  bufs = []
  for g in sorted((u for u in ast.toposort() if u.op.name == "DEFINE_GLOBAL"), key=lambda u: u.arg):
    b = Buffer("CPU", max(g.dtype.size, 1), g.dtype.base).ensure_allocated()
    b.copyin(np.random.rand(max(g.dtype.size, 1)).astype(np.float32))
    bufs.append(b)
  return prg, [b.handle for b in bufs], len(spec.uops)

def run(prg, handles, reps: int) -> float:
  ts = []
  for _ in range(reps):
    st = time.thread_time_ns(); prg(*handles); ts.append(time.thread_time_ns() - st)
  return statistics.median(ts) * 1e-9

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--shape", action="append", default=[])
  ap.add_argument("--opts", action="append", default=[], help="a Python list of Opt(OptOps.X, axis, arg)")
  ap.add_argument("--before", help="another checkout whose heuristic_opts is timed beside this one's")
  ap.add_argument("--rounds", type=int, default=15)
  ap.add_argument("--reps", type=int, default=20)
  args = ap.parse_args()
  names = {"Opt": Opt, "OptOps": OptOps}
  extra = [eval(o, names) for o in args.opts]
  before = load_heuristic(args.before) if args.before else None
  print(f"load average {os.getloadavg()[0]:.2f}")
  for shape in args.shape or SHAPES:
    kind, dims = shape.split(":")
    m, n, k = (int(x) for x in dims.split("x"))
    ast = matmul_ast(kind, m, n, k)
    configs = {"heuristic": heuristic_opts(Kernel(ast, Device["CPU"].renderer))}
    if before: configs["before"] = before(Kernel(ast, Device["CPU"].renderer))
    configs.update({f"opts {i}": o for i, o in enumerate(extra)})
    built = {}
    for name, opts in configs.items():
      st = time.perf_counter()
      try: prg, handles, n_uops = build(ast, opts)
      except Exception as e:
        print(f"  {name}: does not build ({e})")
        continue
      built[name] = (prg, handles, n_uops, time.perf_counter() - st)
    times: dict[str, list[float]] = {name: [] for name in built}
    for _ in range(args.rounds):
      for name, (prg, handles, _, _) in built.items(): times[name].append(run(prg, handles, args.reps))
    flops = 2 * m * n * k
    print(f"{shape} ({flops / 1e6:.1f} MFLOP)")
    for name, v in times.items():
      p10, med = np.percentile(v, 10), statistics.median(v)
      print(f"  {name:9s} p10 {p10 * 1e6:8.1f} us median {med * 1e6:8.1f} us {flops / p10 / 1e9:6.1f} GFLOP/s  "
            f"{built[name][2]:5d} uops, build {built[name][3]:.2f} s  {configs[name]}")
  print(f"load average {os.getloadavg()[0]:.2f}")

if __name__ == "__main__": main()
