"""TinyJit: run a function's kernels again without re-running its Python.

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor: ...

Call 1 runs the function normally (compiling its kernels, realizing lazily-created weights). Call 2 runs it again
while `engine.realize` records every kernel it launches with its buffers. From call 3 on, the recorded kernels are
launched directly on the same buffers, with the buffers of the tensor arguments (matched by position) swapped for
the new arguments' buffers; the function's Python does not run. Returned tensors are the ones from call 2, whose
buffers now hold the new results. Arguments must keep their shapes, dtypes and devices. `JIT=0` runs eagerly.

Symbolic shapes: a tensor argument may have sizes that are bound variables (`a[:, :Variable("i", 1, 10).bind(n)]`),
and bound variables may be passed as arguments themselves. The capture compares shapes with the variables unbound,
so a call with another value replays the same kernels with the new values as kernel arguments (the results live in
buffers laid out for the variables' largest values, uop/sint.py).

Random numbers (`Tensor.rand`, `randn`, `dropout`, ...) drawn inside the function are fresh on every replay: each
replay writes the current RNG counter into the buffers the captured kernels read it from and advances the counter by
what the function used, so jitted calls give the same sequence as eager calls (as in tinygrad). The seed is part of
the kernels: `Tensor.manual_seed` with a new seed after the capture needs `.reset()`.

Misuse is a JitError: another argument shape, dtype or device than the capture's, the same buffer passed twice,
a capture that ran no kernels, a return value holding anything but tensors (a replay returns the captured call's
value). `TinyJit(f, prune=True)` replays only the kernels that depend on the arguments; `captured.free_intermediates()`
gives back the memory of the buffers the kernels write (reallocated by the next replay).

Graph replay: where the device offers it (`Compiled.make_graph`, the backend contract: the cuda plugin's CUDA
graphs), each run of two or more kernels between copies is handed to the device once, at the first replay, and replayed
as one unit from then on, with the launches whose buffers or variables changed (the arguments' slots, bound
variables) updated in place. A device that returns None, or whose graph raises when built or run, gets its kernels
replayed one by one (`DEBUG=1` says why); `JIT_GRAPH=0` (or tinygrad's `JIT=2`) always replays one by one. `DEBUG=2` prints one line per
graph (its whole run timed); a profile listener (the visualizer) gets per-kernel replay and spans.

What is not replayed: Python side effects, values read back to the host inside the function (`.item()`), and
anything that would change the graph from call to call (shapes, Python control flow on data).
"""
from __future__ import annotations
import functools, time
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, TypeVar
from tinyplug import events
from tinyplug.engine import realize as _realize
from tinyplug.helpers import DEBUG, JIT, JIT_GRAPH, GlobalCounters
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops.graph import is_plain_buffer, is_symbolic_buffer
from tinyplug.uop.sint import render_shape, unbind_shape
from tinyplug.uop.dtype import dtypes
from tinyplug.tensor_ops.random import RNGState, rng_words
from tinyplug.uop.ops import Ops, UOp

R = TypeVar("R")

class JitError(RuntimeError):
  """A jitted function was called with arguments that do not fit what it captured."""

@dataclass(frozen=True)
class _Signature:
  shape: tuple[int, ...]
  dtype: Any
  device: str | tuple   # (devices, split axis) for a tensor split over several devices
  def describe(self) -> str: return f"shape {render_shape(self.shape)}, dtype {self.dtype!r}, device {self.device}"

