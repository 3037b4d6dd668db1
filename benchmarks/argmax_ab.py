"""A/B of argmax's two forms on the CPU: one pass over int64 keys (the default on loop-running targets) against the
max-then-first-index form GPUs keep, interleaved in one process, per-thread CPU time (CPU_THREADS=1 runs the kernels
on the timed thread, so other work on a shared machine moves the numbers less), numpy beside them.

  CPU_THREADS=1 python benchmarks/argmax_ab.py [--reps 30] [--n 4096]"""
import argparse, os, time
import numpy as np
from tinyplug import Tensor
from tinyplug.tensor_ops import reduce as reduce_ops, template

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--reps", type=int, default=30)
  ap.add_argument("--n", type=int, default=4096)
  args = ap.parse_args()
  if os.environ.get("CPU_THREADS") != "1": raise SystemExit("run with CPU_THREADS=1: the kernels must run on the timed thread")
  a = np.random.default_rng(0).random((args.n, args.n), dtype=np.float32)
  x = Tensor(a).realize()
  keyed = reduce_ops._keyed_argmax
  def form(use_keys: bool, axis: int):
    def run():
      reduce_ops._keyed_argmax = keyed if use_keys else (lambda device: False)
      template._templates.clear(); template._seen.clear()   # each call builds its own form's graph
      out = x.argmax(axis).realize()
      reduce_ops._keyed_argmax = keyed
      return out
    return run
  for axis in (1, 0):
    runs = {"keyed (one pass)": form(True, axis), "two passes": form(False, axis), "numpy": lambda: a.argmax(axis)}
    for name, f in runs.items():   # compile, and check the values
      out = f()
      assert np.array_equal(out if name == "numpy" else out.numpy(), a.argmax(axis)), name
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.reps):
      for name, f in runs.items():
        st = time.thread_time(); f(); times[name].append(time.thread_time() - st)
    for name, v in times.items():
      print(f"argmax({axis}) {args.n}x{args.n} {name:18s} p10 {np.percentile(v, 10) * 1e3:7.3f} ms  "
            f"median {np.median(v) * 1e3:7.3f} ms")
  print("load average", os.getloadavg())

if __name__ == "__main__": main()
