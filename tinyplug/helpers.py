"""Small helpers shared by every layer, and the one place where tinyplug reads its configuration.

Only the standard library is imported here, so `import tinyplug.helpers` stays cheap.
No other tinyplug module reads `os.environ`: they call `getenv` (cached, for values fixed for the
whole process), `env_str` (read fresh every time) or use one of the `ContextVar`s declared below.
Every variable is documented in docs/env_vars.md; `tinyplug env` prints them with their values.
"""
from __future__ import annotations

import contextlib
import functools
import operator
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable, Iterator, TypeVar

T = TypeVar("T")

OSX = sys.platform == "darwin"
LINUX = sys.platform.startswith("linux")
WINDOWS = sys.platform == "win32"

# ---------------------------------------------------------------------------------------------------------------------
# environment

_TRUE_WORDS = ("1", "true", "yes", "on", "y", "t")
_FALSE_WORDS = ("", "0", "false", "no", "off", "n", "f")


def _cast(key: str, raw: str, default: Any) -> Any:
  """Convert the text of an environment variable to the type of `default`."""
  if isinstance(default, bool):
    word = raw.strip().lower()
    if word in _TRUE_WORDS: return True
    if word in _FALSE_WORDS: return False
    raise ValueError(f"environment variable {key}={raw!r} is not a boolean (use 1/0, true/false, yes/no)")
  if isinstance(default, int):
    try: return int(raw.strip() or "0")
    except ValueError: raise ValueError(f"environment variable {key}={raw!r} is not an integer") from None
  if isinstance(default, float):
    try: return float(raw.strip() or "0")
    except ValueError: raise ValueError(f"environment variable {key}={raw!r} is not a number") from None
  return raw


def env_flag(key: str, default: bool = False) -> bool:
  """Boolean environment variable `key`, read fresh on every call: 1/0, true/false, yes/no, on/off (any case);
  unset gives `default`, anything else is a ValueError naming the variable. The one boolean parser."""
  raw = os.environ.get(key)
  return default if raw is None else _cast(key, raw, True)


def env_str(key: str, default: str = "") -> str:
  """The raw text of environment variable `key`, read fresh on every call (not cached)."""
  return os.environ.get(key, default)


@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
  """Environment variable `key` cast to the type of `default` (int, float, bool or str); cached per (key, default).

  Unset variables give `default`. An empty string counts as 0/False for numbers and booleans.
  The cache means a value is read once per process; use `env_str` for values tests change.
  """
  raw = os.environ.get(key)
  return default if raw is None else _cast(key, raw, default)


@dataclass(frozen=True)
class EnvVarDoc:
  """One documented environment variable: its name, default, one-line meaning and who reads it."""
  name: str
  default: Any
  doc: str
  kind: str  # "context" for ContextVars, "env" for plain variables read with getenv/env_str


ENV_VARS: dict[str, EnvVarDoc] = {}


def document_env(name: str, default: Any, doc: str, kind: str = "env") -> None:
  """Declare an environment variable so that `tinyplug env` and the docs test know about it."""
  ENV_VARS[name] = EnvVarDoc(name, default, doc, kind)


# ---------------------------------------------------------------------------------------------------------------------
# context variables

