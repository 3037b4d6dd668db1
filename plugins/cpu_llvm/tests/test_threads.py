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
  from tinyplug.backend import ProgramSpec
  from tinyplug_cpu_llvm import LLVMRenderer
  uops = _matvec_like(1001, 333)
  src = LLVMRenderer().render("k", uops)
  spec = ProgramSpec("k", tuple(uops), src)
  assert spec.thread_split and spec.work == 1001 + 1001 * 333
  assert "%core_id" in src and "%n_cores" in src and not src.startswith(";")

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
  from tinyplug.backend import shareable_loop
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
  assert shareable_loop(rebuilt) is None

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

# ---------------- the pool itself ----------------

_ARGS_IR = """
define void @argk(ptr %out, i32 %a, i64 %b, ptr %other, i32 %core, i32 %n) {
  %slot = mul i32 %core, 4
  %s64 = sext i32 %slot to i64
  %p0 = getelementptr i64, ptr %out, i64 %s64
  %a64 = sext i32 %a to i64
  store i64 %a64, ptr %p0
  %p1 = getelementptr i64, ptr %p0, i64 1
  store i64 %b, ptr %p1
  %p2 = getelementptr i64, ptr %p0, i64 2
  %o = ptrtoint ptr %other to i64
  store i64 %o, ptr %p2
  %p3 = getelementptr i64, ptr %p0, i64 3
  %n64 = sext i32 %n to i64
  store i64 %n64, ptr %p3
  ret void
}
"""

def _args_kernel():
  import ctypes
  from tinyplug.device import Device
  from tinyplug_cpu_llvm.compiler import symbol_for
  dev = Device["CPU"]
  addr = dev.load(symbol_for(_ARGS_IR), dev.compiler.compile_cached(_ARGS_IR))
  return ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int32,
                          ctypes.c_int32)(addr)

def _native_or_skip():
  import platform, sys
  from tinyplug_cpu_llvm.threads import NativeThreadPool, pool
  if not sys.platform.startswith("linux") or platform.machine().lower() not in ("x86_64", "amd64", "aarch64", "arm64"):
    pytest.skip("the native pool is for Linux on x86-64/aarch64")
  p = pool()
  assert isinstance(p, NativeThreadPool), "the native pool should build on this platform"
  return p

@pytest.mark.parametrize("n", [1, 2, 3, 6])
def test_native_pool_passes_every_argument_to_every_core(n):
  p = _native_or_skip()
  fn = _args_kernel()
  out, other = np.zeros(4 * 8, np.int64), np.zeros(4, np.int64)
  for a, b in [(-7, 2**40 + 3), (2**31 - 1, -(2**62))]:
    out[:] = 0
    p.run(fn, [out.ctypes.data, a, b, other.ctypes.data], n)
    rows = out.reshape(8, 4)
    for core in range(8):
      want = [a, b, other.ctypes.data, n] if core < n else [0, 0, 0, 0]
      assert rows[core].tolist() == want, f"core {core} of {n}"

@pytest.mark.parametrize("spin_us", [0, 2000])
def test_native_pool_sleeping_and_spinning_workers(run, spin_us):
  # with CPU_SPIN_US=0 every job wakes the workers from their futex; with spinning they catch it on the fly
  import time
  from tinyplug.helpers import Context
  _native_or_skip()
  uops = _matvec_like(64, 2048)
  a = np.random.rand(64 * 2048).astype(np.float32)
  want = np.sin(a.astype(np.float64)).reshape(64, 2048).sum(1)
  with Context(CPU_SPIN_US=spin_us):
    for i in range(20):
      o = np.zeros(64, np.float32)
      run(uops, [o, a], threads=2 + i % 3)
      np.testing.assert_allclose(o, want, rtol=1e-4)
      if i % 5 == 0: time.sleep(0.005)   # longer than any spin: the workers are asleep for the next one

