"""MOCK+CL as a device: registration, unavailability, the checksummed disk cache, agreement with PoCL and numpy."""
from __future__ import annotations
import json, os, stat, subprocess, sys
import numpy as np
import pytest
from tinyplug import Tensor
from tinyplug.helpers import Context

@pytest.mark.slow
def test_listed_by_list_plugins_and_doctor(emu, tmp_path):
  # an empty cache (doctor checks every entry of it); the device checks then compile cold, so a generous bound
  env = {**os.environ, "TINY_PLUGINS": "", "XDG_CACHE_HOME": str(tmp_path), "TINY_PLUGINS_TIMEOUT": "300"}
  out = subprocess.run([sys.executable, "-m", "tinyplug", "list-plugins", "--json"], capture_output=True, text=True,
                       env=env, timeout=120)
  doc = json.loads(out.stdout)
  plugins = {p["id"]: p for p in doc["plugins"]}
  assert "MOCK+CL" in plugins["emulator"]["provides"]["devices"]
  rep = subprocess.run([sys.executable, "-m", "tinyplug", "doctor", "--json"], capture_output=True, text=True, env=env,
                       timeout=300)
  devices = {d["name"]: d for d in json.loads(rep.stdout)["devices"]}
  assert devices["MOCK+CL"]["status"] == "ok", devices["MOCK+CL"]
  assert "opencl kernels compiled by" in devices["MOCK+CL"]["reason"]

def test_never_the_default_device(emu):
  from tinyplug.plugins import get_plugin_manager
  order = get_plugin_manager().devices_by_priority()
  assert order.index("MOCK+CL") > order.index("PYTHON")

def _fake_clang(tmp_path, version: int, knows_flags: bool = True) -> str:
  """A 'clang' that prints `version` for --version and fails anything else unless it `knows_flags`."""
  (tmp_path / f"v{version}").mkdir(exist_ok=True)
  path = tmp_path / f"v{version}" / "clang"   # its own path: the probe's result is cached per path
  path.write_text(f"#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'clang version {version}.0.1'; exit 0; fi\n"
                  f"exit {0 if knows_flags else 1}\n")
  path.chmod(path.stat().st_mode | stat.S_IEXEC)
  return str(path)

def test_unavailable_with_a_reason_when_clang_is_missing_or_old(tmp_path):
  from tinyplug_emulator.plugin import probe
  with Context(EMU_CLANG=str(tmp_path / "no-such-clang")):
    ok, reason = probe("CL")
  assert not ok and "no suitable clang" in reason and "no-such-clang" in reason
  with Context(EMU_CLANG=_fake_clang(tmp_path, 11)):
    ok, reason = probe("CL")
  assert not ok and "is clang 11, older than 15" in reason
  # new enough by its version, but without the half/bf16 rounding flags every kernel compile passes (seen: a GPU
  # machine's clang, where each MOCK+ device then failed its first kernel instead of being unavailable)
  with Context(EMU_CLANG=_fake_clang(tmp_path, 16, knows_flags=False)):
    ok, reason = probe("CL")
  assert not ok and "(clang 16) does not know -ffloat16-excess-precision=none" in reason

def test_device_open_without_clang_is_a_clear_error(tmp_path):
  code = ("from tinyplug.device import Device\n"
          "try: Device['MOCK+CL']\n"
          "except RuntimeError as e: print('ERR', e)\n")
  env = {**os.environ, "EMU_CLANG": str(tmp_path / "missing"), "TINY_PLUGINS": ""}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
  assert out.returncode == 0, out.stderr
  assert "ERR device MOCK+CL is unavailable: no suitable clang" in out.stdout

SRC = """__kernel void cache_probe_{tag}(__global float* restrict data0) {{ data0[get_group_id(0)] = {tag}.0f; }}
"""

def test_disk_cache_hit_and_damaged_entry_rebuilt(emu, run_kernel, tmp_path, monkeypatch):
  from tinyplug_emulator.device import EmulatorCompiler
  emu.compiler.support_libraries()     # the runtime and builtins stay where they are; kernels go to tmp_path
  monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
  src = SRC.format(tag=int.from_bytes(os.urandom(3), "little"))
  before = EmulatorCompiler.compiles
  first = EmulatorCompiler(emu.dialect)
  lib = first.compile_cached(src)
  assert EmulatorCompiler.compiles == before + 1
  path = first.path_for(lib)
  assert path.startswith(str(tmp_path))
  second = EmulatorCompiler(emu.dialect)         # a new process would look the same: nothing in memory
  assert second.compile_cached(src) == lib and EmulatorCompiler.compiles == before + 1
  with open(path, "r+b") as f: f.seek(200); f.write(b"\xde\xad\xbe\xef")   # damage the cached shared object
  third = EmulatorCompiler(emu.dialect)
  assert third.compile_cached(src) == lib and EmulatorCompiler.compiles == before + 2   # rebuilt, not loaded
  with open(path, "rb") as f: assert f.read() == lib

PRIVATE = """
import os, tempfile
from tinyplug.helpers import Context
from tinyplug_emulator import toolchain
print(toolchain.store("cached", b"lib").startswith(toolchain.emulator_dir()), os.listdir(tempfile.gettempdir()))
with Context(CACHELEVEL=0): print(toolchain.build_shared("private", lambda out: open(out, "wb").write(b"lib")))
"""

