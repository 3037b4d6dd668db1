"""Codegen results on disk: a warm start skipped compiling but ran codegen for every kernel again (most of the first
training steps with a warm cache: E_128_784, a weight's random init, took 1.2-1.8 s of codegen). Programs come back
as the very same UOps; anything that changes the lowering changes the key; a damaged entry is rebuilt."""
import json, os, subprocess, sys
import numpy as np
import pytest
import tinyplug.codegen as codegen
from tinyplug import Tensor, diskcache, nn
from tinyplug.codegen import program_cache
from tinyplug.device import Device
from tinyplug.helpers import Context
from tinyplug.schedule import create_schedule

def _kernels(device: str) -> list:
  a = Tensor(np.arange(24, dtype=np.float32).reshape(4, 6), device=device)
  b = Tensor(np.ones((6, 3), dtype=np.float32), device=device)
  outs = [(a @ b).relu(), a.softmax(-1), a.max(0), (a.cast("int32") * 3 // 2), nn.Linear(20, 7).weight.to(device) * 1]
  return [it.ast for o in outs for it in create_schedule([o.uop])[0] if it.ast.op.name == "SINK"]

def test_programs_come_back_as_the_same_uops(device):
  renderer = Device[device].renderer
  for ast in _kernels(device):
    spec = codegen.get_program(ast, renderer)
    back = program_cache.decode(program_cache.encode(spec))   # encode refuses what would not come back the same
    assert back == spec and all(x is y for x, y in zip(back.uops, spec.uops)) and back.src == spec.src

def test_a_program_read_back_builds_its_uops_only_when_read(device):
  """The cache hands back a StoredProgram: launch fields now, the linear program on first read, and it is the very
  same program (equal, same hash, the same UOp objects) as the one stored."""
  renderer = Device[device].renderer
  for ast in _kernels(device):
    spec = codegen.get_program(ast, renderer)
    lazy = program_cache.decode(program_cache.encode(spec), lazy=True)
    assert isinstance(lazy, program_cache.StoredProgram) and "uops" not in vars(lazy)
    assert lazy.buffer_count == spec.buffer_count == len(spec.outs) + len(spec.ins)
    assert all(a is b for a, b in zip(lazy.vars, spec.vars)) and len(lazy.vars) == len(spec.vars)
    assert (lazy.src, lazy.global_size, lazy.work, lazy.thread_split) == (spec.src, spec.global_size, spec.work, spec.thread_split)
    assert lazy.shared_trips == spec.shared_trips   # (what a CPU runtime shares among threads)
    assert "uops" not in vars(lazy)   # none of the launch fields needed the program
    assert lazy == spec and spec == lazy and hash(lazy) == hash(spec) and not (lazy != spec)
    assert len(lazy.uops) == len(spec.uops) and all(a is b for a, b in zip(lazy.uops, spec.uops))

def test_a_lazy_read_parses_only_the_launch_fields(device):
  """A program's rows (most of its JSON) are parsed when its UOps are first read, not when it is read back."""
  renderer = Device[device].renderer
  for ast in _kernels(device):
    spec = codegen.get_program(ast, renderer)
    head = program_cache.encode(spec).split(b"\n")[0]
    lazy = program_cache.decode(head + b"\n[not json", lazy=True)
    assert (lazy.src, lazy.buffer_count, lazy.global_size) == (spec.src, spec.buffer_count, spec.global_size)
    with pytest.raises(ValueError): lazy.uops
    with pytest.raises(ValueError): program_cache.decode(head + b"\n[not json")

def test_the_graph_text_names_the_graph():
  """The key's text of an AST: equal graphs give equal text, any difference in op, dtype, arg or wiring another."""
  from tinyplug.uop.dtype import dtypes
  from tinyplug.uop.ops import Ops, UOp
  a, b = UOp.const(dtypes.float, 1.0), UOp.const(dtypes.float, 2.0)
  g = lambda x, y: UOp(Ops.SINK, dtypes.void, ((x + y) * x,))
  text = program_cache.graph_text(g(a, b))
  assert text == program_cache.graph_text(g(UOp.const(dtypes.float, 1.0), b))
  others = [g(b, a), g(a, UOp.const(dtypes.float, -2.0)), g(a, a), UOp(Ops.SINK, dtypes.void, ((a + b) * b,)),
            g(UOp.const(dtypes.float, 0.0), b), g(UOp.const(dtypes.float, -0.0), b),
            UOp(Ops.SINK, dtypes.void, ((UOp.const(dtypes.int, 1) + UOp.const(dtypes.int, 2)) * UOp.const(dtypes.int, 1),))]
  texts = [program_cache.graph_text(o) for o in others]
  assert text not in texts and len(set(texts)) == len(texts)

def test_the_key_follows_what_the_lowering_depends_on(monkeypatch):
  renderer = Device["CPU"].renderer
  ast = _kernels("CPU")[0]
  steps = codegen.pipeline_steps(renderer)
  key = program_cache.program_key("k", ast, renderer, None, steps)
  assert key == program_cache.program_key("k", ast, renderer, None, steps)
  with Context(NOOPT=1): assert program_cache.program_key("k", ast, renderer, None, steps) != key
  with Context(DEBUG=3): assert program_cache.program_key("k", ast, renderer, None, steps) == key
  with Context(TRAINING=1, JIT=0): assert program_cache.program_key("k", ast, renderer, None, steps) == key
  assert program_cache.program_key("k2", ast, renderer, None, steps) != key
  assert program_cache.program_key("k", _kernels("CPU")[1], renderer, None, steps) != key
  regs = renderer.vector_registers
  monkeypatch.setattr(renderer, "vector_registers", regs + 1)   # a setting of the renderer
  assert program_cache.program_key("k", ast, renderer, None, steps) != key
  monkeypatch.setattr(renderer, "vector_registers", regs)
  assert program_cache.program_key("k", ast, renderer, None, steps) == key
  monkeypatch.setitem(diskcache._source_digests, "tinyplug", "edited")   # tinyplug's source changed
  assert program_cache.program_key("k", ast, renderer, None, steps) != key

_RUN = """
import json, numpy as np, tinyplug.codegen as codegen
from tinyplug import Tensor, diskcache, nn
from tinyplug.nn.optim import Adam
import hashlib, tinyplug.schedule as sched
from tinyplug.device import Device
from tinyplug.codegen.program_cache import graph_text
import tinyplug.engine.realize as realize
simplify_runs, asts = [0], hashlib.sha256()   # kernel simplification rewrites run, and every kernel scheduled
real_rewrite, real_schedule = sched.graph_rewrite, realize.create_schedule
schedule_runs, real_breaking = [0], sched._schedule_breaking_cycles   # graphs the scheduler worked out
def counting_schedules(targets):
  schedule_runs[0] += 1
  return real_breaking(targets)
sched._schedule_breaking_cycles = counting_schedules
def counting_rewrite(*a, **k):
  if k.get("name") == "simplify kernel": simplify_runs[0] += 1
  return real_rewrite(*a, **k)
def recording_schedule(*a, **k):
  items, becomes = real_schedule(*a, **k)
  for it in items: asts.update(graph_text(it.ast).encode())
  return items, becomes
sched.graph_rewrite, realize.create_schedule = counting_rewrite, recording_schedule
runs = [0]
real = codegen.run_pipeline
def counting(*a, **k):
  runs[0] += 1
  return real(*a, **k)
codegen.run_pipeline = counting
model = nn.Linear(12, 5)
model.weight.assign(Tensor(np.random.default_rng(0).standard_normal((5, 12)).astype(np.float32))).realize()
model.bias.assign(Tensor(np.linspace(-1, 1, 5, dtype=np.float32))).realize()   # the init is seeded by the clock
opt = Adam([model.weight, model.bias], lr=0.01)
x = Tensor(np.random.default_rng(1).standard_normal((8, 12)).astype(np.float32))
with Tensor.train():
  for _ in range(2):
    opt.zero_grad()
    loss = model(x).relu().sum()
    loss.backward()
    opt.step()
compiler = type(Device[Device.DEFAULT].compiler)   # cpu_llvm counts its LLVM compilations (cache misses)
print(json.dumps([runs[0], getattr(compiler, "compiles", None), model.weight.numpy().tolist(), simplify_runs[0],
                  asts.hexdigest(), schedule_runs[0]]))
"""

def _run_counts(cache: str, **env) -> dict:
  full = {k: v for k, v in os.environ.items() if k not in ("DEV", "VIZ", "TINY_PLUGINS")} | {"XDG_CACHE_HOME": cache} | env
  out = subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True, env=full, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  runs, compiles, weight, simplify_runs, asts, schedules = json.loads(out.stdout.strip().splitlines()[-1])
  return {"codegen": runs, "compiles": compiles, "weight": np.array(weight), "simplify": simplify_runs, "asts": asts,
          "schedules": schedules}

def _run(cache: str, **env) -> tuple[int, np.ndarray]:
  r = _run_counts(cache, **env)
  return r["codegen"], r["weight"]

def test_a_warm_process_runs_no_codegen_and_gets_the_same_results(tmp_path):
  """A second process with the same cache schedules, lowers, compiles and simplifies nothing, and computes the same:
  the same kernel ASTs and the same weights as the first one and as one without the disk cache."""
  cold = _run_counts(str(tmp_path))
  warm = _run_counts(str(tmp_path))
  assert cold["codegen"] > 5 and warm["codegen"] == 0
  assert cold["simplify"] > 5 and warm["simplify"] == 0
  assert cold["schedules"] > 3 and warm["schedules"] == 0
  if cold["compiles"] is not None:   # the default device is cpu_llvm's CPU: every kernel from the object cache too
    assert cold["compiles"] >= cold["codegen"] and warm["compiles"] == 0
  np.testing.assert_array_equal(warm["weight"], cold["weight"])
  assert warm["asts"] == cold["asts"]
  off = _run_counts(str(tmp_path), CACHELEVEL="0")
  assert off["codegen"] == cold["codegen"] and off["simplify"] == cold["simplify"] and off["asts"] == cold["asts"]
  assert off["schedules"] == cold["schedules"]
  np.testing.assert_array_equal(off["weight"], cold["weight"])

def test_a_warm_process_on_a_runtime_that_reads_the_uops(tmp_path):
  """The PYTHON runtime interprets the linear program: a program read back builds it, and runs the same."""
  cold = _run_counts(str(tmp_path), DEV="PYTHON")
  warm = _run_counts(str(tmp_path), DEV="PYTHON")
  assert cold["codegen"] > 5 and warm["codegen"] == 0
  np.testing.assert_array_equal(warm["weight"], cold["weight"])

def test_a_damaged_entry_is_rebuilt(tmp_path, capfd):
  import sqlite3
  from tinyplug.diskcache import entry_digest
  _run(str(tmp_path))
  db = tmp_path / "tinyplug" / "codegen.sqlite"
  conn = sqlite3.connect(db)
  keys = [k for (k,) in conn.execute("SELECT key FROM programs_v1")]
  bad = b'{"not": "a program"}'   # intact (its digest matches) but unusable
  conn.execute("UPDATE programs_v1 SET payload=?, digest=? WHERE key=?", (bad, entry_digest(keys[0], bad), keys[0]))
  conn.execute("UPDATE programs_v1 SET payload=? WHERE key=?", (b"garbage", keys[1]))           # digest mismatch
  conn.commit(); conn.close()
  runs, weight = _run(str(tmp_path))
  assert runs == 2
  np.testing.assert_array_equal(weight, _run(str(tmp_path), CACHELEVEL="0")[1])
  assert _run(str(tmp_path))[0] == 0

def test_a_key_with_its_shared_part_worked_out_once_is_the_same_key():
  renderer = Device["CPU"].renderer
  steps = codegen.pipeline_steps(renderer)
  context = program_cache.key_context(renderer, steps)
  for ast in _kernels("CPU"):
    assert program_cache.program_key("k", ast, renderer, None, steps, context) == \
      program_cache.program_key("k", ast, renderer, None, steps)

_QUERIES = """
import json, sys, numpy as np
from tinyplug import Tensor
from tinyplug.codegen import program_cache
calls = {"get": 0, "get_many": 0, "read": 0}
table = type(program_cache.PROGRAMS)
get, get_many = table.get, table.get_many
def counting_get(self, key):
  if self is program_cache.PROGRAMS: calls["get"] += 1
  return get(self, key)
def counting_many(self, keys):
  if self is program_cache.PROGRAMS: calls["get_many"] += 1; calls["read"] += len(keys)
  return get_many(self, keys)
table.get, table.get_many = counting_get, counting_many
x = np.random.default_rng(0).standard_normal((37, 53)).astype(np.float32)
a = Tensor(x)
outs = [(a + 1).sum(0), (a * 3).max(1), (a - 2).exp(), a.sum(), (a * a).sum(1)]
Tensor.realize(*outs)
for got, want in zip(outs, [(x + 1).sum(0), (x * 3).max(1), np.exp(x - 2), x.sum(), (x * x).sum(1)]):
  np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-4)
print(json.dumps(calls))
"""

def test_a_warm_schedule_reads_its_programs_in_one_query(tmp_path):
  """A warm process reads the programs of a schedule's new kernels at once (engine compile_ahead): one query, no
  read per kernel; a cold one finds none there and lowers them."""
  env = {**{k: v for k, v in os.environ.items() if k not in ("DEV", "VIZ", "TINY_PLUGINS", "DEBUG")},
         "XDG_CACHE_HOME": str(tmp_path)}
  run = lambda: json.loads(subprocess.run([sys.executable, "-c", _QUERIES], capture_output=True, text=True, env=env,
                                          timeout=300, check=True).stdout.strip().splitlines()[-1])
  cold, warm = run(), run()
  assert cold["get_many"] == 1 and cold["read"] >= 5
  assert warm == {"get": 0, "get_many": 1, "read": cold["read"]}

def test_no_cache_while_rewrites_are_recorded(monkeypatch):
  """The visualizer records every rewrite: a program read back would show none."""
  from tinyplug import events
  calls = []
  monkeypatch.setattr(program_cache, "load", lambda key: calls.append(key))
  renderer = Device["CPU"].renderer
  ast = _kernels("CPU")[0]
  codegen.get_program(ast, renderer)
  assert len(calls) == 1
  listener = lambda e: None
  events.subscribe("rewrite", listener, owner="test")
  try: codegen.get_program(ast, renderer)
  finally: events.unsubscribe("rewrite", listener)
  assert len(calls) == 1

def test_renderers_that_declare_other_capabilities_get_other_keys():
  """A renderer subclass with fewer native ops (a class attribute) lowers differently: its key must differ."""
  from tinyplug.runtime.python import PythonRenderer
  from tinyplug.uop.ops import GroupOp, Ops
  ast = _kernels("CPU")[1]
  steps = codegen.pipeline_steps()
  full = PythonRenderer()
  partial = type("PythonRenderer", (PythonRenderer,), {"native_ops": frozenset(GroupOp.ALU) - {Ops.SUB},
                                                     "__module__": PythonRenderer.__module__})()
  assert program_cache.program_key("k", ast, full, None, steps) != program_cache.program_key("k", ast, partial, None, steps)
