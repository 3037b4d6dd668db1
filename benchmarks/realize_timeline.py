"""Where one realize's time goes: the Python before the first kernel, each kernel as called, the gaps
between them, the Python after the last one; numpy's `v @ W` timed in the same process after each realize.

  CPU_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/realize_timeline.py --reps 200            # v @ W 4096x4096
  python benchmarks/realize_timeline.py --expr "W.sum(0)"                                            # both cores

Each realize follows the previous one's 64 MB read, as in cpu_bench's loop, so the Python parts run on cold caches.
Prints p10, median and min per segment (microseconds) and the load average."""
import argparse, time
import numpy as np

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--expr", default="v @ W", help="a Python expression over v (4096,) and W (4096, 4096)")
  ap.add_argument("--reps", type=int, default=100)
  args = ap.parse_args()
  from tinyplug.tensor import Tensor
  import tinyplug_cpu_llvm.runtime as rt
  rng = np.random.default_rng(1)
  vn, wn = rng.random(4096, dtype=np.float32), rng.random((4096, 4096), dtype=np.float32)
  v, W = Tensor(vn).realize(), Tensor(wn).realize()
  events: list[tuple[str, float, float]] = []
  def timed(name: str, fn):
    def run(*a, **k):
      st = time.perf_counter()
      out = fn(*a, **k)
      events.append((name, st, time.perf_counter()))
      return out
    return run
  call, one = rt.CPUProgram.__call__, rt.CPUProgram.launcher
  rt.CPUProgram.__call__ = lambda self, *a, **k: timed(self.name, call)(self, *a, **k)
  def launcher(self, *a, **k):
    fn = one(self, *a, **k)
    return None if fn is None else timed(self.name, fn)
  rt.CPUProgram.launcher = launcher
  run = eval(f"lambda v, W: ({args.expr}).realize()")
  for _ in range(5): run(v, W)
  rows, names, npt = [], None, []
  for _ in range(args.reps):
    events.clear()
    st = time.perf_counter(); run(v, W); end = time.perf_counter()
    seg = [events[0][1] - st]
    for j, (_, a, b) in enumerate(events):
      seg.append(b - a)
      if j + 1 < len(events): seg.append(events[j + 1][1] - b)
    seg += [end - events[-1][2], end - st]
    names = ["Python before"] + sum([[n, "gap"] for n, _, _ in events], [])[:-1] + ["Python after", "total"]
    rows.append(seg)
    st = time.perf_counter(); vn @ wn; npt.append(time.perf_counter() - st)
  t = np.array(rows) * 1e6
  print(f"{args.expr}: {args.reps} realizes, load {' '.join(open('/proc/loadavg').read().split()[:3])}")
  for k, n in enumerate(names):
    col = t[:, k]
    print(f"  {n:28s} p10 {np.percentile(col, 10):8.1f}  median {np.median(col):8.1f}  min {col.min():8.1f} us")
  n = np.array(npt) * 1e6
  print(f"  {'numpy v @ W':28s} p10 {np.percentile(n, 10):8.1f}  median {np.median(n):8.1f}  min {n.min():8.1f} us")

if __name__ == "__main__": main()
