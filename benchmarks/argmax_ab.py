"""A/B of argmax's (or argmin's) forms on the CPU: the default (one pass over int64 keys on loop-running targets with
wide vectors; on AVX2 the two passes) against the max-then-first-index form GPUs keep. Each form runs in its own process (argmax is a graph template and its kernels
are cached: one form per process), the processes alternated --rounds times; each measures the per-thread CPU time of
--reps calls (CPU_THREADS=1 runs the kernels on the timed thread, so other work on a shared machine moves the numbers
less) and reports its p10. Printed: per shape and form, the best and the median of the rounds' p10, numpy beside.

  python benchmarks/argmax_ab.py [--rounds 3] [--reps 30] [--op argmin]"""
import argparse, json, os, subprocess, sys, time
import numpy as np

SHAPES = ((4096, 4096, 1), (4096, 4096, 0), (8192, 10, 1), (64, 1000, 1))

def worker(form: str, reps: int, op: str = "argmax") -> dict:
  from tinyplug import Tensor
  from tinyplug.tensor_ops import reduce as reduce_ops
  if form == "two passes": reduce_ops._keyed_argmax = lambda device: False
  out = {}
  for r, c, axis in SHAPES:
    a = np.random.default_rng(0).random((r, c), dtype=np.float32)
    x = Tensor(a).realize()
    run = (lambda: getattr(a, op)(axis)) if form == "numpy" else (lambda: getattr(x, op)(axis).realize())
    for _ in range(3): got = run()
    assert np.array_equal(got if form == "numpy" else got.numpy(), getattr(a, op)(axis)), (form, r, c, axis)
    times = []
    for _ in range(reps if r * c > 1 << 20 else 4 * reps):
      st = time.thread_time(); run(); times.append(time.thread_time() - st)
    out[f"{op}({axis}) {r}x{c}"] = float(np.percentile(times, 10))
  return out

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--reps", type=int, default=30)
  ap.add_argument("--op", choices=("argmax", "argmin"), default="argmax")
  ap.add_argument("--worker", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.worker:
    print(json.dumps(worker(args.worker, args.reps, args.op)))
    return
  env = dict(os.environ, CPU_THREADS="1")
  forms = ("default", "two passes", "numpy")
  res: dict[str, dict[str, list[float]]] = {f: {} for f in forms}
  for _ in range(args.rounds):
    for form in forms:
      out = subprocess.run([sys.executable, __file__, "--worker", form, "--reps", str(args.reps), "--op", args.op], env=env,
                           check=True, capture_output=True, text=True).stdout
      for k, v in json.loads(out.strip().splitlines()[-1]).items(): res[form].setdefault(k, []).append(v)
  for k in res[forms[0]]:
    for form in forms:
      v = res[form][k]
      print(f"{k:22s} {form:17s} p10 best {min(v) * 1e3:8.3f} ms  median of rounds {np.median(v) * 1e3:8.3f} ms")
  print("load average", os.getloadavg())

if __name__ == "__main__": main()
