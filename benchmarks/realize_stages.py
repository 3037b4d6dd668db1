"""Where the Python of a tiny realized op and of a new graph's first result goes, stage by stage (issue 20).

    python benchmarks/realize_stages.py [--n 5000]

Each stage of `t = (t + 1.0).realize()` (a 1-float tensor: a one-op graph plan) and of a new `((x * k) + 1).exp()`
(a new float constant k each time: a parameter plan) is timed on its own with perf_counter_ns, p10 / median in us;
the stages call the same internals the realize calls, so their sum is close to the total (the rest is call layers
and frees). For A/B timings of the totals use cpu_bench.py --variant (see benchmarks/README.md)."""
from __future__ import annotations
import argparse, platform, statistics, time
import numpy as np
from tinyplug.tensor import Tensor, _apply_becomes_map
from tinyplug.engine import realize as eng, plan as P
from tinyplug import schedule as S
from tinyplug.schedule import cache as C
from tinyplug.device import handle_of
from tinyplug.uop.ops import UOp, Ops
from tinyplug.uop.dtype import dtypes

pc = time.perf_counter_ns

def table(title: str, stages: dict[str, list[int]]) -> None:
  print(f"\n{title}\n\n| stage | p10 us | median us |\n|---|---:|---:|")
  for k, v in stages.items():
    v.sort()
    print(f"| {k} | {v[len(v) // 10] / 1e3:.2f} | {statistics.median(v) / 1e3:.2f} |")

def tiny_op(n: int) -> None:
  t = Tensor(np.zeros(1, np.float32)).realize()
  for _ in range(300): t = (t + 1.0).realize()
  R: dict[str, list[int]] = {}
  def rec(k: str, v: int) -> None: R.setdefault(k, []).append(v)
  for _ in range(n):
    a = pc(); x = t + 1.0; b = pc(); rec("build `t + 1.0` (Tensor, UOps)", b - a)
    u = x.uop
    a = pc(); eng.plans_apply(); tok = P._settings_token(); b = pc(); rec("plans apply?, settings number", b - a)
    a = pc(); sk = C.shallow_key(u); b = pc(); rec("shallow key", b - a)
    a = pc(); tpl, plan, recipe, _, _ = P._one_op_plans.get((sk, tok)); nodes = C.nodes_of(recipe, u); b = pc()
    rec("plan lookup, nodes", b - a)
    a = pc(); made = [m() for m in plan.outs]; b = pc(); rec("output: UOp, Buffer, memory", b - a)
    launch, refs, _, _, _ = plan.steps[0]
    a = pc(); hs = [handle_of(nodes[r]) if r >= 0 else made[-r - 1][1] for r in refs]; b = pc(); rec("input handles", b - a)
    a = pc(); launch(hs, ()); b = pc(); rec("kernel launch (ctypes, the kernel itself included)", b - a)
    a = pc(); becomes = tpl.becomes_over(nodes, [m[0] for m in made]); b = pc(); rec("what the node becomes", b - a)
    a = pc(); _apply_becomes_map(becomes); b = pc(); rec("point the tensor at its buffer", b - a)
    del nodes, hs, becomes, u, made
    t = x
    y = t + 1.0
    a = pc(); y.realize(); b = pc(); rec("**realize() of a built `t + 1.0`**", b - a)
    a = pc(); z = (y + 1.0).realize(); b = pc(); rec("**`(t + 1.0).realize()`**", b - a)
    t = z
    del y
  table("`t = (t + 1.0).realize()`, 1 float", R)

def first_result(n: int) -> None:
  rng = np.random.default_rng(0)
  small = Tensor(rng.random(1024, dtype=np.float32)).realize()
  for _ in range(50): ((small * (float(rng.random()) + 1.0)) + 1.0).exp().realize()
  R: dict[str, list[int]] = {}
  def rec(k: str, v: int) -> None: R.setdefault(k, []).append(v)
  for _ in range(n):
    k = float(rng.random()) + 1.0
    a = pc(); x = ((small * k) + 1.0).exp(); b = pc(); rec("build the graph (4 ops, 17 nodes)", b - a)
    u = x.uop
    a = pc(); found = S.structure(UOp(Ops.SINK, dtypes.void, (u,))); b = pc(); rec("structure walk (key, nodes)", b - a)
    a = pc(); P._param_plans.get((P._masked(found[0]), P._settings_token())); b = pc()
    rec("constants masked, plan lookup", b - a)
    del found, u
    a = pc(); x.realize(); b = pc(); rec("**realize() of the built graph**", b - a)
    a = pc(); ((small * (k + 0.5)) + 1.0).exp().realize(); b = pc(); rec("**build + realize**", b - a)
  table("new `((x * k) + 1.0).exp()` of 1024 floats, a new k each time", R)

if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=5000)
  args = ap.parse_args()
  print(f"{platform.processor() or platform.machine()}, python {platform.python_version()}")
  tiny_op(args.n)
  first_result(max(1, args.n // 2))
