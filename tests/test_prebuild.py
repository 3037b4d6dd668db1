"""A schedule's kernels are built ahead of their run (engine/realize.py `prebuild`): codegen on the calling thread while
the kernels before compile on a background thread, for compilers that allow it (`Compiler.compiles_in_background`,
the CPU's LLVM compiler). Values, errors and the order things happen in are those of a build kernel by kernel."""
import threading, time
import numpy as np
import pytest
from tinyplug.engine import realize
from tinyplug.helpers import Context
from tinyplug.tensor import Tensor
from tinyplug_cpu_llvm.compiler import LLVMCompiler

RNG = np.random.default_rng(3)

def _new_constant() -> float:
  """A constant no earlier run (nor the disk cache) has built kernels for."""
  return 0.5 + (time.time_ns() % 10**9) * 1e-10

def _two_kernels(x: Tensor, c: float) -> Tensor:
  """Two dependent kernels whose code holds `c` (a new constant: neither is built yet)."""
  return ((x * c).sum(1, keepdim=True) + x).exp().sum(0) * c

@pytest.fixture
def compiles(monkeypatch):
  """The thread of each LLVM compile, in order, by the kernel's symbol."""
  seen: list[tuple[str, str]] = []
  orig = LLVMCompiler.compile
  def compile(self, src, quick=False):
    seen.append((threading.current_thread().name, src))
    return orig(self, src, quick)
  monkeypatch.setattr(LLVMCompiler, "compile", compile)
  with Context(CACHELEVEL=0, REALIZE_PLANS=0): yield seen   # (a plan would reuse kernels over a new constant)

def test_a_cold_schedule_compiles_on_the_background_thread(compiles):
  xn = RNG.standard_normal((64, 32)).astype(np.float32)
  c = _new_constant()
  got = _two_kernels(Tensor(xn), c).numpy()
  want = (np.exp((xn * c).sum(1, keepdims=True) + xn).sum(0) * c).astype(np.float32)
  np.testing.assert_allclose(got, want, rtol=1e-5)
  assert len(compiles) == 2 and all(name.startswith("tinyplug-compile") for name, _ in compiles), compiles
  assert not realize._building

def test_a_warm_schedule_starts_nothing(compiles):
  x = Tensor(RNG.standard_normal((64, 32)).astype(np.float32)).realize()
  c = _new_constant()
  _two_kernels(x, c).realize()
  compiles.clear()
  items = _two_kernels(x, c).schedule()
  assert realize.prebuild(items) == [] and not compiles
  realize.run_schedule(items)   # (scheduled items run before anything else: none left for the next test)
  assert not compiles

def test_a_compile_error_is_raised_at_its_kernel_and_leaves_nothing_behind(compiles, monkeypatch):
  orig = LLVMCompiler.compile
  ran: list[str] = []
  def failing(self, src, quick=False):
    if len(compiles) == 1: raise RuntimeError("no second kernel today")   # (compiles: every compile before this one)
    return orig(self, src, quick)
  monkeypatch.setattr(LLVMCompiler, "compile", failing)
  orig_run = realize.CompiledRunner.__call__
  def run(self, bufs, var_vals, wait=False):
    ran.append(self.spec.name)
    return orig_run(self, bufs, var_vals, wait)
  x = Tensor(RNG.standard_normal((64, 32)).astype(np.float32)).realize()
  monkeypatch.setattr(realize.CompiledRunner, "__call__", run)
  with pytest.raises(RuntimeError, match="no second kernel today"):
    _two_kernels(x, _new_constant()).realize()
  assert len(ran) == 1, ran   # the kernel before the failing one ran first
  assert not realize._building   # the compiles it had started were waited for and forgotten
  monkeypatch.setattr(LLVMCompiler, "compile", orig)
  np.testing.assert_allclose((x + 1).numpy(), x.numpy() + 1)   # the process stays usable
