"""Realize: schedule tensor-level UOps, compile each kernel once, run them, and report with DEBUG."""
from __future__ import annotations
import gc, time, weakref
from concurrent.futures import wait as wait_all
from typing import Any
from tinyplug import events
from tinyplug.caches import BoundedCache
from tinyplug.device import Buffer, Device, ProgramSpec
from tinyplug.helpers import BEAM, DEBUG, EMULATED_DTYPES, KERNEL_CACHE_SIZE, NOOPT, REALIZE_PLANS, TC, TRANSCENDENTAL, \
  GlobalCounters, colored, worker_thread
from tinyplug.uop.ops import Ops, UOp
from tinyplug.schedule import UNKNOWN_STRUCTURE, ScheduleItem, create_schedule
from tinyplug.codegen import pipeline_key

from tinyplug.device import buffer_of, has_buffer  # noqa: F401  (they live with Buffer; imported from here too)

# ---------------- compiled programs, cached by (device, ast) ----------------

class CompiledRunner:
  def __init__(self, device: str, spec: ProgramSpec, compile_s: float, lib: Any = None):
    """`lib`: a future of the binary (compiled ahead, see compile_ahead); None: compiled here."""
    self.device, self.spec, self.compile_s = device, spec, compile_s
    dev = Device[device]
    lib = dev.compiler.compile_program(spec) if lib is None else lib.result()
    self.prg = dev.make_program(spec, lib)
  def __call__(self, bufs: list[Buffer], var_vals: dict[str, int], wait: bool = False) -> float | None:
    if self.spec.vars and (missing := [v.arg[0] for v in self.spec.vars if v.arg[0] not in var_vals]):
      raise RuntimeError(f"kernel {self.spec.name} uses the unbound variable(s) {', '.join(missing)}: bind a value "
                         "(Variable(...).bind(n)) to run it")
    vals = tuple([var_vals[v.arg[0]] for v in self.spec.vars]) if self.spec.vars else ()
    if 0 in self.spec.global_size: return 0.0 if wait else None   # an empty output: GPU drivers reject a 0-wide grid
    return self.prg(*[b.handle for b in bufs], global_size=self.spec.global_size, local_size=self.spec.local_size,
                    vals=vals, wait=wait)

# (device, ast, TRANSCENDENTAL, NOOPT, BEAM, TC, EMULATED_DTYPES, pipeline fingerprint) -> compiled program; least
# recently used go first, so a kernel made per distinct constant does not pile up forever
_runners: BoundedCache = BoundedCache("engine.runners", KERNEL_CACHE_SIZE.value)

def _runner_key(device: str, ast: UOp) -> tuple:
  # the settings and the ordered passes of the loaded plugin set (ids, versions) change the code of the same kernel
  return (device, ast, TRANSCENDENTAL.value, NOOPT.value, BEAM.value, TC.value, EMULATED_DTYPES.value, pipeline_key())

def get_runner(device: str, ast: UOp) -> CompiledRunner:
  key = _runner_key(device, ast)
  if (r := _runners.get_lru(key)) is None:
    st = time.perf_counter()
    opts = None
    if (ahead := _ahead.pop(key, None)) is not None: spec, lib = ahead
    else:
      from tinyplug.codegen import get_program
      renderer, lib = Device[device].renderer, None
      if BEAM >= 1 and not NOOPT:   # the engine asks the search strategy; codegen only applies actions
        from tinyplug.search.runner import search_kernel
        opts = search_kernel(ast, renderer)
    st_codegen = time.perf_counter()
    if ahead is None: spec = get_program(ast, renderer, opts=opts)
    st_compile = time.perf_counter()
    with events.profile_span("compile", spec.name, device):
      r = CompiledRunner(device, spec, st_compile - st, lib)
    if DEBUG >= 2:   # what a first step waits for: building each kernel (compile includes a disk-cache hit)
      print(f"*** {device:7s} built {colored(f'{spec.name:26s}', 'yellow')} "
            + (f"search {(st_codegen - st) * 1e3:8.2f} ms " if opts is not None else "")
            + f"codegen {(st_compile - st_codegen) * 1e3:8.2f} ms compile {(time.perf_counter() - st_compile) * 1e3:8.2f} ms"
            + f" ({len(spec.uops)} uops)" + _tensor_cores_note(spec))
    if DEBUG >= 3 and spec.applied_opts: print(f"{spec.name}: applied opts {spec.applied_opts}")
    if DEBUG >= 4: print(spec.src)
    _runners.put(key, r)
  return r