def test_python_callables_run_on_the_python_pool():
  from tinyplug_cpu_llvm.threads import pool
  seen = []
  pool().run(lambda x, core, n: seen.append((x, core, n)), [5], 3)
  assert sorted(seen) == [(5, 0, 3), (5, 1, 3), (5, 2, 3)]
  with pytest.raises(ZeroDivisionError):
    pool().run(lambda core, n: 1 // (core - 1), [], 2)
  pool().run(lambda core, n: seen.append(core), [], 2)    # the pool survives a failing job

def test_process_exits_cleanly_right_after_a_parallel_kernel():
  # the workers are still spinning in JIT code when the interpreter shuts down: stopping them must not hang or crash
  import os, subprocess, sys
  code = ("import numpy as np\nfrom tinyplug import Tensor\n"
          "x = Tensor(np.ones((512, 512), np.float32))\n"
          "print(float((x @ x).sum().item()))\n")
  for _ in range(3):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "CPU_THREADS": "2", "DEV": "CPU"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(512.0 ** 3)

def test_native_pool_close_stops_workers_and_a_later_job_starts_new_ones():
  p = _native_or_skip()
  fn = _args_kernel()
  out, other = np.zeros(4 * 8, np.int64), np.zeros(4, np.int64)
  p.run(fn, [out.ctypes.data, 1, 2, other.ctypes.data], 3)
  old = list(p.workers)
  p.close()
  for t in old: t.join(timeout=10)   # back in Python, the thread function returns
  assert not any(t.is_alive() for t in old) and p.workers == []
  out[:] = 0
  p.run(fn, [out.ctypes.data, 3, 4, other.ctypes.data], 2)
  assert out.reshape(8, 4)[:3].tolist() == [[3, 4, other.ctypes.data, 2]] * 2 + [[0, 0, 0, 0]]

def test_mid_sized_kernels_split_only_while_the_workers_are_awake(run):
  from tinyplug.device import Device, ProgramSpec
  from tinyplug.helpers import Context
  p = _native_or_skip()
  dev = Device["CPU"]
  uops = _matvec_like(30, 1000)    # 30 + 30*1000 loop-body executions: between the two thresholds
  src = dev.renderer.render("k", uops)
  mid = dev.make_program(ProgramSpec("k", tuple(uops), src), dev.compiler.compile_cached(src))
  a = np.random.rand(64 * 2048).astype(np.float32)
  with Context(CPU_THREADS=2, CPU_SPIN_US=200_000):
    run(_matvec_like(64, 2048), [np.zeros(64, np.float32), a], threads=2)   # a parallel kernel: workers awake now
    assert p.awake() and mid.threads() == 2
    p.last_done -= 1.0     # as if the last parallel kernel ran a second ago: the workers sleep
    assert not p.awake() and mid.threads() == 1
    o = np.zeros(30, np.float32)
    run(uops, [o, a[:30000]], threads=2)
    np.testing.assert_allclose(o, np.sin(a[:30000].astype(np.float64)).reshape(30, 1000).sum(1), rtol=1e-4)

def test_python_pool_runs_kernels_where_the_native_one_cannot_be_built(run, monkeypatch):
  # other platforms (or a failed build) get the portable pool: same results, same interface
  from tinyplug_cpu_llvm import threads
  monkeypatch.setattr(threads, "_pool", threads.PyThreadPool())
  assert not threads.pool().awake()
  uops = _matvec_like(64, 2048)
  a = np.random.rand(64 * 2048).astype(np.float32)
  o1, o2 = np.zeros(64, np.float32), np.zeros(64, np.float32)
  run(uops, [o1, a], threads=1)
  run(uops, [o2, a], threads=3)
  np.testing.assert_array_equal(o1, o2)
  fn = _args_kernel()
  out, other = np.zeros(4 * 8, np.int64), np.zeros(4, np.int64)
  threads.pool().run(fn, [out.ctypes.data, -3, 5, other.ctypes.data], 2)
  assert out.reshape(8, 4)[:2].tolist() == [[-3, 5, other.ctypes.data, 2]] * 2

def test_a_call_with_the_wrong_buffer_count_is_refused_not_run():
  """Extra pointers would land in the kernel's (core_id, n_cores) slots: a division by zero that kills the process."""
  from tinyplug.engine.realize import get_runner
  from tinyplug.schedule import create_schedule
  from tinyplug.tensor import Tensor
  t = Tensor.ones(8, device="CPU").contiguous().realize() * 3
  item = create_schedule([t.uop])[0][-1]
  runner = get_runner("CPU", item.ast)
  bufs = [b.ensure_allocated().handle for b in item.bufs]
  with pytest.raises(ValueError, match=r"takes 2 buffers and 0 values, got 3 and 0"): runner.prg(*bufs, bufs[0])
  runner.prg(*bufs)
  assert t.numpy().tolist() == [3.0] * 8

def test_shared_loop_bounds_let_llvm_drop_the_sign_extensions(monkeypatch):
  """The shared loop's bounds are clamped to [0, end], so LLVM knows its 32-bit counter stays small: every index is
  widened to 64 bits once instead of sign-extended per access (42 `sext`s in a 4x4-upcast transposition's loops before;
  they made LSR and IndVarSimplify the most expensive passes of small kernels). Results stay exact on any thread count."""
  from tinyplug import Tensor, Device
  from tinyplug.helpers import Context
  from tinyplug_cpu_llvm.compiler import LLVMCompiler
  specs = []
  compile_program = LLVMCompiler.compile_program
  monkeypatch.setattr(LLVMCompiler, "compile_program", lambda self, spec: specs.append(spec) or compile_program(self, spec))
  x = np.random.rand(64, 64, 12, 12).astype(np.float32)
  compiler = Device["CPU"].compiler    # opening the device registers CPU_THREADS
  for threads in (1, 2, 5):
    with Context(CPU_THREADS=threads):
      np.testing.assert_array_equal(Tensor(x).permute(0, 2, 3, 1).contiguous().numpy(), x.transpose(0, 2, 3, 1))
  split = [sp for sp in specs if sp.thread_split and not sp.work <= 1024]
  assert split
  for sp in split:
    blocks = compiler.optimized_ir(sp.src).split("define")[1].split("\n\n")
    assert "sext" not in "".join(blocks[1:]), sp.name    # only the entry block widens core_id and n_cores

def _cpu_program(ast):
  from tinyplug.codegen import get_program
  from tinyplug.device import Device
  dev = Device["CPU"]
  spec = get_program(ast, dev.renderer)
  return spec, dev.make_program(spec, dev.compiler.compile_cached(spec.src))

@pytest.fixture
def avx512_machine(monkeypatch):
  """The CPU renderer describes a Zen 4 (AVX-512's 32 vector registers of 64 bytes, 1 MB L2): the loop-body counts
  below are that tile's, whatever the host (an AVX2 host's 16 x 4 tile makes four times the bodies)."""
  from tinyplug import schedule
  from tinyplug.device import Device
  r = Device["CPU"].renderer
  for name, value in (("vector_bytes", 64), ("vector_registers", 32), ("cache_bytes", (32 << 10, 1 << 20, 32 << 20))):
    monkeypatch.setattr(r, name, value)
  schedule._templates.clear()   # no schedule made for the host's machine
  yield r
  schedule._templates.clear()

def test_few_wide_bodies_over_big_buffers_share_out(avx512_machine):
  """Packing B for a 1024 matmul: ~8k loop bodies of 128 floats each (8 MB), under the loop-body count that splits a
  kernel, shares out by its bytes; a one-row slice of a big tensor (as many bytes, a few bodies) stays on one thread."""
  from tinyplug import Tensor
  from tinyplug.helpers import Context
  from tinyplug.schedule import create_schedule
  a, b = Tensor.empty(1024, 1024, device="CPU"), Tensor.empty(1024, 1024, device="CPU")
  items, _ = create_schedule([(a @ b).uop])
  assert len(items) == 2, "the pack pass no longer packs B: pick another kernel with few wide bodies"
  spec, pack = _cpu_program(items[0].ast)
  assert spec.work < 1 << 14 and spec.estimates["mem"] >= 8 << 20
  (row,), _ = create_schedule([Tensor.empty(4096, 1024, device="CPU")[7:8].contiguous().uop])
  _, one_row = _cpu_program(row.ast)
  with Context(CPU_THREADS=16): assert pack.threads() == 16 and one_row.threads() == 1
  with Context(CPU_THREADS=2): assert pack.threads() == 2

def test_tiled_kernel_gets_a_thread_per_million_operations(monkeypatch, avx512_machine):
  """A skinny matmul (64x9216 @ 9216x128): 295K loop bodies, each an 8 x 32 tile of products, 150M operations; by bodies
  it took 13 of 16 threads, by its operations all 16. A kernel of few bodies stays on one thread whatever its
  operations, and two threads stay two."""
  from tinyplug import Tensor
  from tinyplug.backend import ProgramSpec
  from tinyplug.device import Device
  from tinyplug.helpers import Context
  from tinyplug.schedule import create_schedule
  (item,), _ = create_schedule([(Tensor.empty(64, 9216, device="CPU") @ Tensor.empty(9216, 128, device="CPU")).uop])
  with Context(CPU_THREADS=16, CACHELEVEL=0): spec, prg = _cpu_program(item.ast)
  assert spec.estimates["ops"] >= 16 << 20 and spec.work // (1 << 15) < 16   # by bodies alone: fewer than 16
  monkeypatch.setattr(prg.device.pool, "awake", lambda: False)   # workers asleep: the stricter rule by bodies
  with Context(CPU_THREADS=16): assert prg.threads() == 16
  with Context(CPU_THREADS=2): assert prg.threads() == 2
  dev, uops = Device["CPU"], _matvec_like(64, 64)   # 4K bodies
  src = dev.renderer.render("k", uops)
  small = dev.make_program(ProgramSpec("k", tuple(uops), src, estimates={"ops": 64 << 20}), dev.compiler.compile_cached(src))
  with Context(CPU_THREADS=16): assert small.threads() == 1

def test_a_kernel_whose_last_run_was_long_gets_a_thread_per_share_of_it():
  """q @ k^T 8x12x128x64 packs k in a kernel of 14K loop bodies over 6 MB with strided loads (0.6 ms on one Zen 4 core):
  by its bytes 12 of 16 threads. Once a run took that long it gets one thread per PARALLEL_SHARE_S of it, no more than
  its shared loop has rows; a short run changes nothing, two threads stay two, a one-thread kernel stays one; run as
  its 16 shares one after the other, every share has rows and the values are numpy's."""
  from tinyplug import Tensor
  from tinyplug.helpers import Context
  from tinyplug.schedule import create_schedule
  from tinyplug_cpu_llvm import runtime as rt
  q, k = Tensor.empty(8, 12, 128, 64, device="CPU"), Tensor.empty(8, 12, 128, 64, device="CPU")
  with Context(CPU_THREADS=16, CACHELEVEL=0):
    items, _ = create_schedule([(q @ k.transpose(-2, -1)).uop])
    assert len(items) == 2, "q @ k^T no longer packs k: pick another kernel of few bodies and many bytes"
    spec, pack = _cpu_program(items[0].ast)
  assert spec.work < rt.PARALLEL_MIN_WORK_AWAKE and 1 < pack.byte_shares < 16 and pack.shared_rows() >= 16
  with Context(CPU_THREADS=16):
    assert pack.threads() == pack.byte_shares                     # never run
    pack.last_s, pack.last_threads = 2 * rt.PARALLEL_SHARE_S, 8   # 8 threads ran two shares' time each: 16
    assert pack.threads() == 16
    pack.last_s = 0.5 * rt.PARALLEL_SHARE_S                       # each of 8 threads ran half a share: nothing changes
    assert pack.threads() == pack.byte_shares
    pack.last_s, pack.last_threads = 605e-6, 1
    assert pack.threads() == 16
  with Context(CPU_THREADS=2): assert pack.threads() == 2
  with Context(CPU_THREADS=64): assert pack.threads() == min(60, pack.shared_rows())
  (row,), _ = create_schedule([Tensor.empty(4096, 1024, device="CPU")[7:8].contiguous().uop])
  _, one_row = _cpu_program(row.ast)
  one_row.last_s = 1.0
  with Context(CPU_THREADS=16): assert one_row.threads() == 1
  # the pack's 16 shares in turn: each writes its own rows, together k^T packed as the matmul reads it
  kv = np.random.default_rng(0).random((8, 12, 128, 64), dtype=np.float32)
  out, seen = np.full(8 * 12 * 128 * 64, np.nan, np.float32), []
  for c in range(16):
    before = np.isnan(out).sum()
    pack.fn(out.ctypes.data, kv.ctypes.data, c, 16)
    seen.append(before - np.isnan(out).sum())
  assert all(n > 0 for n in seen) and not np.isnan(out).any()
  whole = np.zeros_like(out)
  pack.fn(whole.ctypes.data, kv.ctypes.data, 0, 1)
  np.testing.assert_array_equal(out, whole)
  np.testing.assert_array_equal(np.sort(out), np.sort(kv.ravel()))   # a permutation of k's values

def test_packed_matmul_with_its_pack_shared_out_matches_numpy():
  from tinyplug import Tensor
  from tinyplug.helpers import Context
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((1024, 1024), dtype=np.float32), rng.standard_normal((1024, 1024), dtype=np.float32)
  with Context(CPU_THREADS=5):   # 8 blocks of B's panels over 5 threads: uneven shares
    got = (Tensor(a, device="CPU") @ Tensor(b, device="CPU")).numpy()
  np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)

