"""How each kernel of a grad_sweep step shares out across threads, measured on this one thread (so other load on the
machine hardly moves it): every kernel the step runs is captured, then run again here as one share of one thread
(`core 0 of 1`) and as each share of `--threads` (`core c of n`, one after the other), per-thread CPU time, best of
--reps. A share's time against the whole kernel's / n is the split's imbalance and its cost; `runs on` is how many
threads the runtime picked for it in the step by its bodies, bytes and operations, `picked` how many it would where its
last run took the one-thread time (a machine with that many idle cores; on this one n threads' runs are longer), and
`as picked` the slowest of those threads' shares x n against the whole kernel. With CPU_THREADS=1 the step's own time
on this thread, minus its kernels', is the Python it pays; with more threads that remainder also holds the caller's
waits.

  CPU_THREADS=2 python benchmarks/thread_shares.py --only matmul
  CPU_THREADS=2 python benchmarks/thread_shares.py --only "cross,embedding" --reps 30
  CPU_THREADS=16 python benchmarks/thread_shares.py --forward --only "pad,topk,sum0" --threads 16   # cpu_bench's rows
  CPU_THREADS=2 python benchmarks/thread_shares.py --picks --only all   # every kernel's pick, to diff two checkouts

Shares run one after the other on one core, so a share that reads what another read is helped by the cache; two
threads at once also share memory bandwidth, which this does not see."""
from __future__ import annotations
import argparse, os, sys, time
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--only", required=True, help="comma list of words in grad_sweep's workload names (all: every one)")
  ap.add_argument("--threads", type=int, default=2, help="shares to split each kernel into")
  ap.add_argument("--reps", type=int, default=15)
  ap.add_argument("--forward", action="store_true", help="cpu_bench's forward workloads (its keys: sweep and "
                  "reductions) instead of grad_sweep's training steps")
  ap.add_argument("--wall", action="store_true", help="also each kernel's wall time on one thread and as the runtime "
                  "picks (on the pool), in turns: only meaningful on a quiet machine")
  ap.add_argument("--picks", action="store_true", help="nothing timed: every kernel call of three steps of each "
                  "workload, training and forward (sort aside), as (name, threads, shared rows, bodies, actions)")
  args = ap.parse_args()
  import torch, torch.nn.functional as F
  from tinyplug.tensor import Tensor
  from tinyplug.helpers import Context
  from tinyplug_cpu_llvm import runtime as rt
  captured: list | None = None
  picked: list[int] = []
  plain_call = rt.CPUProgram.__call__
  def recording_call(self, *bufs, global_size=None, local_size=None, vals=(), wait=False):
    if captured is not None:
      args_ = [b.addr if type(b) is rt.CPUMemory else rt._address(b) for b in bufs] + [int(v) for v in vals]
      # the pick without the rule by the last run's time (on this machine n threads' runs are long; `picks` below adds
      # it from the one-thread time)
      last, self.last_s = self.last_s, 0.0
      captured.append((self, args_)); picked.append(self.threads())
      self.last_s = last
    return plain_call(self, *bufs, global_size=global_size, local_size=local_size, vals=vals, wait=wait)
  rt.CPUProgram.__call__ = recording_call
  rt.CPUProgram.launcher = lambda self, global_size=None, local_size=None: None   # every launch through __call__
  rng, n = np.random.default_rng(0), args.threads
  if args.picks: return list_picks(rt, plain_call, Tensor, torch, F, rng, args.only)
  clock = time.thread_time
  print(f"load average {os.getloadavg()[0]:.1f}; per-thread CPU time, best of {args.reps}; shares of {n}\n")
  for name, step in (forward_steps(Tensor, rng) if args.forward else training_steps(Tensor, torch, F, rng)):
    if not selected(name, args.only): continue
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
    # the runtime's pick where the kernel's last run took its one-thread time (as on a machine with n idle cores; on
    # fewer, n threads take longer and it would pick more); it never splits a one-thread kernel
    picks = [min(n, max(k, threads_for_time(rt, w, prg.shared_rows()))) if k > 1 else 1
             for (prg, _), k, w in zip(kernels, choices, whole)]
    slowest = [w if p == 1 else max(sh) if p == n else float("inf") for p, w, sh in zip(picks, whole, shares)]
    for _ in range(args.reps):   # kernels picked onto fewer than n threads: their own shares
      for i, ((prg, a), p) in enumerate(zip(kernels, picks)):
        if 1 < p < n: slowest[i] = min(slowest[i], max(_timed(clock, prg.fn, a, c, p) for c in range(p)))
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
    print(f"| kernel | work | shared rows | runs on | picked | one thread | " +
          " | ".join(f"share {c}" for c in range(n)) +
          f" | slowest share x {n} / one thread | as picked: slowest of its shares x {n} / one thread |" +
          (" wall: one thread | wall: as picked |" if args.wall else "") +
          "\n|---|---:|---:|---:|---:|---:|" + "---:|" * (n + 2 + 2 * args.wall))
    for (prg, _), k, p, w, sh, sl, wl in zip(kernels, choices, picks, whole, shares, slowest, walls):
      print(f"| {prg.name} | {prg.work} | {prg.shared_rows()} | {k} | {p} | {w*1e6:.1f} us | " +
            " | ".join(f"{s*1e6:.1f}" for s in sh) + f" | {max(sh) * n / w:.2f} | {sl * n / w:.2f} |" +
            (f" {wl[0]*1e6:.1f} us | {wl[1]*1e6:.1f} us |" if args.wall else ""))
    if kernels:
      best2 = sum(slowest)
      here = sum(sh[0] if k > 1 else w for k, w, sh in zip(choices, whole, shares))   # what ran on this thread
      print(f"\nkernels on {n} threads as the runtime picks (slowest share each, no wake cost): {best2*1e3:.3f} ms; "
            f"the calling thread beyond its own shares (Python; with threads also its waits and shares it took over): "
            f"~{(min(steps) - here)*1e3:.3f} ms\n")

