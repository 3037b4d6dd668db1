"""CPU matmul kernels with different optimisation actions, timed side by side with numpy (and torch) in one process.

  python benchmarks/matmul_opts.py                 # 512, 1024, 2048: heuristic (packed B where the pack pass packs),
                                                   # heuristic on the unpacked kernel, register tile only, numpy, torch
  python benchmarks/matmul_opts.py 2048 --threads 16 --opts "[Opt(OptOps.UPCAST,1,32),Opt(OptOps.UPCAST,0,8)]"

Times the compiled kernels alone (no scheduling) on buffers filled with data, best of `--rounds`, every config and
peer once per round so all see the same machine load. Rows on the packed kernel include the pack kernel's time
(copying B into column panels, passes/pack.py); `--opts` lists apply to the packed kernel where there is one,
`--opts-unpacked` lists to the kernel that reads B as it is (main's kernel before the pack pass).
`--threads N` runs the kernels and torch on N threads (CPU_THREADS; numpy's BLAS takes OMP/MKL/OPENBLAS_NUM_THREADS
from the environment). Prints the machine (CPU, caches, threads) and the load. Never run from tests."""
from __future__ import annotations
import argparse, os, time
import numpy as np
from tinyplug.codegen.kernel import Kernel, Opt, OptOps
from tinyplug.device import Device
from tinyplug.passes import pack
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.search.runner import Timer
from tinyplug.tensor import Tensor

SETTLE_S = 0.3   # between frameworks: longer than any of their idle threads spin (OpenMP's KMP_BLOCKTIME is 200 ms)
TILE_ONLY = [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 8)]   # the heuristic before cache blocking

def matmul_items(n: int, packed: bool) -> list:
  """The schedule of an n x n matmul: [pack kernel, matmul] where the pack pass packs B, else [matmul]."""
  from tinyplug import schedule
  a, b = Tensor.empty(n, n, device="CPU"), Tensor.empty(n, n, device="CPU")
  keep = pack.should_pack
  if not packed: pack.should_pack = lambda *args: False
  schedule._templates.clear()   # a graph of the same structure would get the schedule made the other way
  try: items, _ = create_schedule([(a @ b).uop])
  finally: pack.should_pack = keep
  return items

def _torch(threads: int):
  try: import torch
  except ImportError: return None
  torch.set_num_threads(threads)
  return torch

def compare(n: int, rounds: int, extra: list[list[Opt]], threads: int, extra_plain: list[list[Opt]] = ()) -> None:
  renderer = Device["CPU"].renderer
  packed, plain = matmul_items(n, True), matmul_items(n, False)
  mm = packed[-1].ast
  configs: dict[str, tuple] = {"heuristic": (mm, heuristic_opts(Kernel(mm, renderer)))}
  if len(packed) > 1: configs["heuristic, B unpacked"] = (plain[-1].ast, heuristic_opts(Kernel(plain[-1].ast, renderer)))
  configs["register tile only"] = (plain[-1].ast, TILE_ONLY)
  configs.update({f"--opts {i}": (mm, o) for i, o in enumerate(extra)})
  configs.update({f"--opts-unpacked {i}": (plain[-1].ast, o) for i, o in enumerate(extra_plain)})
  timers = {name: Timer(ast, renderer, "CPU") for name, (ast, _) in configs.items()}
  pack_timer = Timer(packed[0].ast, renderer, "CPU") if len(packed) > 1 else None
  pack_opts = heuristic_opts(Kernel(packed[0].ast, renderer)) if pack_timer else []
  a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
  torch = _torch(threads)
  ta, tb = (torch.from_numpy(a), torch.from_numpy(b)) if torch else (None, None)
  best = {name: float("inf") for name in configs}
  best_np = best_torch = best_pack = float("inf")
  for _ in range(rounds):
    if pack_timer: best_pack = min(best_pack, pack_timer(pack_opts))
    for name, (_, opts) in configs.items(): best[name] = min(best[name], timers[name](opts))
    # idle threads keep spinning a while after a kernel (ours CPU_SPIN_US, the BLAS's and OpenMP's their own) and
    # would take the cores from whoever runs next: let them go to sleep between frameworks
    time.sleep(SETTLE_S)
    st = time.perf_counter(); a @ b; best_np = min(best_np, time.perf_counter() - st)
    time.sleep(SETTLE_S)
    if torch:
      st = time.perf_counter(); ta @ tb; best_torch = min(best_torch, time.perf_counter() - st)
      time.sleep(SETTLE_S)
  flops = 2 * n**3
  peers = f"numpy {best_np*1e3:.2f} ms ({flops/best_np/1e9:.0f} GFLOP/s)" + \
    (f", torch {best_torch*1e3:.2f} ms ({flops/best_torch/1e9:.0f} GFLOP/s)" if torch else "")
  print(f"matmul {n}: {peers}" + (f"; pack kernel {best_pack*1e3:.2f} ms" if pack_timer else "; B not packed"))
  for name, (ast, opts) in configs.items():
    t = best[name] + (best_pack if ast is mm and pack_timer else 0.0)
    vs = f"{best_np/t:5.2f}x numpy" + (f" {best_torch/t:5.2f}x torch" if torch else "")
    print(f"  {name:22s} {t*1e3:8.2f} ms  {vs}  {flops/t/1e9:5.0f} GFLOP/s  {opts}")

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("sizes", nargs="*", type=int, default=[512, 1024, 2048])
  ap.add_argument("--rounds", type=int, default=5)
  ap.add_argument("--threads", type=int, default=0, help="CPU_THREADS for the kernels, torch's threads (0: every core)")
  ap.add_argument("--opts", action="append", default=[], help="a Python list of Opt(OptOps.X, axis, arg)")
  ap.add_argument("--opts-unpacked", action="append", default=[], help="the same, on the kernel that reads B unpacked")
  args = ap.parse_args()
  names = {"Opt": Opt, "OptOps": OptOps}
  extra, extra_plain = [eval(o, names) for o in args.opts], [eval(o, names) for o in args.opts_unpacked]
  if args.threads: os.environ["CPU_THREADS"] = str(args.threads)   # read when the CPU plugin loads (Device["CPU"])
  r = Device["CPU"].renderer
  try: cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
  except (OSError, StopIteration): cpu = "unknown CPU"
  print(f"{cpu}; caches {[f'{c >> 10} KB' for c in r.cache_bytes]}; {r.threads} threads; "
        f"load average {os.getloadavg()[0]:.1f}")
  for n in args.sizes: compare(n, args.rounds, extra, r.threads, extra_plain)
  print(f"load average {os.getloadavg()[0]:.1f}")

if __name__ == "__main__": main()
