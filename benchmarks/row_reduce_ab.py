"""Row (last-axis) reductions, plain and topk's selection passes over rows: the vectorize pass now against the rule
before (`vectorize.has_data_gather` swapped for `has_gather`: the upcast rows' reductions grouped as one vector
accumulator across rows whose lanes compare loaded values one by one), and the same reduction across rows (axis 0:
two kernels, both timed) for scale, interleaved in one process: per-thread CPU time of the compiled programs alone, p10 of --reps. Outputs of the two
row variants are compared (equal for max and int sums; float sums to rounding).

  CPU_THREADS=1 python benchmarks/row_reduce_ab.py [--n 1024 4096] [--reps 40]"""
from __future__ import annotations
import argparse, os, time
os.environ.setdefault("CACHELEVEL", "0")   # both variants lower the same AST and opts: no disk-cached programs
import numpy as np
from tinyplug import Tensor
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel
from tinyplug.device import Device
from tinyplug.passes import heuristic, vectorize
from tinyplug.schedule import create_schedule

def _select(x: Tensor, axis: int) -> Tensor:
  """topk's selection pass along `axis`: the largest key below the last pick's (or equal to it at a later index)."""
  n = x.shape[axis]
  ar = Tensor.arange(n, device="CPU", dtype="int32").reshape((1, n) if axis == 1 else (n, 1))
  last = x.max(axis, keepdim=True).contiguous() - 1
  where = (x < last) | (x.eq(last) & (ar > 3))
  return where.where(x, -(2 ** 31)).max(axis)

def _first(x: Tensor, axis: int) -> Tensor:
  """topk's first-index pass: the last index minus the max of reversed indices where the key is hit."""
  n = x.shape[axis]
  ar = Tensor.arange(n, device="CPU", dtype="int32").reshape((1, n) if axis == 1 else (n, 1))
  best = x.max(axis, keepdim=True).contiguous()
  return (n - 1) - x.eq(best).where(n - 1 - ar, -1).max(axis)

KERNELS = {"max": lambda x, a: x.max(a), "sum": lambda x, a: x.sum(a), "select": _select, "first": _first}

def variant(fn: str, dtype, n: int, axis: int, vectors: bool, data: np.ndarray):
  """The compiled kernels of `x.fn(axis)`, their buffers (input filled with `data`) and the last kernel's opts."""
  dev = Device["CPU"]
  x = Tensor.empty(n, n, dtype=np.dtype(dtype).name, device="CPU")
  items = create_schedule([KERNELS[fn](x, axis).uop])[0]
  saved, vectorize.has_data_gather = vectorize.has_data_gather, (vectorize.has_data_gather if vectors else vectorize.has_gather)
  try:
    runs, opts0 = [], None
    for item in items:
      opts = heuristic.heuristic_opts(Kernel(item.ast, dev.renderer))
      opts0 = opts   # the last kernel's (the fused reduction)
      spec = get_program(item.ast, dev.renderer, opts=opts)
      bufs = [b.ensure_allocated() for b in item.bufs]
      runs.append((dev.make_program(spec, dev.compiler.compile_cached(spec.src)), spec, [b.handle for b in bufs]))
  finally: vectorize.has_data_gather = saved
  next(b for it in items for b in it.bufs if b.size == n * n).copyin(data)
  return runs, items[-1].bufs[0], opts0

def call(runs) -> None:
  for prg, spec, h in runs: prg(*h, global_size=spec.global_size, local_size=spec.local_size, vals=(), wait=True)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--n", type=int, nargs="+", default=[1024, 4096])
  ap.add_argument("--reps", type=int, default=40)
  ap.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS))
  args = ap.parse_args()
  print(f"{Device['CPU'].describe()}; per-thread CPU time, p10 of {args.reps}")
  for n in args.n:
    for dtype in (np.float32, np.int32):
      data = (np.random.default_rng(0).standard_normal(n * n) * 100).astype(dtype)
      for fn in args.kernels:
        progs = {label: variant(fn, dtype, n, axis, vec, data)
                 for label, axis, vec in (("axis 1 before", 1, False), ("axis 1 now", 1, True), ("axis 0", 0, True))}
        outs = {}
        for label, (runs, out, _) in progs.items():
          call(runs); outs[label] = out.numpy().copy()
        a, b = outs["axis 1 before"], outs["axis 1 now"]
        assert np.array_equal(a, b) or (dtype == np.float32 and np.allclose(a, b, rtol=1e-4, atol=1e-5 * n * 100)), (fn, dtype, n)
        times: dict[str, list[float]] = {label: [] for label in progs}
        for _ in range(args.reps):
          for label, (runs, _, _) in progs.items():
            st = time.process_time(); call(runs); times[label].append(time.process_time() - st)
        cells = "  ".join(f"{label} {np.percentile(times[label], 10) * 1e3:6.3f} ms" for label in progs)
        print(f"{n}x{n} {np.dtype(dtype).name:7s} {fn}: {cells}")
        for label in ("axis 1 before", "axis 1 now"): print(f"    {label} opts: {progs[label][2]}")

if __name__ == "__main__":
  main()
