"""Where a realize's time goes beyond its kernels, piece by piece, on the CPU (issue 20's "gap").

Three measurements in one process, DEV=CPU:
  1. phases: one `build().realize()` split into building the graph, scheduling, running (the kernel call itself
     apart), pointing the tensor at its buffer and freeing the result; each as it runs right after the big kernel
     ("in context") and, for comparison, the same Python for a 16x16 matmul / 1x3x8x8 conv (a ~1 us kernel, so the
     caches stay warm: "hot").
  2. memory: minor page faults and the plugin allocator's own allocations per realize (0 and 0: the freed output is
     reused, nothing is faulted in).
  3. gaps: the kernels alone after an idle gap of N us (a busy loop that touches no memory), then the same with the
     kernels' buffers read back into the caches just before: what a pause between kernels costs, and whether that is
     the thread pool (compare CPU_THREADS=1) or the data going cold.
  4. the small workload's realize (all Python) right after nothing, after streaming 4 MB with numpy and after the
     big kernels: how much slower the same Python runs once a kernel has evicted the interpreter's state.

  python benchmarks/realize_gap.py                      # matmul 512 and conv2d b32
  CPU_THREADS=1 python benchmarks/realize_gap.py --only matmul_512
  python benchmarks/realize_gap.py --only matmul_512,sum --phases-only   # the phases with REALIZE_PLANS=0 and =1

The phases run with REALIZE_PLANS=0 (the usual realize) and =1 (a repeated template realize replays its plan,
engine/plan.py: "plan" is then that whole realize, the kernel apart), in alternating blocks in one process.

A timing: run it on a quiet machine and say the load (it prints the load average)."""
from __future__ import annotations
import argparse, os, resource, time
import numpy as np

