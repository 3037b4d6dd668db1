"""Where a warm process's first training steps go, stage by stage (first_step.py's models, one process).

    XDG_CACHE_HOME=/tmp/c python benchmarks/first_phases.py --model gpt      # run twice: the second is warm

Wraps the stages with timers (wall and main-thread CPU) and prints, for the setup and each step: scheduling (its
template keys and disk reads apart), codegen-cache reads (program keys apart), loading binaries, the kernels' calls
(first call of each program apart from later ones), SQLite queries, and what is left (building the graph, gradient,
optimiser, TinyJit)."""
from __future__ import annotations
import argparse, os, sys, time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--model", default="gpt")
  ap.add_argument("--steps", type=int, default=3)
  ap.add_argument("--modules", action="store_true", help="also name the modules each phase imported")
  ap.add_argument("--profile", nargs=2, metavar=("STEP", "FILE"), help="cProfile step STEP (0: the setup) into FILE")
  args = ap.parse_args()
  import cProfile
  prof = cProfile.Profile()
  def profiled(i: int, fn):
    if not args.profile or int(args.profile[0]) != i: return fn()
    try: return prof.runcall(fn)
    finally: prof.dump_stats(args.profile[1])
  t0 = time.perf_counter()
  import first_step as fs
  from tinyplug import Tensor, nn
  from tinyplug.nn.optim import Adam
  from tinyplug.nn.state import get_parameters
  from tinyplug.engine import realize as R
  from tinyplug import codegen as CG, diskcache as DC
  from tinyplug.codegen import program_cache as PC
  from tinyplug.schedule import template_cache as TC
  import tinyplug_cpu_llvm.runtime as RT
  t_import = time.perf_counter() - t0
  wall: dict[str, float] = defaultdict(float)
  cpu: dict[str, float] = defaultdict(float)
  count: dict[str, int] = defaultdict(int)
  def timed(name: str, fn):
    def run(*a, **k):
      st, ct = time.perf_counter(), time.thread_time()
      try: return fn(*a, **k)
      finally:
        wall[name] += time.perf_counter() - st
        cpu[name] += time.thread_time() - ct
        count[name] += 1
    return run
  R.create_schedule = timed("schedule", R.create_schedule)
  TC.template_key = timed("schedule: template keys", TC.template_key)
  TC.load = timed("schedule: template reads", TC.load)
  CG.get_program = timed("codegen-cache reads (get_program)", CG.get_program)
  PC.program_key = timed("  program keys", PC.program_key)
  PC.load = timed("  program reads (load)", PC.load)
  if hasattr(CG, "cached_programs"):   # (a checkout before it reads each program alone)
    CG.cached_programs = timed("codegen-cache reads, batched (cached_programs)", CG.cached_programs)
  R.CompiledRunner.__init__ = timed("runners (binaries loaded)", R.CompiledRunner.__init__)
  seen: set[int] = set()
  call = RT.CPUProgram.__call__
  def kernel(self, *a, **k):
    first = id(self) not in seen
    seen.add(id(self))
    return timed("kernels, first call" if first else "kernels, later calls", call)(self, *a, **k)
  RT.CPUProgram.__call__ = kernel
  get = DC.SealedTable.get
  DC.SealedTable.get = timed("sqlite reads (SealedTable.get)", get)
  if hasattr(DC.SealedTable, "get_many"):
    DC.SealedTable.get_many = timed("sqlite reads, batched (get_many)", DC.SealedTable.get_many)
  import resource
  new_modules: list[list[str]] = []
  def snap() -> tuple[dict, dict, dict]:
    new_modules.append(sorted(set(sys.modules) - set().union(*new_modules) - before_modules))
    wall["modules imported"], count["modules imported"] = 0.0, len(sys.modules)
    wall["page faults (minor)"], count["page faults (minor)"] = 0.0, resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    ru = resource.getrusage(resource.RUSAGE_SELF)
    wall["process sys / user CPU ms"], cpu["process sys / user CPU ms"] = ru.ru_stime, ru.ru_utime
    count["process sys / user CPU ms"] = 1
    return dict(wall), dict(cpu), dict(count)
  phases = []
  before_modules = set(sys.modules)
  ru0 = resource.getrusage(resource.RUSAGE_SELF)
  n_modules, faults = len(sys.modules), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  st, ct = time.perf_counter(), time.thread_time()
  m, opt = profiled(0, lambda: (m := fs._make_model(args.model, nn), Adam(get_parameters(m), lr=1e-3)))
  phases.append(("setup", time.perf_counter() - st, time.thread_time() - ct, snap()))
  jstep = fs.tinyplug_step(m, opt)
  for i, (x, y) in enumerate(fs._batches(args.model, args.steps)):
    st, ct = time.perf_counter(), time.thread_time()
    profiled(i + 1, lambda: jstep(Tensor(x), Tensor(y)).item())
    phases.append((f"step {i + 1}", time.perf_counter() - st, time.thread_time() - ct, snap()))
  print(f"import {t_import * 1e3:.0f} ms; load {os.getloadavg()[0]:.1f}")
  sysuser = "process sys / user CPU ms"
  prev: tuple = ({sysuser: ru0.ru_stime}, {sysuser: ru0.ru_utime},
                 {"modules imported": n_modules, "page faults (minor)": faults})
  names = ["schedule", "schedule: template keys", "schedule: template reads", "codegen-cache reads (get_program)",
           "  program keys", "  program reads (load)", "codegen-cache reads, batched (cached_programs)",
           "runners (binaries loaded)", "sqlite reads (SealedTable.get)",
           "sqlite reads, batched (get_many)", "kernels, first call", "kernels, later calls",
           "modules imported", "page faults (minor)", sysuser]
  print("| stage | " + " | ".join(p[0] for p in phases) + " |\n|---|" + "---:|" * len(phases))
  totals = " | ".join(f"{w * 1e3:.0f} / {c * 1e3:.0f}" for _, w, c, _ in phases)
  print(f"| total wall / main-thread CPU ms | {totals} |")
  rows = {n: [] for n in names}
  for _, w, c, (sw, sc, sn) in phases:
    for n in names:
      dw, dc, dn = sw.get(n, 0) - prev[0].get(n, 0), sc.get(n, 0) - prev[1].get(n, 0), sn.get(n, 0) - prev[2].get(n, 0)
      if n.startswith("process"): dn = 1
      rows[n].append(("" if not dn else f"{dn}" if not dw else f"{dw * 1e3:.0f} / {dc * 1e3:.0f} ({dn})"))
    prev = (sw, sc, sn)
  for n in names: print(f"| {n} | " + " | ".join(rows[n]) + " |")
  if args.modules:
    for (name, *_), mods in zip(phases, new_modules): print(f"{name} imported: {' '.join(mods)}")

if __name__ == "__main__": main()
