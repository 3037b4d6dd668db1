"""CUDA graphs (graph.py) against the stand-in libcuda.so.1 (fake_driver/libcuda.c), built twice: with the CUDA 12+
`_v2` kernel-node entry points and struct, and (-DFAKE_GRAPH_V1) with only the unversioned ones and the v1 struct.
The fake lays CUDA_KERNEL_NODE_PARAMS out as cuda.h declares them (its C compiler's offsets are compared with the
plugin's ctypes structs), refuses a node that does not depend on exactly the one before it, copies argument values
when a node is added or its parameters set, and a graph launch runs the nodes in order, each writing its grid, block,
first int argument and a launch count into its first buffer. So these tests see what the driver would be given;
no GPU semantics (the GPU run is plugins/cuda/tests/test_hardware.py)."""
from __future__ import annotations
import ctypes, json, os, pathlib, shutil, subprocess, sys
import pytest
from tinyplug_cuda import driver

HERE = pathlib.Path(__file__).parent

def _build(out: pathlib.Path, *flags: str) -> str:
  cc = shutil.which("cc") or shutil.which("clang-19") or shutil.which("clang") or shutil.which("gcc")
  if cc is None: pytest.skip("no C compiler to build the fake driver")
  out.mkdir(parents=True, exist_ok=True)
  subprocess.run([cc, "-shared", "-fPIC", "-O1", *flags, str(HERE / "fake_driver" / "libcuda.c"), "-o",
                  str(out / "libcuda.so.1")], check=True, capture_output=True, timeout=120)
  return str(out)

@pytest.fixture(scope="module", params=["v2", "v1"])
def fake_driver(request, tmp_path_factory) -> tuple[str, str]:
  flags = ("-DFAKE_GRAPH_V1",) if request.param == "v1" else ()
  return request.param, _build(tmp_path_factory.mktemp(f"fake_cuda_{request.param}"), *flags)

def test_kernel_node_params_layout_matches_cuda_h():
  # CUDA_KERNEL_NODE_PARAMS on LP64: func 0, six grid/block uints 8..28, sharedMemBytes 32, (4 bytes padding),
  # kernelParams 40, extra 48 (v1 ends at 56), kern 56, ctx 64 (v2 ends at 72)
  V1, V2 = driver.KernelNodeParamsV1, driver.KernelNodeParamsV2
  offsets = [getattr(V2, f).offset for f, _ in V2._fields_]
  assert offsets == [0, 8, 12, 16, 20, 24, 28, 32, 40, 48, 56, 64]
  assert ctypes.sizeof(V2) == 72 and ctypes.sizeof(V1) == 56
  assert [f for f, _ in V1._fields_] == [f for f, _ in V2._fields_][:10]

def test_kernel_node_params_layout_matches_the_c_compiler(tmp_path):
  lib = ctypes.CDLL(os.path.join(_build(tmp_path), "libcuda.so.1"))
  got = (ctypes.c_size_t * 14)()
  lib.fake_kernel_node_params_layout(got)
  V2 = driver.KernelNodeParamsV2
  assert list(got[:12]) == [getattr(V2, f).offset for f, _ in V2._fields_]
  assert got[12] == ctypes.sizeof(V2) and got[13] == ctypes.sizeof(driver.KernelNodeParamsV1)

SCRIPT = r'''
import ctypes, json, sys
import numpy as np
from tinyplug.device import Device, ProgramSpec
from tinyplug.helpers import Context
from tinyplug_cuda import driver
dev = Device["CUDA"]
L = driver.lib()
print("API", driver.graph_api().params.__name__, driver.graph_api().names["add"])
src = 'extern "C" __global__ void k(unsigned int* __restrict__ data0, int n) { data0[threadIdx.x] = n; }\n'
prg = dev.make_program(ProgramSpec(name="k", uops=(), src=src), dev.compiler.compile_cached(src))
class Launch:
  def __init__(self, out, n, grid, block):
    self.prg, self.name, self.handles, self.vals, self.global_size, self.local_size = prg, "k", [out], (n,), grid, block
def buf():
  return dev.allocator.alloc(64)
def read(h):
  got = np.zeros(8, np.uint32)
  dev.allocator.copyout(memoryview(got).cast("B"), h)
  return [int(x) for x in got]
a, b, c, e = buf(), buf(), buf(), buf()
launches = [Launch(a, 7, (3, 2, 1), (32, 1, 1)), Launch(e, 5, (0, 1, 1), (32, 1, 1)), Launch(b, 9, (1, 1, 1), (64, 2, 1))]
g = dev.make_graph(launches)
print("NODES", [n is not None for n in g.nodes])
g([])
print("RUN1", json.dumps([read(a), read(b), read(e)]))
launches[0].handles, launches[0].vals = [c], (11,)
sets = ctypes.c_int.in_dll(L, "graph_param_sets").value
print("TM", g([0, 2], wait=True))   # node 2 did not change: no parameter update for it
print("RUN2", json.dumps([read(a), read(b), read(c), ctypes.c_int.in_dll(L, "graph_param_sets").value - sets]))
# TinyJit end to end: three kernels, one graph, launched once per replay
from tinyplug import Tensor, TinyJit
f = TinyJit(lambda x, y: ((((x + 1).contiguous() * y).contiguous() + 2).contiguous() * 3).realize())
gl = lambda: ctypes.c_int.in_dll(L, "graph_launches").value
start = gl()
for i in range(5): f(Tensor.full((64,), float(i), device="CUDA").realize(), Tensor.ones(64, device="CUDA").realize())
print("JIT", len(f.captured), gl() - start)
with Context(JIT_GRAPH=0):
  for i in range(2): f(Tensor.ones(64, device="CUDA").realize(), Tensor.ones(64, device="CUDA").realize())
print("JITOFF", gl() - start)
with Context(DEBUG=2): f(Tensor.ones(64, device="CUDA").realize(), Tensor.ones(64, device="CUDA").realize())
'''

def test_graphs_against_a_fake_driver(fake_driver, nvrtc):
  version, path = fake_driver
  env = {**os.environ, "LD_LIBRARY_PATH": path + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""), "DEV": "CUDA"}
  out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=600)
  assert out.returncode == 0, out.stdout + out.stderr
  lines = {l.split()[0]: l.split(None, 1)[1] for l in out.stdout.splitlines() if l.split()}
  want = ("KernelNodeParamsV2 cuGraphAddKernelNode_v2" if version == "v2" else "KernelNodeParamsV1 cuGraphAddKernelNode")
  assert lines["API"] == want
  assert lines["NODES"] == "[True, False, True]"   # the empty grid gets no node
  a1, b1, e1 = json.loads(lines["RUN1"])
  assert a1[:7] == [3, 2, 1, 32, 1, 1, 7] and b1[:7] == [1, 1, 1, 64, 2, 1, 9] and b1[7] == a1[7] + 1 and e1 == [0] * 8
  tm, *_ = lines["TM"].split()
  assert float(tm) == 0.0015   # the events around the graph launch
  a2, b2, c2, sets = json.loads(lines["RUN2"])
  assert a2 == a1, "the old buffer is no longer written"
  assert c2[:7] == [3, 2, 1, 32, 1, 1, 11] and b2[7] == c2[7] + 1 and sets == 1
  assert lines["JIT"] == "4 3", lines["JIT"]   # four kernels; replays 3..5, one graph launch each
  assert lines["JITOFF"].split()[0] == "3", "JIT_GRAPH=0 launches no graph"
  assert any("graph" in l and "kernels" in l and "1500.00us" in l for l in out.stdout.splitlines()), out.stdout