class ContextVar:
  """A named, typed setting whose initial value comes from the environment variable of the same name.

  `DEBUG = ContextVar("DEBUG", 0)`; read it with `DEBUG.value` or compare it directly (`DEBUG >= 2`).
  Change it for a block with `Context(DEBUG=2)`. Declaring the same name twice returns the first instance
  when the defaults agree, and raises otherwise.
  """
  registry: dict[str, ContextVar] = {}
  key: str
  default: Any
  doc: str
  value: Any

  def __new__(cls, key: str, default: Any, doc: str = "") -> ContextVar:
    if (existing := cls.registry.get(key)) is not None:
      if existing.default != default or type(existing.default) is not type(default):
        raise ValueError(f"ContextVar {key} already declared with default {existing.default!r}, not {default!r}")
      return existing
    self = super().__new__(cls)
    self.key, self.default, self.doc = key, default, doc
    self.value = getenv(key, default)
    cls.registry[key] = self
    document_env(key, default, doc, kind="context")
    return self

  # bumped by every assignment to any ContextVar's value (Context, `.value = `, monkeypatch): caches of results that
  # depend on the settings (engine/plan.py) recheck them only when it moved
  generation: ClassVar[int] = 0
  def __setattr__(self, name: str, value: Any) -> None:
    object.__setattr__(self, name, value)
    ContextVar.generation += 1

  def __repr__(self) -> str: return f"ContextVar({self.key}={self.value!r})"
  def __reduce__(self):
    # the value travels with the setting: a worker process that unpickles it runs with the sender's value
    return _unpickle_context_var, (self.key, self.default, self.doc, self.value)
  def tolist(self, namespace: Any = None) -> list:
    """A comma-separated value as a list of its items; with `namespace`, each item looked up as its attribute
    (`EMULATED_DTYPES.tolist(dtypes)`)."""
    items = [x.strip() for x in str(self.value).split(",") if x.strip()]
    if namespace is None: return items
    if bad := [x for x in items if not hasattr(namespace, x)]: raise ValueError(f"{self.key}: unknown name(s) {bad}")
    return [getattr(namespace, x) for x in items]
  def __bool__(self) -> bool: return bool(self.value)
  def __int__(self) -> int: return int(self.value)
  def __index__(self) -> int: return int(self.value)
  def __float__(self) -> float: return float(self.value)
  def __str__(self) -> str: return str(self.value)
  def __hash__(self) -> int: return hash(self.key)

  def __eq__(self, other: object) -> bool: return self.value == _unwrap_var(other)
  def __ne__(self, other: object) -> bool: return self.value != _unwrap_var(other)
  def __ge__(self, other: Any) -> bool: return self.value >= _unwrap_var(other)
  def __gt__(self, other: Any) -> bool: return self.value > _unwrap_var(other)
  def __le__(self, other: Any) -> bool: return self.value <= _unwrap_var(other)
  def __lt__(self, other: Any) -> bool: return self.value < _unwrap_var(other)


def _unwrap_var(x: Any) -> Any: return x.value if isinstance(x, ContextVar) else x

def _unpickle_context_var(key: str, default: Any, doc: str, value: Any) -> ContextVar:
  var = ContextVar(key, default, doc)
  var.value = value
  return var


class Context(contextlib.ContextDecorator):
  """Set ContextVars for the duration of a block or a function call, and restore them afterwards.

      with Context(DEBUG=2, NOOPT=1): ...
      @Context(BEAM=0)
      def f(): ...

  Values are restored even when the block raises. An unknown name raises KeyError naming it.
  """
  def __init__(self, **kwargs: Any):
    unknown = [k for k in kwargs if k not in ContextVar.registry]
    if unknown:
      hint = suggest(unknown[0], ContextVar.registry)
      raise KeyError(f"unknown context variable {unknown[0]!r}{hint}; known: {', '.join(sorted(ContextVar.registry))}")
    self.kwargs = kwargs
    self._saved: list[dict[str, Any]] = []  # a stack, so one Context object can be re-entered (recursive decorated calls)

  def __enter__(self) -> Context:
    self._saved.append({k: ContextVar.registry[k].value for k in self.kwargs})
    for k, v in self.kwargs.items(): ContextVar.registry[k].value = v
    return self

  def __exit__(self, *exc: Any) -> None:
    for k, v in self._saved.pop().items(): ContextVar.registry[k].value = v


DEBUG = ContextVar("DEBUG", 0, "verbosity: 1 kernel count and time per realize, 2 one line per kernel, "
                               "3 applied optimisations, 4 generated code")
NOOPT = ContextVar("NOOPT", 0, "1 disables kernel optimisations (upcast/unroll/local/group); baseline code")
TC = ContextVar("TC", 1, "tensor cores: 1 lets the heuristic and search turn matmuls into the renderer's matrix-multiply "
               "instructions (`Renderer.tensor_cores`, the TC action); 0 never uses them")
BEAM = ContextVar("BEAM", 0, "kernel autotuning: width/budget of the search strategy picked by SEARCH; 0 is off")
SEARCH = ContextVar("SEARCH", "beam", "name of the search strategy used when BEAM>0")
PARALLEL = ContextVar("PARALLEL", -1, "worker processes that build BEAM's candidates (lower and compile them) while "
                      "the search times them on the device: -1 (default) one per core, 0 builds them in this process")
IGNORE_BEAM_CACHE = ContextVar("IGNORE_BEAM_CACHE", 0, "1 re-runs the search even when a cached result exists")
VIZ = ContextVar("VIZ", 0, "1 turns on the viz_web plugin (same as TINY_PLUGINS=viz_web)")
JIT = ContextVar("JIT", 1, "0 disables TinyJit capture (functions run eagerly); 2 replays without device graphs")
JIT_GRAPH = ContextVar("JIT_GRAPH", 1, "0: TinyJit replays kernel by kernel even on devices that replay a captured "
                       "run of kernels as one unit (`Compiled.make_graph`: CUDA graphs)")