class _Launch:
  """One recorded kernel (or copy) with the raw handles it runs on; input slots are patched before each replay."""
  __slots__ = ("runner", "prg", "bufs", "handles", "global_size", "local_size", "vals", "is_copy", "name", "var_vals",
               "var_names", "ast")
  def __init__(self, runner, bufs: list, var_vals: dict[str, int], ast: UOp | None = None):
    self.runner, self.bufs, self.is_copy, self.ast = runner, list(bufs), runner is None, ast
    self.handles = [b.ensure_allocated().handle for b in bufs]
    if runner is not None:
      spec = runner.spec
      self.prg, self.global_size, self.local_size, self.name = runner.prg, spec.global_size, spec.local_size, spec.name
      # the values the kernel ran with; a replay overrides the ones the call's arguments bind
      self.var_vals, self.var_names = dict(var_vals), tuple(v.arg[0] for v in spec.vars)
      self.vals = tuple(var_vals[n] for n in self.var_names)
    else:
      self.prg, self.global_size, self.local_size, self.vals, self.name = None, None, None, (), "copy"
      self.var_vals, self.var_names = {}, ()

  def rebind(self, var_vals: dict[str, int]) -> None:
    if any(n in var_vals for n in self.var_names):
      self.vals = tuple(var_vals.get(n, self.var_vals[n]) for n in self.var_names)

@dataclass
class RngUse:
  """The RNG counters one call used: each draw's counter buffer with its counter relative to the call's first,
  and how many counters the call used in all."""
  draws: list[tuple[Any, int]] = field(default_factory=list)
  used: int = 0

  def advance(self) -> None:
    """Point every draw at fresh counters, from the current one on, and move the counter past them."""
    import numpy as np
    base = RNGState.counter
    for buf, rel in self.draws:
      buf.copyin(np.array(rng_words(base + rel), dtype=np.uint32))
    RNGState.counter = base + self.used

def _reads_its_output(launch: _Launch) -> bool:
  """Whether a kernel reads the buffer it writes (an in-place update such as `x += y`)."""
  if launch.is_copy or launch.ast is None: return False
  return any(u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.DEFINE_GLOBAL and
             u.src[0].src[0].arg == 0 for u in launch.ast.toposort())

def _prune(launches: list[_Launch], input_buffers: list) -> list[_Launch]:
  """The launches that depend on the inputs (through the buffers they read); the others computed what they compute
  once, at the capture, for good."""
  dep = {id(b) for b in input_buffers}
  kept = []
  for launch in launches:
    if any(id(b) in dep for b in launch.bufs):
      kept.append(launch)
      dep.add(id(launch.bufs[0]))
  return kept

class _Segment:
  """Launches [start, stop) of one device, replayed by the device's LaunchGraph (None once it failed)."""
  __slots__ = ("start", "stop", "device", "graph", "ops", "mem")
  def __init__(self, start: int, stop: int, device: str, graph: Any, launches: list[_Launch]):
    self.start, self.stop, self.device, self.graph = start, stop, device, graph
    ests = [launch.runner.spec.estimates for launch in launches[start:stop]]
    self.ops, self.mem = sum(e.get("ops", 0) for e in ests), sum(e.get("mem", 0) for e in ests)

def _graph_off(seg: _Segment, launches: list[_Launch], why: Exception) -> None:
  seg.graph = None
  if DEBUG >= 1:
    print(f"TinyJit: {seg.device} graph of {seg.stop - seg.start} kernels ({launches[seg.start].name} .. "
          f"{launches[seg.stop - 1].name}) not used, replaying them one by one: {type(why).__name__}: {why}")

def _graph_plan(launches: list[_Launch]) -> list:
  """The replay plan: launch indices (run one by one) and _Segments (runs of kernels a device replays as one)."""
  from tinyplug.device import Device
  plan: list = []
  i = 0
  while i < len(launches):
    j = i + 1
    if not launches[i].is_copy:
      device = launches[i].bufs[0].device
      while j < len(launches) and not launches[j].is_copy and launches[j].bufs[0].device == device: j += 1
    seg = None
    if j - i >= 2:
      seg = _Segment(i, j, device, None, launches)
      try: seg.graph = Device[device].make_graph(launches[i:j])
      except Exception as e: _graph_off(seg, launches, e)
    if seg is not None and seg.graph is not None:
      plan.append(seg)
      if DEBUG >= 1: print(f"TinyJit: {device} replays kernels {i}..{j - 1} as one graph ({type(seg.graph).__name__})")
    else: plan.extend(range(i, j))
    i = j
  return plan

