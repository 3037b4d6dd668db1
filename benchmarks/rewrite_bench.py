"""Rewrite-engine benchmark: the same workloads in tinyplug and tinygrad, side by side, as time ratios.

  python benchmarks/rewrite_bench.py [--exprs 2000] [--chain 50000] [--repeat 5] [--seed 0] [--only tinyplug]

Workloads (every graph is built the same way, from the same seed, in both libraries):
  index_build      build N index expressions (sums of variable*stride with div/mod by constants)
  index_simplify   graph_rewrite(expr, symbolic) for each of those N expressions
  const_chain      fold a chain of M constant ADDs with the one-rule matcher from ramp.md
  var_chain        simplify x+1+1+...+1 (M ADDs) with symbolic
Each time is the best of --repeat runs, the libraries taking turns; graphs are rebuilt and the old ones freed
between runs, so no cached bounds or rewrite results carry over. ratio = tinyplug / tinygrad (below 1.0: tinyplug is faster).
"""
from __future__ import annotations
import argparse, gc, os, random, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))

class Lib:
  """The few calls the workloads need, bound to one library."""
  def __init__(self, name: str):
    self.name = name
    if name == "tinyplug":
      from tinyplug.uop import UOp, Ops, dtypes, UPat, PatternMatcher, graph_rewrite
      from tinyplug.uop.symbolic import symbolic
      self.var = lambda n, lo, hi: UOp.variable(n, lo, hi, dtypes.int)
      self.const = lambda v: UOp.const(dtypes.int, v)
    else:
      from tinygrad.uop.ops import UOp, Ops, UPat, PatternMatcher, graph_rewrite
      from tinygrad.uop.symbolic import symbolic
      from tinygrad import dtypes
      self.var = lambda n, lo, hi: UOp.variable(n, lo, hi, dtypes.int)
      self.const = lambda v: UOp.const(dtypes.int, v) if _const_first_is_dtype(UOp) else UOp.const(v, dtypes.int)
    self.UOp, self.Ops, self.symbolic, self.graph_rewrite = UOp, Ops, symbolic, graph_rewrite
    # the constant-folding matcher of ramp.md, written the same way in both libraries
    self.fold_pm = PatternMatcher([(UPat.cvar("c1") + UPat.cvar("c2"), lambda c1, c2: c1.const_like(c1.arg + c2.arg))])

def _const_first_is_dtype(UOp) -> bool:
  import inspect
  return next(iter(inspect.signature(UOp.const).parameters)) == "dtype"

# ---- workload recipes: plain data, turned into graphs by each library ----

def index_recipes(n: int, seed: int) -> list:
  rng = random.Random(seed)
  recipes = []
  for _ in range(n):
    nvars = rng.randint(2, 4)
    sizes = [rng.choice([2, 3, 4, 8, 16, 32]) for _ in range(nvars)]
    parts = []
    for _ in range(rng.randint(1, 3)):
      terms = [(i, rng.choice([1, 2, 4, 8, 16, 3, 12])) for i in rng.sample(range(nvars), rng.randint(1, nvars))]
      ops = [(rng.choice(["//", "%"]), rng.choice([2, 4, 8, 3, 16])) for _ in range(rng.randint(1, 3))]
      parts.append((terms, rng.randint(0, 7), ops, rng.choice([1, 4, 16, 64])))
    recipes.append((sizes, parts))
  return recipes

def build_index(lib: Lib, recipe) -> object:
  sizes, parts = recipe
  vs = [lib.var(f"r{i}", 0, s - 1) for i, s in enumerate(sizes)]
  out = None
  for terms, offset, ops, stride in parts:
    x = None
    for i, k in terms: x = vs[i] * k if x is None else x + vs[i] * k
    x = x + offset
    for op, c in ops: x = x // c if op == "//" else x % c
    x = x * stride
    out = x if out is None else out + x
  return out

def build_const_chain(lib: Lib, m: int):
  one = lib.const(1)
  x = one
  for _ in range(m): x = x + one
  return x