# ---------------- running a schedule ----------------

def _debug_line(name: str, device: str, item_bufs: list[Buffer], tm: float | None, ops: int = 0, mem: int = 0,
                gsize: Any = None) -> None:
  GlobalCounters.kernel_count += 1
  GlobalCounters.global_ops += ops
  GlobalCounters.global_mem += mem
  if tm is not None: GlobalCounters.time_sum_s += tm
  if DEBUG.value >= 2:
    t = tm if tm is not None else 0.0
    gflops = ops / t / 1e9 if t > 0 else 0.0
    gbs = mem / t / 1e9 if t > 0 else 0.0
    print(f"*** {device:7s} {GlobalCounters.kernel_count:4d} {colored(f'{name:26s}', 'cyan')} arg {len(item_bufs):2d} "
          f"mem {GlobalCounters.mem_used/1e9:6.2f} GB tm {t*1e6:9.2f}us/{GlobalCounters.time_sum_s*1e3:9.2f}ms "
          f"({gflops:8.2f} GFLOPS {gbs:6.1f} GB/s)" + (f" global {gsize}" if gsize else ""))

# TinyJit's capture: while a list, run_item appends (item, runner or None for a copy, bufs, var_vals) to it
capturing: list | None = None

def _capture(item: ScheduleItem, bufs: list[Buffer], var_vals: dict[str, int] | None) -> None:
  runner = None if item.ast.op is Ops.COPY else get_runner(bufs[0].device, item.ast)
  capturing.append((item, runner, bufs, var_vals or {}))

# Schedules that Tensor.schedule() handed out and that have not run: their tensors already point at the output
# buffers, so before anything else is realized or read they run (in order; `run_pending`), and a later run_schedule
# of the same items skips them. Without this, a random tensor scheduled but not run would be computed afresh while
# what depends on it read the scheduled buffer (two different draws), or a read would see an empty buffer.
_pending: list[ScheduleItem] = []
_ran_early: weakref.WeakSet = weakref.WeakSet()

def defer(items: list[ScheduleItem]) -> None:
  """Remember `items` as scheduled but not run."""
  _pending.extend(items)

def run_pending() -> None:
  """Run every deferred schedule item that has not run yet."""
  while _pending:
    items = list(_pending)
    _pending.clear()
    for item in items:
      run_item(item)
      _ran_early.add(item)

def run_item(item: ScheduleItem, var_vals: dict[str, int] | None = None) -> None:
  if _pending or _ran_early.data:   # (a WeakSet's len() is Python code; its set of references is not)
    if item in _ran_early:
      _ran_early.discard(item)
      return
    if item in _pending: _pending.remove(item)
  bufs = item.bufs
  if item.var_vals: var_vals = {**item.var_vals, **var_vals} if var_vals else item.var_vals
  if capturing is not None: _capture(item, bufs, var_vals)
  if item.ast.op is Ops.COPY:
    dest, src = bufs
    with events.profile_span("copy", item.metadata.get("name", "copy"), dest.device, nbytes=dest.nbytes):
      st = time.perf_counter()
      dest.ensure_allocated().copyin(src.numpy())
      tm = time.perf_counter() - st
    _debug_line(item.metadata.get("name", "copy"), dest.device, bufs, tm, 0, dest.nbytes)
    return
  device = bufs[0].device
  runner = get_runner(device, item.ast)   # the runner allocates the buffers it is given
  if events.enabled("profile"):
    with events.profile_span("run", runner.spec.name, device) as info:
      tm = runner(bufs, var_vals or {}, wait=True)
      info["device_time_s"] = tm
  else: tm = runner(bufs, var_vals or {}, wait=DEBUG.value >= 2)
  _debug_line(runner.spec.name, device, bufs, tm, runner.spec.estimates.get("ops", 0),
              runner.spec.estimates.get("mem", 0), runner.spec.global_size)

