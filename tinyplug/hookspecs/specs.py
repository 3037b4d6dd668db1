"""The frozen, keyword-only spec objects that plugins pass to the `register` callbacks of the hooks.

A `factory` (and a probe, a pass's `rewrite`, a command's `run`) is either a callable or a
`"package.module:attribute"` string. Strings are imported only when the thing is first used, so a plugin's
registration module stays cheap to import whatever heavy libraries its implementation needs.
New fields are only ever added with defaults (a minor API version); removing one is a major version.
"""
from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Union

if TYPE_CHECKING:
  import argparse

Ref = Union[Callable[..., Any], str]  # a callable, or "module:attr" imported lazily

_REF_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")

LISTENER_KINDS = ("rewrite", "scope", "profile", "kernel", "schedule", "search", "log")  # = tinyplug.events.KINDS


def resolve_ref(ref: Ref) -> Any:
  """The object a reference names: callables are returned as they are, `"module:attr"` strings are imported."""
  if not isinstance(ref, str): return ref
  module_name, _, attr_path = ref.partition(":")
  try:
    obj: Any = importlib.import_module(module_name)
  except ImportError as e:
    raise ImportError(f"cannot import {module_name!r} for {ref!r}: {e}") from e
  for attr in attr_path.split("."):
    try: obj = getattr(obj, attr)
    except AttributeError: raise ImportError(f"{ref!r}: module {module_name!r} has no attribute {attr_path!r}") from None
  return obj


def _check_name(kind: str, name: Any) -> None:
  if not isinstance(name, str) or not name or name != name.strip():
    raise ValueError(f"{kind} name must be a non-empty string without surrounding spaces, got {name!r}")


def _check_ref(owner: str, field: str, ref: Any, optional: bool = False) -> None:
  if ref is None and optional: return
  if isinstance(ref, str):
    if not _REF_RE.match(ref): raise ValueError(f"{owner}: {field} {ref!r} is not of the form 'package.module:attribute'")
  elif not callable(ref):
    raise TypeError(f"{owner}: {field} must be a callable or a 'module:attr' string, got {type(ref).__name__}")


@dataclass(frozen=True, kw_only=True)
class DeviceSpec:
  """A device (runtime) a plugin provides.

  name: canonical upper-case name used by `DEV=` and `Device[...]`, e.g. "CUDA".
  factory: the device class (or a "module:attr" string naming it); called with the device string on first use.
  priority: higher wins when `DEV` is not set and several devices are available.
  probe: cheap check `() -> (available, reason)` that loads no driver; None means always available.
  aliases: other names accepted for this device, e.g. ("GPU",).
  """
  name: str
  factory: Ref
  priority: int = 0
  probe: Ref | None = None
  aliases: tuple[str, ...] = ()
  description: str = ""

  def __post_init__(self) -> None:
    _check_name("device", self.name)
    _check_ref(f"device {self.name}", "factory", self.factory)
    _check_ref(f"device {self.name}", "probe", self.probe, optional=True)
    if not isinstance(self.aliases, tuple): raise TypeError(f"device {self.name}: aliases must be a tuple")


@dataclass(frozen=True, kw_only=True)
class RendererSpec:
  """A renderer (IR -> source) for a device, possibly a device another plugin owns.

  device: the device name it attaches to; name: e.g. "PTX", selected with `DEV=CUDA:PTX`.
  factory: the renderer class or "module:attr"; priority: higher is the device's default renderer.
  """
  device: str
  name: str
  factory: Ref
  priority: int = 0

  def __post_init__(self) -> None:
    _check_name("renderer device", self.device)
    _check_name("renderer", self.name)
    _check_ref(f"renderer {self.device}:{self.name}", "factory", self.factory)


@dataclass(frozen=True, kw_only=True)
class PassSpec:
  """A rewrite pass inserted into the codegen pipeline.

  name: unique id, by convention "<plugin id>.<pass>"; anchors of other passes refer to it.
  stage: a core stage id (see `CORE_STAGES`) this pass extends: it runs after that stage, before the next one.
  before / after: stage ids or pass names this pass must run before / after.
  rewrite: factory (or "module:attr") returning a PatternMatcher or a function `(sink, ctx) -> sink` (after linearize:
    `(uops, ctx) -> uops`); ctx is the kernel's KernelContext, with `.renderer`.
  when: optional predicate `(renderer) -> bool`; the pass is skipped for renderers where it is False.
  bottom_up: apply the PatternMatcher bottom-up. version: bump it when the output changes (cache keys).
  """
  name: str
  rewrite: Ref
  stage: str | None = None
  before: tuple[str, ...] = ()
  after: tuple[str, ...] = ()
  when: Callable[..., bool] | None = None
  bottom_up: bool = False
  version: str = "1"

  def __post_init__(self) -> None:
    _check_name("pass", self.name)
    _check_ref(f"pass {self.name}", "rewrite", self.rewrite)
    for field in ("before", "after"):
      value = getattr(self, field)
      if not isinstance(value, tuple) or not all(isinstance(a, str) for a in value):
        raise TypeError(f"pass {self.name}: {field} must be a tuple of names, got {value!r}")
    if self.stage is None and not self.before and not self.after:
      raise ValueError(f"pass {self.name}: give a stage or at least one before/after anchor to place it")
    if self.when is not None and not callable(self.when): raise TypeError(f"pass {self.name}: when must be callable")


@dataclass(frozen=True, kw_only=True)
class SearchSpec:
  """A kernel search strategy selected with `SEARCH=<name>` when `BEAM>0`.

  factory: the strategy (or "module:attr"); version feeds the search-cache key.
  """
  name: str
  factory: Ref
  version: str = "1"
  description: str = ""

  def __post_init__(self) -> None:
    _check_name("search strategy", self.name)
    _check_ref(f"search strategy {self.name}", "factory", self.factory)


@dataclass(frozen=True, kw_only=True)
class ListenerSpec:
  """A subscriber to the core event bus (`tinyplug.events`).

  kind: one of LISTENER_KINDS. factory: called once when the plugin is activated; returns the callback
  `(payload) -> None` that receives every event of that kind.
  """
  kind: str
  factory: Ref

  def __post_init__(self) -> None:
    if self.kind not in LISTENER_KINDS:
      raise ValueError(f"listener kind {self.kind!r} is not one of {', '.join(LISTENER_KINDS)}")
    _check_ref(f"{self.kind} listener", "factory", self.factory)


@dataclass(frozen=True, kw_only=True)
class CommandSpec:
  """A `tinyplug <name>` subcommand.

  add_arguments: cheap `(parser) -> None` adding argparse options; keep imports out of it.
  run: `(args: argparse.Namespace) -> int | None` (or "module:attr"), imported only when the command runs;
  its return value is the exit code (None means 0).
  """
  name: str
  help: str
  run: Ref
  add_arguments: Callable[[argparse.ArgumentParser], None] | None = None

  def __post_init__(self) -> None:
    _check_name("command", self.name)
    if not re.match(r"^[a-z][a-z0-9-]*$", self.name):
      raise ValueError(f"command name {self.name!r} must be lower-case letters, digits and '-'")
    _check_ref(f"command {self.name}", "run", self.run)
    if self.add_arguments is not None and not callable(self.add_arguments):
      raise TypeError(f"command {self.name}: add_arguments must be callable")
