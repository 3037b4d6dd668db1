#!/usr/bin/env python3
"""Time to the first training step, cold and warm disk cache, in tinyplug, tinygrad and PyTorch, in one run.

    python benchmarks/first_step.py [--models mlp,cnn] [--only tinyplug,tinygrad,torch] [--rounds 1] [--steps 6]
    git worktree add /tmp/before <commit>; python benchmarks/first_step.py --only tinyplug --before /tmp/before --rounds 5
(--before puts that checkout's core and its plugins/*/src first on PYTHONPATH)

Models (the same in each framework):
  mlp  Linear(32,64) relu Linear(64,64) relu Linear(64,10), batch 128, cross-entropy, Adam
  cnn  examples/mnist.py's model: uint8 28x28 input normalised, Conv2d(1,16,3) relu maxpool2 Conv2d(16,32,3) relu
       maxpool2 Linear(800,10), batch 64, cross-entropy, Adam
  strided  issue 20's CNN: the same input, Conv2d(1,32,3) relu Conv2d(32,64,3,stride=2) relu Linear(9216,10), batch 64
  gpt  a small transformer language model: Embedding(1000,256) + learned positions, 2 pre-norm blocks (LayerNorm,
       Linear(256,768) to q/k/v, 4-head causal scaled_dot_product_attention, Linear(256,256); LayerNorm,
       Linear(256,1024) gelu (tanh) Linear(1024,256)), LayerNorm, Linear(256,1000); batch 8 x 128 tokens,
       cross-entropy over every token, Adam
tinyplug and tinygrad run a TinyJit-ed `zero_grad; loss.backward(); opt.step()` (tinygrad with DEV=CPU); PyTorch
runs eagerly with 2 threads. Every run is a fresh process (import and model creation are timed apart from the
steps; setup is creating the model and the optimiser, as a user's script does: no manual_seed, no explicit realize).
"cold": the run gets an empty cache folder (XDG_CACHE_HOME, which both tinyplug and tinygrad use);
"warm": a second process with the same folder. Step 1 runs the Python and compiles; TinyJit captures on step 2 and
replays from step 3, so "first steps" (steps 1+2) is what a user waits before training runs at full speed.
tinyplug's rows also say how many kernels went through codegen and how many LLVM compilations ran (a warm run
should compile nothing).
"""
from __future__ import annotations
import argparse, glob, json, os, shutil, subprocess, statistics, sys, tempfile, time

T0 = time.perf_counter()

def _batches(model: str, n: int):
  import numpy as np
  rng = np.random.default_rng(0)
  if model == "mlp": return [(rng.standard_normal((128, 32), dtype=np.float32), rng.integers(0, 10, 128).astype(np.int32))
                             for _ in range(n)]
  if model == "gpt": return [(rng.integers(0, GPT_VOCAB, (8, GPT_CONTEXT)).astype(np.int32),
                              rng.integers(0, GPT_VOCAB, 8 * GPT_CONTEXT).astype(np.int32)) for _ in range(n)]
  return [(rng.integers(0, 256, (64, 1, 28, 28)).astype(np.uint8), rng.integers(0, 10, 64).astype(np.int32))
          for _ in range(n)]

GPT_VOCAB, GPT_CONTEXT, GPT_WIDTH, GPT_HEADS, GPT_LAYERS = 1000, 128, 256, 4, 2

def _make_model(model: str, nn):
  """The benchmark's model from tinyplug's or tinygrad's `nn` (they share the API)."""
  if model == "gpt": return _make_gpt(nn)
  if model == "mlp":
    class MLP:
      def __init__(self): self.l1, self.l2, self.l3 = nn.Linear(32, 64), nn.Linear(64, 64), nn.Linear(64, 10)
      def __call__(self, x): return self.l3(self.l2(self.l1(x).relu()).relu())
    return MLP()
  if model == "strided":
    class Strided:   # a stride-2 convolution and a 9216-wide linear layer (issue 20)
      def __init__(self): self.c1, self.c2, self.l1 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3, stride=2), nn.Linear(9216, 10)
      def __call__(self, x):
        x = (x.float() / 255.0 - 0.1307) / 0.3081
        return self.l1(self.c2(self.c1(x).relu()).relu().flatten(1))
    return Strided()
  class CNN:   # examples/mnist.py's Model (batchnorm off)
    def __init__(self): self.c1, self.c2, self.l1 = nn.Conv2d(1, 16, 3), nn.Conv2d(16, 32, 3), nn.Linear(800, 10)
    def __call__(self, x):
      x = (x.float() / 255.0 - 0.1307) / 0.3081
      x = self.c2(self.c1(x).relu().max_pool2d(2)).relu().max_pool2d(2)
      return self.l1(x.flatten(1))
  return CNN()

