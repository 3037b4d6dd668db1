#!/usr/bin/env python3
"""Codegen cost per kernel against its size: where the Python time of a first training step goes.

    python benchmarks/codegen_cost.py [--models mlp,cnn] [--repeat 3] [--compile] [--profile]

Runs one TinyJit-ed training step of benchmarks/first_step.py's models (cross-entropy, Adam) to collect every
kernel AST, then lowers each one again with `get_program` (best of --repeat, in this process) and prints, per
kernel: the AST's UOp count, the linear program's UOp count, the seconds in each codegen stage, and the
microseconds per program UOp. Codegen that scales linearly keeps that last column about flat from the smallest
kernel to the largest. --compile adds the LLVM compile time of the rendered source (no cache); --profile prints a
cProfile of all the lowering, by internal time.
"""
from __future__ import annotations
import argparse, cProfile, os, pstats, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

def collect_asts(model: str) -> list:
  """Every kernel AST of the model's first training step (weights, optimiser state, the jitted step)."""
  from tinyplug import Tensor, TinyJit, nn
  from tinyplug.nn.optim import Adam
  from tinyplug.nn.state import get_parameters
  from tinyplug.engine import realize
  from first_step import _batches, _make_model
  Tensor.manual_seed(0)
  before = set(realize._runners)
  m = _make_model(model, nn)
  opt = Adam(get_parameters(m), lr=1e-3)
  @TinyJit
  @Tensor.train()
  def jstep(x, y):
    opt.zero_grad()
    loss = m(x).sparse_categorical_crossentropy(y).backward()
    return loss.realize(*opt.schedule_step())
  for x, y in _batches(model, 2): jstep(Tensor(x), Tensor(y)).item()
  return [k[1] for k in realize._runners if k not in before]

def lower(ast, renderer) -> tuple[dict[str, float], object]:
  """Seconds per pipeline step of one lowering (core stages and pass-set passes by their ids), and the program."""
  from tinyplug import events
  from tinyplug.codegen import STAGES as CORE, KernelContext, pipeline_steps, _run_plugin_pass
  from tinyplug.codegen.naming import kernel_name
  stage_fn = dict(CORE)
  ctx = KernelContext(renderer, name=kernel_name(ast))
  times: dict[str, float] = {}
  x, linear = ast, False
  for step in pipeline_steps(renderer):
    st = time.perf_counter()
    with events.scope("pass", step.name):
      x = stage_fn[step.name](x, ctx, step.name) if step.is_core else _run_plugin_pass(step, x, ctx, linear)
    linear = linear or step.name == "linearize"
    times[step.name] = times.get(step.name, 0.0) + time.perf_counter() - st
  uops = x
  st = time.perf_counter()
  src = renderer.render(ctx.name, uops)
  times["render"] = time.perf_counter() - st
  return times, (ctx.name, uops, src)

STAGES = ("simplify.initial", "opt", "heuristic.actions", "expand", "simplify.postopt", "gpudims", "vectorize.lanes",
          "decompositions", "simplify.final", "linearize", "render")

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--models", default="mlp,cnn")
  ap.add_argument("--repeat", type=int, default=3)
  ap.add_argument("--compile", action="store_true", help="also time the LLVM compile of each kernel (uncached)")
  ap.add_argument("--profile", action="store_true")
  ap.add_argument("--top", type=int, default=0, help="list only the N largest kernels of each model")
  args = ap.parse_args()
  from tinyplug import Device
  from first_step import _cpu_name
  dev = Device[Device.DEFAULT]
  prof = cProfile.Profile() if args.profile else None
  rows = []
  for model in args.models.split(","):
    asts = collect_asts(model)
    mine = []
    for ast in asts:
      best: dict[str, float] | None = None
      for _ in range(args.repeat):
        if prof: prof.enable()
        times, (name, uops, src) = lower(ast, dev.renderer)
        if prof: prof.disable()
        if best is None or sum(times.values()) < sum(best.values()): best = times
      ctime = None
      if args.compile:
        st = time.perf_counter()
        dev.compiler.compile(src)
        ctime = time.perf_counter() - st
      mine.append((model, name, len(ast.toposort()), len(uops), best, ctime))
    mine.sort(key=lambda r: r[3])   # by program size
    rows.extend(mine[-args.top:] if args.top else mine)
  print(f"\ncodegen cost per kernel ({_cpu_name()}; best of {args.repeat}; seconds unless marked)\n")
  cols = [s for s in STAGES if any(s in r[4] for r in rows)]
  print("| model | kernel | AST UOps | program UOps | " + " | ".join(cols) + " | codegen | µs / program UOp |"
        + (" LLVM compile |" if args.compile else ""))
  print("|---|---|---:|---:|" + "---:|" * (len(cols) + 2) + ("---:|" if args.compile else ""))
  for model, name, n_ast, n_prog, t, ctime in rows:
    total = sum(t.values())
    print(f"| {model} | {name} | {n_ast} | {n_prog} | " + " | ".join(f"{t.get(c, 0):.4f}" for c in cols) +
          f" | {total:.4f} | {total / n_prog * 1e6:.0f} |" + (f" {ctime:.3f} |" if ctime is not None else ""))
  total = sum(sum(r[4].values()) for r in rows)
  print(f"\n{len(rows)} kernels, {sum(r[3] for r in rows)} program UOps, codegen {total:.2f} s" +
        (f", LLVM {sum(r[5] for r in rows):.2f} s" if args.compile else ""))
  if prof: pstats.Stats(prof).sort_stats("tottime").print_stats(25)

if __name__ == "__main__": main()
