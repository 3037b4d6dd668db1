"""Kernel search: run the selected strategy plugin, time candidates on the real device, cache the answer on disk."""
from __future__ import annotations
import hashlib, json, os, sys, time
from typing import TYPE_CHECKING, Callable
from tinyplug import events
from tinyplug.diskcache import SealedTable
from tinyplug.helpers import CACHELEVEL, DEBUG, IGNORE_BEAM_CACHE, suggest
from tinyplug.uop.ops import Ops, UOp
from tinyplug.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tinyplug.hookspecs.search import check_strategy
if TYPE_CHECKING: from tinyplug.backend import ProgramSpec

def _thread_choices() -> tuple[int, ...]:
  try: n = len(os.sched_getaffinity(0))
  except (AttributeError, OSError): n = os.cpu_count() or 1
  return tuple(sorted({n, 2 * n})) if n > 1 else ()

THREAD_CHOICES = _thread_choices()   # one share per core, or two (uneven work evens out)

def candidate_actions(k: Kernel) -> list[Opt]:
  """Every single action worth trying next on `k`."""
  acts: list[Opt] = []
  loops_run = k.renderer is None or k.renderer.runs_loops   # CPU-style: loop order, blocking and threads matter
  n_loop, n_reduce = len(k.loop_axes), len(k.reduce_axes)
  for axis in range(n_loop):
    acts += [Opt(OptOps.UPCAST, axis, a) for a in (2, 3, 4, 5, 7, 8, 16, 32)]
    if k.renderer is not None and k.renderer.has_local: acts += [Opt(OptOps.LOCAL, axis, a) for a in (2, 4, 8, 16, 32)]
    if loops_run:
      acts += [Opt(OptOps.SPLIT, axis, a) for a in (4, 8, 16)]
      acts += [Opt(OptOps.SWAP, axis, other) for other in range(axis + 1, n_loop)]
      acts += [Opt(OptOps.THREAD, axis, a) for a in THREAD_CHOICES]
  for axis in range(n_reduce):
    acts += [Opt(OptOps.UNROLL, axis, a) for a in (2, 3, 4, 7, 8)]
    if k.renderer is not None and k.renderer.has_shared:
      acts += [Opt(OptOps.GROUPTOP, axis, a) for a in (8, 16, 32)]
  for axis in range(n_loop + n_reduce): acts += [Opt(OptOps.PADTO, axis, a) for a in (4, 8, 16, 32)]
  return _tensor_core_actions(k) + acts

# The tensor-core kernel's search space, in one table (the TC action's args come from the renderer's cores):
# "stage": the STAGE args tried once a kernel runs on tensor cores (tc_staging's bits: 1 prefetch the next K step, 2 and
#   4 fill B and A with 16-byte loads, 8 pad the shared tiles; None: plain staging);
# "tiles": the whole tensor-core kernels a search starts from (`tensor_core_kernels`), each (UPCAST N, UPCAST M,
#   UNROLL K, LOCAL N, LOCAL M): WMMAs per warp along N and M, K-tiles per loop trip, warps per work-group along N and
#   M (1: that action left out), each unstaged and with every "stage" arg. One action at a time a narrow beam never
#   gets there: each step of the way is slower than the heuristic's kernel it competes with.
TC_SEARCH: dict[str, tuple] = {
  "stage": (None, 1, 11, 15),
  # STAGE's asynchronous mode (tc_async.py), where the renderer has async copies: 2, 3 and 4 stages; 3 stages with the
  # blocks in grouped order (the heuristic's default)
  "async_stage": (16, 48, 80, 304),
  "tiles": ((4, 2, 2, 2, 2), (4, 4, 2, 2, 2), (4, 4, 2, 4, 2), (4, 4, 2, 2, 4), (8, 4, 2, 2, 2), (8, 4, 2, 4, 2),
            (8, 2, 2, 2, 4), (4, 2, 2, 4, 4), (4, 4, 4, 2, 2), (2, 4, 2, 4, 2), (8, 4, 4, 2, 2), (8, 4, 2, 1, 2)),
  # tensor cores that read shared memory through descriptors (Hopper's wgmma: the renderer's descriptor_cores): only
  # staged by STAGE's descriptor mode (tc_wgmma.py, 2048 + 16): 3 and 4 stages, grouped and not; tiles of K steps of
  # 64 or 128 (UNROLL 4, 8), one or two warpgroups along M, one or two cores' N (64 x 128, 64 x 256 per warpgroup)
  "descriptor_stage": (2048 + 16 + 32 + 256, 2048 + 16 + 64 + 256, 2048 + 16 + 32, 2048 + 16 + 64),
  "descriptor_tiles": ((1, 1, 4, 1, 2), (2, 1, 4, 1, 2), (1, 1, 4, 1, 1), (2, 1, 4, 1, 1), (1, 2, 4, 1, 1),
                       (1, 1, 8, 1, 2), (2, 1, 8, 1, 2)),
}