def _make_gpt(nn):
  from importlib import import_module
  Tensor = import_module(nn.__name__.split(".")[0]).Tensor
  d, heads = GPT_WIDTH, GPT_HEADS
  class Block:
    def __init__(self):
      self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
      self.qkv, self.proj, self.fc1, self.fc2 = nn.Linear(d, 3 * d), nn.Linear(d, d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
    def __call__(self, x):
      b, t, _ = x.shape
      q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
      x = x + self.proj(q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
      return x + self.fc2(self.fc1(self.ln2(x)).gelu())
  class GPT:
    def __init__(self):
      self.tok, self.pos = nn.Embedding(GPT_VOCAB, d), Tensor.randn(GPT_CONTEXT, d) * 0.02
      self.blocks = [Block() for _ in range(GPT_LAYERS)]
      self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, GPT_VOCAB)
    def __call__(self, idx):
      x = self.tok(idx) + self.pos
      for blk in self.blocks: x = blk(x)
      return self.head(self.ln(x)).reshape(-1, GPT_VOCAB)
  return GPT()

def _torch_gpt(torch):
  d, heads, F = GPT_WIDTH, GPT_HEADS, torch.nn.functional
  class Block(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
      self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
      self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
    def forward(self, x):
      b, t, _ = x.shape
      q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
      x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
      return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))
  class GPT(torch.nn.Module):
    def __init__(self):
      super().__init__()
      self.tok, self.pos = torch.nn.Embedding(GPT_VOCAB, d), torch.nn.Parameter(torch.randn(GPT_CONTEXT, d) * 0.02)
      self.blocks = torch.nn.ModuleList([Block() for _ in range(GPT_LAYERS)])
      self.ln, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, GPT_VOCAB)
    def forward(self, idx):
      x = self.tok(idx) + self.pos
      for blk in self.blocks: x = blk(x)
      return self.head(self.ln(x)).reshape(-1, GPT_VOCAB)
  return GPT()

CPU_STEPS: list[float] = []   # process CPU time (all threads) of each step of the last _time_steps

def tinyplug_step(m, opt):
  """tinyplug's jitted training step of model `m`: cross-entropy, backward, one optimiser step (also step_kernels.py's
  and codegen_cost.py's)."""
  from tinyplug import Tensor, TinyJit
  @TinyJit
  @Tensor.train()
  def step(x, y):
    opt.zero_grad()
    loss = m(x).sparse_categorical_crossentropy(y).backward()
    return loss.realize(*opt.schedule_step())
  return step

def _time_steps(step, batches) -> list[float]:
  times = []
  CPU_STEPS.clear()
  for x, y in batches:
    st, cst = time.perf_counter(), time.process_time()
    step(x, y)
    times.append(time.perf_counter() - st)
    CPU_STEPS.append(time.process_time() - cst)
  return times

# ---------------- workers (each runs in its own process) ----------------

def worker_tinyplug(model: str, steps: int) -> dict:
  from tinyplug import Tensor, Device, nn
  from tinyplug.nn.optim import Adam
  from tinyplug.nn.state import get_parameters
  from tinyplug.engine import realize
  t_import = time.perf_counter() - T0
  if (profile_to := os.environ.get("FIRST_STEP_PROFILE")):   # cProfile of setup and every step (--profile)
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
  m = _make_model(model, nn)
  opt = Adam(get_parameters(m), lr=1e-3)
  t_setup = time.perf_counter() - T0 - t_import
  jstep = tinyplug_step(m, opt)
  compiler = Device[Device.DEFAULT].compiler
  before = (getattr(type(compiler), "compiles", 0), len(realize._runners))
  times = _time_steps(lambda x, y: jstep(Tensor(x), Tensor(y)).item(), _batches(model, steps))
  if profile_to:
    prof.disable()
    prof.dump_stats(profile_to)
  return {"import_s": t_import, "setup_s": t_setup, "steps": times, "device": Device.DEFAULT, "steps_cpu": list(CPU_STEPS),
          "compiles": getattr(type(compiler), "compiles", 0) - before[0], "codegen": len(realize._runners) - before[1]}

