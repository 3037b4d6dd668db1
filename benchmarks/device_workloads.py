"""Workloads shared by the device benchmarks (cl_bench.py, cuda_bench.py): timing and the rows every device table has,
for any framework with tinygrad's Tensor API (tinyplug, tinygrad) or PyTorch's (`torch_api=True`)."""
from __future__ import annotations
import random, time
from typing import Any, Callable

def best(fn: Callable[[], Any], sync: Callable[[], None], reps: int) -> float:
  """Seconds of the fastest of `reps` runs of fn (each waited for with sync), after one warm-up run (compiles)."""
  fn(); sync()
  fastest = float("inf")
  for _ in range(reps):
    st = time.perf_counter()
    fn(); sync()
    fastest = min(fastest, time.perf_counter() - st)
  return fastest

def first_result(make: Callable[[float, float], Any], reps: int) -> float:
  """The cold path, fastest of `reps`: `make(k1, k2)` builds, compiles, runs and copies back a graph with constants
  nobody has used before."""
  fastest = float("inf")
  for _ in range(max(reps, 1)):
    k1, k2 = random.random(), random.random()
    st = time.perf_counter()
    make(k1, k2)
    fastest = min(fastest, time.perf_counter() - st)
  return fastest

def common_row(cfg: dict, tensor: Callable[..., Any], sync: Callable[[], None], reps: int,
               torch_api: bool = False) -> float | None:
  """Time the rows every device benchmark has (matmul, chain, sum, softmax, first, tiny); None for other kinds.
  `tensor(*shape, half=False)` makes a realized random input on the device."""
  done = (lambda t: t) if torch_api else (lambda t: t.realize())
  to_host = (lambda t: t.cpu().numpy()) if torch_api else (lambda t: t.numpy())
  kind = cfg["kind"]
  if kind == "matmul":
    a, b = tensor(cfg["n"], cfg["n"], half=cfg.get("half", False)), tensor(cfg["n"], cfg["n"], half=cfg.get("half", False))
    return best(lambda: done(a @ b), sync, reps)
  if kind == "chain":
    a, b, c = tensor(cfg["n"]), tensor(cfg["n"]), tensor(cfg["n"])
    return best(lambda: done(((a * b) + c).relu() * 0.5), sync, reps)
  if kind == "sum":
    a = tensor(cfg["n"])
    return best(lambda: done(a.sum()), sync, reps)
  if kind == "softmax":
    a = tensor(cfg["n"], cfg["n"])
    return best(lambda: done(a.softmax(-1)), sync, reps)
  if kind == "first":
    a = tensor(64, 64)
    return first_result(lambda k1, k2: to_host((a * k1 + k2).relu()), reps)
  if kind == "tiny":
    a = tensor(16)
    return best(lambda: done(a + 1), sync, max(reps, 20))
  return None

# ---------------- one framework per subprocess ----------------

def selected(name: str, only: str | None) -> bool:
  """Whether a row is asked for: `--only` unset, or its name contains one of its comma-separated words."""
  return not only or any(w.strip() and w.strip() in name.lower() for w in only.lower().split(","))

def report_rows(rows: list[tuple[str, dict]], run: Callable[[dict], float], only: str | None,
                always: tuple[str, ...] = ()) -> None:
  """In a child: time each row (those whose name contains `only`, or one of its comma-separated words, and the names in
  `always`) and print one JSON line
  `{name: seconds or "Error: why"}` per row as it finishes, so a parent that times out still gets the rows before."""
  import json
  for name, cfg in rows:
    if not selected(name, only) and name not in always: continue
    try: value: Any = run(cfg)
    except Exception as e: value = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else ''}"
    print(json.dumps({name: value}), flush=True)

def run_child(script: str, framework: str, device: str, args: Any, timeout: float) -> tuple[dict, str | None]:
  """In the parent: `script --child framework` under DEV=device; (the rows it printed, the last line of its error
  output or None when it exited cleanly). A child past `timeout` is killed and keeps the rows it printed."""
  import json, os, subprocess, sys
  env = {**os.environ, "DEV": device}
  env.pop("DEBUG", None)
  cmd = [sys.executable, os.path.abspath(script), "--child", framework, "--reps", str(args.reps)]
  if args.quick: cmd.append("--quick")
  if args.only: cmd += ["--only", args.only]
  try: proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
  except subprocess.TimeoutExpired as e:
    out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    proc = subprocess.CompletedProcess(cmd, -9, out, f"timed out after {timeout} s")
  results: dict = {}
  for line in proc.stdout.splitlines():
    if line.startswith("{"): results.update(json.loads(line))
  error = None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300]
  return results, error