def _on_descriptor_core(k: Kernel) -> bool:
  cores = k.renderer.tensor_cores
  return any(o.op is OptOps.TC and isinstance(o.arg, int) and o.arg < len(cores) and
             cores[o.arg].name in k.renderer.descriptor_cores for o in k.applied_opts)

def _stage_args(k: Kernel) -> tuple:
  if _on_descriptor_core(k): return TC_SEARCH["descriptor_stage"]
  return TC_SEARCH["stage"] + (TC_SEARCH["async_stage"] if k.renderer.async_copy else ())

def _tensor_core_actions(k: Kernel) -> list[Opt]:
  """TC actions (first, or after PADTOs only): one per tensor core and way the kernel's reduction runs on it (up to 2);
  after TC, STAGE (once) with each of TC_SEARCH's args ("async_stage" too where the renderer has async copies)."""
  from tinyplug.codegen.tensor_cores import tc_matches
  from tinyplug.helpers import TC
  if not TC or k.renderer is None or not k.renderer.uses_work_groups: return []
  if any(o.op is OptOps.TC for o in k.applied_opts):   # then STAGE: the operands through shared memory
    if k.staged is not None or not k.renderer.has_shared: return []
    return [Opt(OptOps.STAGE, None, a) for a in _stage_args(k)]
  if any(o.op is not OptOps.PADTO for o in k.applied_opts): return []
  return [Opt(OptOps.TC, choice, i) for i, tc in enumerate(k.renderer.tensor_cores)
          for choice in range(min(2, len(tc_matches(k.sink, tc))))]

def tensor_core_kernels(k: Kernel) -> list[tuple[Opt, ...]]:
  """TC_SEARCH's whole tensor-core kernels for `k` (no actions but PADTOs applied; else none): each tensor core the
  kernel matches (its first assignment), each tile, unstaged and staged each way. Those that do not apply are left out."""
  steps: list[tuple[Opt, ...]] = []
  for tc in (a for a in _tensor_core_actions(k) if a.op is OptOps.TC and a.axis == 0):
    if (on_tc := apply_all(k, [tc])) is None: continue
    n, m, red = len(on_tc.loop_axes) - 1, len(on_tc.loop_axes) - 2, len(on_tc.reduce_axes) - 1
    if m < 0 or red < 0: continue
    descriptor = _on_descriptor_core(on_tc)   # its WMMAs run only staged so
    for up_n, up_m, unroll, loc_n, loc_m in TC_SEARCH["descriptor_tiles" if descriptor else "tiles"]:
      tile = [Opt(op, axis, amt) for op, axis, amt in ((OptOps.UPCAST, n, up_n), (OptOps.UPCAST, m, up_m),
                                                       (OptOps.UNROLL, red, unroll), (OptOps.LOCAL, n, loc_n),
                                                       (OptOps.LOCAL, m, loc_m)) if amt > 1]
      if (tiled := apply_all(on_tc, tile)) is None: continue
      if not descriptor: steps.append((tc, *tile))
      if k.renderer.has_shared:
        steps += [(tc, *tile, st) for a in _stage_args(tiled) if apply_all(tiled, [st := Opt(OptOps.STAGE, None, a)])]
  return steps

def _applied(k: Kernel, opts: list[Opt]) -> Kernel | str:
  """A copy of `k` with `opts` applied, or why one of them does not apply."""
  k = k.copy()
  try:
    for o in opts: k.apply_opt(o)
  except KernelOptError as e: return str(e)
  return k

def apply_all(k: Kernel, opts: list[Opt]) -> Kernel | None:
  return None if isinstance(done := _applied(k, opts), str) else done

