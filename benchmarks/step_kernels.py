"""Per-kernel times of one of first_step.py's training steps (TinyJit-ed), best of several rounds.

    python benchmarks/step_kernels.py --model strided --rounds 9 --top 12
    CPU_THREADS=1 python benchmarks/step_kernels.py --model strided --cpu-time   # one thread, process CPU time

Each round replays the whole step once (timed), then runs every captured kernel on its own, waiting for it; a
kernel's time is its best over the rounds, and the total is the sum of those bests. `--cpu-time` reads process CPU
time instead of the wall clock: on a machine shared with other work it moves less with the load (with CPU_THREADS=1
the kernel runs on one thread). Run two checkouts' copies in turns (PYTHONPATH=<checkout>:<checkout>/plugins/cpu_llvm/src)
to compare them."""
from __future__ import annotations
import argparse, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import first_step

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--model", default="strided", choices=("mlp", "cnn", "strided", "gpt"))
  ap.add_argument("--rounds", type=int, default=7)
  ap.add_argument("--top", type=int, default=12, help="how many of the slowest kernels to list")
  ap.add_argument("--cpu-time", action="store_true", help="process CPU time instead of the wall clock")
  args = ap.parse_args()
  from tinyplug import Tensor, nn
  from tinyplug.nn.optim import Adam
  from tinyplug.nn.state import get_parameters
  m = first_step._make_model(args.model, nn)
  opt = Adam(get_parameters(m), lr=1e-3)
  step = first_step.tinyplug_step(m, opt)
  batches = first_step._batches(args.model, 4)
  for x, y in batches[:3]: step(Tensor(x), Tensor(y)).item()   # the third call replays
  launches = step.captured.launches
  clock = time.process_time if args.cpu_time else time.perf_counter
  best: dict[int, float] = {}
  whole: list[float] = []
  for _ in range(args.rounds):
    st = time.perf_counter()
    step(Tensor(batches[3][0]), Tensor(batches[3][1])).item()
    whole.append(time.perf_counter() - st)
    for i, launch in enumerate(launches):
      if launch.is_copy: continue
      st = clock()
      launch.prg(*launch.handles, global_size=launch.global_size, local_size=launch.local_size, vals=launch.vals, wait=True)
      best[i] = min(best.get(i, float("inf")), clock() - st)
  for i, t in sorted(best.items(), key=lambda kv: -kv[1])[:args.top]: print(f"{t * 1e3:8.3f} ms  {launches[i].name}")
  whole.sort()
  print(f"{len(best)} kernels, sum of their bests {sum(best.values()) * 1e3:.2f} ms "
        f"({'process CPU time' if args.cpu_time else 'wall clock'}); whole replay (wall clock) best {whole[0] * 1e3:.2f} ms, "
        f"median {whole[len(whole) // 2] * 1e3:.2f} ms")

if __name__ == "__main__": main()