def _pct(v: list[int], q: float) -> float: return sorted(v)[int(len(v) * q)] / 1e3

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--only", default="matmul_512,conv_b32")
  ap.add_argument("--n", type=int, default=300, help="realizes (and gap rounds) per measurement")
  ap.add_argument("--phases-only", action="store_true", help="measure the phases only (1.), not the gaps")
  args = ap.parse_args()
  from tinyplug.tensor import Tensor
  import tinyplug.tensor as tensor_mod
  import tinyplug.engine.realize as engine
  from tinyplug.device import Device
  from tinyplug.schedule import create_schedule
  from tinyplug.helpers import Context, ContextVar
  # REALIZE_PLANS off and on (a checkout without it: one column, its usual realize)
  modes = (0, 1) if "REALIZE_PLANS" in ContextVar.registry else (None,)
  def setting(m): return Context(REALIZE_PLANS=m) if m is not None else Context()
  dev = Device["CPU"]
  rng = np.random.default_rng(0)
  def t(*shape): return Tensor(rng.random(shape, dtype=np.float32)).realize()
  big = {"matmul_512": (lambda a=t(512, 512), b=t(512, 512): a @ b, lambda a=t(16, 16), b=t(16, 16): a @ b),
         "conv_b32": (lambda x=t(32, 3, 32, 32), w=t(32, 3, 3, 3): x.conv2d(w, padding=1),
                      lambda x=t(1, 3, 8, 8), w=t(4, 3, 3, 3): x.conv2d(w, padding=1)),
         "sum": (lambda x=t(4096, 4096): x.sum(), lambda x=t(64, 64): x.sum())}
  # phase timers: wrap the engine's steps and the kernel call (the program object the runner calls)
  phase: dict[str, int] = {}
  def timed(fn, key):
    def wrapper(*a, **k):
      st = time.perf_counter_ns(); r = fn(*a, **k); phase[key] = phase.get(key, 0) + time.perf_counter_ns() - st
      return r
    return wrapper
  engine.create_schedule = timed(engine.create_schedule, "schedule")
  engine.run_schedule = timed(engine.run_schedule, "run")
  tensor_mod._apply_becomes_map = timed(tensor_mod._apply_becomes_map, "becomes")
  try:
    import tinyplug.engine.plan as plan_mod
    plan_mod.realize_deferred = timed(plan_mod.realize_deferred, "plan")
  except ImportError: pass
  from tinyplug_cpu_llvm.runtime import CPUProgram
  CPUProgram.__call__ = timed(CPUProgram.__call__, "kernel")
  raw_allocs = [0]
  raw_alloc = dev.allocator.raw.alloc
  def counting_alloc(nbytes):
    raw_allocs[0] += 1
    return raw_alloc(nbytes)
  dev.allocator.raw.alloc = counting_alloc

  def phases(build) -> dict:
    # blocks of 10 realizes per setting, alternating; the first realize after a switch is not timed (a new setting
    # makes the plan path look its settings up again)
    out: dict = {m: [] for m in modes}
    for m in modes:
      with setting(m):
        for _ in range(5): build().realize()
    for rep in range(max(1, args.n // 10)):
      for m in (modes if rep % 2 else modes[::-1]):
        with setting(m):
          build().realize()
          for _ in range(10):
            phase.clear()
            t0 = time.perf_counter_ns(); r = build(); t1 = time.perf_counter_ns(); r.realize(); dev.synchronize()
            t2 = time.perf_counter_ns(); del r; t3 = time.perf_counter_ns()
            out[m].append({**phase, "build": t1 - t0, "realize": t2 - t1, "free": t3 - t2, "all": t3 - t0})
    return out

  print(f"DEV=CPU, {os.environ.get('CPU_THREADS') or 'all'} threads, load average at start {os.getloadavg()[0]:.2f}; "
        "us, p10 / median")
  for name in args.only.split(","):
    build, small = big[name]
    ctx, hot = phases(build), phases(small)
    for s in [s for m in modes for s in ctx[m] + hot[m]]:
      k = s.get("kernel", 0)
      s["realize"] -= k
      if "run" in s: s["run"] -= k   # the run step's own Python, the kernel apart
      if "plan" in s: s["plan"] -= k
    label = {None: "", 0: " REALIZE_PLANS=0", 1: " REALIZE_PLANS=1"}
    print(f"\n{name}: phases in context (after its kernel) and hot (the same Python around a tiny kernel)")
    print("| phase |" + "".join(f" in context{label[m]} |" for m in modes) + "".join(f" hot{label[m]} |" for m in modes))
    print("|---|" + "---:|" * (2 * len(modes)))
    for key in ("build", "schedule", "run", "plan", "kernel", "becomes", "realize", "free", "all"):
      cells = []
      for d in (ctx, hot):
        for m in modes:
          v = [s.get(key, 0) for s in d[m]]
          cells.append(f"{_pct(v, .1):.1f} / {_pct(v, .5):.1f}")
      what = {"run": "run (without the kernel)", "plan": "plan replay (without the kernel)",
              "realize": "realize() (without the kernel)"}.get(key, key)
      print(f"| {what} | " + " | ".join(cells) + " |")
    for m in modes:
      py_ctx = [s["all"] - s.get("kernel", 0) for s in ctx[m]]
      py_hot = [s["all"] - s.get("kernel", 0) for s in hot[m]]
      print(f"Python around the kernel{label[m]}: {_pct(py_ctx, .1):.1f} us in context, {_pct(py_hot, .1):.1f} us hot (p10)")
    if args.phases_only: continue
    faults0, allocs0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, raw_allocs[0]
    for _ in range(20): build().realize()
    print(f"per realize: {(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0) / 20:.1f} minor page faults, "
          f"{(raw_allocs[0] - allocs0) / 20:.1f} allocations by the plugin allocator")

    items, _ = create_schedule([build().uop])
    runs = [(engine.get_runner(it.bufs[0].device, it.ast), [b.ensure_allocated() for b in it.bufs]) for it in items]
    views = [b._handle.array for _, bufs in runs for b in bufs]
    def kernels() -> int:
      st = time.perf_counter_ns()
      for r, bufs in runs: r(bufs, {}, wait=False)
      dev.synchronize()
      return time.perf_counter_ns() - st
    def busy(us: int) -> None:
      end = time.perf_counter() + us * 1e-6
      while time.perf_counter() < end: pass
    gaps = (0, 150, 1000, 3000)
    res: dict[tuple[int, bool], list[int]] = {(g, w): [] for g in gaps for w in (False, True)}
    for _ in range(5): kernels()
    for rep in range(args.n // 2):
      for g in (gaps if rep % 2 else gaps[::-1]):
        for warm in (False, True):
          busy(g)
          if warm:
            for v in views: np.add.reduce(v)   # the buffers back into the caches (untimed)
          res[(g, warm)].append(kernels())
    print("kernels alone after an idle gap (p10 / median, us):\n| gap | as it is | buffers re-read first |\n|---|---:|---:|")
    for g in gaps:
      print(f"| {g} us | {_pct(res[(g, False)], .1):.1f} / {_pct(res[(g, False)], .5):.1f} | "
            f"{_pct(res[(g, True)], .1):.1f} / {_pct(res[(g, True)], .5):.1f} |")
    # 4. the same small realize (all Python) right after nothing, after streaming 4 MB, after the big kernels
    junk = np.zeros((4 << 20) // 8)
    before = {"nothing": lambda: None, "a 4 MB numpy stream": lambda: junk.__iadd__(1.0), "the kernels": kernels}
    after: dict[str, list[int]] = {k: [] for k in before}
    for rep in range(args.n):
      for k, f in (list(before.items()) if rep % 2 else list(before.items())[::-1]):
        f()
        st = time.perf_counter_ns(); r = small().realize(); dev.synchronize(); del r
        after[k].append(time.perf_counter_ns() - st)
    print("the small realize (its Python, a ~1 us kernel) right after ...: " +
          ", ".join(f"{k} {_pct(v, .1):.1f} / {_pct(v, .5):.1f} us" for k, v in after.items()))
  print(f"\nload average at end: {os.getloadavg()[0]:.2f}")

if __name__ == "__main__":
  main()
