"""tinyplug on CUDA beside PyTorch (CUDA) and tinygrad's CUDA backend, on the same GPU, in one run.

  python benchmarks/cuda_bench.py                 # every workload, three frameworks, one table
  python benchmarks/cuda_bench.py --quick         # small sizes, one repetition (a smoke test)
  python benchmarks/cuda_bench.py --only matmul   # workloads whose name contains a word (--only mnist,dispatch: either)
  python benchmarks/cuda_bench.py --json out.json # also write the numbers

Each framework runs in its own subprocess. Times are wall-clock seconds from launching the work to the GPU having
finished it (synchronized), best of several runs after a warm-up (compile excluded), except "first result" (a graph
never seen before: scheduled, compiled, run, copied back) and "dispatch" (one tiny op, launch to finish). The jitted
training step runs twice for tinyplug: as is (its replays go through CUDA graphs) and with JIT_GRAPH=0 (one launch per
kernel, the row `--only mnist` compares). Memory-bound
rows also give GB/s (bytes read and written once), beside a device-to-device copy measured by PyTorch in the same run.
A framework that cannot run a row (no tinygrad wheel, no driver) shows `error` and the reason below the table."""
from __future__ import annotations
import argparse, json, subprocess, sys
import numpy as np
from device_workloads import best, common_row, report_rows, run_child, selected

def workloads(quick: bool) -> list[tuple[str, dict]]:
  mm = 1024 if quick else 4096
  n = 1 << 22 if quick else 1 << 28
  sm = 1024 if quick else 8192
  return [
    (f"matmul fp32 {mm}", {"kind": "matmul", "n": mm, "half": False}),
    (f"matmul fp16 {mm}", {"kind": "matmul", "n": mm, "half": True}),
    (f"fused ((a*b)+c).relu()*0.5, {n >> 20}M floats", {"kind": "chain", "n": n, "bytes": 16 * n}),
    (f"sum of {n >> 20}M floats", {"kind": "sum", "n": n, "bytes": 4 * n}),
    (f"row softmax {sm}x{sm}", {"kind": "softmax", "n": sm, "bytes": 8 * sm * sm}),
    ("conv2d b32 64->64 56x56 3x3 pad 1", {"kind": "conv", "b": 4 if quick else 32}),
    ("mnist CNN training step, batch 128 (jit)", {"kind": "train"}),
    ("mnist CNN training step (jit, JIT_GRAPH=0)", {"kind": "train", "graph": False, "only": "tinyplug"}),
    ("first result of a new elementwise graph", {"kind": "first"}),
    ("dispatch: one tiny op (16 floats), to finish", {"kind": "tiny"}),
  ]

# ---------------- tinyplug and tinygrad (the same Tensor API) ----------------

def _tiny(framework: str):
  if framework == "tinygrad":
    from tinygrad import Tensor, Device, TinyJit, dtypes, nn
    from tinygrad.helpers import Context
    training = lambda: Context(TRAINING=1)   # tinygrad 0.14: training mode is a context variable
  else:
    from tinyplug import Tensor, TinyJit, dtypes, nn
    from tinyplug.device import Device
    training = Tensor.train
  dev = Device.DEFAULT
  assert dev.split(":")[0] in ("CUDA", "NV"), f"{framework} runs on {dev}, not a CUDA device"
  return Tensor, TinyJit, dtypes, nn, training, (lambda: Device[dev].synchronize())

def run_tiny(framework: str, cfg: dict, reps: int) -> float:
  Tensor, TinyJit, dtypes, nn, training, sync = _tiny(framework)
  rng = np.random.default_rng(0)
  def tensor(*shape, half=False):
    t = Tensor(rng.random(shape, dtype=np.float32) - 0.5)   # random() is 4x faster than standard_normal at 256M
    return (t.cast(dtypes.half) if half else t).realize()
  if (t := common_row(cfg, tensor, sync, reps)) is not None: return t
  kind = cfg["kind"]
  if kind == "conv":
    x, w = tensor(cfg["b"], 64, 56, 56), tensor(64, 64, 3, 3)
    return best(lambda: x.conv2d(w, padding=1).realize(), sync, reps)
  if kind == "train":
    Tensor.manual_seed(0)
    class Net:
      def __init__(self):
        self.c1, self.c2, self.l = nn.Conv2d(1, 32, 5), nn.Conv2d(32, 64, 5), nn.Linear(64 * 4 * 4, 10)
      def __call__(self, x):
        x = self.c1(x).relu().max_pool2d(2)
        return self.l(self.c2(x).relu().max_pool2d(2).flatten(1))
    net = Net()
    opt = nn.optim.Adam(nn.state.get_parameters(net), lr=1e-3)
    x, y = tensor(128, 1, 28, 28), Tensor(rng.integers(0, 10, 128).astype(np.int32)).realize()
    @TinyJit
    def step():
      with training():
        opt.zero_grad()
        loss = net(x).sparse_categorical_crossentropy(y).backward()
        opt.step()
      return loss.realize()
    from contextlib import nullcontext
    from tinyplug.helpers import Context
    with nullcontext() if cfg.get("graph", True) else Context(JIT_GRAPH=0):
      for _ in range(2): step()
      return best(step, sync, reps)
  raise ValueError(kind)

# ---------------- PyTorch ----------------

