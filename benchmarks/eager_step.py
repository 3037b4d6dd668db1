"""Python per eager step, A/B against another checkout (issue 20): per-thread CPU time of small steps that tinyplug's
Python dominates, each checkout in processes of its own, taking turns.

  CPU_THREADS=1 python benchmarks/eager_step.py --against /path/to/other/checkout --rounds 4

Rows: a cross-entropy training step on 512x1000 logits with a new label tensor each step (loss, backward(), the
gradient realized and read, as grad_sweep.py's row), `x.logsumexp(1).realize()` on 128x10, `t = (t + 1.0).realize()`,
a new `((x * k) + 1).exp()` of 1024 floats with a new k each time (cpu_bench.py's first result). `--only tiny,exp`
picks rows by words of their names.
Each process reports, per row, the best of 5 runs of the mean over many steps; the table shows the min and median
over rounds. Per-thread CPU time stays put while other work shares the machine; wall time does not."""
from __future__ import annotations
import argparse, json, os, statistics, subprocess, sys, time

def _worker() -> dict[str, float]:
  import numpy as np
  from tinyplug.tensor import Tensor
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 1000, 512).astype(np.int32)
  x = Tensor(rng.standard_normal((512, 1000)).astype(np.float32), requires_grad=True).realize()
  def cross_entropy() -> None:
    x.grad = None
    x.sparse_categorical_crossentropy(Tensor(labels)).backward()
    x.grad.realize().numpy()
  s = Tensor(rng.standard_normal((128, 10)).astype(np.float32)).realize()
  def loss_rows() -> None: s.logsumexp(1).realize()
  t = Tensor(np.zeros(1, np.float32)).realize()
  def tiny() -> None:
    nonlocal t
    t = (t + 1.0).realize()
  small = Tensor(rng.random(1024, dtype=np.float32)).realize()
  def first_result() -> None: ((small * (float(rng.random()) + 1.0)) + 1.0).exp().realize()   # cpu_bench's row
  only = os.environ.get("EAGER_STEP_ONLY", "")
  out = {}
  for name, fn, n in (("cross-entropy step 512x1000", cross_entropy, 150), ("logsumexp(1) 128x10 realize", loss_rows, 2000),
                      ("tiny op (t + 1.0).realize()", tiny, 3000), ("new graph ((x * k) + 1).exp(), a new k", first_result, 500)):
    if only and not any(w in name for w in only.split(",")): continue
    for _ in range(30): fn()
    runs = []
    for _ in range(5):
      st = time.thread_time_ns()
      for _ in range(n): fn()
      runs.append((time.thread_time_ns() - st) / n / 1e3)
    out[name] = min(runs)
  return out

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--against", help="another checkout's root (put first on PYTHONPATH for the 'other' column)")
  ap.add_argument("--rounds", type=int, default=3)
  ap.add_argument("--only", default="", help="rows whose name holds one of these comma-separated words (tiny,128x10)")
  ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.worker:
    print(json.dumps(_worker()))
    return
  if os.environ.get("CPU_THREADS") != "1": sys.exit("per-thread CPU time: run it with CPU_THREADS=1")
  sides = {"this": None, **({"other": os.path.abspath(args.against)} if args.against else {})}
  got: dict[str, list[dict]] = {k: [] for k in sides}
  for _ in range(args.rounds):
    for side, path in sides.items():
      env = dict(os.environ, EAGER_STEP_ONLY=args.only,
                 **({"PYTHONPATH": f"{path}:{path}/plugins/cpu_llvm/src"} if path else {}))
      # run outside the checkout, so the other one's package is the one imported
      out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker"], env=env, cwd="/", check=True,
                           capture_output=True, text=True).stdout
      got[side].append(json.loads(out.strip().splitlines()[-1]))
  print(f"per-thread CPU time, us, min / median over {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}\n")
  print("| step | " + " | ".join(sides) + (" | other / this |" if len(sides) > 1 else " |"))
  print("|---|" + "---:|" * (len(sides) + (len(sides) > 1)))
  for row in got["this"][0]:
    cells = {k: [r[row] for r in v] for k, v in got.items()}
    line = " | ".join(f"{min(c):.1f} / {statistics.median(c):.1f}" for c in cells.values())
    ratio = f" | {min(cells['other']) / min(cells['this']):.2f}x" if len(sides) > 1 else ""
    print(f"| {row} | {line}{ratio} |")

if __name__ == "__main__": main()
