"""Large kernels split their outermost loop across threads; the result must not depend on the thread count."""
import numpy as np
import pytest
from tinyplug.uop import UOp, Ops, dtypes

def _matvec_like(N, M):
  out, a = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(N), arg=0), UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(N * M), arg=1)
  r = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, N),), (0, "loop"))
  k = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, M),), (1, "reduce"))
  acc = UOp(Ops.DEFINE_REG, dtypes.float.ptr(1), arg=0)
  slot = UOp(Ops.INDEX, acc.dtype, (acc, UOp.const(dtypes.int, 0)))
  rm = UOp(Ops.MUL, dtypes.int, (r, UOp.const(dtypes.int, M)))
  i = UOp(Ops.ADD, dtypes.int, (rm, k))
  ix = UOp(Ops.INDEX, a.dtype, (a, i))
  x = UOp(Ops.LOAD, dtypes.float, (ix,))
  sx = UOp(Ops.SIN, dtypes.float, (x,))
  cur = UOp(Ops.LOAD, dtypes.float, (slot,), arg=("acc", 0, "in"))
  upd = UOp(Ops.ADD, dtypes.float, (cur, sx))
  fin = UOp(Ops.LOAD, dtypes.float, (slot,), arg=("acc", 0, "out"))
  oi = UOp(Ops.INDEX, out.dtype, (out, r))
  st = lambda ix_, v: UOp(Ops.STORE, dtypes.void, (ix_, v))
  return [out, a, r, oi, acc, slot, st(slot, UOp.const(dtypes.float, 0.0)), rm, k, i, ix, x, sx, cur, upd, st(slot, upd),
          UOp(Ops.END, dtypes.void, (k,)), fin, st(oi, fin), UOp(Ops.END, dtypes.void, (r,))]

def test_split_marker_and_work():
  from tinyplug_cpu_llvm import LLVMRenderer
  from tinyplug_cpu_llvm.runtime import parse_meta
  src = LLVMRenderer().render("k", _matvec_like(1001, 333))
  assert parse_meta(src) == {"split": 1, "work": 1001 + 1001 * 333}
  assert "%core_id" in src and "%n_cores" in src

@pytest.mark.parametrize("N", [1001, 7, 2])
def test_same_result_with_1_and_2_threads(run, N):
  M = 4096 if N > 10 else 40000
  a = np.random.rand(N * M).astype(np.float32)
  o1, o2, o3 = np.zeros(N, np.float32), np.zeros(N, np.float32), np.zeros(N, np.float32)
  uops = _matvec_like(N, M)
  run(uops, [o1, a], threads=1)
  run(uops, [o2, a], threads=2)
  run(uops, [o3, a], threads=5)    # more threads than rows or cores: shares may be empty
  np.testing.assert_array_equal(o1, o2)
  np.testing.assert_array_equal(o1, o3)
  np.testing.assert_allclose(o1, np.sin(a.astype(np.float64)).reshape(N, M).sum(1), rtol=1e-4)

def test_threads_used_for_big_kernels_only():
  from tinyplug.device import Device, ProgramSpec
  from tinyplug.helpers import Context
  dev = Device["CPU"]
  big, small = _matvec_like(1000, 1000), _matvec_like(10, 10)
  progs = []
  for uops in (big, small):
    src = dev.renderer.render("k", uops)
    progs.append(dev.make_program(ProgramSpec("k", tuple(uops), src), dev.compiler.compile_cached(src)))
  with Context(CPU_THREADS=2): assert progs[0].threads() == 2 and progs[1].threads() == 1
  with Context(CPU_THREADS=1): assert progs[0].threads() == 1

def test_full_reduction_runs_on_one_thread():
  from tinyplug_cpu_llvm import LLVMRenderer
  from tinyplug_cpu_llvm.runtime import parse_meta
  uops = _matvec_like(1, 100)
  # drop the output loop: a store outside every loop cannot be split
  r = uops[2]
  sub = {r: UOp.const(dtypes.int, 0)}
  prog = [u for u in uops if u is not r and not (u.op is Ops.END and u.src[0] is r)]
  rebuilt, done = [], {}
  for u in prog:
    nu = u.replace(src=tuple(done.get(s, sub.get(s, s)) for s in u.src))
    done[u] = nu
    rebuilt.append(nu)
  assert parse_meta(LLVMRenderer().render("k", rebuilt))["split"] == 0

def test_tensor_level_threads(monkeypatch):
  from tinyplug.engine.realize import realize, buffer_of
  from tinyplug.helpers import Context
  a = UOp.new_buffer("CPU", 1 << 20, dtypes.float)
  buffer_of(a).copyin(np.random.rand(1 << 20).astype(np.float32))
  x = a.reshape((1024, 1024))
  outs = []
  for n in (1, 2):
    with Context(CPU_THREADS=n):
      y = UOp(Ops.MUL, dtypes.float, (x, x))
      s = UOp(Ops.REDUCE_AXIS, dtypes.float, (y,), (Ops.ADD, (1,)))
      outs.append(buffer_of(realize([s])[s]).numpy())
  np.testing.assert_array_equal(outs[0], outs[1])

def test_pool_survives_fork(run):
  import os, sys
  if not hasattr(os, "fork"): pytest.skip("no fork")
  uops = _matvec_like(64, 2048)
  a = np.random.rand(64 * 2048).astype(np.float32)
  o = np.zeros(64, np.float32)
  run(uops, [o, a], threads=2)        # the parent's pool has a worker now
  pid = os.fork()
  if pid == 0:
    try:
      o2 = np.zeros(64, np.float32)
      run(uops, [o2, a], threads=2)
      os._exit(0 if np.array_equal(o, o2) else 1)
    except BaseException:
      os._exit(2)
  _, status = os.waitpid(pid, 0)
  assert os.waitstatus_to_exitcode(status) == 0
