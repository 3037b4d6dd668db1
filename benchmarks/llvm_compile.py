#!/usr/bin/env python3
"""LLVM's share of a cold first step, per kernel and per pass: what the cpu_llvm plugin spends compiling a model's kernels.

    python benchmarks/llvm_compile.py --model strided [--before CHECKOUT] [--passes] [--top 12]

Runs first_step.py's model for two steps in a subprocess with an empty cache and keeps the LLVM IR of every kernel
compiled at O3 (the quick tier's O0 kernels are left out). Then compiles each one here, best of 3 (process CPU time,
steadier than the wall clock on a busy machine), with this checkout's compiler. With --before, the other checkout
renders the same model too, and both sets are compiled in turns by the same compiler: the rows differ only in the IR.
--passes adds LLVM's pass timing report summed over the kernels (-time-passes).
"""
from __future__ import annotations
import argparse, collections, glob, os, re, subprocess, sys, tempfile, time

def capture(model: str, out: str) -> None:
  """(subprocess) run the model's first two steps and write every O3 kernel's IR into `out`."""
  from tinyplug_cpu_llvm import compiler as C
  compile_ = C.LLVMCompiler.compile
  def keep(self, src, quick=False):
    if not quick:
      name = re.search(r"define void @([\w.]+)\(", src).group(1)
      with open(os.path.join(out, f"{name}.ll"), "w") as f: f.write(src)
    return compile_(self, src, quick)
  C.LLVMCompiler.compile = keep
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  import first_step
  first_step.worker_tinyplug(model, 2)

def render(model: str, checkout: str | None, out: str) -> dict[str, str]:
  env = dict(os.environ, XDG_CACHE_HOME=os.path.join(out, "cache"))
  if checkout:
    env["PYTHONPATH"] = os.pathsep.join([checkout, *sorted(glob.glob(os.path.join(checkout, "plugins", "*", "src")))])
  os.makedirs(ir := os.path.join(out, "ir"))
  subprocess.run([sys.executable, os.path.abspath(__file__), "--capture", ir, "--model", model], env=env, check=True,
                 stdout=subprocess.DEVNULL)
  return {os.path.basename(f)[:-3]: open(f).read() for f in glob.glob(os.path.join(ir, "*.ll"))}

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--model", default="strided", help="mlp, cnn or strided (benchmarks/first_step.py)")
  ap.add_argument("--before", metavar="CHECKOUT", help="also render the kernels with another checkout")
  ap.add_argument("--passes", action="store_true", help="sum LLVM's pass timings over the kernels")
  ap.add_argument("--top", type=int, default=12)
  ap.add_argument("--capture", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.capture: return capture(args.model, args.capture)
  import llvmlite.binding as llvm
  from tinyplug_cpu_llvm.compiler import LLVMCompiler
  tmp = tempfile.mkdtemp(prefix="llvm_compile-")
  sets = {"now": render(args.model, None, os.path.join(tmp, "now"))}
  if args.before: sets["before"] = render(args.model, args.before, os.path.join(tmp, "before"))
  compiler = LLVMCompiler()
  def cost(src: str) -> float:
    mod = llvm.parse_assembly(src)
    st = time.process_time()
    compiler._optimize(mod, False)
    compiler.tm.emit_object(mod)
    return (time.process_time() - st) * 1e3
  names = sorted(set.intersection(*(set(s) for s in sets.values())))
  if args.passes: llvm.set_time_passes(True)
  best = {(k, n): min(cost(sets[k][n]) for _ in range(3)) for n in names for k in sets}
  cpu = compiler.cpu
  print(f"LLVM O3 compile of the {args.model} model's kernels ({cpu}; process CPU time, best of 3, ms)\n")
  print("| kernel | IR lines | " + " | ".join(sets) + " |\n|---|---:|" + "---:|" * len(sets))
  order = sorted(names, key=lambda n: -max(best[(k, n)] for k in sets))
  for n in order[:args.top]:
    print(f"| {n} | {sets['now'][n].count(chr(10))} | " + " | ".join(f"{best[(k, n)]:.1f}" for k in sets) + " |")
  print(f"| all {len(names)} | | " + " | ".join(f"{sum(best[(k, n)] for n in names):.0f}" for k in sets) + " |")
  if args.passes:
    agg: collections.Counter = collections.Counter()
    for line in llvm.report_and_reset_timings().splitlines():
      if (m := re.match(r"\s+([\d.]+) \(.*?\)(?:\s+[\d.]+ \(.*?\)){3}\s+(.*)$", line)) and m.group(2) != "Total":
        agg[re.sub(r" #\d+$", "", m.group(2))] += float(m.group(1)) * 1e3
    print("\npasses (user time summed over every compile above):")
    for name, ms in agg.most_common(args.top): print(f"  {ms:8.1f} ms  {name}")

if __name__ == "__main__":
  main()
