"""TinyJit: run a function's kernels again without re-running its Python.

    @TinyJit
    def step(x: Tensor, y: Tensor) -> Tensor: ...

Call 1 runs the function normally (compiling its kernels, realizing lazily-created weights). Call 2 runs it again
while `engine.realize` records every kernel it launches with its buffers. From call 3 on, the recorded kernels are
launched directly on the same buffers, with the buffers of the tensor arguments (matched by position) swapped for
the new arguments' buffers; the function's Python does not run. Returned tensors are the ones from call 2, whose
buffers now hold the new results. Arguments must keep their shapes, dtypes and devices. `JIT=0` runs eagerly.

Random numbers (`Tensor.rand`, `randn`, `dropout`, ...) drawn inside the function are fresh on every replay: each
replay writes the current RNG counter into the buffers the captured kernels read it from and advances the counter by
what the function used, so jitted calls give the same sequence as eager calls (as in tinygrad). The seed is part of
the kernels: `Tensor.manual_seed` with a new seed after the capture needs `.reset()`.

What is not replayed: Python side effects, values read back to the host inside the function (`.item()`), and
anything that would change the graph from call to call (shapes, Python control flow on data).
"""
from __future__ import annotations
import functools, time
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, TypeVar
from tinyplug import events
from tinyplug.engine import realize as _realize
from tinyplug.helpers import DEBUG, JIT, GlobalCounters
from tinyplug.tensor import Tensor
from tinyplug.tensor_ops.graph import is_plain_buffer
from tinyplug.tensor_ops.random import RNGState, rng_words
from tinyplug.uop.ops import Ops, UOp

R = TypeVar("R")

class JitError(RuntimeError):
  """A jitted function was called with arguments that do not fit what it captured."""

@dataclass(frozen=True)
class _Signature:
  shape: tuple[int, ...]
  dtype: Any
  device: str
  def describe(self) -> str: return f"shape {self.shape}, dtype {self.dtype!r}, device {self.device}"

class _Launch:
  """One recorded kernel (or copy) with the raw handles it runs on; input slots are patched before each replay."""
  __slots__ = ("runner", "prg", "bufs", "handles", "global_size", "local_size", "vals", "is_copy", "name")
  def __init__(self, runner, bufs: list, var_vals: dict[str, int]):
    self.runner, self.bufs, self.is_copy = runner, list(bufs), runner is None
    self.handles = [b.ensure_allocated().handle for b in bufs]
    if runner is not None:
      spec = runner.spec
      self.prg, self.global_size, self.local_size, self.name = runner.prg, spec.global_size, spec.local_size, spec.name
      self.vals = tuple(var_vals[v.arg[0]] for v in spec.vars)
    else: self.prg, self.global_size, self.local_size, self.vals, self.name = None, None, None, (), "copy"

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

class CapturedJit:
  """The kernels of one call, the positions where the tensor arguments' buffers go, and the call's return value."""
  def __init__(self, records: list[tuple], input_buffers: list, ret: Any, signature: list[_Signature],
               rng: RngUse | None = None):
    self.launches = [_Launch(runner, bufs, vv) for _item, runner, bufs, vv in records]
    self.rng = rng or RngUse()
    by_id = {id(b): i for i, b in enumerate(input_buffers)}
    # (launch index, argument position within the launch, input index)
    self.input_slots = [(li, pos, by_id[id(b)]) for li, launch in enumerate(self.launches)
                        for pos, b in enumerate(launch.bufs) if id(b) in by_id]
    self.ret, self.signature = ret, signature
    self.input_buffers = list(input_buffers)

  def __len__(self) -> int: return len(self.launches)

  def replay(self, input_buffers: list) -> None:
    launches = self.launches
    for li, pos, ii in self.input_slots:
      launch = launches[li]
      launch.bufs[pos] = input_buffers[ii]
      launch.handles[pos] = input_buffers[ii].handle
    if self.rng.draws or self.rng.used: self.rng.advance()
    if DEBUG >= 2 or events.enabled("profile"):
      for launch in launches: _replay_one_reported(launch)
      return
    for launch in launches:
      if launch.is_copy: launch.bufs[0].copyin(launch.bufs[1].numpy())
      else: launch.prg(*launch.handles, global_size=launch.global_size, local_size=launch.local_size,
                       vals=launch.vals, wait=False)
    GlobalCounters.kernel_count += len(launches)

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
    pending = [t for t in inputs if not is_plain_buffer(t.uop)]
    if make_contiguous: pending = [t.replace(t.contiguous()) for t in pending]
    if pending: pending[0].realize(*pending[1:])
  bufs = [buffer_of(t.uop) for t in inputs]
  if len({id(b) for b in bufs}) != len(bufs):
    raise JitError("the same tensor (buffer) is passed to a jitted function twice; pass distinct tensors")
  for b in bufs: b.ensure_allocated()
  return bufs

def _rng_use(draws: list[tuple[UOp, int]], first_counter: int) -> RngUse:
  """Where each draw's first counter lives: the host buffer it is created in (a captured copy moves it on)."""
  from tinyplug.engine.realize import buffer_of
  def host(u: UOp) -> UOp: return host(u.src[0]) if u.op is Ops.COPY else u
  return RngUse([(buffer_of(host(u)), start - first_counter) for u, start in draws], RNGState.counter - first_counter)

def _realize_outputs(ret: Any) -> None:
  outs = [ret] if isinstance(ret, Tensor) else [x for x in ret if isinstance(x, Tensor)] \
    if isinstance(ret, (tuple, list)) else [x for x in ret.values() if isinstance(x, Tensor)] if isinstance(ret, dict) else []
  if outs: outs[0].realize(*outs[1:])

class TinyJit(Generic[R]):
  """Decorator: capture the kernels of a function on its second call and replay them on later calls."""
  def __init__(self, fxn: Callable[..., R] | None, captured: CapturedJit | None = None):
    if fxn is None and captured is None: raise ValueError("TinyJit needs a function (or a CapturedJit)")
    self.fxn = fxn
    self.captured = captured
    self.cnt = 0 if captured is None else 2
    if fxn is not None: functools.update_wrapper(self, fxn)

  def reset(self) -> None:
    """Forget the capture: the next call runs eagerly again and the one after re-captures."""
    self.captured, self.cnt = None, 0

  def __get__(self, obj: Any, objtype: Any = None):
    """As a method decorator: bind `self` like a function would."""
    return self if obj is None else functools.partial(self.__call__, obj)

  @property
  def jit_cache(self) -> list[_Launch]: return [] if self.captured is None else self.captured.launches

  def __call__(self, *args: Any, **kwargs: Any) -> R:
    if JIT.value == 0 or _realize.capturing is not None:   # off, or called inside another jit's capture
      if self.fxn is None: raise JitError("JIT=0 but this TinyJit only has a captured program, no function to run")
      return self.fxn(*args, **kwargs)
    inputs = _tensor_args(args, kwargs)
    input_bufs = _realize_inputs(inputs)
    signature = [_Signature(tuple(t.shape), t.dtype, t.device) for t in inputs]
    if self.cnt >= 2 and self.captured is not None:
      self._check(signature)
      self.captured.replay(input_bufs)
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
    self.captured = CapturedJit(records, input_bufs, ret, signature, _rng_use(draws, first_counter))
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