def _run_plain(launch: _Launch) -> None:
  if launch.is_copy: launch.bufs[0].copyin(launch.bufs[1].numpy())
  else: launch.prg(*launch.handles, global_size=launch.global_size, local_size=launch.local_size, vals=launch.vals,
                   wait=False)

class CapturedJit:
  """The kernels of one call, the positions where the tensor arguments' buffers go, and the call's return value."""
  def __init__(self, records: list[tuple], input_buffers: list, ret: Any, signature: list[_Signature],
               rng: RngUse | None = None, prune: bool = False):
    self.launches = [_Launch(runner, bufs, vv, item.ast) for item, runner, bufs, vv in records]
    if prune: self.launches = _prune(self.launches, input_buffers)
    self._freed = False
    # what a replay adds to GlobalCounters (as an eager run of the same kernels would)
    ests = [launch.runner.spec.estimates for launch in self.launches if not launch.is_copy]
    self.ops, self.mem = sum(e.get("ops", 0) for e in ests), sum(e.get("mem", 0) for e in ests)
    self.rng = rng or RngUse()
    by_id = {id(b): i for i, b in enumerate(input_buffers)}
    # (launch index, argument position within the launch, input index)
    self.input_slots = [(li, pos, by_id[id(b)]) for li, launch in enumerate(self.launches)
                        for pos, b in enumerate(launch.bufs) if id(b) in by_id]
    self.ret, self.signature = ret, signature
    self.input_buffers = list(input_buffers)
    self._plan: list | None = None   # graph replay plan, made at the first replay (JIT_GRAPH)
    self._graphs_stale = False       # a replay ran without the graphs: they may hold old buffers or values
    self._graphed = False            # the plan has graphs (a device offered make_graph)

  def __len__(self) -> int: return len(self.launches)

  def __reduce__(self):
    # kernels travel as their ASTs (compiled again where they are unpickled), buffers with their contents
    launches = [(None if launch.is_copy else launch.ast, launch.bufs[0].device, launch.bufs, launch.var_vals)
                for launch in self.launches]
    state = {"ops": self.ops, "mem": self.mem, "rng": self.rng, "input_slots": self.input_slots, "ret": self.ret,
             "signature": self.signature, "input_buffers": self.input_buffers}
    return _unpickle_captured, (launches, state)

  @property
  def linear(self) -> UOp:
    """The captured launches as a LINEAR of CALLs (tinygrad's form): a kernel's CALL holds its AST, a copy's a
    CUSTOM_FUNCTION (the JIT copies on the host), each followed by the buffers it runs on."""
    calls = []
    for launch in self.launches:
      bufs = tuple(UOp(Ops.DEFINE_GLOBAL, b.dtype.ptr(b.size), arg=i) for i, b in enumerate(launch.bufs))
      fn = UOp(Ops.CUSTOM_FUNCTION, dtypes.void, arg="copy") if launch.is_copy else launch.ast
      calls.append(UOp(Ops.CALL, dtypes.void, (fn, *bufs)))
    return UOp(Ops.LINEAR, dtypes.void, tuple(calls))

  def free_intermediates(self) -> None:
    """Give back the memory of the buffers the kernels write (results and intermediates, not the inputs nor what a
    kernel updates in place); the next replay allocates them again."""
    inputs = {id(b) for b in self.input_buffers}
    keep = inputs | {id(launch.bufs[0]) for launch in self.launches if _reads_its_output(launch)}
    for launch in self.launches:
      out = launch.bufs[0]
      if id(out) not in keep: out.deallocate()
    self._freed = True

  def replay(self, input_buffers: list, var_vals: dict[str, int] | None = None) -> None:
    launches = self.launches
    realloc = self._freed
    if realloc:
      for launch in launches: launch.handles = [b.ensure_allocated().handle for b in launch.bufs]
      self._freed = False
    if var_vals:
      for launch in launches: launch.rebind(var_vals)
    for li, pos, ii in self.input_slots:
      launch = launches[li]
      launch.bufs[pos] = input_buffers[ii]
      launch.handles[pos] = input_buffers[ii].handle
    if self.rng.draws or self.rng.used: self.rng.advance()
    profiling = events.enabled("profile")
    if JIT_GRAPH.value and JIT.value < 2 and not profiling:   # JIT=2: tinygrad's "jit without graphs"
      if self._plan is None:
        self._plan = _graph_plan(launches)
        self._graphed = any(step.__class__ is _Segment for step in self._plan)
      if self._graphed:
        return self._replay_plan(realloc or self._graphs_stale, bool(var_vals))
    # replayed without the graphs (JIT_GRAPH=0 now, a profile listener): they learn every launch's values next time
    self._graphs_stale = self._plan is not None
    if DEBUG >= 2 or profiling:
      for launch in launches: _replay_one_reported(launch)
      return
    for launch in launches: _run_plain(launch)
    self._count()

  def _count(self) -> None:
    """A replay without DEBUG lines adds its totals at once (a reported launch counts itself)."""
    GlobalCounters.kernel_count += len(self.launches)
    GlobalCounters.global_ops += self.ops
    GlobalCounters.global_mem += self.mem

  def _changed(self, every: bool, rebound: bool) -> list[int]:
    """The launches whose handles or variable values may differ from the graphs' previous replay."""
    if every: return list(range(len(self.launches)))
    changed = {li for li, _, _ in self.input_slots}
    if rebound: changed.update(li for li, launch in enumerate(self.launches) if launch.var_names)
    return sorted(changed)

  def _replay_plan(self, every: bool, rebound: bool) -> None:
    launches, reported = self.launches, DEBUG >= 2
    run_one = _replay_one_reported if reported else _run_plain
    changed = self._changed(every, rebound)
    self._graphs_stale = False
    for step in self._plan:
      if step.__class__ is not _Segment:
        run_one(launches[step])
        continue
      if step.graph is not None:
        local = [li - step.start for li in changed if step.start <= li < step.stop]
        try:
          tm = step.graph(local, wait=reported)
          if reported: _graph_line(step, launches, tm)
          continue
        except Exception as e: _graph_off(step, launches, e)
      for launch in launches[step.start:step.stop]: run_one(launch)   # its graph failed: one by one from now on
    if not reported: self._count()

