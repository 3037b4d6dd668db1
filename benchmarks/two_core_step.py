"""Where a grad_sweep step's wall time goes on all cores, against the ideal: in turns, (a) the real step (after an untimed
one, so the pool is as steps back to back leave it), each kernel's wall time as the runtime launches it (its threads and shares) and the Python around them (the step's wall minus its
kernels'), and (b) every kernel of the step run alone on this thread in the step's order (per-thread CPU time, the
caches as a step leaves them). The ideal step is the one-thread kernels / threads + the Python; real / ideal says what
the threads lose beyond the serial Python (uneven shares, kernels left on one thread, waits, contention).

  python benchmarks/two_core_step.py --only "64->64 28x28" --rounds 40
  chrt -f 10 python benchmarks/two_core_step.py --only "64->64 28x28,64->64 56x56"   # ahead of other sessions' load

Wall times on a shared machine move with the others' load; `chrt -f` (real-time priority, root only) keeps other
processes off the cores for the run, and with it the scheduler's own placement and time slices, so it shows the
process's best case, not a quiet machine's. Prints p10 / median over the rounds and the load average."""
from __future__ import annotations
import argparse, os, sys, time
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--only", required=True, help="comma list of words in grad_sweep's workload names")
  ap.add_argument("--rounds", type=int, default=30)
  args = ap.parse_args()
  import torch, torch.nn.functional as F
  from tinyplug.tensor import Tensor
  from tinyplug_cpu_llvm import runtime as rt
  from tinyplug_cpu_llvm.machine import n_threads
  from grad_sweep import workloads
  # (program, its buffers, its values, wall start, wall end) per launch; the addresses are worked out after the step
  events: list | None = None
  plain_call, plain_launcher = rt.CPUProgram.__call__, rt.CPUProgram.launcher
  def address_list(bufs, vals) -> list[int]:
    return [b.addr if type(b) is rt.CPUMemory else rt._address(b) for b in bufs] + [int(v) for v in vals]
  def timed_call(self, *bufs, global_size=None, local_size=None, vals=(), wait=False):
    st = time.perf_counter()
    out = plain_call(self, *bufs, global_size=global_size, local_size=local_size, vals=vals, wait=wait)
    if events is not None: events.append((self, bufs, vals, st, time.perf_counter()))
    return out
  def timed_launcher(self, global_size=None, local_size=None):
    if (launch := plain_launcher(self, global_size, local_size)) is None: return None
    def run(handles: list, vals: tuple) -> None:
      st = time.perf_counter(); launch(handles, vals)
      if events is not None: events.append((self, handles, vals, st, time.perf_counter()))
    return run
  rt.CPUProgram.__call__, rt.CPUProgram.launcher = timed_call, timed_launcher
  rng, threads, clock = np.random.default_rng(0), n_threads(), time.thread_time
  print(f"load average {os.getloadavg()[0]:.1f}; {threads} threads; {args.rounds} rounds, p10 / median\n")
  for name, (shapes, ours, _) in workloads(Tensor, torch, F).items():
    if not any(w and w in name for w in args.only.split(",")): continue
    tp = [Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True).realize() for s in shapes]
    def step(ours=ours, tp=tp) -> None:
      for t in tp: t.grad = None
      ours(*tp).backward()
      Tensor.realize(*[t.grad for t in tp])
    for _ in range(3): step()
    walls, pythons, launched, alone = [], [], [], []
    for _ in range(args.rounds):
      step()   # untimed: the workers idle through the kernels run alone below and fall asleep; steps back to back keep them awake
      events = []
      st = time.perf_counter(); step(); walls.append(time.perf_counter() - st)
      ev, events = events, None
      used = [prg.threads() for prg, *_ in ev]   # the pool still awake from the step: the threads each launch had
      launched.append([e[4] - e[3] for e in ev])
      pythons.append(walls[-1] - sum(launched[-1]))
      one = []
      for prg, bufs, vals, _, _ in ev:
        a = address_list(bufs, vals)
        st = clock(); prg.fn(*a, 0, 1); one.append(clock() - st)
      alone.append(one)
    if len({len(r) for r in launched}) != 1: sys.exit(f"{name}: the step's kernels changed between rounds")
    q = lambda xs: (np.percentile(xs, 10) * 1e3, np.median(xs) * 1e3)
    print(f"## {name}\n\n| kernel | threads | one thread, alone | in the step, as launched | one thread / (threads x "
          f"launched) |\n|---|---:|---:|---:|---:|")
    for k, (prg, _, _, _, _) in enumerate(ev):
      one_k, in_k = q([r[k] for r in alone]), q([r[k] for r in launched])
      print(f"| {prg.name} | {used[k]} | {one_k[0]:.3f} / {one_k[1]:.3f} ms | {in_k[0]:.3f} / {in_k[1]:.3f} ms | "
            f"{one_k[0] / (used[k] * in_k[0]):.2f} |")
    kern1, kern_in, py, real = q([sum(r) for r in alone]), q([sum(r) for r in launched]), q(pythons), q(walls)
    ideal = kern1[0] / threads + py[0]
    print(f"\nkernels alone on one thread {kern1[0]:.3f} / {kern1[1]:.3f} ms; as launched in the step {kern_in[0]:.3f} / "
          f"{kern_in[1]:.3f} ms; Python in the step (wall minus kernels) {py[0]:.3f} / {py[1]:.3f} ms\n"
          f"ideal on {threads} threads (one-thread kernels / {threads} + Python, p10s) {ideal:.3f} ms; real step "
          f"{real[0]:.3f} / {real[1]:.3f} ms: real p10 / ideal {real[0] / ideal:.2f}\n")

if __name__ == "__main__": main()
