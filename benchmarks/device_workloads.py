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
