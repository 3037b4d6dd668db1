#!/usr/bin/env python3
"""Training throughput of the MNIST example's model in tinyplug, tinygrad and PyTorch, in one run.

    python benchmarks/train_bench.py [--steps 40] [--warmup 3] [--chain 64] [--json results.json] [--kernels 5]

Model: Conv2d(1,16,3) -> relu -> maxpool2 -> Conv2d(16,32,3) -> relu -> maxpool2 -> Linear(800,10), batch 64 of
28x28, sparse categorical cross-entropy, Adam. tinyplug and tinygrad run a TinyJit-ed step; PyTorch runs eagerly
with 2 threads. Each framework runs in its own subprocess (tinygrad with DEV=CPU, which needs clang). Every step
feeds a fresh batch from numpy and reads the loss back, as a training loop does.

--kernels N: afterwards N more tinyplug steps run with a profile listener (each kernel waited for), and the
best time of every kernel of the step is listed, largest first: where a step's time goes.

Dispatch cost: a jitted function of `--chain` tiny dependent kernels ((x * 1.0001 + 1).contiguous() on 16 floats),
so the replay time is almost all per-kernel launch overhead; reported as microseconds per kernel.
"""
from __future__ import annotations
import argparse, json, os, subprocess, sys, time

BS, STEPS_DEFAULT = 64, 40

def _batches(n: int):
  import numpy as np
  rng = np.random.default_rng(0)
  return [(rng.integers(0, 256, (BS, 1, 28, 28)).astype(np.float32) / 255.0, rng.integers(0, 10, BS).astype(np.int32))
          for _ in range(n)]

def _timed_steps(step, batches, warmup: int) -> dict:
  for x, y in batches[:warmup]: step(x, y)
  st = time.perf_counter()
  for x, y in batches[warmup:]: step(x, y)
  dt = time.perf_counter() - st
  n = len(batches) - warmup
  return {"steps": n, "seconds": dt, "steps_per_s": n / dt, "ms_per_step": dt / n * 1e3}

def _timed_chain(fn, make_input, calls: int = 20) -> float:
  for _ in range(3): fn(make_input())
  inputs = [make_input() for _ in range(calls)]
  st = time.perf_counter()
  for x in inputs: fn(x)
  return (time.perf_counter() - st) / calls

# ---------------- workers (each runs in its own process) ----------------

def _kernel_times(step, batches) -> list[tuple[str, float]]:
  """(kernel name, best seconds) for each launch of a jitted step, over the given steps, from profile events."""
  from tinyplug import events
  runs: list[list[tuple[str, float]]] = []
  def listen(ev):
    if ev.kind == "run": runs[-1].append((ev.name, ev.info.get("device_time_s") or (ev.end_ns - ev.start_ns) * 1e-9))
  events.subscribe("profile", listen, owner="train_bench")
  try:
    for x, y in batches:
      runs.append([])
      step(x, y)
  finally: events.unsubscribe("profile", listen)
  full = [r for r in runs if len(r) == len(runs[-1])]
  return [(name, min(r[i][1] for r in full)) for i, (name, _) in enumerate(full[-1])]

def _model_and_optimizer(nn, get_parameters, Adam):
  """The benchmark's CNN and its Adam, from either framework's modules (tinyplug and tinygrad share the API)."""
  class Model:
    def __init__(self): self.c1, self.c2, self.l1 = nn.Conv2d(1, 16, 3), nn.Conv2d(16, 32, 3), nn.Linear(800, 10)
    def __call__(self, x):
      x = self.c2(self.c1(x).relu().max_pool2d(2)).relu().max_pool2d(2)
      return self.l1(x.flatten(1))
  model = Model()
  return model, Adam(get_parameters(model), lr=1e-3)

def worker_tinyplug(steps: int, warmup: int, chain: int, kernels: int = 0) -> dict:
  from tinyplug import Tensor, TinyJit, Device, nn
  from tinyplug.nn.optim import Adam
  from tinyplug.nn.state import get_parameters
  model, opt = _model_and_optimizer(nn, get_parameters, Adam)
  @TinyJit
  @Tensor.train()
  def jstep(x, y):
    opt.zero_grad()
    loss = model(x).sparse_categorical_crossentropy(y).backward()
    return loss.realize(*opt.schedule_step())
  def step(x, y): return jstep(Tensor(x), Tensor(y)).item()
  out = _timed_steps(step, _batches(steps + warmup), warmup)
  out["kernels_per_step"] = len(jstep.captured)
  if kernels: out["kernel_times"] = _kernel_times(step, _batches(kernels))
  @TinyJit
  def chain_fn(x):
    for _ in range(chain): x = (x * 1.0001 + 1).contiguous()
    return x.realize()
  import numpy as np
  per_call = _timed_chain(lambda x: chain_fn(x).realize(), lambda: Tensor(np.ones(16, np.float32)).realize())
  out["chain_kernels"] = len(chain_fn.captured)
  out["us_per_kernel"] = per_call / len(chain_fn.captured) * 1e6
  out["device"] = Device.DEFAULT
  return out

def _tinygrad_launches(jit) -> int | None:
  """Kernel calls in a tinygrad 0.14 capture (CALL nodes of its linear program); None if that layout changed."""
  try:
    from tinygrad.uop.ops import Ops
    return sum(1 for u in jit.captured.linear.toposort() if u.op is Ops.CALL)
  except Exception: return None

