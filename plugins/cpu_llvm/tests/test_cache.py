"""The compile cache: in memory, on disk in SQLite (shared by processes), off with CACHELEVEL=0."""
import os, subprocess, sys, textwrap
import pytest

# a script that compiles a few kernels through the Tensor-free path and prints how many LLVM compiles it did
SCRIPT = textwrap.dedent("""
  import sys, numpy as np
  from tinyplug.uop import UOp, Ops, dtypes
  from tinyplug.engine.realize import realize, buffer_of
  from tinyplug_cpu_llvm.compiler import LLVMCompiler
  tag = float(sys.argv[1])
  a = UOp.new_buffer("CPU", 64, dtypes.float); buffer_of(a).copyin(np.arange(64, dtype=np.float32))
  x = a.reshape((8, 8))
  y = UOp(Ops.ADD, dtypes.float, (x, UOp(Ops.EXPAND, dtypes.float, (UOp(Ops.RESHAPE, dtypes.float,
      (UOp(Ops.CONST, dtypes.float, (UOp(Ops.DEVICE, arg="CPU"),), tag),), (1, 1)),), (8, 8))))
  s = UOp(Ops.REDUCE_AXIS, dtypes.float, (y,), (Ops.ADD, (1,)))
  m = realize([s, y])
  assert np.allclose(buffer_of(m[s]).numpy(), (np.arange(64).reshape(8, 8) + tag).sum(1))
  print("COMPILES", LLVMCompiler.compiles)
""")

def _run(tmp_path, tag: float, **env) -> int:
  e = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "DEV": "CPU", **env}
  out = subprocess.run([sys.executable, "-c", SCRIPT, str(tag)], capture_output=True, text=True, timeout=300, env=e)
  assert out.returncode == 0, out.stderr
  return int(out.stdout.split("COMPILES")[-1])

def test_second_process_compiles_nothing(tmp_path):
  assert _run(tmp_path, 1.5) == 2
  assert os.path.exists(tmp_path / "tinyplug" / "cpu_llvm.sqlite")
  assert _run(tmp_path, 1.5) == 0          # warm: every object comes from the disk cache
  assert _run(tmp_path, 2.5) >= 1          # a different constant is a different kernel

def test_cachelevel_0_turns_the_disk_cache_off(tmp_path):
  assert _run(tmp_path, 3.5, CACHELEVEL="0") == 2
  assert not os.path.exists(tmp_path / "tinyplug" / "cpu_llvm.sqlite")
  assert _run(tmp_path, 3.5) == 2
  assert _run(tmp_path, 3.5, CACHELEVEL="0") == 2

def test_concurrent_writers(tmp_path):
  e = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "DEV": "CPU"}
  procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(4.5 + (i % 2))], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=e) for i in range(6)]
  for p in procs:
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
  assert _run(tmp_path, 4.5) == 0 and _run(tmp_path, 5.5) == 0

def test_unusable_cache_file_just_recompiles(tmp_path):
  d = tmp_path / "tinyplug"
  d.mkdir()
  (d / "cpu_llvm.sqlite").write_bytes(b"this is not a database" * 100)
  assert _run(tmp_path, 6.5) == 2
  assert _run(tmp_path, 6.5) == 2

def test_memory_cache_and_key():
  from tinyplug.device import Device
  comp = Device["CPU"].compiler
  src = "define void @k(i32 %core_id, i32 %n_cores) {\nentry:\n  ret void\n}\n"
  before = type(comp).compiles
  lib = comp.compile_cached(src)
  assert comp.compile_cached(src) is lib and type(comp).compiles - before <= 1
  assert comp.key(src) != comp.key(src + " ")
  assert lib[:4] == b"\x7fELF"

# a small training loop as a user writes it: no manual_seed (the RNG starts from the time, different per process),
# weights from Tensor.uniform/kaiming, dropout drawing random numbers inside the jitted step, Adam
TRAIN_SCRIPT = textwrap.dedent("""
  import numpy as np
  from tinyplug import Tensor, TinyJit, nn
  from tinyplug.nn.optim import Adam
  from tinyplug.nn.state import get_parameters
  from tinyplug.engine import realize
  from tinyplug_cpu_llvm.compiler import LLVMCompiler
  class Net:
    def __init__(self): self.c, self.l1, self.l2 = nn.Conv2d(1, 2, 3), nn.Linear(2 * 4 * 4, 8), nn.Linear(8, 3)
    def __call__(self, x): return self.l2(self.l1(self.c(x).relu().flatten(1)).relu().dropout(0.25))
  net = Net()
  opt = Adam(get_parameters(net), lr=1e-2)
  @TinyJit
  @Tensor.train()
  def step(x, y):
    opt.zero_grad()
    loss = net(x).sparse_categorical_crossentropy(y).backward()
    return loss.realize(*opt.schedule_step())
  rng = np.random.default_rng(0)
  losses = [step(Tensor(rng.standard_normal((4, 1, 6, 6), dtype=np.float32)),
                 Tensor(rng.integers(0, 3, 4).astype(np.int32))).item() for _ in range(4)]
  assert all(np.isfinite(losses)), losses
  print("KERNELS", len(realize._runners), "COMPILES", LLVMCompiler.compiles)
""")

def test_second_training_process_gets_every_kernel_from_the_disk_cache(tmp_path):
  e = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "DEV": "CPU"}
  runs = []
  for _ in range(2):
    out = subprocess.run([sys.executable, "-c", TRAIN_SCRIPT], capture_output=True, text=True, timeout=600, env=e)
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    runs.append((int(words[words.index("KERNELS") + 1]), int(words[words.index("COMPILES") + 1])))
  (kernels1, compiles1), (kernels2, compiles2) = runs
  assert kernels1 == kernels2 > 10 and compiles1 > 10   # the same kernels, each compiled once in the first process
  assert compiles2 == 0, f"the second process compiled {compiles2} of its {kernels2} kernels again"

@pytest.mark.parametrize("damage", ["empty", "random", "truncated", "swapped"])
def test_damaged_object_is_dropped_and_compiled_again(tmp_path, damage):
  """A damaged or substituted object in cpu_llvm.sqlite is never loaded: the run compiles it again, says so once,
  and the next run is warm again."""
  import sqlite3
  assert _run(tmp_path, 7.5) == 2
  db = tmp_path / "tinyplug" / "cpu_llvm.sqlite"
  with sqlite3.connect(db) as conn:
    rows = conn.execute("SELECT key, payload FROM cpu_llvm_objects_v2 ORDER BY key").fetchall()
    assert len(rows) == 2
    (k0, o0), (k1, o1) = rows
    new = {"empty": (b"", o1), "random": (os.urandom(len(o0)), o1), "truncated": (o0[:len(o0) // 2], o1),
           "swapped": (o1, o0)}[damage]
    conn.execute("UPDATE cpu_llvm_objects_v2 SET payload=? WHERE key=?", (new[0], k0))
    conn.execute("UPDATE cpu_llvm_objects_v2 SET payload=? WHERE key=?", (new[1], k1))
  e = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "DEV": "CPU"}
  out = subprocess.run([sys.executable, "-c", SCRIPT, "7.5"], capture_output=True, text=True, timeout=300, env=e)
  assert out.returncode == 0, out.stderr                      # the value check inside SCRIPT passed too
  assert int(out.stdout.split("COMPILES")[-1]) == (2 if damage == "swapped" else 1)
  assert out.stderr.count("dropped a damaged entry of the cpu_llvm cache") == 1, out.stderr
  assert _run(tmp_path, 7.5) == 0
