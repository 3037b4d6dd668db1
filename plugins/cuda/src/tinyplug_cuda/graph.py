"""TinyJit's replay as a CUDA graph (the core's `Compiled.make_graph` hook): one kernel node per captured launch, each
depending on the one before (stream order: a replay may pass an earlier call's output as an input, so buffer
dependencies seen at capture time would not be safe), instantiated once and launched with one cuGraphLaunch on the
device's stream. Launches whose buffers or variables changed get their parameters set again in the executable graph
(cuGraphExecKernelNodeSetParams) before the launch, only when their values really differ.

Any driver error raises a CUDAError; the JIT then replays these kernels one by one and says why under DEBUG=1."""
from __future__ import annotations
import ctypes
from typing import Any, Sequence
from tinyplug.backend import GraphLaunch, LaunchGraph
from tinyplug_cuda import driver
from tinyplug_cuda.driver import check, lib

class _Node:
  """One kernel node: its handle in the graph, the launch it runs, and the parameter values it holds now."""
  __slots__ = ("handle", "launch", "args", "params", "struct", "held")
  def __init__(self, launch: GraphLaunch):
    self.launch, self.handle = launch, ctypes.c_void_p()

class CUDAGraph(LaunchGraph):
  def __init__(self, dev: Any, launches: Sequence[GraphLaunch]):
    from tinyplug_cuda.runtime import CUDAProgram
    self.dev, self.api = dev, driver.graph_api()
    self.graph, self.exec = ctypes.c_void_p(), ctypes.c_void_p()
    self.nodes: list[_Node | None] = []   # per launch; None for a launch with an empty grid (it runs nothing)
    dev.make_current()
    check("cuGraphCreate", self.api.create(ctypes.byref(self.graph), 0))
    prev: _Node | None = None
    for launch in launches:
      if not isinstance(launch.prg, CUDAProgram) or launch.prg.dev is not dev:
        raise TypeError(f"{launch.name} is not a kernel loaded on {dev.name}")
      if launch.global_size is not None and 0 in tuple(launch.global_size):
        self.nodes.append(None)
        continue
      node = _Node(launch)
      self._fill(node)
      deps = (ctypes.c_void_p * 1)(prev.handle) if prev is not None else None
      check(self.api.names["add"], self.api.add_kernel_node(ctypes.byref(node.handle), self.graph, deps,
                                                            1 if prev is not None else 0, ctypes.byref(node.struct)),
            f"kernel {launch.name}")
      self.nodes.append(node)
      prev = node
    check("cuGraphInstantiateWithFlags", self.api.instantiate(ctypes.byref(self.exec), self.graph, 0),
          f"{len(self.nodes)} kernels")

  def _fill(self, node: _Node) -> None:
    """Pack the launch's current arguments into the node's parameter struct."""
    launch = node.launch
    node.args, node.params = launch.prg.pack(launch.handles, launch.vals)
    grid, block = _dims(launch)
    node.struct = self.api.params(func=launch.prg.function, gridDimX=grid[0], gridDimY=grid[1], gridDimZ=grid[2],
                                  blockDimX=block[0], blockDimY=block[1], blockDimZ=block[2], sharedMemBytes=launch.prg.shared,
                                  kernelParams=ctypes.cast(node.params, ctypes.c_void_p), extra=None)
    node.held = _values(launch)

  def __call__(self, changed: Sequence[int], wait: bool = False) -> float | None:
    dev, api = self.dev, self.api
    dev.make_current()
    for i in changed:
      node = self.nodes[i]
      if node is None or _values(node.launch) == node.held: continue
      self._fill(node)
      check(api.names["set"], api.exec_set_params(self.exec, node.handle, ctypes.byref(node.struct)),
            f"kernel {node.launch.name}")
    if not wait:
      check("cuGraphLaunch", api.launch(self.exec, dev.stream))
      return None
    check("cuEventRecord", lib().cuEventRecord(dev.events[0], dev.stream))
    check("cuGraphLaunch", api.launch(self.exec, dev.stream))
    return dev.elapsed_since_start("a graph")

  def __del__(self):
    try:
      if self.exec: self.api.exec_destroy(self.exec)
      if self.graph: self.api.destroy(self.graph)
    except Exception: pass

def _dims(launch: GraphLaunch) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
  from tinyplug_cuda.runtime import launch_dims
  return launch_dims(launch.global_size or (1, 1, 1), launch.local_size)

def _values(launch: GraphLaunch) -> tuple:
  """What a node's parameters are made of: the buffers' device addresses and the variables' values."""
  return tuple(h.value for h in launch.handles) + tuple(launch.vals)