def worker_tinygrad(steps: int, warmup: int, chain: int, kernels: int = 0) -> dict:
  from tinygrad import Tensor, TinyJit, Device, nn, Context
  from tinygrad.nn.optim import Adam
  from tinygrad.nn.state import get_parameters
  model, opt = _model_and_optimizer(nn, get_parameters, Adam)
  @TinyJit
  def jstep(x, y):
    with Context(TRAINING=1):   # tinygrad 0.14 spells Tensor.train() as the TRAINING context variable
      opt.zero_grad()
      loss = model(x).sparse_categorical_crossentropy(y).backward()
      return loss.realize(*opt.schedule_step())
  out = _timed_steps(lambda x, y: jstep(Tensor(x), Tensor(y)).item(), _batches(steps + warmup), warmup)
  out["kernels_per_step"] = _tinygrad_launches(jstep)
  @TinyJit
  def chain_fn(x):
    for _ in range(chain): x = (x * 1.0001 + 1).contiguous()
    return x.realize()
  import numpy as np
  per_call = _timed_chain(lambda x: chain_fn(x).realize(), lambda: Tensor(np.ones(16, np.float32)).realize())
  out["chain_kernels"] = chain
  out["us_per_kernel"] = per_call / chain * 1e6
  out["chain_launch_items"] = _tinygrad_launches(chain_fn)
  out["device"] = Device.DEFAULT
  return out

def worker_torch(steps: int, warmup: int, chain: int, kernels: int = 0) -> dict:
  import torch
  torch.set_num_threads(2)
  model = torch.nn.Sequential(torch.nn.Conv2d(1, 16, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                              torch.nn.Conv2d(16, 32, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                              torch.nn.Linear(800, 10))
  opt = torch.optim.Adam(model.parameters(), lr=1e-3)
  def step(x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y).long())
    loss.backward()
    opt.step()
    return loss.item()
  out = _timed_steps(step, _batches(steps + warmup), warmup)
  out["device"] = f"cpu, {torch.get_num_threads()} threads"
  return out

WORKERS = {"tinyplug": worker_tinyplug, "tinygrad": worker_tinygrad, "torch": worker_torch}

# ---------------- driver ----------------

def run_worker(name: str, args) -> dict:
  env = dict(os.environ)
  if name == "tinygrad": env["DEV"] = "CPU"
  cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--steps", str(args.steps), "--warmup",
         str(args.warmup), "--chain", str(args.chain), "--kernels", str(args.kernels)]
  try: r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
  except subprocess.TimeoutExpired: return {"error": f"timed out after {args.timeout}s"}
  lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
  if r.returncode != 0 or not lines:
    return {"error": (r.stderr.strip().splitlines() or ["no output"])[-1][:200]}
  return json.loads(lines[-1][len("RESULT "):])

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--steps", type=int, default=STEPS_DEFAULT)
  ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (jit capture and compilation)")
  ap.add_argument("--chain", type=int, default=64, help="kernels in the dispatch-cost chain")
  ap.add_argument("--only", default="tinyplug,tinygrad,torch")
  ap.add_argument("--timeout", type=int, default=900)
  ap.add_argument("--json", help="also write the results here")
  ap.add_argument("--kernels", type=int, default=0, metavar="N",
                  help="then N profiled tinyplug steps: every kernel's best time, largest first")
  ap.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.worker:
    print("RESULT " + json.dumps(WORKERS[args.worker](args.steps, args.warmup, args.chain, args.kernels)), flush=True)
    return
  results = {}
  for name in args.only.split(","):
    print(f"running {name} ...", file=sys.stderr, flush=True)
    results[name] = run_worker(name, args)
  base = results.get("tinyplug", {}).get("steps_per_s")
  print(f"\ntraining step: batch {BS}, 28x28, conv3x3(16) conv3x3(32) linear, Adam; {args.steps} timed steps\n")
  print("| framework | device | steps/s | ms/step | kernels/step | vs tinyplug |")
  print("|---|---|---:|---:|---:|---:|")
  for name, r in results.items():
    if "error" in r: print(f"| {name} | - | error: {r['error']} | | | |"); continue
    ratio = f"{r['steps_per_s'] / base:.2f}x" if base else "-"
    print(f"| {name} | {r['device']} | {r['steps_per_s']:.2f} | {r['ms_per_step']:.1f} | "
          f"{r.get('kernels_per_step') or '-'} | {ratio} |")
  print(f"\ndispatch cost inside a jitted function ({args.chain} dependent tiny kernels):\n")
  print("| framework | µs per chained kernel | launches per call |")
  print("|---|---:|---:|")
  for name in ("tinyplug", "tinygrad"):
    r = results.get(name, {})
    if "us_per_kernel" in r:
      print(f"| {name} | {r['us_per_kernel']:.1f} | {r.get('chain_launch_items', r.get('chain_kernels'))} |")
  if times := results.get("tinyplug", {}).get("kernel_times"):
    total = sum(t for _, t in times)
    print(f"\ntinyplug kernels of one step, best of {args.kernels} profiled steps (sum {total * 1e3:.2f} ms):\n")
    print("| kernel | µs | share |")
    print("|---|---:|---:|")
    for name, t in sorted(times, key=lambda nt: -nt[1])[:20]: print(f"| {name} | {t * 1e6:.0f} | {t / total:.0%} |")
  if args.json:
    with open(args.json, "w") as f: json.dump(results, f, indent=2)

if __name__ == "__main__":
  main()
