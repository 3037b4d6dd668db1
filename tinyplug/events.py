"""The core event bus: trace and profile listeners subscribe here; producers check `enabled` before building payloads.

Delivery is a plain function call per subscriber (never a pluggy hook per event). A listener that raises is
reported once and unsubscribed, so a broken plugin never takes the host down."""
from __future__ import annotations
import sys, threading, time, traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

KINDS = ("rewrite", "scope", "profile", "kernel", "schedule", "search", "log")

_subscribers: dict[str, list[tuple[Callable[[Any], None], str]]] = {}
_lock = threading.Lock()

def subscribe(kind: str, callback: Callable[[Any], None], owner: str = "?") -> None:
  if kind not in KINDS: raise ValueError(f"unknown event kind {kind!r}; choose one of {KINDS}")
  with _lock: _subscribers.setdefault(kind, []).append((callback, owner))

def unsubscribe(kind: str, callback: Callable[[Any], None]) -> None:
  with _lock:
    # `!=`, not `is not`: each `obj.method` access is a new bound-method object, equal to the subscribed one
    subs = [s for s in _subscribers.get(kind, []) if s[0] != callback]
    if subs: _subscribers[kind] = subs
    else: _subscribers.pop(kind, None)

def enabled(kind: str) -> bool:
  return kind in _subscribers

def emit(kind: str, payload: Any) -> None:
  for callback, owner in _subscribers.get(kind, ()):
    try: callback(payload)
    except Exception as e:  # a listener is a signal: one failure disables it, the program goes on
      unsubscribe(kind, callback)
      print(f"tinyplug: the {kind!r} listener of plugin {owner!r} raised {type(e).__name__}: {e}; it is now off",
            file=sys.stderr)
      traceback.print_exc(file=sys.stderr)

# ---- scopes: where an event happened (which schedule, which kernel) ----

@dataclass(frozen=True)
class ScopeEvent:
  """Sent when a scope opens (`entered=True`) and closes. `path` names all open scopes, outermost first."""
  kind: str             # "schedule", "kernel", "program", ...
  name: str
  path: tuple[str, ...]
  entered: bool
  time_ns: int
  info: dict = field(default_factory=dict)

_local = threading.local()

def current_scope() -> tuple[str, ...]:
  return getattr(_local, "path", ())

@contextmanager
def scope(kind: str, name: str, **info: Any) -> Iterator[None]:
  """Groups the events sent inside it (rewrites, profile spans) under `name`."""
  prev = current_scope()
  _local.path = path = prev + (name,)
  if enabled("scope"): emit("scope", ScopeEvent(kind, name, path, True, time.perf_counter_ns(), info))
  try: yield
  finally:
    _local.path = prev
    if enabled("scope"): emit("scope", ScopeEvent(kind, name, path, False, time.perf_counter_ns(), info))

# ---- payloads ----

@dataclass(frozen=True)
class RewriteMatch:
  """One applied pattern: `before` was replaced by `after` by the row at file:line owned by `owner`."""
  before: Any
  after: Any
  file: str
  line: int
  owner: str
  time_ns: int

@dataclass(frozen=True)
class RewriteEvent:
  """One whole graph_rewrite call."""
  name: str
  input: Any
  output: Any
  matches: tuple[RewriteMatch, ...]
  scope: tuple[str, ...]
  start_ns: int
  end_ns: int
  caller: str           # file:line of the code that called graph_rewrite

@dataclass(frozen=True)
class ProfileEvent:
  """A span on a track: `kind` is schedule/codegen/compile/run/copy/alloc/free; times are perf_counter ns."""
  kind: str
  name: str
  device: str
  start_ns: int
  end_ns: int
  info: dict = field(default_factory=dict)

@contextmanager
def profile_span(kind: str, name: str, device: str = "HOST", **info: Any) -> Iterator[dict]:
  """Times the block and sends a ProfileEvent if anyone listens; `info` may be filled in inside the block."""
  if not enabled("profile"):
    yield info
    return
  start = time.perf_counter_ns()
  try: yield info
  finally: emit("profile", ProfileEvent(kind, name, device, start, time.perf_counter_ns(), info))
