"""CPU matmul kernels with different optimisation actions, timed side by side with numpy in the same process.

  python benchmarks/matmul_opts.py                 # 512, 1024, 2048: register tile only, heuristic, numpy
  python benchmarks/matmul_opts.py 2048 --rounds 5 --opts "[Opt(OptOps.UPCAST,1,32),Opt(OptOps.UPCAST,0,8)]"

Times the compiled kernel alone (no scheduling) on buffers filled with data, best of `--rounds`, interleaved with
numpy so both see the same machine load. Never run from tests."""
from __future__ import annotations
import argparse, time
import numpy as np
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.device import Device
from tinyplug.schedule import create_schedule
from tinyplug.search.runner import Timer
from tinyplug.tensor import Tensor

TILE_ONLY = [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 8)]   # the heuristic before cache blocking

def matmul_ast(n: int):
  items, _ = create_schedule([(Tensor.empty(n, n, device="CPU") @ Tensor.empty(n, n, device="CPU")).uop])
  return items[-1].ast

def compare(n: int, rounds: int, extra: list[list[Opt]]) -> None:
  ast, renderer = matmul_ast(n), Device["CPU"].renderer
  configs = {"register tile only": TILE_ONLY, "heuristic": heuristic_opts(Kernel(ast, renderer))}
  configs.update({f"--opts {i}": o for i, o in enumerate(extra)})
  timer = Timer(ast, renderer, "CPU")
  a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
  best = {name: float("inf") for name in configs}
  best_np = float("inf")
  for _ in range(rounds):
    st = time.perf_counter(); a @ b; best_np = min(best_np, time.perf_counter() - st)
    for name, opts in configs.items(): best[name] = min(best[name], timer(opts))
  print(f"matmul {n}: numpy {best_np*1e3:.2f} ms ({2*n**3/best_np/1e9:.0f} GFLOP/s)")
  for name, opts in configs.items():
    t = best[name]
    print(f"  {name:20s} {t*1e3:8.2f} ms  {best_np/t:5.2f}x numpy  {2*n**3/t/1e9:5.0f} GFLOP/s  {opts}")

if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("sizes", nargs="*", type=int, default=[512, 1024, 2048])
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--opts", action="append", default=[], help="a Python list of Opt(OptOps.X, axis, arg)")
  args = ap.parse_args()
  extra = [eval(o, {"Opt": Opt, "OptOps": OptOps}) for o in args.opts]
  for n in args.sizes: compare(n, args.rounds, extra)