CACHELEVEL = ContextVar("CACHELEVEL", 2, "disk cache use: 0 off, 1 compiled programs only, 2 programs and search results")
KERNEL_CACHE_SIZE = ContextVar("KERNEL_CACHE_SIZE", 4096, "compiled kernels kept in memory per kernel cache (the "
                               "least recently used go first); read when a cache is made")
REALIZE_PLANS = ContextVar("REALIZE_PLANS", 1, "1: a graph template's output over plain buffers (a @ b, x.sum(), "
                           "conv2d, ...) is built only when used, and realizing it again on same-shaped inputs runs "
                           "the recorded kernels without building, scheduling or looking up programs; 0 builds every "
                           "graph at once and realizes it the usual way")
SCALAR_ARGS = ContextVar("SCALAR_ARGS", 1, "1: a float32 constant that changes between runs of an otherwise equal "
                         "graph (a Python scalar set every step) becomes a kernel argument from its second value on, so "
                         "it compiles once, not once per value; 0 bakes every constant into the code")
GRADIENT_TEMPLATES = ContextVar("GRADIENT_TEMPLATES", 1, "1: backward() and gradient() on a graph of a structure "
                                "seen before rebuild its gradient graph from a recipe instead of deriving it again; "
                                "0 derives it every time (results are the same)")
SPEC = ContextVar("SPEC", 0, "1 checks UOp graphs against the IR spec after each stage; 2 also after each plugin pass")
CHECK_OOB = ContextVar("CHECK_OOB", 0, "1 refuses to build a kernel whose unmasked loads or stores may reach outside "
                                       "their buffer (judged from each index's bounds); a RuntimeError names them")
TRAINING = ContextVar("TRAINING", 0, "1 puts dropout, BatchNorm and optimiser steps in training mode (what "
                                     "`Tensor.train()` and `Tensor.training = True` set)")
DEFAULT_FLOAT = ContextVar("DEFAULT_FLOAT", "float32", "dtype of float tensors made without one (a float dtype name)")
DEFAULT_INT = ContextVar("DEFAULT_INT", "int32", "dtype of int tensors made without one (an int dtype name)")
EMULATED_DTYPES = ContextVar("EMULATED_DTYPES", "", "comma-separated float dtypes (e.g. half,bfloat16,fp8e4m3) kernels "
                              "store as bits and compute in float32 even where the device has them (fp8 always is)")
TRANSCENDENTAL = ContextVar("TRANSCENDENTAL", 1, "2 computes exp2, log2 and sin with tinyplug's own polynomial "
                                                 "decompositions on every device, also where the renderer has them")

document_env("DEV", "", "device to run on, e.g. CPU, CL, CUDA, METAL, AMD, PYTHON; `DEV=CUDA:PTX` also picks a renderer")
document_env("TINY_PLUGINS", "", "comma list of plugin ids: `id` turns a plugin on, `-id` turns it off")
document_env("TINY_PLUGINS_AUTOLOAD", "1", "0 loads only built-in plugins plus those named in TINY_PLUGINS")
document_env("TINY_PLUGINS_STRICT", "0", "1 makes any plugin failure an error instead of a warning")
document_env("TINY_PLUGINS_TIMEOUT", 20, "seconds `tinyplug` commands wait for one plugin's import or device probe")
document_env("TINY_DOCTOR_CHECK_TIMEOUT", "", "seconds `tinyplug doctor` waits for one device check (a cold compile "
             "and run); unset: TINY_PLUGINS_TIMEOUT")
document_env("NO_COLOR", "", "set to anything to turn off ANSI colours in terminal output")
document_env("XDG_CACHE_HOME", "~/.cache", "base directory of tinyplug's disk cache (<base>/tinyplug)")
document_env("CACHE_MAX_MB", 4000, "size limit of the disk cache in MB (0: none); the least recently written or used "
             "entries are evicted when it is exceeded (`tinyplug cache trim`)")


# ---------------------------------------------------------------------------------------------------------------------
# counters and timing

