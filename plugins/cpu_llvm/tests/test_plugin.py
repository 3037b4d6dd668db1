"""The plugin as installed: discovery through the real entry point, default device, device-string options."""
import json, os, shutil, subprocess, sys, tempfile
import pytest

def _cli(*args, env=None) -> subprocess.CompletedProcess:
  # an empty disk cache (`doctor` checks every entry of the one it is given), so its device checks compile cold
  cache = tempfile.mkdtemp(prefix="tinyplug-cli-cache-")
  try:
    return subprocess.run([sys.executable, "-m", "tinyplug", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_CACHE_HOME": cache, "TINY_PLUGINS_TIMEOUT": "300", **(env or {})})
  finally: shutil.rmtree(cache, ignore_errors=True)

def test_entry_point_is_installed():
  from importlib.metadata import entry_points
  eps = [ep for ep in entry_points(group="tinyplug") if ep.name == "cpu_llvm"]
  assert eps and eps[0].value == "tinyplug_cpu_llvm.plugin"
  assert eps[0].dist.name == "tinyplug-cpu-llvm"

def test_listed_and_available():
  out = _cli("list-plugins", "--json")
  assert out.returncode == 0, out.stderr
  plugins = {p["id"]: p for p in json.loads(out.stdout)["plugins"]}
  p = plugins["cpu_llvm"]
  assert p["status"] == "active" and p["distribution"] == "tinyplug-cpu-llvm" and p["version"] == "0.1.0"
  assert p["provides"]["devices"] == ["CPU"] and "CPU:LLVM" in p["provides"]["renderers"]
  assert p["devices"] == [{"name": "CPU", "available": True, "reason": ""}]

def test_default_device_and_registration_is_lazy():
  code = ("import sys; from tinyplug.device import Device; from tinyplug.plugins import get_plugin_manager; "
          "d = Device.DEFAULT; print(d, get_plugin_manager().devices[d][0].priority, "
          "'llvmlite' in sys.modules, 'tinyplug_cpu_llvm.runtime' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={k: v for k, v in os.environ.items() if k != "DEV"})
  assert out.returncode == 0, out.stderr
  default, priority, llvmlite_loaded, runtime_loaded = out.stdout.split()
  # CPU wins unless a device with a higher priority (an accelerator) is available
  assert default == "CPU" or int(priority) > 100
  # choosing the default imported neither llvmlite nor the runtime
  assert (llvmlite_loaded, runtime_loaded) == ("False", "False")

def test_probe():
  from tinyplug_cpu_llvm.plugin import probe
  assert probe() == (True, "")

def test_device_string_options():
  from tinyplug_cpu_llvm.runtime import parse_device
  assert parse_device("CPU") == (None, None)
  assert parse_device("CPU:LLVM") == (None, None)
  assert parse_device("CPU:LLVM:znver4,+avx2,-avx512f") == ("znver4", "+avx2,-avx512f")
  assert parse_device("CPU:LLVM:x86-64") == ("x86-64", "")

def test_target_override_runs():
  import numpy as np
  from tinyplug.device import Device
  dev = Device["CPU:LLVM:x86-64"]
  assert dev.compiler.cpu == "x86-64" and dev.compiler.features == "+sse2"   # the baseline's, as LLVM has it
  assert dev.compiler.cachekey != Device["CPU"].compiler.cachekey
  from tinyplug.device import ProgramSpec
  from tinyplug.uop import UOp, Ops, dtypes
  out = UOp(Ops.DEFINE_GLOBAL, dtypes.float.ptr(16), arg=0)
  r = UOp(Ops.RANGE, dtypes.int, (UOp.const(dtypes.int, 16),), (0, "loop"))
  ix = UOp(Ops.INDEX, out.dtype, (out, r))
  v = UOp(Ops.CAST, dtypes.float, (r,))
  uops = [out, r, ix, v, UOp(Ops.STORE, dtypes.void, (ix, v)), UOp(Ops.END, dtypes.void, (r,))]
  src = dev.renderer.render("iota", uops)
  prg = dev.make_program(ProgramSpec("iota", tuple(uops), src), dev.compiler.compile_cached(src))
  o = np.zeros(16, np.float32)
  prg(o)
  np.testing.assert_array_equal(o, np.arange(16))

def test_cpu_threads_is_documented():
  from tinyplug.helpers import ENV_VARS
  import tinyplug_cpu_llvm.plugin  # noqa: F401
  assert "CPU_THREADS" in ENV_VARS
  here = os.path.dirname(__file__)
  text = open(os.path.join(here, "..", "..", "..", "docs", "env_vars.md")).read()
  assert "`CPU_THREADS`" in text

def test_aligned_allocations():
  from tinyplug.device import Buffer
  from tinyplug.uop import dtypes
  for n in (1, 3, 17, 1000):
    b = Buffer("CPU", n, dtypes.float).ensure_allocated()
    assert b.handle.addr % 64 == 0

def test_doctor_says_what_the_cpu_device_is():
  from tinyplug.device import Device
  from tinyplug_cpu_llvm.runtime import n_threads
  about = Device["CPU"].describe()
  assert about.startswith("LLVM ") and f"{n_threads()} threads (" in about
  out = _cli("doctor", "--json", env={"CPU_SPIN_US": "123"})
  cpu = next(d for d in json.loads(out.stdout)["devices"] if d["name"] == "CPU")
  assert cpu["status"] == "ok" and "LLVM " in cpu["reason"], cpu
  assert "idle spin 123 us" in cpu["reason"] or "Python pool" in cpu["reason"], cpu
