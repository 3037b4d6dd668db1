"""A/B of opts lists for a padded copy (`x.pad(pads).contiguous()`), interleaved in one process: CPU time of the
compiled program alone, p10/median per variant, and each variant's output against the first's. Opts as in
gather_ab.py (`heuristic` for the current decision; THREAD opts are dropped, so run with CPU_THREADS=1):
  CPU_THREADS=1 python benchmarks/pad_row_ab.py 40 heuristic "UPCAST3:58"
SHAPE=b,c,h,w (default 8,64,56,56) and PADS=left,right,top,bottom (default 1,1,1,1) pick the copy."""
from __future__ import annotations
import os, sys
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop.ops import Ops
sys.path.insert(0, os.path.dirname(__file__))
from conv_row_ab import time_variants

def main() -> None:
  shape = [int(v) for v in os.environ.get("SHAPE", "8,64,56,56").split(",")]
  pads = tuple(int(v) for v in os.environ.get("PADS", "1,1,1,1").split(","))
  out = Tensor.empty(*shape).pad(pads).contiguous()
  ast = [it.ast for it in create_schedule([out.uop])[0] if it.ast.op is Ops.SINK][-1]
  print(f"{ast.arg if isinstance(ast.arg, str) else ''} shape {shape} pads {pads}")
  for v, p10, median, diff, name in time_variants(ast, int(sys.argv[1]), sys.argv[2:]):
    print(f"{v:>40s} {name:20s} p10 {p10:.3f} ms median {median:.3f} ms  max diff from the first {diff:.2e}")

if __name__ == "__main__":
  main()
