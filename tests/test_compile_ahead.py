"""A schedule's new kernels are lowered one after another while a thread compiles the ones already lowered
(engine/realize.py compile_ahead); a warm start hands nothing to that thread."""
import os, subprocess, sys, textwrap
import pytest

pytest.importorskip("tinyplug_cpu_llvm")

SCRIPT = textwrap.dedent("""
  import sys, threading, numpy as np
  from tinyplug import Tensor
  from tinyplug import helpers
  from tinyplug.engine import realize as engine
  from tinyplug_cpu_llvm.compiler import LLVMCompiler
  threads, compile = [], LLVMCompiler.compile
  def watched(self, src, quick=False):
    threads.append(threading.current_thread().name)
    if sys.argv[1] == "fail" and "fmul" in src: raise ValueError("this kernel does not compile")
    return compile(self, src, quick)
  LLVMCompiler.compile = watched
  x = np.random.default_rng(0).standard_normal((37, 53)).astype(np.float32)
  a = Tensor(x)
  outs = [(a + 1).sum(0), (a * 3).max(1), (a - 2).exp(), a.sum()]
  try: Tensor.realize(*outs)
  except ValueError as e:
    print("RAISED", e)
    sys.exit(0)
  for got, want in zip(outs, [(x + 1).sum(0), (x * 3).max(1), np.exp(x - 2), x.sum()]):
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-4)
  print("THREADS", ",".join(sorted(set(threads))) or "-", "POOL", sum(name == engine.COMPILE_THREAD for name in helpers._worker_threads))
""")

def _run(tmp_path, mode: str = "ok", **env) -> str:
  e = {**{k: v for k, v in os.environ.items() if k != "DEBUG"}, "XDG_CACHE_HOME": str(tmp_path), "DEV": "CPU", **env}
  out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, timeout=300, env=e)
  assert out.returncode == 0, out.stderr
  return out.stdout.strip().splitlines()[-1]

def test_cold_kernels_compile_on_the_compile_thread_and_warm_ones_never_reach_it(tmp_path):
  cold = _run(tmp_path)
  assert cold.startswith("THREADS ") and "tinyplug-compile" in cold and cold.endswith("POOL 1")
  assert _run(tmp_path) == "THREADS - POOL 0"   # every binary from the disk cache: no thread started

def test_debug_2_compiles_each_kernel_in_its_turn(tmp_path):
  assert _run(tmp_path, DEBUG="2").endswith("POOL 0")

def test_an_error_on_the_compile_thread_reaches_the_caller(tmp_path):
  assert _run(tmp_path, "fail") == "RAISED this kernel does not compile"
