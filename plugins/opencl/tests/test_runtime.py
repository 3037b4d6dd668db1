"""The CL runtime: buffers, builds (and their errors), launches with device timings, device selection, the compile
cache, and how the plugin reports itself when OpenCL is missing."""
import json, os, subprocess, sys, textwrap
import numpy as np
import pytest

def test_buffer_roundtrip(cl):
  from tinyplug.device import Buffer
  from tinyplug.uop import dtypes
  data = np.arange(1000, dtype=np.float32)
  b = Buffer("CL", 1000, dtypes.float).copyin(data)
  np.testing.assert_array_equal(b.numpy(), data)
  empty = Buffer("CL", 0, dtypes.float)
  assert empty.numpy().shape == (0,)

def test_build_error_shows_the_log_and_the_source(cl):
  from tinyplug_opencl.cl import CLError
  with pytest.raises(CLError, match="BUILD_PROGRAM_FAILURE") as info:
    cl.compiler.compile("__kernel void broken(__global float* a) { a[0] = undefined_name; }")
  assert "undefined_name" in str(info.value) and "build log" in str(info.value)

def test_launch_returns_device_seconds_when_waiting(cl, run_source):
  src = "__kernel void fill(__global float* a) { a[get_global_id(0)] = 2.0f * get_global_id(0); }"
  dev = cl
  lib = dev.compiler.compile_cached(src)
  from tinyplug_opencl.runtime import CLProgram
  prg = CLProgram(dev, "fill", dev.compiler.program_for(lib))
  h = dev.allocator.alloc(4 * 1024)
  assert prg(h, global_size=(64, 1, 1), local_size=(16, 1, 1)) is None
  t = prg(h, global_size=(64, 1, 1), local_size=(16, 1, 1), wait=True)
  assert isinstance(t, float) and 0 < t < 5
  out = np.empty(1024, np.float32)
  dev.allocator.copyout(memoryview(out).cast("B"), h)
  np.testing.assert_array_equal(out, 2.0 * np.arange(1024))

def test_int_parameters(cl, run_source):
  src = "__kernel void addn(__global int* a, int n) { a[get_global_id(0)] += n; }"
  (res,) = run_source(src, "addn", [np.arange(8, dtype=np.int32)], global_size=(8, 1, 1), vals=(5,))
  np.testing.assert_array_equal(res, np.arange(8) + 5)

def test_device_selection(cl):
  from tinyplug_opencl.runtime import select_device
  from tinyplug_opencl import cl as clapi
  first = clapi.all_devices()[0]
  assert select_device("") == first and select_device("0") == first
  name = clapi.device_str(first[1], clapi.CL_DEVICE_NAME)
  assert select_device(name[:5].upper()) == first
  with pytest.raises(RuntimeError, match="only"): select_device("99")
  with pytest.raises(RuntimeError, match="matches no OpenCL device"): select_device("no-such-device-xyz")

def test_renderer_limits_come_from_the_device(cl):
  r = cl.renderer
  assert r.local_max[0] >= 1 and r.max_work_group_size >= 1 and r.shared_max > 0
  assert max(r.local_max) <= r.max_work_group_size

SCRIPT = textwrap.dedent("""
  import numpy as np
  from tinyplug.uop import UOp, Ops, dtypes
  from tinyplug.engine.realize import realize, buffer_of
  from tinyplug_opencl.runtime import CLCompiler
  a = UOp.new_buffer("CL", 64, dtypes.float); buffer_of(a).copyin(np.arange(64, dtype=np.float32))
  y = UOp(Ops.MUL, dtypes.float, (a, a))
  m = realize([y])
  assert np.allclose(buffer_of(m[y]).numpy(), np.arange(64) ** 2)
  print("BUILDS", CLCompiler.builds_from_source, CLCompiler.builds_from_binary)
""")

def _builds(tmp_path, **env) -> tuple[int, int]:
  e = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), **env}
  out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=e)
  assert out.returncode == 0, out.stderr
  src, binary = out.stdout.split("BUILDS")[-1].split()
  return int(src), int(binary)

def test_built_programs_are_bounded_and_released_when_dropped(cl, monkeypatch):
  """A kernel per distinct Python scalar used to keep every built program forever: the least recently used go, each
  released through clReleaseProgram; a dropped kernel builds again when it comes back."""
  released = []
  programs, by_src = cl.compiler.programs, cl.compiler._by_src
  free = programs.on_evict
  monkeypatch.setattr(programs, "on_evict", lambda prg: (released.append(prg.value), free(prg)))
  monkeypatch.setattr(programs, "maxsize", 4)
  monkeypatch.setattr(by_src, "maxsize", 4)
  src = "__kernel void add{k}(__global int* a) {{ a[get_global_id(0)] += {k}; }}"
  def run(k: int) -> np.ndarray:
    lib = cl.compiler.compile_cached(src.format(k=k))
    from tinyplug_opencl.runtime import CLProgram
    prg = CLProgram(cl, f"add{k}", cl.compiler.program_for(lib))
    h = cl.allocator.alloc(4 * 8)
    cl.allocator.copyin(h, memoryview(np.arange(8, dtype=np.int32)).cast("B"))
    prg(h, global_size=(8, 1, 1), wait=True)
    out = np.empty(8, np.int32)
    cl.allocator.copyout(memoryview(out).cast("B"), h)
    cl.allocator.free(h, 4 * 8)
    return out
  before = len(programs)
  for k in range(12):
    np.testing.assert_array_equal(run(k), np.arange(8) + k)
    assert len(programs) <= 4 and len(by_src) <= 4
  assert len(programs) == 4 and len(released) == before + 12 - 4     # every program dropped was released once
  np.testing.assert_array_equal(run(0), np.arange(8))   # dropped long ago: built again

