"""TinyJit's replay on the CPU (the core's `Compiled.make_graph` hook): each run of kernels that always run on one
thread becomes one small JIT-compiled function that calls them in order, reading their arguments from a table of
8-byte slots; a replay is then one ctypes call for the whole run instead of one per kernel (~5 us of Python each: a
small model's training step is mostly such kernels). Kernels that may split over the cores keep their own call,
so the thread pool decides as it does outside the graph.

A replay rewrites the slots of the launches whose buffers or values changed (the JIT says which) and calls the
runs in order. The kernels' addresses come from a second table, so a run's function depends only on its kernels'
signatures: it is compiled once and kept with the kernels' objects (on disk too), and a warm process's first replay
loads it instead of compiling it (~5-10 ms each, ~30 runs in a transformer's step)."""
from __future__ import annotations
import ctypes, itertools, time
from typing import Any, Sequence
from tinyplug.backend import GraphLaunch, LaunchGraph
from tinyplug_cpu_llvm.threads import _CTYPE_IR


def runs_on_one_thread(prg: Any) -> bool:
  """Whether CPUProgram `prg` always runs on one thread (CPUProgram.threads() is 1 whatever the pool's state)."""
  from tinyplug_cpu_llvm.runtime import PARALLEL_MIN_WORK_AWAKE
  return not prg.splittable or (prg.thread_opt is None and prg.work < PARALLEL_MIN_WORK_AWAKE)

def batch_ir(name: str, calls: Sequence[tuple[tuple[str, ...], int]]) -> str:
  """`void name(ptr argv, ptr fns)`: for each (argument types, first slot), the j-th calls function fns[j] with its
  arguments from argv's 8-byte slots (an i32 is the low half of its slot, little-endian) and then core 0 of 1."""
  lines = [f"define void @{name}(ptr %argv, ptr %fns) {{"]
  for j, (types, first) in enumerate(calls):
    args = []
    for i, t in enumerate(types):
      lines += [f"  %p{j}_{i} = getelementptr i64, ptr %argv, i64 {first + i}", f"  %a{j}_{i} = load {t}, ptr %p{j}_{i}, align 8"]
      args.append(f"{t} %a{j}_{i}")
    lines += [f"  %q{j} = getelementptr ptr, ptr %fns, i64 {j}", f"  %f{j} = load ptr, ptr %q{j}, align 8",
              f"  call void %f{j}({', '.join(args + ['i32 0', 'i32 1'])})"]
  return "\n".join(lines + ["  ret void", "}"]) + "\n"

class _Run:
  """Launches [start, stop) called by one native function; `slots[k]` is launch start+k's first argument slot."""
  __slots__ = ("start", "stop", "fn", "argv", "argv_addr", "fns", "fns_addr", "slots")

class CPUGraph(LaunchGraph):
  def __init__(self, dev: Any, launches: Sequence[GraphLaunch]):
    from tinyplug_cpu_llvm.runtime import CPUProgram
    self.dev, self.launches = dev, list(launches)
    for launch in self.launches:
      if not isinstance(launch.prg, CPUProgram) or launch.prg.device is not dev:
        raise TypeError(f"{launch.name} is not a kernel loaded on {dev.name}")
    self.steps: list[Any] = []   # a _Run, or the index of a launch called on its own
    for one_thread, group in itertools.groupby(range(len(self.launches)),
                                               key=lambda i: runs_on_one_thread(self.launches[i].prg)):
      idx = list(group)
      if one_thread and len(idx) >= 2: self.steps.append(self._build_run(idx[0], idx[-1] + 1))
      else: self.steps.extend(idx)
    if not any(isinstance(s, _Run) for s in self.steps): raise ValueError("no two one-thread kernels in a row")
    for step in self.steps:
      if isinstance(step, _Run): self._write(step, range(step.start, step.stop))

  def _build_run(self, start: int, stop: int) -> _Run:
    run = _Run()
    run.start, run.stop, run.slots = start, stop, []
    calls, fns, slot = [], [], 0
    for launch in self.launches[start:stop]:
      prg = launch.prg
      types = tuple(_CTYPE_IR[t] for t in prg.fn.argtypes[:-2])
      calls.append((types, slot))
      fns.append(ctypes.cast(prg.fn, ctypes.c_void_p).value)
      run.slots.append(slot)
      slot += len(types)
    run.fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(self.dev.load_ir(batch_ir("tp_graph", calls)))
    run.fns = (ctypes.c_void_p * len(fns))(*fns)
    run.fns_addr = ctypes.addressof(run.fns)
    run.argv = (ctypes.c_int64 * max(1, slot))()
    run.argv_addr = ctypes.addressof(run.argv)
    return run

  def _write(self, run: _Run, indices: Any) -> None:
    """Copy the current buffers and values of launches `indices` (all within `run`) into its slots."""
    from tinyplug_cpu_llvm.runtime import _address
    argv = run.argv
    for li in indices:
      launch = self.launches[li]
      k = run.slots[li - run.start]
      for h in launch.handles:
        argv[k] = _address(h)
        k += 1
      for v in launch.vals:
        argv[k] = int(v)
        k += 1

  def __call__(self, changed: Sequence[int], wait: bool = False) -> float | None:
    if changed:
      for step in self.steps:
        if isinstance(step, _Run): self._write(step, [li for li in changed if step.start <= li < step.stop])
    st = time.perf_counter()
    for step in self.steps:
      if isinstance(step, _Run): step.fn(step.argv_addr, step.fns_addr)
      else:
        launch = self.launches[step]
        launch.prg(*launch.handles, vals=launch.vals)
    return time.perf_counter() - st if wait else None