def _graph_line(seg: _Segment, launches: list[_Launch], tm: float | None) -> None:
  """DEBUG=2: one line for a graph's run (its kernels have no times of their own inside it)."""
  n = seg.stop - seg.start
  GlobalCounters.kernel_count += n - 1   # _debug_line counts one
  _realize._debug_line(f"graph {n} kernels", seg.device, launches[seg.start].bufs, tm, seg.ops, seg.mem)
  if DEBUG >= 3: print("    " + ", ".join(launch.name for launch in launches[seg.start:seg.stop]))

def _unpickle_captured(launches: list[tuple], state: dict) -> CapturedJit:
  from tinyplug.engine.realize import get_runner
  captured = CapturedJit.__new__(CapturedJit)
  captured.launches = [_Launch(None if ast is None else get_runner(device, ast), bufs, var_vals, ast)
                       for ast, device, bufs, var_vals in launches]
  captured._freed, captured._plan, captured._graphs_stale, captured._graphed = False, None, False, False
  for name, value in state.items(): setattr(captured, name, value)
  return captured

def _replay_one_reported(launch: _Launch) -> None:
  """A replayed launch with a profile span and a DEBUG line, like engine.realize.run_item."""
  device = launch.bufs[0].device
  if launch.is_copy:
    dest, src = launch.bufs
    with events.profile_span("copy", "copy (jit)", device, nbytes=dest.nbytes):
      st = time.perf_counter()
      dest.copyin(src.numpy())
      tm = time.perf_counter() - st
    _realize._debug_line("copy (jit)", device, launch.bufs, tm, 0, dest.nbytes)
    return
  wait = DEBUG >= 2 or events.enabled("profile")
  with events.profile_span("run", launch.name, device, jit=True) as info:
    tm = launch.prg(*launch.handles, global_size=launch.global_size, local_size=launch.local_size, vals=launch.vals,
                    wait=wait)
    info["device_time_s"] = tm
  est = launch.runner.spec.estimates
  _realize._debug_line(launch.name, device, launch.bufs, tm, est.get("ops", 0), est.get("mem", 0), launch.global_size)