def accumulator_registers(k: Kernel) -> int:
  """32-bit registers a work-item's reduction accumulators take: each REDUCE (a tensor core's: one per element of its
  C fragment) once per element of the upcast output tile, at least one register each."""
  reduces = [u for u in k.sink.toposort() if u.op is Ops.REDUCE]
  tile = 1
  for r in k.ranges:
    if r.arg[1] == "upcast" and r.src[0].op is Ops.CONST: tile *= int(r.src[0].arg)
  return sum(tile * max(1, -(-u.dtype.itemsize // 4)) for u in reduces)

def refusal(k: Kernel, opts: list[Opt]) -> str | None:
  """Why `opts` on `k` need not be built at all (they do not apply, or the renderer says they cannot be fast), or None."""
  if isinstance(done := _applied(k, opts), str): return done
  budget = k.renderer.max_registers if k.renderer is not None else 0
  if budget and (regs := accumulator_registers(done)) > budget:
    return f"its accumulators take {regs} registers per work-item; the renderer has {budget}"
  return None

def _scratch(buf):
  """An allocated buffer with every byte written once: fresh host memory maps one shared zero page until it is
  written, which would make every candidate look cache-resident and hide its real memory traffic."""
  buf.ensure_allocated()
  buf.copyin(memoryview(bytearray(buf.nbytes)))
  return buf

def parallel_workers() -> int:
  """How many worker processes build candidates: PARALLEL, or one per core when it is negative (the default)."""
  from tinyplug.helpers import PARALLEL
  from tinyplug.search.pool import default_workers
  n = int(PARALLEL.value)
  return default_workers() if n < 0 else n

def _dropped(opts: list[Opt], why: str, level: int = 2) -> None:
  if DEBUG >= level: print(f"search: dropped {opts}: {why}")
  if events.enabled("log"): events.emit("log", f"search: {opts} failed: {why}")

# a candidate whose build (codegen and compiler) takes longer than this is stopped and dropped: a pathological tile
# (huge unrolls) would otherwise hold the search up for many minutes (only in the workers: a build in this process
# cannot be stopped)
BUILD_TIMEOUT = 120.0

def _settle(pool, fut) -> None:
  """Wait until `fut` is done, stopping builds that run past BUILD_TIMEOUT meanwhile."""
  import concurrent.futures
  while not concurrent.futures.wait([fut], timeout=min(5.0, BUILD_TIMEOUT / 4)).done: pool.stop_stuck(BUILD_TIMEOUT)

class Timer:
  """Builds a kernel AST with given actions and times it on `device` with scratch buffers (min of a few runs).

  `timer(opts)` builds and times one candidate here; `timer.many(candidates)` builds them in the compile workers
  (PARALLEL, tinyplug/search/pool.py) and times them here in order, each as soon as it is built (on a device that
  runs on the host CPU, once all are built: compiling would slow the runs down). Either way a candidate that does
  not build, or whose worker crashes, is inf, and candidates the renderer rules out (`refusal`) are never built.
  `stats` counts what happened to the candidates."""
  def __init__(self, ast: UOp, renderer, device: str):
    self.ast, self.renderer, self.device = ast, renderer, device
    self.kernel = Kernel(ast, renderer)
    self.bufs = None
    self.best = float("inf")
    self.stats = {"timed": 0, "refused": 0, "failed": 0, "built_in_workers": 0}
    self.on_progress: Callable[[int, int], None] | None = None   # (candidates done, of) in a `many` batch
    self._job: bytes | None | bool = None   # the pickled job for the workers; False: they cannot build this kernel
    self._job_key = ""

  def __call__(self, opts: list[Opt]) -> float: return self.many([opts])[0]

  def many(self, candidates: list[list[Opt]]) -> list[float]:
    """The time of each candidate (inf: refused, failed to build or run), timed in the order given."""
    out = [float("inf")] * len(candidates)
    pool = self._pool() if len(candidates) > 1 else None
    todo: list[int] = []
    futures: list = []
    for i, opts in enumerate(candidates):   # each sent to the workers as soon as it passes: they start at once
      if (why := refusal(self.kernel, opts)) is not None:
        self.stats["refused"] += 1
        _dropped(opts, f"refused: {why}", 3)
        continue
      todo.append(i)
      if pool is not None: futures.append(pool.submit(self._job_key, self._job, opts))
    if pool is None:
      for n, i in enumerate(todo):
        out[i] = self._time(candidates[i], self._build_here(candidates[i]))
        if self.on_progress is not None: self.on_progress(n + 1, len(todo))
      return out
    from tinyplug.codegen import announce_kernel
    from tinyplug.search.pool import JobRefused, WorkerDied
    if self.renderer.runs_loops:
      for fut in futures: _settle(pool, fut)
    for n, (i, fut) in enumerate(zip(todo, futures)):
      try:
        _settle(pool, fut)
        built = fut.result()
      except JobRefused as e:   # nothing of this kernel builds there: build the rest here
        if DEBUG >= 1: print(f"search: the compile workers cannot build this kernel ({e}); building here")
        self._job = False
        for f in futures[n:]: f.cancel()
        for j in todo[n:]: out[j] = self._time(candidates[j], self._build_here(candidates[j]))
        break
      except WorkerDied as e:
        self.stats["failed"] += 1
        _dropped(candidates[i], str(e), 1)
        continue
      except Exception as e:
        self.stats["failed"] += 1
        _dropped(candidates[i], str(e))
        continue
      self.stats["built_in_workers"] += 1
      announce_kernel(built[0], self.ast, self.renderer.device)   # codegen's event, for a kernel a worker lowered
      out[i] = self._time(candidates[i], built)
      if self.on_progress is not None: self.on_progress(n + 1, len(todo))
    return out

  def _pool(self):
    """The compile workers for this kernel, or None: PARALLEL=0, or its renderer or compiler does not pickle."""
    n = parallel_workers()
    if n <= 0 or self._job is False: return None
    if self._job is None:
      import pickle
      from tinyplug.codegen import pipeline_key
      from tinyplug.device import Device
      from tinyplug.helpers import ContextVar
      settings = {name: var.value for name, var in ContextVar.registry.items()}
      try: self._job = pickle.dumps((self.renderer, Device[self.device].compiler, self.ast, settings, pipeline_key()))
      except Exception as e:
        if DEBUG >= 2: print(f"search: building candidates here: the renderer or compiler does not pickle ({e})")
        self._job = False
        return None
      self._job_key = hashlib.sha256(self._job).hexdigest()
    from tinyplug.search.pool import compile_pool
    return compile_pool(n)

  def _build_here(self, opts: list[Opt]) -> tuple | None:
    from tinyplug.codegen import get_program
    from tinyplug.device import Device
    try:
      spec = get_program(self.ast, self.renderer, opts=opts)
      return spec, Device[self.device].compiler.compile_program(spec)
    except (KernelOptError, NotImplementedError) as e: why = str(e)
    except Exception as e: why = f"{type(e).__name__}: {e}"   # a compiler's error: a bad candidate, not a failed search
    self.stats["failed"] += 1
    _dropped(opts, why)
    return None

  def run_once(self, prg: Callable[..., float | None], spec: ProgramSpec) -> float:
    """Seconds of one run of a built candidate (tests replace this to time deterministically)."""
    st = time.perf_counter()
    tm = prg(*[b.handle for b in self.bufs], global_size=spec.global_size, local_size=spec.local_size,
             vals=tuple(v.arg[1] for v in spec.vars), wait=True)
    return tm if tm is not None else time.perf_counter() - st

  def _time(self, opts: list[Opt], built: tuple | None) -> float:
    if built is None: return float("inf")
    from tinyplug.device import Buffer, Device
    spec, lib = built
    dev = Device[self.device]
    if self.bufs is None:
      gl = sorted((u for u in self.ast.toposort() if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
      self.bufs = [_scratch(Buffer(self.device, max(g.dtype.size, 1), g.dtype.base)) for g in gl]
    try:
      prg = dev.make_program(spec, lib)
      times: list[float] = []
      # the time cap: a candidate far slower than the best so far runs once, not three times
      while len(times) < 3 and (not times or times[0] < 2 * self.best): times.append(self.run_once(prg, spec))
    except Exception as e:  # a candidate the device rejects is just a bad candidate
      self.stats["failed"] += 1
      _dropped(opts, str(e))
      return float("inf")
    self.stats["timed"] += 1
    self.best = min(self.best, *times)
    return min(times)

_CLEAR_LINE = "\r\033[K"

def _progress(text: str) -> None:
  if sys.stderr.isatty(): print(f"{_CLEAR_LINE}{text}", end="", file=sys.stderr, flush=True)

def _cache_key(strategy: str, version: str, ast: UOp, renderer, device: str, width: int) -> str:
  from tinyplug.codegen import pipeline_key
  from tinyplug.helpers import TC
  text = "\n".join([strategy, version, str(width), device, type(renderer).__qualname__, pipeline_key(), f"TC={TC.value}",
                    str(ast)])
  return hashlib.sha256(text.encode()).hexdigest()

# search answers on disk, each row checked against its digest (tinyplug.diskcache)
SEARCH_DB = SealedTable("search.db", "search_v2", "search")

def _opts_to_json(opts: list[Opt]) -> str: return json.dumps([[o.op.name, o.axis, o.arg] for o in opts])
def _opts_from_json(text: str) -> list[Opt]: return [Opt(OptOps[n], a, g) for n, a, g in json.loads(text)]

def search_kernel(ast: UOp, renderer) -> list[Opt]:
  """BEAM=n: the actions the SEARCH strategy picks for the kernel `ast`, searched on the graph the "opt" stage sees.
  The engine calls this and passes the actions down to codegen (codegen never calls a search)."""
  from tinyplug.codegen import KernelContext, run_pipeline
  from tinyplug.helpers import BEAM, SEARCH
  sink = run_pipeline(ast, renderer, KernelContext(renderer), until="opt")
  # a loop that runs to a variable's value has no size to split: such a kernel runs as scheduled
  if any(u.op is Ops.RANGE and u.src[0].op is not Ops.CONST for u in sink.toposort()): return []
  return run_search(str(SEARCH.value or "beam"), sink, renderer, int(BEAM.value))

def run_search(name: str, sink: UOp, renderer, width: int) -> list[Opt]:
  """The actions the strategy `name` picks for this kernel (from the disk cache when it searched before)."""
  from tinyplug.plugins import get_plugin_manager
  pm = get_plugin_manager()
  if name not in pm.search:
    raise ValueError(f"unknown search strategy {name!r}{suggest(name, list(pm.search))}; installed: {sorted(pm.search)}")
  spec, _ = pm.search[name]
  key = _cache_key(name, spec.version, sink, renderer, renderer.device, width)
  if CACHELEVEL >= 1 and not IGNORE_BEAM_CACHE and (cached := _cached_opts(key, sink, renderer)) is not None:
    return cached
  strategy = pm.load_factory(spec.factory)()
  check_strategy(strategy, name)
  timer = Timer(sink, renderer, renderer.device)
  timer._pool()   # the workers start now: they import while the strategy works out its starting points
  st = time.perf_counter()
  kernel = Kernel(sink, renderer)
  label = f"{name}={width} {renderer.device} kernel {'x'.join(map(str, kernel.full_shape)) or 'scalar'}"
  def step(text: str) -> None:   # the strategy's own lines; without a terminal, DEBUG=1 prints them one per line
    _progress(line := f"{label} {time.perf_counter()-st:5.1f}s: {text}")
    if DEBUG >= 1 and not sys.stderr.isatty(): print(line, file=sys.stderr, flush=True)
  step("timing the starting points")   # shown before the first candidate: that already builds kernels
  timer.on_progress = lambda done, total: _progress(f"{label} {time.perf_counter()-st:5.1f}s: {done}/{total} built and "
                                                   f"timed, best {timer.best*1e6:.1f} us")
  opts = strategy.search(kernel, timer, width, step)
  _progress("")
  seconds, stats = time.perf_counter() - st, dict(timer.stats)
  if (tty := sys.stderr.isatty()) or DEBUG >= 1:
    print(f"{_CLEAR_LINE if tty else ''}{label}: {opts} in {seconds:.2f}s ({stats['timed']} timed, {stats['refused']} refused, "
          f"{stats['failed']} failed; {stats['built_in_workers']} built by {parallel_workers()} workers)", file=sys.stderr)
  if events.enabled("search"):
    events.emit("search", {"strategy": name, "opts": opts, "seconds": seconds, "kernel": kernel.full_shape, **stats})
  if CACHELEVEL >= 1: SEARCH_DB.put(key, _opts_to_json(opts).encode())
  return opts

def _cached_opts(key: str, sink: UOp, renderer) -> list[Opt] | None:
  """The stored answer for `key` if it is intact and still applies to this kernel; a row that does not parse or
  apply is dropped (and reported once), so the search runs again instead of failing every run."""
  if (payload := SEARCH_DB.get(key)) is None: return None
  try:
    opts = _opts_from_json(payload.decode())
    if apply_all(Kernel(sink, renderer), opts) is not None: return opts
    why = "its actions do not apply to the kernel"
  except Exception as e: why = f"unreadable: {type(e).__name__}"   # whatever a damaged row holds
  SEARCH_DB.drop(key, why)
  return None
