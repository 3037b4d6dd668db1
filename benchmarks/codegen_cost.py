#!/usr/bin/env python3
"""Codegen cost per kernel against its size: where the Python time of a first training step goes.

    CACHELEVEL=0 python benchmarks/codegen_cost.py [--models mlp,cnn,strided] [--repeat 3] [--compile] [--profile]
    CACHELEVEL=0 python benchmarks/codegen_cost.py --series    # one kernel, tiles from 1 to 32x8 lanes

Runs one TinyJit-ed training step of benchmarks/first_step.py's models (cross-entropy, Adam) to collect every
kernel AST, then lowers each one again stage by stage (best of --repeat, in this process; the lowering itself never
reads the codegen cache) and prints, per kernel: the AST's UOp count, the graph's after the expand stage (the
straight-line code of the upcasts and unrolls), the linear program's, the seconds in each codegen stage, and the
microseconds per expanded UOp. Then, per stage, the slope of log(time) against log(expanded UOps) over the kernels:
about 1 is linear, clearly above 1 is a stage that grows faster than the kernel. --compile adds the LLVM compile
time of the rendered source (no cache); --profile prints a cProfile of all the lowering, by internal time; --json
writes the rows (with each kernel's actions) for comparing two checkouts.
"""
from __future__ import annotations
import argparse, cProfile, json, math, os, pstats, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

def collect_asts(model: str) -> list:
  """Every kernel AST of the model's first training step (weights, optimiser state, the jitted step)."""
  from tinyplug import Tensor, nn
  from tinyplug.nn.optim import Adam
  from tinyplug.nn.state import get_parameters
  from tinyplug.engine import realize
  from first_step import _batches, _make_model, tinyplug_step
  Tensor.manual_seed(0)
  before = set(realize._runners)
  m = _make_model(model, nn)
  opt = Adam(get_parameters(m), lr=1e-3)
  jstep = tinyplug_step(m, opt)
  for x, y in _batches(model, 2): jstep(Tensor(x), Tensor(y)).item()
  return [k[1] for k in realize._runners if k not in before]

def series_asts() -> list:
  """One kernel at growing register tiles (a pow per pair of rows, summed: a heavy body that stays scalar), so the
  same stages run on graphs from ~50 to ~10,000 UOps: (AST, actions) pairs."""
  from tinyplug import Tensor
  from tinyplug.codegen.kernel import Opt, OptOps
  from tinyplug.schedule import create_schedule
  t = ((Tensor.empty(256, 1, 64) - Tensor.empty(1, 256, 64)).abs() ** 1.5).sum(-1)
  ast = create_schedule([t.uop])[0][-1].ast
  tiles = [(1, 1), (2, 1), (4, 1), (4, 2), (8, 2), (8, 4), (16, 4), (16, 8), (32, 8)]
  return [(ast, [Opt(OptOps.UPCAST, axis, n) for axis, n in ((1, a), (0, b)) if n > 1]) for a, b in tiles]

def lower(ast, renderer, opts=None) -> tuple[dict[str, float], object]:
  """Seconds per pipeline step of one lowering (core stages and pass-set passes by their ids), and the program with
  the size of the expanded graph and the actions applied."""
  from tinyplug import events
  from tinyplug.codegen import STAGES as CORE, KernelContext, pipeline_steps, _run_plugin_pass
  from tinyplug.codegen.naming import kernel_name
  stage_fn = dict(CORE)
  ctx = KernelContext(renderer, name=kernel_name(ast), opts=opts)
  times: dict[str, float] = {}
  x, linear, expanded = ast, False, 0
  for step in pipeline_steps(renderer):
    st = time.perf_counter()
    with events.scope("pass", step.name):
      x = stage_fn[step.name](x, ctx, step.name) if step.is_core else _run_plugin_pass(step, x, ctx, linear)
    linear = linear or step.name == "linearize"
    times[step.name] = times.get(step.name, 0.0) + time.perf_counter() - st
    if step.name == "expand": expanded = len(x.toposort())
  uops = x
  st = time.perf_counter()
  src = renderer.render(ctx.name, uops)
  times["render"] = time.perf_counter() - st
  return times, (ctx.name, uops, src, expanded, [str(o) for o in ctx.applied_opts])

STAGES = ("simplify.initial", "opt", "heuristic.actions", "expand", "simplify.postopt", "gpudims", "vectorize.lanes",
          "decompositions", "simplify.final", "linearize", "render")