# ---------------- shares: each thread's block first, then what is left of the others' ----------------

def _share_kernel():
  """`k(ptr count, ptr who, share, n)`: count[share] += 1 and who[share] = the running thread's Linux id (gettid)."""
  import ctypes, platform
  from tinyplug.device import Device
  from tinyplug_cpu_llvm.compiler import symbol_for
  nr = {"x86_64": 186, "amd64": 186, "aarch64": 178, "arm64": 178}[platform.machine().lower()]
  ir = f"""
declare i64 @syscall(i64, ...)
define void @sharek(ptr %count, ptr %who, i32 %share, i32 %n) {{
  %i = sext i32 %share to i64
  %p = getelementptr i64, ptr %count, i64 %i
  atomicrmw add ptr %p, i64 1 seq_cst
  %tid = call i64 (i64, ...) @syscall(i64 {nr})
  %q = getelementptr i64, ptr %who, i64 %i
  store i64 %tid, ptr %q
  ret void
}}
"""
  dev = Device["CPU"]
  addr = dev.load(symbol_for(ir), dev.compiler.compile_cached(ir))
  return ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32)(addr)

@pytest.mark.parametrize("n,per", [(2, 1), (16, 8), (6, 2), (12, 3), (256, 128)])
def test_native_pool_runs_every_share_exactly_once(n, per):
  p = _native_or_skip()
  fn = _share_kernel()
  for _ in range(50):
    count, who = np.zeros(n, np.int64), np.zeros(n, np.int64)
    p.run(fn, [count.ctypes.data, who.ctypes.data], n, per)
    assert count.tolist() == [1] * n