def selected(name: str, only: str) -> bool: return only == "all" or any(w and w in name for w in only.split(","))

def list_picks(rt, plain_call, Tensor, torch, F, rng, only: str) -> None:
  """Prints each distinct (kernel, threads as picked, shared rows, loop bodies, actions) of the selected workloads."""
  seen: set = set()
  def listing_call(self, *bufs, **kw):
    seen.add((self.name, self.threads(), self.shared_rows(), self.work, str(self._spec.applied_opts)))
    return plain_call(self, *bufs, **kw)
  rt.CPUProgram.__call__ = listing_call
  for steps in (training_steps(Tensor, torch, F, rng), forward_steps(Tensor, rng)):
    for name, step in steps:
      if name == "sort" or not selected(name, only): continue
      for _ in range(3): step()
  for row in sorted(seen): print(row)

def _timed(clock, fn, a: list, core: int, cores: int) -> float:
  st = clock(); fn(*a, core, cores); return clock() - st

def threads_for_time(rt, cpu_s: float, rows: int) -> int:
  """The runtime's floor by time (1 with a checkout from before it: `--variant`-style A/Bs of older trees)."""
  try: rule = rt.threads_for_time
  except AttributeError: return 1
  return rule(cpu_s, rows)

def training_steps(Tensor, torch, F, rng):
  """(name, step) of grad_sweep's workloads: forward and backward, gradients realized."""
  from grad_sweep import workloads
  for name, (shapes, ours, _) in workloads(Tensor, torch, F).items():
    def make(shapes=shapes, ours=ours):
      tp: list = []
      def step() -> None:
        if not tp:
          tp.extend(Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True).realize() for s in shapes)
        for t in tp: t.grad = None
        ours(*tp).backward()
        Tensor.realize(*[t.grad for t in tp])
      return step
    yield name, make()

def forward_steps(Tensor, rng):
  """(name, step) of cpu_bench's forward workloads (its sweep and reductions, by key): the op realized."""
  import cpu_bench as cb
  for key in list(cb.TENSOR_SWEEP) + list(cb.REDUCTIONS):
    def make(key=key):
      xs: list = []
      def step() -> None:
        if key in cb.TENSOR_SWEEP:
          if not xs: xs.extend(Tensor(a).realize() for a in cb.SWEEP_INPUTS(key, rng))
          out = cb.TENSOR_SWEEP[key](*xs)
        else:
          shape, op, axis = cb.REDUCTIONS[key]
          if not xs: xs.append(Tensor(rng.random(cb.RED_SHAPES[shape], dtype=np.float32)).realize())
          out = cb._reduction_fn("tensor", op, axis)(xs[0])
        Tensor.realize(*(out if isinstance(out, tuple) else (out,)))
      return step
    yield key, make()

if __name__ == "__main__": main()
