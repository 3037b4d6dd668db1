"""Kernels with little work compile at O0 (a new small kernel is ready in a few ms instead of ~30); big ones at O3.
Both tiers must compute the same values."""
import numpy as np
import pytest
from tinyplug.device import Device
from tinyplug.tensor import Tensor
from tinyplug_cpu_llvm.compiler import QUICK_WORK

def _src_and_tier(n: int, k: float):
  from tinyplug.codegen import get_program
  from tinyplug.schedule import create_schedule
  x = Tensor(np.linspace(-2, 2, n, dtype=np.float32), device="CPU")
  items, _ = create_schedule([((x * k) + 1.0).exp().uop])
  dev = Device["CPU"]
  spec = get_program(items[-1].ast, dev.renderer)
  before = type(dev.compiler).compiles
  tiers = []
  orig = dev.compiler._tier
  dev.compiler._tier = lambda quick: tiers.append(orig(quick)[0]) or orig(quick)
  try: dev.compiler.compile(spec.src, quick=spec.work <= QUICK_WORK)
  finally: del dev.compiler._tier
  assert type(dev.compiler).compiles == before + 1
  return spec, tiers[0]

def test_small_kernel_is_quick_and_big_kernel_is_optimised():
  spec, opt = _src_and_tier(64, 1.25)
  assert spec.work <= QUICK_WORK and opt == 0
  spec, opt = _src_and_tier(1 << 16, 1.25)
  assert spec.work > QUICK_WORK and opt == Device["CPU"].compiler.opt

def test_hand_written_ir_counts_as_big():
  # compile_cached (no spec) is the full tier; a spec's work picks the quick one
  comp = Device["CPU"].compiler
  src = "define void @f() {\nentry:\n  ret void\n}"
  assert comp.key(src) != comp.key(src, quick=True)
  assert comp._tier(False)[0] == comp.opt

@pytest.mark.parametrize("n", [37, 1000, 5000])
def test_both_tiers_compute_the_same(n):
  a = np.random.default_rng(n).standard_normal(n).astype(np.float32)
  got = ((Tensor(a, device="CPU") * 0.75) + 1.0).exp().sum().numpy()
  np.testing.assert_allclose(got, np.exp(a * 0.75 + 1.0).sum(), rtol=1e-5)

@pytest.mark.parametrize("shape", [(23, 7), (61, 997)])
def test_a_quick_kernel_run_over_and_over_is_compiled_again_fully_on_a_thread(monkeypatch, shape):
  # a kernel compiled at O0 for its size is compiled once more with the full pipeline on the tier-up thread after
  # TIER_UP_CALLS runs; a run after that compile is done loads it and every launcher (a realize plan's among them) runs
  # the new code from then on, with the same values. A big kernel (built fully the first time) is never compiled again
  import tinyplug_cpu_llvm.runtime as rt
  from tinyplug_cpu_llvm.compiler import LLVMCompiler
  from tinyplug.engine import plan
  monkeypatch.setattr(rt, "TIER_UP_CALLS", 5)
  x = np.random.default_rng(3).standard_normal(shape).astype(np.float32) + np.float32(0.375)   # (a shape no other test made)
  xt = Tensor(x, device="CPU").realize()
  made = []
  real = rt.CPUProgram.__init__
  def init(self, *args):
    real(self, *args)
    made.append((self, self.fn))
  monkeypatch.setattr(rt.CPUProgram, "__init__", init)
  hits = plan.counters["hits"]
  got = [xt.logsumexp(-1).realize().numpy() for _ in range(12)]
  compiles = LLVMCompiler.compiles
  (prg, first_fn), = [(p, f) for p, f in made if p.name.startswith("r_")]
  quick = Device["CPU"].compiler.is_quick(prg._spec)
  assert quick == (shape == (23, 7)) and (prg._tier_up is not None) == quick
  if quick: prg._tier_up.result(timeout=120)   # (the caller never waits for it; the test does)
  got += [xt.logsumexp(-1).realize().numpy() for _ in range(3)]
  assert plan.counters["hits"] > hits and LLVMCompiler.compiles == compiles   # (the tier-up is not counted there)
  want = np.log(np.exp(x.astype(np.float64)).sum(-1))
  for g in got: np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
  assert (prg.fn is not first_fn) == quick and prg.calls_left == 0

def test_a_fork_while_the_tier_up_thread_compiles_leaves_the_child_a_free_lock():
  # the child of a fork in the middle of a compile on another thread gets the LLVM lock free (the fork waits for the
  # compile): a lock held by a thread the child does not have would stop its first compile forever
  import os, threading
  from tinyplug_cpu_llvm.compiler import LLVM_LOCK
  if not hasattr(os, "fork"): pytest.skip("no fork here")
  holding, release = threading.Event(), threading.Event()
  def compile_on_a_thread():
    with LLVM_LOCK:
      holding.set()
      release.wait(10)
  th = threading.Thread(target=compile_on_a_thread)
  th.start()
  holding.wait(10)
  threading.Timer(0.2, release.set).start()   # (the fork below waits for this "compile")
  pid = os.fork()
  if pid == 0:
    os._exit(0 if LLVM_LOCK.acquire(timeout=5) else 1)
  th.join()
  assert os.waitpid(pid, 0)[1] == 0