def run_schedule(schedule: list[ScheduleItem], var_vals: dict[str, int] | None = None) -> None:
  if len(schedule) > 1: compile_ahead(schedule)
  for item in schedule: run_item(item, var_vals)

# ---------------- compiling ahead ----------------

# runner key -> (spec, the future of its binary, or None where a cache holds it) of a kernel compile_ahead lowered and
# no runner holds yet
_ahead: dict[tuple, tuple] = {}
COMPILE_THREAD = "tinyplug-compile"   # the one compile thread of this process (helpers.worker_thread)

def _compile_thread() -> Any: return worker_thread(COMPILE_THREAD)

def compile_ahead(schedule: list[ScheduleItem]) -> None:
  """Read every kernel of `schedule` not built yet that the codegen cache holds, in one query (_read_ahead), and lower
  the others, here, handing each to the compile thread as it is lowered, before
  the first one runs: the compiler (LLVM, which lets go of the GIL) works on kernel k while Python lowers kernel k+1,
  so a cold first step takes about the longer of the two on two cores instead of their sum (a compiler says it may
  with `background`); returns once every binary is done. Only where nothing watches the order of lowering and running (no events, DEBUG below 2, no
  search); a kernel that fails to lower here is left for run_item to lower (and raise) in its turn."""
  if BEAM >= 1 or DEBUG.value >= 2 or events._subscribers: return
  todo: dict[tuple, tuple[str, UOp]] = {}   # (a kernel may appear many times: each block of a model)
  for item in schedule:
    if item.ast.op is Ops.COPY: continue
    device = item.bufs[0].device
    if (key := _runner_key(device, item.ast)) in _runners or key in _ahead or key in todo: continue
    if not getattr(Device[device].compiler, "background", False): continue
    todo[key] = (device, item.ast)
  if len(todo) < 2: return
  hits, compiling = 0, []
  try:
    _read_ahead(todo, compiling)
    for key, (device, ast) in todo.items():
      if (handed := _lower_ahead(key, device, ast, compiling)) is None: return
      if not handed and not compiling and (hits := hits + 1) >= WARM_HITS: return
  finally:
    # the kernels run once all are compiled: a kernel run while the thread compiles wakes the thread pool's workers,
    # whose wait for the next kernel took the core the compiler needed (cold gpt: +2.6 s of CPU, no faster)
    if compiling: wait_all(compiling)

def _read_ahead(todo: dict[tuple, tuple[str, UOp]], compiling: list) -> None:
  """Every kernel of `todo` whose program the codegen cache holds into _ahead, all read at once per device (one query
  for the programs, one for their binaries), its binary handed to the compile thread where no cache holds it; what
  was read leaves `todo` (the rest is lowered one by one)."""
  from tinyplug.codegen import cached_programs
  by_device: dict[str, list[tuple[tuple, UOp]]] = {}
  for key, (device, ast) in todo.items(): by_device.setdefault(device, []).append((key, ast))
  for device, entries in by_device.items():
    dev = Device[device]
    try: specs = cached_programs([ast for _, ast in entries], dev.renderer)
    except Exception: continue   # (a CHECK_OOB failure): each is read again in its turn, which raises there
    found = [(key, specs[ast]) for key, ast in entries if ast in specs]
    for (key, spec), lib in zip(found, dev.compiler.cached_programs([spec for _, spec in found])):
      _keep_ahead(key, spec, dev, lib is not None, compiling)
      del todo[key]

