"""Kernel search: run the selected strategy plugin, time candidates on the real device, cache the answer on disk."""
from __future__ import annotations
import hashlib, json, os, sys, time
from tinyplug import events
from tinyplug.diskcache import SealedTable
from tinyplug.helpers import CACHELEVEL, IGNORE_BEAM_CACHE, suggest
from tinyplug.uop.ops import Ops, UOp
from tinyplug.codegen.kernel import Kernel, KernelOptError, Opt, OptOps
from tinyplug.hookspecs.search import check_strategy

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

def _tensor_core_actions(k: Kernel) -> list[Opt]:
  """TC actions (first, or after PADTOs only): one per tensor core and way the kernel's reduction runs on it (up to 2);
  after TC, STAGE (once): plain, prefetched, and prefetched with 16-byte fills of B (A too) into padded tiles."""
  from tinyplug.codegen.tensor_cores import tc_matches
  from tinyplug.helpers import TC
  if not TC or k.renderer is None or not k.renderer.uses_work_groups: return []
  if any(o.op is OptOps.TC for o in k.applied_opts):   # then STAGE: the operands through shared memory
    return [Opt(OptOps.STAGE, None, a) for a in (None, 1, 11, 15)] if k.staged is None and k.renderer.has_shared else []
  if any(o.op is not OptOps.PADTO for o in k.applied_opts): return []
  return [Opt(OptOps.TC, choice, i) for i, tc in enumerate(k.renderer.tensor_cores)
          for choice in range(min(2, len(tc_matches(k.sink, tc))))]

def apply_all(k: Kernel, opts: list[Opt]) -> Kernel | None:
  k = k.copy()
  try:
    for o in opts: k.apply_opt(o)
  except KernelOptError: return None
  return k

def _scratch(buf):
  """An allocated buffer with every byte written once: fresh host memory maps one shared zero page until it is
  written, which would make every candidate look cache-resident and hide its real memory traffic."""
  buf.ensure_allocated()
  buf.copyin(memoryview(bytearray(buf.nbytes)))
  return buf

class Timer:
  """Compiles a kernel AST with given actions and times it on `device` with scratch buffers (min of a few runs)."""
  def __init__(self, ast: UOp, renderer, device: str):
    self.ast, self.renderer, self.device = ast, renderer, device
    self.bufs = None
    self.best = float("inf")
  def __call__(self, opts: list[Opt]) -> float:
    from tinyplug.codegen import get_program
    from tinyplug.device import Buffer, Device
    try: spec = get_program(self.ast, self.renderer, opts=opts)
    except (KernelOptError, NotImplementedError): return float("inf")
    dev = Device[self.device]
    if self.bufs is None:
      gl = sorted((u for u in self.ast.toposort() if u.op is Ops.DEFINE_GLOBAL), key=lambda u: u.arg)
      self.bufs = [_scratch(Buffer(self.device, max(g.dtype.size, 1), g.dtype.base)) for g in gl]
    try:
      prg = dev.make_program(spec, dev.compiler.compile_program(spec))
      times: list[float] = []
      # a candidate far slower than the best so far is not run again (large kernels make search slow otherwise)
      while len(times) < 3 and (not times or times[0] < 2 * self.best):
        st = time.perf_counter()
        tm = prg(*[b.handle for b in self.bufs], global_size=spec.global_size, local_size=spec.local_size,
                 vals=tuple(v.arg[1] for v in spec.vars), wait=True)
        times.append(tm if tm is not None else time.perf_counter() - st)
      self.best = min(self.best, *times)
      return min(times)
    except Exception as e:  # a candidate the device rejects is just a bad candidate
      if events.enabled("log"): events.emit("log", f"search: {opts} failed: {e}")
      return float("inf")

def _progress(text: str) -> None:
  if sys.stderr.isatty(): print(f"\r\033[K{text}", end="", file=sys.stderr, flush=True)

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
  st = time.perf_counter()
  kernel = Kernel(sink, renderer)
  label = f"{name}={width} {renderer.device} kernel {'x'.join(map(str, kernel.full_shape)) or 'scalar'}"
  # shown before the first candidate: timing the starting points already compiles kernels
  _progress(f"{label}: timing the starting points")
  opts = strategy.search(kernel, timer, width,
                         lambda text: _progress(f"{label} {time.perf_counter()-st:5.1f}s: {text}"))
  _progress("")
  if sys.stderr.isatty(): print(f"\r\033[K{label}: {opts} in {time.perf_counter()-st:.2f}s", file=sys.stderr)
  if events.enabled("search"): events.emit("search", {"strategy": name, "opts": opts, "seconds": time.perf_counter() - st})
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
