"""Sort and topk of 1024x1024 float32 with their two outputs used in the usual ways (graph templates: the values' and
the indices' network), per call: p10 and p50 of N calls (env N, default 7), thread CPU time (WALL=1: wall clock).

  CPU_THREADS=1 python benchmarks/template_outputs_ab.py [patterns,...]
  WALL=1 chrt -f 10 python benchmarks/template_outputs_ab.py both,seq

Patterns: vals / idx (one output, the other dropped), both (`v.realize(i)`), seq (`v.numpy(); i.numpy()`), seqr
(`v.realize(); i.realize()`), vkeep (`v.realize()` with i alive, unused), vnp / vrnp (`x.sort()[0].numpy()`, with
and without realize() first); tk_*: the same for topk(16). A/B against another checkout: run both in turns (an
editable install's finder comes before PYTHONPATH: take it out of sys.meta_path and put the checkout's root and
plugins/cpu_llvm/src first on sys.path)."""
import os, sys, time
import numpy as np
from tinyplug import Tensor
pats = sys.argv[1].split(",") if len(sys.argv) > 1 else None
clock = time.perf_counter if os.environ.get("WALL") else time.thread_time
N = int(os.environ.get("N", "7"))
x = Tensor(np.random.default_rng(0).standard_normal((1024, 1024), dtype=np.float32)).realize()
def vals(): x.sort(-1)[0].realize()
def idx(): x.sort(-1)[1].realize()
def both(): v, i = x.sort(-1); v.realize(i)
def seq(): v, i = x.sort(-1); v.numpy(); i.numpy()
def seqr(): v, i = x.sort(-1); v.realize(); i.realize()
def vkeep(): v, i = x.sort(-1); v.realize()
def tk_vals(): x.topk(16)[0].realize()
def tk_both(): v, i = x.topk(16); v.realize(i)
def tk_seq(): v, i = x.topk(16); v.numpy(); i.numpy()
def tk_vkeep(): v, _ = x.topk(16); v.realize()
def vnp(): x.sort(-1)[0].numpy()
def vrnp(): x.sort(-1)[0].realize().numpy()
P = dict(seqr=seqr, vnp=vnp, vrnp=vrnp, vals=vals, idx=idx, both=both, seq=seq, vkeep=vkeep, tk_vals=tk_vals, tk_both=tk_both, tk_seq=tk_seq,
         tk_vkeep=tk_vkeep)
for name, f in P.items():
  if pats and name not in pats: continue
  for _ in range(3): f()
  ts = []
  for _ in range(N):
    t0 = clock(); f(); ts.append(clock() - t0)
  ts.sort()
  print(f"{name:9s} p10 {1e3*ts[max(0, int(0.1*N))]:7.2f}  p50 {1e3*ts[N//2]:7.2f} ms", flush=True)