def test_kernels_outside_the_cache_leave_no_folder_behind(tmp_path):
  """A writable cache makes no private folder; the one CACHELEVEL=0 needs is removed when the process ends."""
  scratch = tmp_path / "tmp"
  scratch.mkdir()
  env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), TMPDIR=str(scratch))
  r = subprocess.run([sys.executable, "-c", PRIVATE], env=env, capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  stored, private = r.stdout.splitlines()
  assert stored == "True []" and private.startswith(str(scratch))
  assert not list(scratch.iterdir())

def test_clang_error_names_the_kernel_source(emu):
  from tinyplug_emulator.toolchain import ToolchainError
  with pytest.raises(ToolchainError, match=r"clang failed on a opencl kernel:\n.*undeclared identifier 'nope'"):
    emu.compiler.compile_cached("__kernel void bad(__global float* restrict data0) { data0[0] = nope; }\n")

def test_an_empty_launch_grid_is_refused_not_run(emu):
  from tinyplug.device import ProgramSpec
  src = "__kernel void k(__global float* restrict data0) { data0[get_global_id(0)] = 1.0f; }\n"
  spec = ProgramSpec(name="k", uops=(), src=src)
  prg = emu.make_program(spec, emu.compiler.compile_cached(src))
  buf = emu.allocator.alloc(64)
  with pytest.raises(ValueError, match=r"kernel k: launch grid \(0, 1, 1\) .* has an empty dimension"):
    prg(buf, global_size=(0, 1, 1), local_size=(4, 1, 1))
  prg(buf, global_size=(1, 1, 1), local_size=(4, 1, 1))   # and the device still runs kernels

# ---------------- agreement with PoCL and numpy ----------------

def _cl_available() -> bool:
  from tinyplug.plugins import get_plugin_manager
  pm = get_plugin_manager(check=False)
  return pm.resolve_device("CL") is not None and pm.device_available("CL")[0]

PROGRAMS = {
  "matmul": (lambda a, b: a @ b, lambda a, b: a @ b),
  "softmax": (lambda a, b: a.softmax(-1), lambda a, b: np.exp(a - a.max(-1, keepdims=True)) /
              np.exp(a - a.max(-1, keepdims=True)).sum(-1, keepdims=True)),
  "sum_axis0": (lambda a, b: a.sum(0), lambda a, b: a.sum(0)),
  "max_all": (lambda a, b: a.max(), lambda a, b: a.max()),
  "where_div": (lambda a, b: (a > 0).where(a / (b.abs() + 1), b * 2), lambda a, b: np.where(a > 0, a / (np.abs(b) + 1), b * 2)),
  "half_mul_add": (lambda a, b: (a.half() * b.half() + a.half()).float(),
                   lambda a, b: (a.astype(np.float16) * b.astype(np.float16) + a.astype(np.float16)).astype(np.float32)),
}

@pytest.mark.parametrize("name", list(PROGRAMS))
def test_agrees_with_numpy_and_pocl(emu, name):
  tiny, ref = PROGRAMS[name]
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((48, 40)).astype(np.float32), rng.standard_normal((40, 40)).astype(np.float32)
  if name != "matmul": b = rng.standard_normal((48, 40)).astype(np.float32)
  want = ref(a, b)
  got = tiny(Tensor(a, device="MOCK+CL"), Tensor(b, device="MOCK+CL")).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 if "half" not in name else 1e-2)
  if not _cl_available(): pytest.skip("no OpenCL device (PoCL) to compare with")
  pocl = tiny(Tensor(a, device="CL"), Tensor(b, device="CL")).numpy()
  np.testing.assert_allclose(got, pocl, rtol=1e-5, atol=1e-5 if "half" not in name else 1e-2)

def test_training_step_matches_cpu(emu):
  """A few SGD steps of a small MLP: same losses on MOCK+CL as on the CPU device."""
  from tinyplug.nn import Linear
  from tinyplug.nn.optim import SGD
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal((16, 8)).astype(np.float32), rng.integers(0, 4, 16)
  w1, w2 = rng.standard_normal((8, 16)).astype(np.float32) * 0.3, rng.standard_normal((16, 4)).astype(np.float32) * 0.3
  losses = {}
  for dev in ("MOCK+CL", "CPU"):
    l1, l2 = Linear(8, 16, bias=False), Linear(16, 4, bias=False)
    l1.weight, l2.weight = Tensor(w1.T.copy(), device=dev, requires_grad=True), Tensor(w2.T.copy(), device=dev, requires_grad=True)
    opt = SGD([l1.weight, l2.weight], lr=0.1)
    out = []
    with Tensor.train():
      for _ in range(3):
        opt.zero_grad()
        loss = l2(l1(Tensor(x, device=dev)).relu()).sparse_categorical_crossentropy(Tensor(y, device=dev))
        loss.backward()
        opt.step()
        out.append(loss.item())
    losses[dev] = out
  np.testing.assert_allclose(losses["MOCK+CL"], losses["CPU"], rtol=1e-5)

EVICTED = """
import glob, os, numpy as np
from tinyplug import Tensor
from tinyplug.device import Device
from tinyplug_emulator.toolchain import emulator_dir
a = np.arange(6, dtype=np.float32)
print((Tensor(a, device="MOCK+CL") * 2).numpy().tolist())
for p in glob.glob(os.path.join(emulator_dir(), "*")): os.remove(p)   # another process's trim evicts everything
print((Tensor(a, device="MOCK+CL") + 5).exp2().numpy().tolist())   # a new kernel links against the runtime again
"""

def test_support_libraries_evicted_from_the_cache_are_written_back(emu, tmp_path):
  # the cache's size limit may evict the runtime and builtins while a process still links kernels against them
  env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
  r = subprocess.run([sys.executable, "-c", EVICTED], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  first, second = (json.loads(line) for line in r.stdout.split("\n")[:2])
  a = np.arange(6, dtype=np.float32)
  assert first == (a * 2).tolist()
  np.testing.assert_allclose(second, np.exp2(a + 5), rtol=1e-6)