def test_disk_cache_of_program_binaries(cl, tmp_path):
  assert _builds(tmp_path) == (1, 0)
  cached = list((tmp_path / "tinyplug" / "opencl").glob("*.bin"))
  assert len(cached) == 1
  assert _builds(tmp_path) == (0, 1)                     # warm: built from the cached binary
  assert _builds(tmp_path, CACHELEVEL="0") == (1, 0)     # off
  cached[0].write_bytes(b"garbage")                      # a corrupt entry is rebuilt from source, not an error
  assert _builds(tmp_path) == (1, 0)
  assert _builds(tmp_path) == (0, 1)

def test_truncated_cached_binary_never_reaches_the_driver(cl, tmp_path):
  """A truncated program binary tripped an assertion inside PoCL (the process aborted): the digest stored with
  each binary catches it first, and the program is built from source again."""
  assert _builds(tmp_path) == (1, 0)
  (path,) = (tmp_path / "tinyplug" / "opencl").glob("*.bin")
  data = path.read_bytes()
  path.write_bytes(data[:len(data) * 2 // 3])
  assert _builds(tmp_path) == (1, 0)
  assert _builds(tmp_path) == (0, 1)

def test_probe_without_library(monkeypatch):
  from tinyplug_opencl import cl as clapi
  monkeypatch.setattr(clapi, "find_library", lambda: None)
  ok, reason = clapi.probe_platforms()
  assert not ok and "libOpenCL not found" in reason

def test_list_plugins_reports_unavailable_without_opencl(tmp_path):
  from tinyplug_opencl.cl import find_library
  if find_library() is None: pytest.skip("needs the ICD loader, to point it at an empty vendor directory")
  env = {**os.environ, "OCL_ICD_VENDORS": str(tmp_path)}    # the loader finds no platform there
  out = subprocess.run([sys.executable, "-m", "tinyplug", "list-plugins", "--json"], capture_output=True, text=True,
                       env=env, timeout=120)
  assert out.returncode == 0, out.stderr
  row = next(p for p in json.loads(out.stdout)["plugins"] if p["id"] == "opencl")
  if row["status"] == "active": pytest.skip("this ICD loader ignores OCL_ICD_VENDORS (it is not ocl-icd)")
  assert row["status"] == "unavailable" and "no OpenCL platform" in row["reason"], row
  # asking for the device then is an error naming the reason, and the process keeps working
  code = "from tinyplug.device import Device\ntry: Device['CL']\nexcept RuntimeError as e: print('ERR', e)\nimport tinyplug"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
  assert "ERR device CL is unavailable" in out.stdout, out.stdout + out.stderr

def test_import_does_not_load_opencl():
  code = "import sys, tinyplug, tinyplug_opencl, tinyplug_opencl.plugin; print('tinyplug_opencl.cl' in sys.modules)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
  assert out.stdout.strip() == "False", out.stderr

POCL_CHILD = textwrap.dedent("""
  import os, sys
  import numpy as np
  from tinyplug import Tensor
  assert (Tensor([1.0, 2.0], device="CL") * 3).numpy().tolist() == [3.0, 6.0]
  print(os.environ.get("POCL_CACHE_DIR"), flush=True)
  sys.stdin.readline()   # hold the slot until the test says so
""")

def test_each_process_gets_its_own_pocl_cache(cl, tmp_path):
  # PoCL crashed when two processes built the same program in one shared kernel cache at the same time
  env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
  env.pop("POCL_CACHE_DIR", None)
  def start(): return subprocess.Popen([sys.executable, "-c", POCL_CHILD], env=env, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  first, second = start(), start()
  try: dirs = [p.stdout.readline().strip() for p in (first, second)]
  finally:
    for p in (first, second): p.communicate("\n", timeout=120)
  assert first.returncode == 0 and second.returncode == 0, (first.stderr, second.stderr)
  slots = str(tmp_path / "tinyplug" / "pocl")
  assert sorted(dirs) == [os.path.join(slots, "0", "kcache"), os.path.join(slots, "1", "kcache")]
  again = start()
  out, err = again.communicate("\n", timeout=120)
  assert again.returncode == 0, err
  assert out.strip() == os.path.join(slots, "0", "kcache")   # a slot is reused once its process has gone
  env["POCL_CACHE_DIR"] = str(tmp_path / "mine")
  mine = start()
  out, err = mine.communicate("\n", timeout=120)
  assert mine.returncode == 0 and out.strip() == str(tmp_path / "mine"), err

def test_a_byte_count_past_size_t_is_refused_not_wrapped(cl):
  """ctypes wrapped (1 << 62) + 4 floats' byte count to 16: a tiny buffer, then reads of heap memory."""
  with pytest.raises(ValueError, match="cannot allocate 18446744073709551632 bytes"): cl.allocator.alloc(((1 << 62) + 4) * 4)

def test_count_is_the_number_of_opencl_devices(cl):
  from tinyplug.device import Device
  from tinyplug_opencl import cl as cl_api
  assert cl.count() == len(cl_api.all_devices()) >= 1
  assert Device["PYTHON"].count() == 1   # the contract's default