def test_native_pool_caller_takes_every_share_when_no_worker_comes():
  """A worker that never gets to the job (here: there is none) leaves the whole job to the caller, which takes its own
  block in order and then the others' from their ends, and returns without waiting for anyone."""
  import ctypes, threading
  p = _native_or_skip()
  fn = _share_kernel()
  p.run(fn, [np.zeros(2, np.int64).ctypes.data, np.zeros(2, np.int64).ctypes.data], 2)   # builds the trampoline
  p.close()
  assert p.workers == []
  entry = p._entry(fn)
  count, who = np.zeros(12, np.int64), np.zeros(12, np.int64)
  argv = (ctypes.c_int64 * 2)(count.ctypes.data, who.ctypes.data)
  p._run(p.addr, entry[2], entry[1], ctypes.addressof(argv), 12, 4)   # 3 blocks of 4, no worker
  assert count.tolist() == [1] * 12 and set(who.tolist()) == {threading.get_native_id()}

def test_native_pool_refuses_shares_that_do_not_make_blocks():
  p = _native_or_skip()
  fn = _share_kernel()
  buf = np.zeros(8, np.int64)
  for n, per in [(5, 2), (4, 0), (0, 1)]:
    with pytest.raises(ValueError, match="blocks"): p.run(fn, [buf.ctypes.data, buf.ctypes.data], n, per)
  from tinyplug_cpu_llvm.threads import MAX_SHARES
  with pytest.raises(ValueError, match="at most"): p.run(fn, [buf.ctypes.data, buf.ctypes.data], 2 * MAX_SHARES, 2)