class _GlobalCounters:
  """Process-wide counters updated by the engine; `reset()` zeroes them between measurements.

  `mem_used` counts bytes currently allocated on devices, so `reset()` leaves it alone.

  One instance, `GlobalCounters` (read and written as `GlobalCounters.kernel_count`, as a class's attributes would
  be): every realize bumps several counters, and a store into a class's attribute costs ~3x one into an instance's
  (each one also invalidates what the interpreter cached about the class)."""
  def __init__(self) -> None:
    self.global_ops, self.global_mem, self.time_sum_s, self.kernel_count, self.mem_used = 0, 0, 0.0, 0, 0
  def reset(self) -> None:
    self.global_ops, self.global_mem = 0, 0
    self.time_sum_s, self.kernel_count = 0.0, 0
  def __repr__(self) -> str:
    return (f"GlobalCounters(kernel_count={self.kernel_count}, global_ops={self.global_ops}, "
            f"global_mem={self.global_mem}, time_sum_s={self.time_sum_s}, mem_used={self.mem_used})")

GlobalCounters = _GlobalCounters()


class Timing(contextlib.ContextDecorator):
  """Measure a block: `with Timing("load "): ...` prints `load 12.34 ms`. `.elapsed_s` holds the result.

  `on_exit(elapsed_ns)` may return extra text to append; `enabled=False` measures without printing.
  """
  def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True):
    self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled
    self.elapsed_s = 0.0

  def __enter__(self) -> Timing:
    self._start = time.perf_counter_ns()
    return self

  def __exit__(self, *exc: Any) -> None:
    elapsed_ns = time.perf_counter_ns() - self._start
    self.elapsed_s = elapsed_ns * 1e-9
    if self.enabled:
      print(f"{self.prefix}{elapsed_ns * 1e-6:6.2f} ms" + (self.on_exit(elapsed_ns) if self.on_exit else ""))


# ---------------------------------------------------------------------------------------------------------------------
# sequences and numbers

def prod(xs: Iterable[T], start: Any = 1) -> Any:
  """Product of the items (1 for an empty sequence); works for ints, floats and symbolic values."""
  return functools.reduce(operator.mul, xs, start)


def flatten(xss: Iterable[Iterable[T]]) -> list[T]:
  """One level of nesting removed: [[1, 2], [3]] -> [1, 2, 3]."""
  return [x for xs in xss for x in xs]


def fully_flatten(x: Any) -> list:
  """Every level of list/tuple nesting removed: [[1, [2]], 3] -> [1, 2, 3]."""
  if not isinstance(x, (list, tuple)): return [x]
  return [y for item in x for y in fully_flatten(item)]


def dedup(xs: Iterable[T]) -> list[T]:
  """The items without repeats, in first-seen order."""
  return list(dict.fromkeys(xs))


def all_same(xs: Iterable[Any]) -> bool:
  """True when every item equals the first (and for an empty sequence)."""
  items = list(xs)
  return all(x == items[0] for x in items[1:])


def all_int(xs: Iterable[Any]) -> bool:
  """True when every item is a plain int (not a symbolic value)."""
  return all(isinstance(x, int) for x in xs)


def argsort(xs: list[Any]) -> list[int]:
  """Indices that would sort `xs` (stable)."""
  return sorted(range(len(xs)), key=xs.__getitem__)


def partition(xs: Iterable[T], predicate: Callable[[T], bool]) -> tuple[list[T], list[T]]:
  """Split into (items where predicate is true, items where it is false), keeping order."""
  yes: list[T] = []
  no: list[T] = []
  for x in xs: (yes if predicate(x) else no).append(x)
  return yes, no


def make_tuple(x: int | Iterable[int], count: int) -> tuple[int, ...]:
  """`3, 2 -> (3, 3)`; a sequence is returned as a tuple unchanged."""
  return (x,) * count if isinstance(x, int) else tuple(x)


def unwrap(x: T | None) -> T:
  """`x`, asserting it is not None (narrows Optional types)."""
  if x is None: raise ValueError("unwrap: value is None")
  return x


def cdiv(x: int, y: int) -> int:
  """Integer division truncating toward zero, as in C (`cdiv(-7, 2) == -3`); division by zero gives 0."""
  if y == 0: return 0
  q = abs(x) // abs(y)
  return -q if (x < 0) != (y < 0) else q


def cmod(x: int, y: int) -> int:
  """Remainder matching `cdiv`, as in C: it has the sign of `x` (`cmod(-7, 2) == -1`)."""
  return x - cdiv(x, y) * y


