"""Per-kernel time of a convolution's forward + both gradients (issue 20: training), interleaved in one process: each
kernel of the schedule compiled with the heuristic's opts (or an opts list given for one of them) and run in turns,
per-thread CPU time, p10/median per kernel. Run with CPU_THREADS=1 (THREAD opts are dropped).
  CPU_THREADS=1 python benchmarks/conv_grad_kernels.py 20 8,64,64,28,1,1
  CPU_THREADS=1 python benchmarks/conv_grad_kernels.py 20 8,64,64,28,1,1 4 "UPCAST0:8 UPCAST1:16" heuristic
The shape is b,cin,cout,side,stride,pad of a 3x3 conv2d; the optional kernel index and opts lists give variants of
that kernel beside the others (`heuristic` for the current decision). AB=1: the schedule twice, the weight gradient
as the convolution over the batch ("batched", before session 13) and as it is chosen now, each kernel in turns, with
each schedule's sum; AB=rows: before = every unstrided convolution on the weight as it is (no channel-innermost copy
for a short row, `nn._short_row`, session 14)."""
from __future__ import annotations
import os, sys, time
import numpy as np
from tinyplug.codegen import get_program
from tinyplug.codegen.kernel import Kernel, OptOps
from tinyplug.device import Buffer, Device
from tinyplug.passes.heuristic import heuristic_opts
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops import nn, template
from tinyplug.uop.ops import Ops, UOp
sys.path.insert(0, __file__.rsplit("/", 1)[0])
from gather_ab import parse

def main() -> None:
  reps, (b, cin, cout, side, stride, pad) = int(sys.argv[1]), [int(v) for v in sys.argv[2].split(",")]
  pick, variants = (int(sys.argv[3]), sys.argv[4:]) if len(sys.argv) > 3 else (None, [])
  def schedule(batched: bool) -> list[UOp]:
    chosen, short = nn._wants_channels_last_wgrad, nn._short_row
    template._templates.clear(); template._seen.clear()   # the gradients are graph templates: built anew each time
    if batched and os.environ.get("AB") == "rows": nn._short_row = lambda *a: False
    elif batched: nn._wants_channels_last_wgrad = lambda *a: False
    try:
      x, w = Tensor.empty(b, cin, side, side, requires_grad=True), Tensor.empty(cout, cin, 3, 3, requires_grad=True)
      out = x.conv2d(w, stride=stride, padding=pad)
      items, _ = create_schedule([t.uop for t in (out, *out.square().sum().gradient(x, w))])
    finally: nn._wants_channels_last_wgrad, nn._short_row = chosen, short
    return [it.ast for it in items if it.ast.op is Ops.SINK]
  asts = schedule(False)
  tags = [str(i) for i in range(len(asts))]
  if os.environ.get("AB"):
    old = schedule(True)
    tags, asts = [f"B{i}" for i in range(len(old))] + [f"A{i}" for i in range(len(asts))], old + asts
  dev, rng = Device["CPU"], np.random.default_rng(0)
  runs = []
  for i, (tag, ast) in enumerate(zip(tags, asts)):
    k = Kernel(ast, dev.renderer)
    gl = sorted((u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
    bufs = [Buffer("CPU", max(g.dtype.size, 1), g.dtype.base).ensure_allocated() for g in gl]
    for buf in bufs: buf.copyin(memoryview(rng.standard_normal(buf.size).astype(np.float32).view(np.uint8)))
    for v in (variants if i == pick else ["heuristic"]):
      opts = [o for o in parse(v, k) if o.op is not OptOps.THREAD]
      spec = get_program(ast, dev.renderer, opts=opts)
      prg = dev.make_program(spec, dev.compiler.compile_program(spec))
      shown = v if i == pick else " ".join(f"{o.op.name}{o.axis}:{o.arg}" for o in opts)
      runs.append((f"{tag} {spec.name}", shown, spec, prg, bufs, []))
  for _ in range(reps):
    for _, _, spec, prg, bufs, times in runs:
      st = time.thread_time()
      prg(*[buf.handle for buf in bufs], global_size=spec.global_size, local_size=spec.local_size, vals=(), wait=True)
      times.append(time.thread_time() - st)
  totals: dict[str, list[float]] = {}
  for name, v, spec, prg, bufs, times in runs:
    ts = np.array(times) * 1e3
    tot = totals.setdefault(name[0] if name[0] in "AB" else "", [0.0, 0.0])
    tot[0] += np.percentile(ts, 10)
    tot[1] += np.median(ts)
    print(f"{name:32s} p10 {np.percentile(ts, 10):7.3f} ms median {np.median(ts):7.3f} ms  {v}")
  for key, (p10, med) in totals.items():
    label = dict(A="after (now)", B="before (rows)" if os.environ.get("AB") == "rows" else "before (batched)").get(key, "all")
    print(f"{label}: sum of p10s {p10:.2f} ms, of medians {med:.2f} ms (variants of one kernel counted each)")

if __name__ == "__main__":
  main()
