"""The runtime's driver calls, against a stand-in libcuda.so.1 (fake_driver/libcuda.c, built here with the C compiler):
probe, device open (name, sm_80, limits), allocation, copies through the pinned staging buffers (more than one chunk),
cubins from NVRTC and nvJitLink loaded, launch geometry and parameters packed as the driver API expects, event timing,
driver errors by name. No GPU semantics are checked: the fake runs no kernel code (the emulator does that)."""
from __future__ import annotations
import json, os, pathlib, shutil, subprocess, sys
import pytest

HERE = pathlib.Path(__file__).parent

@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory) -> str:
  cc = shutil.which("cc") or shutil.which("clang-19") or shutil.which("clang") or shutil.which("gcc")
  if cc is None: pytest.skip("no C compiler to build the fake driver")
  out = tmp_path_factory.mktemp("fake_cuda")
  subprocess.run([cc, "-shared", "-fPIC", "-O1", str(HERE / "fake_driver" / "libcuda.c"), "-o", str(out / "libcuda.so.1")],
                 check=True, capture_output=True, timeout=120)
  return str(out)

SCRIPT = r'''
import numpy as np
from tinyplug.device import Device, ProgramSpec
from tinyplug.helpers import Context
print("DEFAULT", Device.DEFAULT)   # DEV is unset: an available GPU outranks the CPU
dev = Device["CUDA"]
print("OPEN", dev.arch, type(dev.renderer).__name__, dev.renderer.local_max, dev.renderer.shared_max, dev.describe())
a = np.random.default_rng(0).integers(0, 255, size=(40 << 20) + 3, dtype=np.uint8)   # three staging chunks
h = dev.allocator.alloc(a.nbytes)
dev.allocator.copyin(h, memoryview(a))
b = np.empty_like(a)
dev.allocator.copyout(memoryview(b), h)
print("ROUNDTRIP", np.array_equal(a, b))
src = 'extern "C" __global__ void k(unsigned int* __restrict__ data0, int n) { data0[threadIdx.x] = n; }\n'
prg = dev.make_program(ProgramSpec(name="k", uops=(), src=src), dev.compiler.compile_cached(src))
out = dev.allocator.alloc(64)
t = prg(out, global_size=(3, 2, 1), local_size=(32, 1, 1), vals=(7,), wait=True)
got = np.zeros(7, np.uint32)
dev.allocator.copyout(memoryview(got).cast("B"), out)
print("LAUNCH", [int(x) for x in got], t)
from tinyplug import dtypes
from tinyplug.uop.ops import Ops, UOp
big = (UOp(Ops.DEFINE_LOCAL, dtypes.half.ptr(40960, local=True), (), "stage0"),)   # 80 KB: dynamic shared memory
dyn = dev.make_program(ProgramSpec(name="k", uops=big, src=src), dev.compiler.compile_cached(src))
dyn(out, global_size=(1, 1, 1), local_size=(32, 1, 1), vals=(9,), wait=True)
dev.allocator.copyout(memoryview(got).cast("B"), out)
print("DYNAMIC", dyn.shared, prg.shared, int(got[6]))
try: dev.make_program(ProgramSpec(name="k", uops=(), src=src), b"not a cubin")
except RuntimeError as e: print("BADIMAGE", e)
ptx = Device["CUDA:PTX"]
print("PTX", type(ptx.renderer).__name__, type(ptx.compiler).__name__)
from tinyplug import Tensor
with Context(DEBUG=2):
  r = (Tensor([1.0, 2.0], device="CUDA") + 1).realize()
print("REALIZED", r.device)
'''

def test_runtime_against_a_fake_driver(fake_driver, nvrtc):
  env = {**os.environ, "LD_LIBRARY_PATH": fake_driver + os.pathsep + os.environ.get("LD_LIBRARY_PATH", "")}
  env.pop("DEV", None)
  out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
  assert out.returncode == 0, out.stdout + out.stderr
  lines = {l.split()[0]: l for l in out.stdout.splitlines() if l.split()}
  # the shared memory a block may opt in to: the CUDA C renderer carves more than 48 KB out of dynamic shared memory
  assert lines["OPEN"].startswith("OPEN sm_80 CUDARenderer (1024, 1024, 64) 166912 Fake GPU (sm_80, 4 SMs, 1024 MiB, driver 13.0)")
  assert lines["DEFAULT"] == "DEFAULT CUDA"
  assert lines["ROUNDTRIP"] == "ROUNDTRIP True"
  assert lines["LAUNCH"] == "LAUNCH [3, 2, 1, 32, 1, 1, 7] 0.0015"   # grid, block, int parameter, event time
  assert lines["DYNAMIC"] == "DYNAMIC 81920 0 9"   # the function's limit raised, the launch given 80 KB
  assert "cuModuleLoadData failed: CUDA_ERROR_INVALID_IMAGE: device kernel image is invalid (kernel k)" in lines["BADIMAGE"]
  assert lines["PTX"] == "PTX PTXRenderer PTXCompiler"
  assert "CUDA" in lines["REALIZED"] and "E_2" in out.stdout   # DEBUG=2 line of the launched kernel

BEAM_SCRIPT = r'''
import json
import numpy as np
from tinyplug import Tensor, dtypes, events
from tinyplug.helpers import Context
seen = []
events.subscribe("search", seen.append)
a = Tensor(np.ones((64, 32), np.float32), device="CUDA").cast(dtypes.half).realize()
b = Tensor(np.ones((32, 32), np.float32), device="CUDA").cast(dtypes.half).realize()
with Context(BEAM=1, PARALLEL=2, IGNORE_BEAM_CACHE=1): (a @ b).realize()
print("SEARCH", json.dumps({k: v for k, v in seen[0].items() if k not in ("opts", "kernel")}),
      " ".join(f"{o.op.name}:{o.arg}" for o in seen[0]["opts"]))
'''

def test_parallel_beam_against_a_fake_driver(fake_driver, nvrtc):
  """BEAM on DEV=CUDA with PARALLEL=2: the workers build cubins with NVRTC, this process loads and times them through
  the driver (the fake's event time is the same for every kernel, so the first start, the heuristic's, stays)."""
  env = {**os.environ, "LD_LIBRARY_PATH": fake_driver + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""), "DEV": "CUDA"}
  out = subprocess.run([sys.executable, "-c", BEAM_SCRIPT], capture_output=True, text=True, env=env, timeout=600)
  assert out.returncode == 0, out.stdout + out.stderr
  line = next(l for l in out.stdout.splitlines() if l.startswith("SEARCH"))
  stats = json.loads(line.split(" ", 1)[1].rsplit("}", 1)[0] + "}")
  assert stats["built_in_workers"] == stats["timed"] > 5 and "exited" not in out.stdout + out.stderr
  assert line.split("}", 1)[1].split()[0] == "TC:0"