def _tensor_args(args: tuple, kwargs: dict) -> list[Tensor]:
  """The tensor arguments, in a fixed order: positional first, then keyword arguments sorted by name."""
  ts = [a for a in args if isinstance(a, Tensor)]
  ts += [kwargs[k] for k in sorted(kwargs) if isinstance(kwargs[k], Tensor)]
  return ts

def _realize_inputs(inputs: list[Tensor]) -> list:
  """Make each tensor argument a realized, contiguous buffer of its own; returns the Buffers."""
  from tinyplug.engine.realize import buffer_of
  for make_contiguous in (False, True):   # realize first; only views of a buffer still need a contiguous copy
    pending = [t for t in inputs if not is_plain_buffer(t.uop) and not is_symbolic_buffer(t.uop)]
    if make_contiguous: pending = [t.replace(t.contiguous()) for t in pending]
    if pending: pending[0].realize(*pending[1:])
  # a tensor split over devices passes one buffer per device
  bufs = [buffer_of(u.base) for t in inputs for u in (t.uop.src if t.uop.op is Ops.MULTI else (t.uop,))]
  if len({id(b) for b in bufs}) != len(bufs):
    raise JitError("the same tensor (buffer) is passed to a jitted function twice; pass distinct tensors")
  for b in bufs: b.ensure_allocated()
  return bufs

def _rng_use(draws: list[tuple[UOp, int]], first_counter: int) -> RngUse:
  """Where each draw's first counter lives: the host buffer it is created in (a captured copy moves it on)."""
  from tinyplug.engine.realize import buffer_of
  def host(u: UOp) -> UOp: return host(u.src[0]) if u.op is Ops.COPY or u.op is Ops.MULTI else u   # MULTI: copies of one
  return RngUse([(buffer_of(host(u)), start - first_counter) for u, start in draws], RNGState.counter - first_counter)

def _bound_args(args: tuple, kwargs: dict) -> dict[str, int]:
  """The values of the bound variables passed as arguments (`f(x, Variable("n", 1, 9).bind(4))`)."""
  out = {}
  for a in (*args, *kwargs.values()):
    if isinstance(a, UOp) and a.op is Ops.BIND and a.src[0].op is Ops.DEFINE_VAR: out[a.src[0].arg[0]] = a.src[1].arg
  return out

def _check_tensor_return(ret: Any, name: str) -> None:
  """A replay returns the captured call's value: anything but tensors (and None) in it would be stale."""
  if ret is None or isinstance(ret, Tensor): return
  if isinstance(ret, (tuple, list, dict)):
    for item in (ret.values() if isinstance(ret, dict) else ret): _check_tensor_return(item, name)
    return
  raise JitError(f"jitted {name} returns a {type(ret).__name__}; a replay would return the captured call's value, "
                 "so return tensors (read numbers from them outside the jitted function)")

def _realize_outputs(ret: Any) -> None:
  outs = [ret] if isinstance(ret, Tensor) else [x for x in ret if isinstance(x, Tensor)] \
    if isinstance(ret, (tuple, list)) else [x for x in ret.values() if isinstance(x, Tensor)] if isinstance(ret, dict) else []
  if outs: outs[0].realize(*outs[1:])

