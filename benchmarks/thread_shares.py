"""How each kernel of a grad_sweep step shares out across threads, measured on this one thread (so other load on the
machine hardly moves it): every kernel the step runs is captured, then run again here as one share of one thread
(`core 0 of 1`) and as each share of `--threads` (`core c of n`, one after the other), per-thread CPU time, best of
--reps. A share's time against the whole kernel's / n is the split's imbalance and its cost; `runs on` is how many
threads the runtime picks for it now (its PARALLEL_* rules). With CPU_THREADS=1 the step's own time on this thread,
minus its kernels', is the Python it pays; with more threads that remainder also holds the caller's waits.

  CPU_THREADS=2 python benchmarks/thread_shares.py --only matmul
  CPU_THREADS=2 python benchmarks/thread_shares.py --only "cross,embedding" --reps 30

Shares run one after the other on one core, so a share that reads what another read is helped by the cache; two
threads at once also share memory bandwidth, which this does not see."""
from __future__ import annotations
import argparse, os, sys, time
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--only", required=True, help="comma list of words in grad_sweep's workload names")
  ap.add_argument("--threads", type=int, default=2, help="shares to split each kernel into")
  ap.add_argument("--reps", type=int, default=15)
  ap.add_argument("--wall", action="store_true", help="also each kernel's wall time on one thread and as the runtime "
                  "picks (on the pool), in turns: only meaningful on a quiet machine")
  args = ap.parse_args()
  import torch, torch.nn.functional as F
  from tinyplug.tensor import Tensor
  from tinyplug.helpers import Context
  from tinyplug_cpu_llvm import runtime as rt
  from grad_sweep import workloads
  captured: list | None = None
  picked: list[int] = []
  plain_call = rt.CPUProgram.__call__
  def recording_call(self, *bufs, global_size=None, local_size=None, vals=(), wait=False):
    if captured is not None:
      args_ = [b.addr if type(b) is rt.CPUMemory else rt._address(b) for b in bufs] + [int(v) for v in vals]
      captured.append((self, args_)); picked.append(self.threads())
    return plain_call(self, *bufs, global_size=global_size, local_size=local_size, vals=vals, wait=wait)
  rt.CPUProgram.__call__ = recording_call
  rt.CPUProgram.launcher = lambda self, global_size=None, local_size=None: None   # every launch through __call__
  rng, n = np.random.default_rng(0), args.threads
  clock = time.thread_time
  print(f"load average {os.getloadavg()[0]:.1f}; per-thread CPU time, best of {args.reps}; shares of {n}\n")
  for name, (shapes, ours, _) in workloads(Tensor, torch, F).items():
    if not any(w and w in name for w in args.only.split(",")): continue
    tp = [Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True).realize() for s in shapes]
    def step() -> None:
      for t in tp: t.grad = None
      ours(*tp).backward()
      Tensor.realize(*[t.grad for t in tp])
    for _ in range(2): step()
    captured, picked = [], []
    steps = []
    for _ in range(args.reps):
      captured.clear(); picked.clear()
      st = clock(); step(); steps.append(clock() - st)
    kernels, choices, captured = list(captured), list(picked), None
    whole = [float("inf")] * len(kernels)
    shares = [[float("inf")] * n for _ in kernels]
    for _ in range(args.reps):
      for i, (prg, a) in enumerate(kernels):
        st = clock(); prg.fn(*a, 0, 1); whole[i] = min(whole[i], clock() - st)
        for c in range(n):
          st = clock(); prg.fn(*a, c, n); shares[i][c] = min(shares[i][c], clock() - st)
    walls = [[float("inf")] * 2 for _ in kernels]
    for _ in range(args.reps if args.wall else 0):   # wall time: one thread, then the runtime's pick on the pool
      for i, (prg, a) in enumerate(kernels):
        bufs, vals = [rt.CPUMemory.over(x, 0) for x in a[:prg.n_bufs]], tuple(a[prg.n_bufs:])
        for side, threads in ((0, 1), (1, 0)):   # both through the program's call (its Python included)
          with Context(CPU_THREADS=threads or int(os.environ.get("CPU_THREADS", "0"))):
            st = time.perf_counter(); prg(*bufs, vals=vals)
          walls[i][side] = min(walls[i][side], time.perf_counter() - st)
    kern = sum(whole)
    print(f"## {name}: step {min(steps)*1e3:.3f} ms on this thread (min; median {np.median(steps)*1e3:.3f}), "
          f"kernels alone {kern*1e3:.3f} ms\n")
    print(f"| kernel | work | runs on | one thread | " + " | ".join(f"share {c}" for c in range(n)) +
          f" | slowest share x {n} / one thread |" + (" wall: one thread | wall: as picked |" if args.wall else "") +
          "\n|---|---:|---:|---:|" + "---:|" * (n + 1 + 2 * args.wall))
    for (prg, _), k, w, sh, wl in zip(kernels, choices, whole, shares, walls):
      print(f"| {prg.name} | {prg.work} | {k} | {w*1e6:.1f} us | " + " | ".join(f"{s*1e6:.1f}" for s in sh) +
            f" | {max(sh) * n / w:.2f} |" + (f" {wl[0]*1e6:.1f} us | {wl[1]*1e6:.1f} us |" if args.wall else ""))
    if kernels:
      best2 = sum(max(sh) if k > 1 else w for k, w, sh in zip(choices, whole, shares))
      here = sum(sh[0] if k > 1 else w for k, w, sh in zip(choices, whole, shares))   # what ran on this thread
      print(f"\nkernels on {n} threads as the runtime picks (slowest share each, no wake cost): {best2*1e3:.3f} ms; "
            f"the calling thread beyond its own shares (Python; with threads also its waits and shares it took over): "
            f"~{(min(steps) - here)*1e3:.3f} ms\n")

if __name__ == "__main__": main()
