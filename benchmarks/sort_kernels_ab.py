"""sort and topk rows (issue 20), this checkout against another git ref's tensor_ops/sorting.py and bitonic.py (default
main), in one process, interleaved: (1) the compiled kernels alone, per-thread CPU time of the whole chain (run with
CPU_THREADS=1; `--no-lane-rule` builds the ref's kernels with the lane-select rule off, as before it existed); (2) the whole call,
`x.sort(-1)[0].realize()` / `x.topk(16)[0].realize()`, wall time (graph building, scheduling, kernels); (3) per
side: kernels, the programs' UOps, codegen + LLVM time of a cold build. Results are checked against numpy.

  CPU_THREADS=1 python benchmarks/sort_kernels_ab.py [--ref main] [--reps 20] [--n 1024]"""
from __future__ import annotations
import argparse, os, subprocess, sys, time, types
os.environ.setdefault("CACHELEVEL", "0")   # cold builds are timed, and both sides compile from scratch
import numpy as np
from tinyplug import Tensor
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel
from tinyplug.device import Device
from tinyplug.passes import heuristic
from tinyplug.schedule import create_schedule
from tinyplug.uop.ops import Ops

class Swapped:
  """While entered, Tensor's sorting methods are the ref's (so every Tensor the old code makes uses them too)."""
  def __init__(self, ref: str):
    root = subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip()
    src = subprocess.check_output(["git", "-C", root, "show", f"{ref}:tinyplug/tensor_ops/sorting.py"], text=True)
    mod = types.ModuleType("sorting_" + ref.replace("/", "_"))
    exec(compile(src, mod.__name__, "exec"), mod.__dict__)
    try:   # the ref's network too, where it has one (its sorting methods read it as a global)
      net = subprocess.check_output(["git", "-C", root, "show", f"{ref}:tinyplug/tensor_ops/bitonic.py"], text=True,
                                    stderr=subprocess.DEVNULL)
      bit = types.ModuleType("bitonic_" + ref.replace("/", "_"))
      exec(compile(net, bit.__name__, "exec"), bit.__dict__)
      mod.__dict__["bitonic"] = bit
    except subprocess.CalledProcessError: pass
    self.methods = {k: v for k, v in vars(mod.SortingMixin).items() if callable(v)}
  def __enter__(self):
    self.saved = {k: Tensor.__dict__.get(k) for k in self.methods}
    for k, v in self.methods.items(): setattr(Tensor, k, v)
  def __exit__(self, *exc):
    for k, v in self.saved.items():
      if v is None: delattr(Tensor, k)
      else: setattr(Tensor, k, v)

class Now:
  def __enter__(self): pass
  def __exit__(self, *exc): pass

def build(out: Tensor, lane_rule: bool):
  """The compiled kernels of `out`, with their buffers; (runs, output buffer, kernels, UOps, build seconds)."""
  dev = Device["CPU"]
  items = create_schedule([out.uop])[0]
  saved = heuristic._lane_select
  if not lane_rule: heuristic._lane_select = lambda k: None
  runs, uops, t0 = [], 0, time.perf_counter()
  try:
    for item in items:
      if item.ast.op is not Ops.SINK: continue
      spec = get_program(item.ast, dev.renderer, opts=heuristic.heuristic_opts(Kernel(item.ast, dev.renderer)))
      uops += len(spec.uops) if getattr(spec, "uops", None) is not None else 0
      runs.append((dev.make_program(spec, dev.compiler.compile_cached(spec.src)), spec,
                   [b.ensure_allocated().handle for b in item.bufs]))
  finally: heuristic._lane_select = saved
  return runs, items[-1].bufs[0], len(runs), uops, time.perf_counter() - t0

def call(runs) -> None:
  for prg, spec, h in runs: prg(*h, global_size=spec.global_size, local_size=spec.local_size, vals=(), wait=True)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--ref", default="main")
  ap.add_argument("--reps", type=int, default=20)
  ap.add_argument("--n", type=int, default=1024)
  ap.add_argument("--no-lane-rule", action="store_true", help="the ref's kernels without heuristic._lane_select")
  args = ap.parse_args()
  n = args.n
  ref = Swapped(args.ref)
  a = np.random.default_rng(0).random((n, n), dtype=np.float32)
  want = {"sort": np.sort(a, -1), "topk": -np.sort(-a, -1)[:, :16]}
  work = {"sort": lambda t: t.sort(-1)[0], "topk": lambda t: t.topk(16)[0]}
  sides = {"before": ref, "now": Now()}
  print(f"{Device['CPU'].describe()}; load {os.getloadavg()}; ref {args.ref}")
  for w, fn in work.items():
    built = {}
    for side, ctx in sides.items():
      x = Tensor(a).realize()
      with ctx: runs, out, kernels, uops, secs = build(fn(x), lane_rule=side == "now" or not args.no_lane_rule)
      call(runs)
      assert np.array_equal(out.numpy().reshape(want[w].shape), want[w]), (w, side)
      built[side] = (runs, x)
      print(f"{w} {side}: {kernels} kernels, {uops} program UOps, cold codegen + compile {secs:.2f} s")
    cpu: dict[str, list[float]] = {s: [] for s in sides}
    wall: dict[str, list[float]] = {s: [] for s in sides}
    for _ in range(args.reps):
      for side in sides:
        runs, x = built[side]
        st = time.process_time(); call(runs); cpu[side].append(time.process_time() - st)
        with sides[side]:
          st = time.perf_counter(); fn(x).realize(); wall[side].append(time.perf_counter() - st)
    for side in sides:
      c, t = np.array(cpu[side]) * 1e3, np.array(wall[side]) * 1e3
      print(f"{w} {side}: kernels CPU time p10 {np.percentile(c, 10):.2f} / median {np.median(c):.2f} ms; "
            f"whole call wall p10 {np.percentile(t, 10):.2f} / median {np.median(t):.2f} ms")
  print(f"load {os.getloadavg()}", file=sys.stderr)

if __name__ == "__main__":
  main()