class TinyJit(Generic[R]):
  """Decorator: capture the kernels of a function on its second call and replay them on later calls."""
  def __init__(self, fxn: Callable[..., R] | None = None, captured: CapturedJit | None = None, prune: bool = False):
    # prune: replay only the kernels that depend on the arguments (the rest ran once, at the capture)
    self.fxn, self.prune = fxn, prune
    self.captured = captured
    self.cnt = 0 if captured is None else 2
    if fxn is not None: functools.update_wrapper(self, fxn)

  def __reduce__(self):
    # as in tinygrad, a TinyJit pickles as its captured kernels: the loaded one replays them (the function stays here)
    if self.captured is None:
      raise JitError("only a TinyJit that has captured (been called twice) can be pickled: it pickles as its kernels")
    return TinyJit, (None, self.captured, self.prune)

  def reset(self) -> None:
    """Forget the capture: the next call runs eagerly again and the one after re-captures."""
    self.captured, self.cnt = None, 0

  def __get__(self, obj: Any, objtype: Any = None):
    """As a method decorator: bind `self` like a function would."""
    return self if obj is None else functools.partial(self.__call__, obj)

  @property
  def jit_cache(self) -> list[_Launch]: return [] if self.captured is None else self.captured.launches

  def __call__(self, *args: Any, **kwargs: Any) -> R:
    if self.fxn is None and self.captured is None:   # `@TinyJit(prune=True)`: this call hands over the function
      if len(args) != 1 or kwargs or not callable(args[0]):
        raise ValueError("TinyJit needs a function (or a CapturedJit)")
      return TinyJit(args[0], prune=self.prune)
    if JIT.value == 0 or _realize.capturing is not None:   # off, or called inside another jit's capture
      if self.fxn is None: raise JitError("JIT=0 but this TinyJit only has a captured program, no function to run")
      return self.fxn(*args, **kwargs)
    inputs = _tensor_args(args, kwargs)
    input_bufs = _realize_inputs(inputs)
    signature, var_vals = [], _bound_args(args, kwargs)
    for t in inputs:
      shape, vals = unbind_shape(tuple(t.shape))
      signature.append(_Signature(shape, t.dtype, t.device if isinstance(t.device, str) else (t.device, t.uop.axis)))
      var_vals.update(vals)
    if self.cnt >= 2 and self.captured is not None:
      self._check(signature)
      self.captured.replay(input_bufs, var_vals)
      self.cnt += 1
      return self.captured.ret
    if self.cnt == 0:
      ret = self.fxn(*args, **kwargs)
      _realize_outputs(ret)
      self.cnt = 1
      return ret
    # call 2: record every kernel the function runs, and the random numbers it draws
    records: list[tuple] = []
    draws: list[tuple[UOp, int]] = []
    first_counter = RNGState.counter
    _realize.capturing, RNGState.draws = records, draws
    try:
      ret = self.fxn(*args, **kwargs)
      _realize_outputs(ret)
    finally: _realize.capturing, RNGState.draws = None, None
    name = getattr(self.fxn, "__name__", "function")
    if not records: raise JitError(f"jitted {name} ran no kernels while capturing: there is nothing to replay")
    _check_tensor_return(ret, name)
    self.captured = CapturedJit(records, input_bufs, ret, signature, _rng_use(draws, first_counter), self.prune)
    if DEBUG >= 1:
      print(f"TinyJit: captured {len(self.captured)} kernels of {getattr(self.fxn, '__name__', 'fn')} "
            f"with {len(inputs)} input tensors")
    self.cnt = 2
    return ret

  def _check(self, signature: list[_Signature]) -> None:
    expected = self.captured.signature
    name = getattr(self.fxn, "__name__", "function")
    if len(signature) != len(expected):
      raise JitError(f"jitted {name} was captured with {len(expected)} tensor arguments, now called with "
                     f"{len(signature)}")
    for i, (got, want) in enumerate(zip(signature, expected)):
      if got != want:
        raise JitError(f"jitted {name}: tensor argument {i} changed from {want.describe()} to {got.describe()}; "
                       "a TinyJit replays fixed kernels, so make a new TinyJit (or call .reset()) for new shapes")

__all__ = ["TinyJit", "CapturedJit", "JitError"]