def _lower_ahead(key: tuple, device: str, ast: UOp, compiling: list) -> bool | None:
  """Lower one kernel into _ahead, its binary handed to the compile thread unless a cache holds it; True: handed,
  None: it failed to lower (left for its turn)."""
  from tinyplug.codegen import get_program
  dev = Device[device]
  try: spec = get_program(ast, dev.renderer)
  except Exception: return None
  return _keep_ahead(key, spec, dev, dev.compiler.cached_program(spec) is not None, compiling)

def _keep_ahead(key: tuple, spec: Any, dev: Any, cached: bool, compiling: list) -> bool:
  """`spec` into _ahead, its binary handed to the compile thread unless a cache holds it (then it is left for
  compile_program in the kernel's turn, a memory hit: handing it to a thread costs more than the read); True: handed."""
  future = None if cached else _compile_thread().submit(dev.compiler.compile_program, spec)
  if future is not None: compiling.append(future)
  _ahead[key] = (spec, future)
  return future is not None

# a warm start (every binary cached, these first kernels say) lowers and runs kernels in turn as before: lowering all
# first kept the thread pool's workers awake through the kernels' first runs, and split more of them on a busy machine
WARM_HITS = 4

class gc_paused:
  """Python's cyclic garbage collector off inside the block, back on after it (unless it was off already: nested
  blocks and a user's own gc.disable() are left alone). Scheduling and reading kernels back build tens of thousands
  of small objects, which set off ~150 collections per warm first step (a full one among them): ~15% of its time.
  Memory freed by reference counting is freed as always; only cycles wait until the block ends. A class, not a
  generator context manager: this wraps every realize, and a generator's enter and exit cost ~1 us more."""
  __slots__ = ("was_on",)
  def __enter__(self) -> None:
    self.was_on = gc.isenabled()
    if self.was_on: gc.disable()
  def __exit__(self, *exc: Any) -> None:
    if self.was_on: gc.enable()

def realize(uops: list[UOp]) -> dict[UOp, UOp]:
  """Compute every given tensor-level UOp; returns what each realized node became (a BUFFER view)."""
  return realize_schedule(uops)[1]

def realize_schedule(uops: list[UOp], plans: bool = True) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """realize(), also returning the schedule that ran (what engine/plan.py records; with `plans`, a graph whose
  schedule is a cached template may run from a plan instead: no schedule then)."""
  found: Any = UNKNOWN_STRUCTURE
  if plans and plans_apply():
    becomes, found = _plan().realize_graph(uops)
    if becomes is not None: return [], becomes
  st = time.perf_counter()
  with gc_paused():
    if _pending: run_pending()
    schedule, becomes = create_schedule(uops, found)
    count_before = GlobalCounters.kernel_count
    run_schedule(schedule)
  if DEBUG.value >= 1 and schedule:
    print(f"realize: {GlobalCounters.kernel_count - count_before} kernels in {(time.perf_counter()-st)*1e3:.2f} ms")
  return schedule, becomes

def plans_apply() -> bool:
  """Whether a realize may run from a plan (engine/plan.py): only where the usual path would do nothing more (nothing
  pending, no TinyJit capture, no event listener, DEBUG 0)."""
  return not _pending and capturing is None and not events._subscribers and not DEBUG.value and bool(REALIZE_PLANS.value)

def _plan():
  global _plan_mod
  if _plan_mod is None:
    import tinyplug.engine.plan as mod
    _plan_mod = mod
  return _plan_mod
_plan_mod = None

def _tensor_cores_note(spec) -> str:
  """', tensor cores: <name>' when the kernel runs WMMAs (the TC action), for the DEBUG=2 build line."""
  names = sorted({u.arg for u in spec.uops if u.op is Ops.WMMA})
  return f", tensor cores: {', '.join(names)}" if names else ""