def worker_tinygrad(model: str, steps: int) -> dict:
  from tinygrad import Tensor, TinyJit, Device, nn, Context
  from tinygrad.nn.optim import Adam
  from tinygrad.nn.state import get_parameters
  t_import = time.perf_counter() - T0
  m = _make_model(model, nn)
  opt = Adam(get_parameters(m), lr=1e-3)
  t_setup = time.perf_counter() - T0 - t_import
  @TinyJit
  def jstep(x, y):
    with Context(TRAINING=1):   # tinygrad 0.14 spells Tensor.train() as the TRAINING context variable
      opt.zero_grad()
      loss = m(x).sparse_categorical_crossentropy(y).backward()
      return loss.realize(*opt.schedule_step())
  times = _time_steps(lambda x, y: jstep(Tensor(x), Tensor(y)).item(), _batches(model, steps))
  return {"import_s": t_import, "setup_s": t_setup, "steps": times, "device": Device.DEFAULT, "steps_cpu": list(CPU_STEPS)}

def worker_torch(model: str, steps: int) -> dict:
  import torch
  t_import = time.perf_counter() - T0
  torch.set_num_threads(2)
  torch.manual_seed(0)
  if model == "mlp":
    m = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                            torch.nn.Linear(64, 10))
    prep = lambda x: torch.from_numpy(x)
  elif model == "gpt":
    m, prep = _torch_gpt(torch), lambda x: torch.from_numpy(x).long()
  elif model == "strided":
    m = torch.nn.Sequential(torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3, stride=2),
                            torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(9216, 10))
    prep = lambda x: (torch.from_numpy(x).float() / 255.0 - 0.1307) / 0.3081
  else:
    m = torch.nn.Sequential(torch.nn.Conv2d(1, 16, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                            torch.nn.Conv2d(16, 32, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                            torch.nn.Linear(800, 10))
    prep = lambda x: (torch.from_numpy(x).float() / 255.0 - 0.1307) / 0.3081
  opt = torch.optim.Adam(m.parameters(), lr=1e-3)
  t_setup = time.perf_counter() - T0 - t_import
  def step(x, y):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(m(prep(x)), torch.from_numpy(y).long())
    loss.backward()
    opt.step()
    return loss.item()
  times = _time_steps(step, _batches(model, steps))
  return {"import_s": t_import, "setup_s": t_setup, "steps": times, "steps_cpu": list(CPU_STEPS),
          "device": f"cpu, {torch.get_num_threads()} threads"}

WORKERS = {"tinyplug": worker_tinyplug, "tinygrad": worker_tinygrad, "torch": worker_torch}

# ---------------- driver ----------------

def _clang_path(tmp: str) -> str:
  """PATH with a `clang` on it: tinygrad's CPU device calls `clang`; Debian installs it as clang-19."""
  path = os.environ.get("PATH", "")
  if shutil.which("clang") or not (versioned := shutil.which("clang-19")): return path
  os.makedirs(bindir := os.path.join(tmp, "bin"), exist_ok=True)
  if not os.path.exists(link := os.path.join(bindir, "clang")): os.symlink(versioned, link)
  return bindir + os.pathsep + path

def run_worker(name: str, model: str, cache: str, args, state: str = "") -> dict:
  env = dict(os.environ, XDG_CACHE_HOME=cache)
  if args.profile and name.startswith("tinyplug") and state == "warm":
    env["FIRST_STEP_PROFILE"] = f"{args.profile}-{'before' if name == 'tinyplug-before' else 'now'}-{model}.prof"
  if name == "tinygrad": env.update(DEV="CPU", PATH=_clang_path(tempfile.gettempdir()))
  if name == "tinyplug-before":   # the core package and the plugins of another checkout shadow the installed ones
    plugin_srcs = sorted(glob.glob(os.path.join(args.before, "plugins", "*", "src")))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (args.before, *plugin_srcs, env.get("PYTHONPATH")) if p)
    name = "tinyplug"
  cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--models", model, "--steps", str(args.steps)]
  try: r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
  except subprocess.TimeoutExpired: return {"error": f"timed out after {args.timeout}s"}
  lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
  if r.returncode != 0 or not lines: return {"error": (r.stderr.strip().splitlines() or ["no output"])[-1][:200]}
  return json.loads(lines[-1][len("RESULT "):])

def _better(a: dict | None, b: dict) -> dict:
  if a is None or "error" in a: return b
  if "error" in b: return a
  return b if sum(b["steps"][:2]) < sum(a["steps"][:2]) else a

def _fmt(s: float) -> str: return f"{s:.2f} s" if s >= 0.1 else f"{s * 1e3:.1f} ms"

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--models", default="mlp,cnn")
  ap.add_argument("--only", default="tinyplug,tinygrad,torch")
  ap.add_argument("--steps", type=int, default=6, help="steps per run (the last ones show the replay speed)")
  ap.add_argument("--rounds", type=int, default=1, help="repeat everything, taking turns; keep each row's best "
                  "(and, with more than one, show the median and range of every round's first steps)")
  ap.add_argument("--timeout", type=int, default=900)
  ap.add_argument("--json", help="also write the results here")
  ap.add_argument("--before", metavar="CHECKOUT", help="also run the tinyplug core of another checkout (a git "
                  "worktree of an older commit) as 'tinyplug-before', taking turns with the installed one")
  ap.add_argument("--profile", metavar="PREFIX", help="cProfile tinyplug's warm runs (setup and every step; --steps 2 "
                  "for the first two only) into PREFIX-now-<model>.prof (PREFIX-before-... for --before); read them "
                  "with `python -m pstats`. The last round's profile is kept")
  ap.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.worker:
    print("RESULT " + json.dumps(WORKERS[args.worker](args.models, args.steps)), flush=True)
    return
  names = args.only.split(",") + (["tinyplug-before"] if args.before else [])
  results: dict[tuple, dict] = {}
  firsts: dict[tuple, list[float]] = {}   # every run's first steps (1+2), for the median and the spread
  firsts_cpu: dict[tuple, list[float]] = {}   # the same in process CPU time (less swayed by other load than wall time)
  for _ in range(args.rounds):
    for model in args.models.split(","):
      for name in names:
        with tempfile.TemporaryDirectory(prefix="first_step_") as cache:
          for state in ("cold", "warm"):
            if name == "torch" and state == "warm": continue   # PyTorch has no compile cache
            print(f"running {name} {model} {state} ...", file=sys.stderr, flush=True)
            key = (model, name, state)
            results[key] = _better(results.get(key), r := run_worker(name, model, cache, args, state))
            if "error" not in r: firsts.setdefault(key, []).append(sum(r["steps"][:2]))
            if "steps_cpu" in r: firsts_cpu.setdefault(key, []).append(sum(r["steps_cpu"][:2]))
  cpu = _cpu_name()
  print(f"\ntime to first training step ({cpu}; best of {args.rounds} round(s)); replay = median of steps 3+\n")
  spread = args.rounds > 1
  print("| model | framework | cache | import | setup | step 1 | step 2 | first steps (1+2) | replay | "
        "vs tinyplug (1+2) | codegen / LLVM compiles |" + (" first steps, median (min-max) of all rounds | CPU time "
        "of steps 1+2, median (min-max) |" if spread else ""))
  print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if spread else ""))
  for (model, name, state), r in results.items():
    if "error" in r:
      print(f"| {model} | {name} | {state} | error: {r['error']} | | | | | | | |")
      continue
    st = r["steps"]
    base = results.get((model, "tinyplug", state), {}).get("steps")
    ratio = f"{sum(st[:2]) / sum(base[:2]):.2f}x" if base else "-"
    replay = sorted(st[2:])[len(st[2:]) // 2] if len(st) > 2 else float("nan")
    counts = f"{r['codegen']} / {r['compiles']}" if "compiles" in r else ""
    med = ""
    if spread:
      for xs in (firsts.get((model, name, state), []), firsts_cpu.get((model, name, state), [])):
        med += f" {_fmt(statistics.median(xs))} ({_fmt(min(xs))}-{_fmt(max(xs))}) |" if xs else " |"
    print(f"| {model} | {name} | {state} | {_fmt(r['import_s'])} | {_fmt(r['setup_s'])} | {_fmt(st[0])} | "
          f"{_fmt(st[1])} | {_fmt(sum(st[:2]))} | {_fmt(replay)} | {ratio} | {counts} |" + med)
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"cpu": cpu, "results": [[*k, v] for k, v in results.items()],
                 "first_steps": [[*k, v] for k, v in firsts.items()],
                 "first_steps_cpu": [[*k, v] for k, v in firsts_cpu.items()]}, f)

def _cpu_name() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "unknown CPU")
  except OSError: name = "unknown CPU"
  return f"{name}, {os.cpu_count()} cores"

if __name__ == "__main__": main()