def build_var_chain(lib: Lib, m: int):
  x = lib.var("a", 0, 100)
  for _ in range(m): x = x + 1
  return x

# ---- timing ----

def best_of(repeat: int, libs: list[Lib], setup, run) -> dict[str, float]:
  """Best time of `run(lib, setup(lib))` per library; the libraries take turns, so load spikes on a shared
  machine hit both alike."""
  best = {lib.name: float("inf") for lib in libs}
  for _ in range(repeat):
    for lib in libs:
      arg = setup(lib)
      gc.collect()
      t0 = time.perf_counter()
      run(lib, arg)
      best[lib.name] = min(best[lib.name], time.perf_counter() - t0)
      del arg
      gc.collect()
  return best

def workloads(libs: list[Lib], args) -> dict[str, dict[str, float]]:
  recipes = index_recipes(args.exprs, args.seed)
  build_all = lambda lib: [build_index(lib, r) for r in recipes]
  return {
    "index_build": best_of(args.repeat, libs, lambda lib: None, lambda lib, _: build_all(lib)),
    "index_simplify": best_of(args.repeat, libs, build_all, lambda lib, exprs: [lib.graph_rewrite(e, lib.symbolic) for e in exprs]),
    "const_chain": best_of(args.repeat, libs, lambda lib: build_const_chain(lib, args.chain),
                           lambda lib, g: lib.graph_rewrite(g, lib.fold_pm)),
    "var_chain": best_of(args.repeat, libs, lambda lib: build_var_chain(lib, args.chain // 5),
                         lambda lib, g: lib.graph_rewrite(g, lib.symbolic)),
  }

def check_same_answers(libs: list[Lib], args) -> None:
  """Both libraries must agree on the value of every simplified expression (a quick sanity check)."""
  recipes = index_recipes(min(args.exprs, 200), args.seed)
  rng = random.Random(args.seed + 1)
  for r in recipes:
    vals = {f"r{i}": rng.randrange(s) for i, s in enumerate(r[0])}
    got = []
    for lib in libs:
      simp = lib.graph_rewrite(build_index(lib, r), lib.symbolic)
      got.append(_eval(lib, simp, vals))
    assert len(set(got)) == 1, f"libraries disagree on {r}: {got}"

def _eval(lib: Lib, u, vals: dict[str, int]) -> int:
  if lib.name == "tinyplug":
    from tinyplug.uop.ops import evaluate
    return evaluate(u, vals)
  # tinygrad 0.14: substitute the variables with constants and simplify
  subs = {}
  for x in u.toposort():
    name = getattr(x.arg, "name", None) if x.op.name == "BUFFER" else x.arg[0] if x.op.name == "DEFINE_VAR" else None
    if name in vals: subs[x] = x.const_like(vals[name])
  return int(u.substitute(subs).simplify().arg)

def main() -> None:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--exprs", type=int, default=2000)
  p.add_argument("--chain", type=int, default=50000)
  p.add_argument("--repeat", type=int, default=5)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--only", choices=["tinyplug", "tinygrad"])
  args = p.parse_args()
  names = [args.only] if args.only else ["tinyplug", "tinygrad"]
  libs = [Lib(n) for n in names]
  if len(libs) == 2: check_same_answers(libs, args)
  by_workload = workloads(libs, args)
  results = {n: {w: t[n] for w, t in by_workload.items()} for n in names}
  print(f"| workload | size | {' | '.join(f'{n} (ms)' for n in names)} |" + (" ratio tinyplug/tinygrad |" if len(libs) == 2 else ""))
  print("|---|---|" + "---:|" * len(names) + ("---:|" if len(libs) == 2 else ""))
  sizes = {"index_build": args.exprs, "index_simplify": args.exprs, "const_chain": args.chain, "var_chain": args.chain // 5}
  for w in results[names[0]]:
    row = f"| {w} | {sizes[w]} | " + " | ".join(f"{results[n][w] * 1e3:.1f}" for n in names) + " |"
    if len(libs) == 2: row += f" {results['tinyplug'][w] / results['tinygrad'][w]:.2f} |"
    print(row)

if __name__ == "__main__":
  main()