def slope(xs: list[float], ys: list[float]) -> float:
  """Least-squares slope of log(y) against log(x)."""
  lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-7)) for y in ys]
  mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
  var = sum((a - mx) ** 2 for a in lx)
  return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / var if var else float("nan")

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--models", default="mlp,cnn")
  ap.add_argument("--repeat", type=int, default=3)
  ap.add_argument("--compile", action="store_true", help="also time the LLVM compile of each kernel (uncached)")
  ap.add_argument("--profile", action="store_true")
  ap.add_argument("--top", type=int, default=0, help="list only the N largest kernels of each model")
  ap.add_argument("--json", help="write every kernel's row (sizes, actions, seconds) here")
  ap.add_argument("--series", action="store_true", help="instead of the models: one kernel at growing tile sizes")
  args = ap.parse_args()
  from tinyplug import Device
  from first_step import _cpu_name
  dev = Device[Device.DEFAULT]
  prof = cProfile.Profile() if args.profile else None
  rows, every = [], []
  for model in (["series"] if args.series else args.models.split(",")):
    work = series_asts() if args.series else [(ast, None) for ast in collect_asts(model)]
    mine = []
    for ast, chosen in work:
      best: dict[str, float] | None = None
      for _ in range(args.repeat):
        if prof: prof.enable()
        times, (name, uops, src, expanded, opts) = lower(ast, dev.renderer, chosen)
        if prof: prof.disable()
        if best is None or sum(times.values()) < sum(best.values()): best = times
      ctime = None
      if args.compile:
        st = time.perf_counter()
        dev.compiler.compile(src)
        ctime = time.perf_counter() - st
      if chosen is not None: name += " tile " + "x".join(str(o.arg) for o in chosen) if chosen else " no tile"
      mine.append({"model": model, "kernel": name, "ast": len(ast.toposort()), "expanded": expanded,
                   "program": len(uops), "seconds": best, "compile": ctime, "opts": opts})
    mine.sort(key=lambda r: r["expanded"])
    every.extend(mine)
    rows.extend(mine[-args.top:] if args.top else mine)
  print(f"\ncodegen cost per kernel ({_cpu_name()}; best of {args.repeat}; seconds unless marked)\n")
  cols = [s for s in STAGES if any(s in r["seconds"] for r in rows)]
  print("| model | kernel | AST UOps | expanded UOps | program UOps | " + " | ".join(cols) +
        " | codegen | µs / expanded UOp |" + (" LLVM compile |" if args.compile else ""))
  print("|---|---|---:|---:|---:|" + "---:|" * (len(cols) + 2) + ("---:|" if args.compile else ""))
  for r in rows:
    t, total = r["seconds"], sum(r["seconds"].values())
    print(f"| {r['model']} | {r['kernel']} | {r['ast']} | {r['expanded']} | {r['program']} | " +
          " | ".join(f"{t.get(c, 0):.4f}" for c in cols) + f" | {total:.4f} | {total / r['expanded'] * 1e6:.0f} |" +
          (f" {r['compile']:.3f} |" if r["compile"] is not None else ""))
  total = sum(sum(r["seconds"].values()) for r in every)
  print(f"\n{len(every)} kernels, {sum(r['program'] for r in every)} program UOps, largest expanded "
        f"{max(r['expanded'] for r in every)}, codegen {total:.2f} s" +
        (f", LLVM {sum(r['compile'] for r in every):.2f} s" if args.compile else ""))
  # growth with kernel size, over the kernels of at least 100 expanded UOps (below that, fixed costs dominate)
  big = [r for r in every if r["expanded"] >= 100]
  if len(big) >= 3:
    xs = [r["expanded"] for r in big]
    fits = {c: slope(xs, [r["seconds"].get(c, 0) for r in big]) for c in cols}
    fits["codegen"] = slope(xs, [sum(r["seconds"].values()) for r in big])
    if args.compile: fits["LLVM compile"] = slope(xs, [r["compile"] for r in big])
    print(f"\nslope of log(seconds) against log(expanded UOps), {len(big)} kernels of >= 100 expanded UOps "
          "(1: linear):\n")
    print("| " + " | ".join(fits) + " |\n|" + "---:|" * len(fits))
    print("| " + " | ".join(f"{v:.2f}" for v in fits.values()) + " |")
  if args.json:
    with open(args.json, "w") as f: json.dump(every, f, indent=1)
  if prof: pstats.Stats(prof).sort_stats("tottime").print_stats(25)

if __name__ == "__main__": main()