def ceildiv(num: int, amt: int) -> int:
  """Division rounding toward +infinity: `ceildiv(7, 2) == 4`."""
  return -(num // -amt)


def round_up(num: int, amt: int) -> int:
  """Smallest multiple of `amt` that is >= `num`: `round_up(10, 4) == 12`."""
  return ceildiv(num, amt) * amt


def suggest(name: str, choices: Iterable[str]) -> str:
  """A `" (did you mean 'x'?)"` hint for a mistyped name, or an empty string when nothing is close."""
  import difflib
  close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
  return f" (did you mean {close[0]!r}?)" if close else ""


# ---------------------------------------------------------------------------------------------------------------------
# text

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_COLORS = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white")


def use_color(stream: Any = None) -> bool:
  """Whether text written to `stream` (default stdout) gets ANSI colours: NO_COLOR (non-empty) turns them off,
  else FORCE_COLOR (not "0") turns them on, else only a terminal gets them (the order Python's own REPL uses)."""
  if os.environ.get("NO_COLOR", ""): return False
  if os.environ.get("FORCE_COLOR", "") not in ("", "0"): return True
  stream = sys.stdout if stream is None else stream
  try: return stream.isatty()
  except (AttributeError, ValueError): return False  # no isatty, or a closed stream


def colored(text: str, color: str | None, background: bool = False, stream: Any = None) -> str:
  """`text` wrapped in an ANSI colour code ('red', 'green', ...; 'BRIGHT' names in upper case) when `stream`
  (default stdout) should get colours (see `use_color`); otherwise `text` unchanged."""
  if color is None or not use_color(stream): return text
  code = 10 * background + 60 * color.isupper() + 30 + _COLORS.index(color.lower())
  return f"\x1b[{code}m{text}\x1b[0m"


def ansistrip(text: str) -> str:
  """`text` without ANSI escape codes."""
  return _ANSI_RE.sub("", text)


def ansilen(text: str) -> int:
  """Printed width of `text`: its length without ANSI escape codes."""
  return len(ansistrip(text))


def to_function_name(name: str) -> str:
  """A valid C/LLVM identifier for a kernel name: letters, digits and '_' stay, others become hex codes."""
  return "".join(c if (c.isascii() and c.isalnum()) or c == "_" else f"{ord(c):02X}" for c in ansistrip(name))


def strip_parens(text: str) -> str:
  """`(a+b)` -> `a+b` when the outer parentheses enclose the whole expression."""
  if not (text.startswith("(") and text.endswith(")")): return text
  depth = 0
  for i, c in enumerate(text):
    depth += (c == "(") - (c == ")")
    if depth == 0 and i != len(text) - 1: return text
  return text[1:-1]


# ---------------------------------------------------------------------------------------------------------------------
# files

def python_module_command(module: str) -> tuple[list[str], dict[str, str]]:
  """The command and environment that run `python -m module` in a child finding modules where this process does and
  nowhere else: -P keeps `-m` from putting the child's working directory first (a struct.py there would run in it)."""
  path = [os.getcwd() if p == "" else p for p in sys.path]
  env = {**os.environ, "PYTHONPATH": os.pathsep.join([p for p in path if os.path.isdir(p)])}
  return [sys.executable, "-P", "-m", module], env

def cache_dir() -> str:
  """Directory for tinyplug's disk cache: $XDG_CACHE_HOME/tinyplug, else ~/.cache/tinyplug (not created here)."""
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "tinyplug")


def temp(name: str, append_user: bool = False) -> str:
  """The path of `name` in the system's temporary directory (`name.<user>` with append_user), as a str."""
  import getpass, tempfile
  return os.path.join(tempfile.gettempdir(), f"{name}.{getpass.getuser()}" if append_user else name)


@contextlib.contextmanager
def temp_environ(**values: str | None) -> Iterator[None]:
  """Set (str) or remove (None) environment variables for a block; used by tests and the CLI."""
  saved = {k: os.environ.get(k) for k in values}
  try:
    for k, v in values.items():
      if v is None: os.environ.pop(k, None)
      else: os.environ[k] = v
    yield
  finally:
    for k, v in saved.items():
      if v is None: os.environ.pop(k, None)
      else: os.environ[k] = v

_worker_threads: dict[str, tuple[int, Any]] = {}   # name -> (pid, executor)

def worker_thread(name: str) -> Any:
  """This process's one-thread executor named `name` (its thread's name prefix), made on first use and again in a
  forked child, which has none of its parent's threads."""
  if (hit := _worker_threads.get(name)) is None or hit[0] != os.getpid():
    from concurrent.futures import ThreadPoolExecutor
    _worker_threads[name] = hit = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix=name))
  return hit[1]
