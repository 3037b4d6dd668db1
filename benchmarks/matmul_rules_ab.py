"""Whole `(a @ b).realize()`s in one process: the heuristic's matmul rules against main's before session 10 (B packed
only where its rows are 8 KB or more apart, cache blocks of 8 tile rows), interleaved in blocks with numpy between.

  python benchmarks/matmul_rules_ab.py 1024 6 10     # size, blocks, realizes per block
  python benchmarks/matmul_rules_ab.py 2048 4 3

Prints min / p10 / median per config and the load average. Never run from tests."""
from __future__ import annotations
import os, sys, time
import numpy as np
from tinyplug import schedule
from tinyplug.passes import heuristic, pack
from tinyplug.tensor import Tensor

def main() -> None:
  n, blocks, per = (int(x) for x in sys.argv[1:4])
  an, bn = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
  a, b = Tensor(an).realize(), Tensor(bn).realize()
  keep_pack, keep_block = pack.should_pack, heuristic.block_rows
  def old_pack(m, nn, k, itemsize, r): return keep_pack(m, nn, k, itemsize, r) and nn * itemsize >= 8192
  def old_block(rows, row_bytes, llc, threads):
    return 8 if rows % 8 == 0 and rows // 8 >= 2 else keep_block(rows, row_bytes, llc, threads)
  configs = {"now": (keep_pack, keep_block), "old rules": (old_pack, old_block)}
  res: dict[str, list[float]] = {name: [] for name in [*configs, "numpy"]}
  try:
    for _ in range(blocks):
      for name, (should_pack, block_rows) in configs.items():
        pack.should_pack, heuristic.block_rows = should_pack, block_rows
        schedule._templates.clear()   # the schedule is made again under these rules
        for _ in range(2): (a @ b).realize()
        for _ in range(per):
          st = time.perf_counter(); (a @ b).realize(); res[name].append(time.perf_counter() - st)
        time.sleep(0.3)   # idle threads go to sleep before the next config
      for _ in range(per):
        st = time.perf_counter(); an @ bn; res["numpy"].append(time.perf_counter() - st)
      time.sleep(0.3)
  finally: pack.should_pack, heuristic.block_rows = keep_pack, keep_block
  def q(v: list[float], p: float) -> float: return sorted(v)[int(p * (len(v) - 1))]
  print(f"matmul {n}, load average {os.getloadavg()[0]:.2f}")
  for name, v in res.items():
    print(f"  {name:10s} min {min(v)*1e3:8.3f} p10 {q(v, .1)*1e3:8.3f} median {q(v, .5)*1e3:8.3f} ms")

if __name__ == "__main__": main()