def test_python_pool_runs_blocks_of_shares():
  from tinyplug_cpu_llvm.threads import PyThreadPool
  seen = []
  PyThreadPool().run(lambda core, n: seen.append((core, n)), [], 6, 3)
  assert sorted(seen) == [(c, 6) for c in range(6)]

def test_shares_per_thread_follow_the_last_run():
  """A kernel gets as many shares per thread as SHARE_MIN_S fit in its last run, 1 to SHARES_PER_THREAD."""
  from tinyplug.device import Device, ProgramSpec
  from tinyplug_cpu_llvm import runtime as rt
  dev = Device["CPU"]
  uops = _matvec_like(1000, 1000)
  src = dev.renderer.render("k", uops)
  prg = dev.make_program(ProgramSpec("k", tuple(uops), src), dev.compiler.compile_cached(src))
  assert prg.last_s == 0.0 and prg.shares_per_thread(2) == 1        # never run: one share per thread
  prg.last_s = 3.5 * rt.SHARE_MIN_S
  assert prg.shares_per_thread(2) == 3
  prg.last_s = 1.0
  assert prg.shares_per_thread(2) == rt.SHARES_PER_THREAD
  from tinyplug_cpu_llvm.threads import MAX_SHARES
  assert prg.shares_per_thread(MAX_SHARES) == 1 and prg.shares_per_thread(MAX_SHARES // 2) == 2
  prg.thread_opt = 2                 # a THREAD axis of 2 parts (a matmul's): one share per thread, however long
  assert prg.shares_per_thread(2) == 1
  prg.thread_opt = 12
  assert prg.shares_per_thread(2) == 6 and prg.shares_per_thread(3) == 4
  prg.thread_opt = None
  short = _matvec_like(6, 100000)    # 6 rows: 3 shares of one row each per thread at most, no empty ones
  src = dev.renderer.render("k", short)
  few = dev.make_program(ProgramSpec("k", tuple(short), src), dev.compiler.compile_cached(src))
  few.last_s = 1.0
  assert few.shared_rows() == 6 and few.shares_per_thread(2) == 3 and few.shares_per_thread(4) == 1

@pytest.mark.parametrize("N,threads", [(1001, 2), (1001, 3), (5, 2), (64, 5)])
def test_many_shares_per_thread_give_the_same_result(N, threads):
  """Several shares per thread (the last run was long) cut the loop finer; the result is the same to the bit and the
  same as numpy's, also where shares outnumber the rows (empty shares)."""
  from tinyplug.device import Device, ProgramSpec
  from tinyplug.helpers import Context
  dev = Device["CPU"]
  M = 4096 if N > 10 else 40000
  uops = _matvec_like(N, M)
  src = dev.renderer.render("k", uops)
  prg = dev.make_program(ProgramSpec("k", tuple(uops), src), dev.compiler.compile_cached(src))
  a = np.random.default_rng(N).random(N * M, dtype=np.float32)
  one, many = np.zeros(N, np.float32), np.zeros(N, np.float32)
  with Context(CPU_THREADS=1): prg(one, a)
  prg.last_s = 1.0
  with Context(CPU_THREADS=threads):
    assert prg.threads() == threads and prg.shares_per_thread(threads) > 1
    prg(many, a)
  np.testing.assert_array_equal(one, many)
  np.testing.assert_allclose(many, np.sin(a.astype(np.float64)).reshape(N, M).sum(1), rtol=1e-4)

def test_trampolines_come_from_the_object_cache(tmp_path, monkeypatch):
  """The pool's trampoline for a kernel signature is compiled once and kept with the kernels' objects (on disk too): a
  process that meets the signature again loads it (no compile, ~2 ms each in a warm first step), and it runs."""
  import ctypes
  from tinyplug.device import Device
  from tinyplug_cpu_llvm.compiler import LLVMCompiler
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  dev = Device["CPU"]
  p = dev.pool
  _native_or_skip()
  types = ("ptr",) * 3 + ("i32",) * 2   # a signature no kernel of the suite has
  monkeypatch.setattr(p, "_trampolines", {})
  before = LLVMCompiler.compiles
  first = p.trampoline(types)
  assert LLVMCompiler.compiles == before + 1 and p.load_ir is not None
  monkeypatch.setattr(p, "_trampolines", {})   # as a new process: only the disk has it
  dev.compiler._memory.clear()
  monkeypatch.setattr(p, "_build_trampoline", lambda *a: pytest.fail("built in process"))
  assert p.trampoline(types) == first and LLVMCompiler.compiles == before + 1
  fn = _share_kernel()
  count, who = np.zeros(4, np.int64), np.zeros(4, np.int64)
  monkeypatch.setattr(p, "_entries", {})
  p.run(fn, [count.ctypes.data, who.ctypes.data], 4, 2)   # a kernel through a trampoline from the cache
  assert count.tolist() == [1] * 4
