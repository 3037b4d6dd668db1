"""Per realize of cpu_bench rows: the wall time, the kernels' share of it (each CPU program call, timed around the
call) and the rest (building the graph, finding the plan, outputs, frees: Python, which runs on cold caches after a
kernel that streamed megabytes), with minor page faults per realize; p10 / median over 55 realizes. Each kernel's
p10 / median follows on its own line.

  CPU_THREADS=16 python benchmarks/realize_rest.py pad,sum_mid,vecmat,conv_64
  CPU_THREADS=1 PYTHONPATH=<checkout>:<checkout>/plugins/cpu_llvm/src python benchmarks/realize_rest.py maxpool_k2

Keys: cpu_bench's sweep workloads (SWEEP), and sum_mid, cumsum1, tiny (t + 1 on one float)."""
import os, resource, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import cpu_bench as cb

def main() -> None:
  if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"): raise SystemExit(__doc__)
  os.environ.setdefault("DEV", "CPU")
  from tinyplug.tensor import Tensor
  from tinyplug_cpu_llvm.runtime import CPUProgram
  total, per = [0], {}
  call = CPUProgram.__call__
  def timed(self, *a, **k):
    st = time.perf_counter_ns(); r = call(self, *a, **k); took = time.perf_counter_ns() - st
    total[0] += took; per.setdefault(self.name, []).append(took / 1e3)
    return r
  CPUProgram.__call__ = timed
  rng = np.random.default_rng(1)
  r = lambda *s: rng.random(s, dtype=np.float32)
  extra = {"sum_mid": (lambda: (r(16, 4096, 256),), lambda x: x.sum(1)),
           "cumsum1": (lambda: (r(1024, 1024),), lambda x: x.cumsum(1)),
           "tiny": (lambda: (np.zeros(1, np.float32),), lambda x: x + 1.0)}
  q = lambda v, p: sorted(v)[int(len(v) * p)]
  print(f"CPU_THREADS={os.environ.get('CPU_THREADS', 'default')}; load {os.getloadavg()[0]:.1f}; microseconds")
  for key in sys.argv[1].split(","):
    make, fn = extra[key] if key in extra else ((lambda k=key: cb.SWEEP_INPUTS(k, np.random.default_rng(1))), cb.TENSOR_SWEEP[key])
    args = [Tensor(a).realize() for a in make()]
    walls, kerns, faults = [], [], []
    for i in range(60):
      if i == 5: per.clear()
      total[0] = 0; f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
      st = time.perf_counter_ns(); res = fn(*args); (res if isinstance(res, tuple) else (res,))[0].realize()
      wall = time.perf_counter_ns() - st; del res
      if i >= 5:
        walls.append(wall / 1e3); kerns.append(total[0] / 1e3)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    rest = [w - k for w, k in zip(walls, kerns)]
    print(f"{key:10s} wall {q(walls, .1):8.1f} / {q(walls, .5):8.1f} | kernels {q(kerns, .1):8.1f} / {q(kerns, .5):8.1f} "
          f"| rest {q(rest, .1):7.1f} / {q(rest, .5):7.1f} | page faults {q(faults, .5)}")
    # (a one-thread tiny kernel is launched straight, past CPUProgram.__call__: it counts as rest)
    for name, v in per.items(): print(f"    {name} {q(v, .1):.1f} / {q(v, .5):.1f}")
    per.clear()

if __name__ == "__main__": main()