def run_torch(cfg: dict, reps: int) -> float:
  import torch
  dev = torch.device("cuda")
  sync = torch.cuda.synchronize
  gen = torch.Generator(device=dev).manual_seed(0)
  def tensor(*shape, half=False):
    return torch.randn(*shape, device=dev, generator=gen, dtype=torch.float16 if half else torch.float32)
  kind = cfg["kind"]
  with torch.no_grad() if kind != "train" else torch.enable_grad():
    if (t := common_row(cfg, tensor, sync, reps, torch_api=True)) is not None: return t
    if kind == "copy":
      a = tensor(cfg["n"]); b = torch.empty_like(a)
      return best(lambda: b.copy_(a), sync, reps)
    if kind == "conv":
      x, w = tensor(cfg["b"], 64, 56, 56), tensor(64, 64, 3, 3)
      return best(lambda: torch.nn.functional.conv2d(x, w, padding=1), sync, reps)
    if kind == "train":
      torch.manual_seed(0)
      net = torch.nn.Sequential(torch.nn.Conv2d(1, 32, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Conv2d(32, 64, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Flatten(), torch.nn.Linear(64 * 4 * 4, 10)).to(dev)
      opt = torch.optim.Adam(net.parameters(), lr=1e-3)
      x, y = tensor(128, 1, 28, 28), torch.randint(0, 10, (128,), device=dev, generator=gen)
      def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return loss
      for _ in range(2): step()
      return best(step, sync, reps)
  raise ValueError(kind)

def child(framework: str, quick: bool, only: str | None, reps: int) -> None:
  rows = [(name, cfg) for name, cfg in workloads(quick) if cfg.get("only", framework) == framework]
  if framework == "torch": rows = [("copy", {"kind": "copy", "n": 1 << 22 if quick else 1 << 28})] + rows
  run = (lambda cfg: run_torch(cfg, reps)) if framework == "torch" else (lambda cfg: run_tiny(framework, cfg, reps))
  report_rows(rows, run, only, always=("copy",))

# ---------------- the parent: three frameworks, one table ----------------

def measure(framework: str, args) -> dict:
  results, error = run_child(__file__, framework, "CUDA", args, timeout=args.timeout)
  if error is not None: results["(exit)"] = error
  return results

def _fmt(t) -> str:
  if not isinstance(t, float): return "error" if t != "missing" else "-"
  return f"{t * 1e3:9.3f} ms" if t >= 1e-3 else f"{t * 1e6:9.1f} us"

def gpu_name() -> str:
  try:
    out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30)
    return out.stdout.strip() or "unknown GPU"
  except (OSError, subprocess.TimeoutExpired): return "unknown GPU (no nvidia-smi)"

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
  ap.add_argument("--only", default=None, help="run the workloads whose name contains this (or one of these words, comma-separated)")
  ap.add_argument("--reps", type=int, default=5, help="timed repetitions after the warm-up (best is kept)")
  ap.add_argument("--frameworks", default="tinyplug,torch,tinygrad", help="comma list")
  ap.add_argument("--timeout", type=float, default=900, help="seconds per framework")
  ap.add_argument("--json", default=None, help="write the numbers here too")
  ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.child: return child(args.child, args.quick, args.only, args.reps)
  from tinyplug_cuda.driver import probe_driver
  ok, reason = probe_driver()
  if not ok: sys.exit(f"CUDA is unavailable: {reason}")
  print(f"GPU: {gpu_name()}")
  names = args.frameworks.split(",")
  res = {fw: measure(fw, args) for fw in names}
  copy = res.get("torch", {}).get("copy")
  rows = dict(workloads(args.quick))
  if isinstance(copy, float):
    n = 1 << 22 if args.quick else 1 << 28
    print(f"device-to-device copy (PyTorch, {n >> 20}M floats): {8 * n / copy / 1e9:.0f} GB/s read+written")
  print(f"{'workload':46s} " + " ".join(f"{fw:>12s}" for fw in names) + "  tp/torch  tp/tinygrad  tp GB/s (of copy)")
  for name, cfg in rows.items():
    if not selected(name, args.only): continue
    vals = [res[fw].get(name, "missing") for fw in names]
    tp, pt, tg = (res.get(fw, {}).get(name) for fw in ("tinyplug", "torch", "tinygrad"))
    r = lambda a, b: f"{a / b:8.2f}" if isinstance(a, float) and isinstance(b, float) and b > 0 else "       -"
    bw = ""
    if isinstance(tp, float) and "bytes" in cfg:
      bw = f"{cfg['bytes'] / tp / 1e9:7.0f}" + (f" ({cfg['bytes'] / tp / (8 * (1 << 28) / copy) * 100:3.0f}%)"
                                                 if isinstance(copy, float) and not args.quick else "")
    print(f"{name:46s} " + " ".join(f"{_fmt(v):>12s}" for v in vals) + f"  {r(tp, pt)}  {r(tp, tg):>11s}  {bw}")
  for fw in names:
    for name, v in res[fw].items():
      if isinstance(v, str): print(f"  {fw} / {name}: {v}")
  print("ratios: tinyplug time / peer time (below 1: tinyplug is faster)")
  if args.json:
    with open(args.json, "w") as f: json.dump({"gpu": gpu_name(), "results": res}, f, indent=1)

if __name__ == "__main__":
  main()
