"""The plugin manager: finds plugins through entry points, loads each in isolation, and keeps the registries.

Load algorithm (runs once per process, under a lock, on first use of `get_plugin_manager()`):
1. read TINY_PLUGINS / TINY_PLUGINS_AUTOLOAD / TINY_PLUGINS_STRICT / VIZ;
2. list the entry points of group `tinyplug` once; an id claimed by two distributions is a conflict for both;
3. per plugin, in plugin-id order: skip if disabled; import the module; check `TINYPLUG_PLUGIN` (API version,
   activation); stop at "opt-in" if it is explicit and not requested; register it with pluggy; call each of its
   registration hooks with a `register` callback; create and subscribe its listeners. A failure in any phase
   rolls back that plugin alone and marks it failed, with one line on stderr;
4. commit the plugin's specs into the registries; a name another plugin already holds is a conflict;
5. requested plugins that are missing or did not load make `get_plugin_manager()` raise `PluginError`.
Factories stay "module:attr" strings until something uses them (`load_factory`).
"""
from __future__ import annotations

import atexit
import functools
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple

from tinyplug.helpers import DEBUG, VIZ, env_flag, env_str, suggest

API_VERSION = "1.0"
ENTRY_POINT_GROUP = "tinyplug"
CORE_DISTRIBUTION = "tinyplug"
CORE_COMMANDS = ("list-plugins", "env", "doctor", "cache")
# "installed" only appears with `list-plugins --no-import` (nothing was imported, so nothing more is known)
STATUSES = ("builtin", "active", "opt-in", "disabled", "unavailable", "failed", "incompatible", "conflict", "installed")
PROBLEM_STATUSES = ("failed", "incompatible", "conflict")
LOADED_STATUSES = ("builtin", "active", "unavailable")  # the plugin's registrations are in the registries

# first-party plugin id -> extra of the `tinyplug` distribution that installs it
FIRST_PARTY_EXTRAS = {"cpu_llvm": "cpu", "opencl": "opencl", "cuda": "cuda", "metal": "metal", "amd": "amd",
                      "viz_web": "viz", "emulator": "emulator"}
# device name -> first-party plugin that provides it (for install hints)
DEVICE_PLUGINS = {"CPU": "cpu_llvm", "CL": "opencl", "CUDA": "cuda", "METAL": "metal", "AMD": "amd",
                  "PYTHON": "python", "MOCK+CL": "emulator", "MOCK+CUDA": "emulator"}


class PluginError(RuntimeError):
  """A plugin that was asked for (TINY_PLUGINS, VIZ, TINY_PLUGINS_STRICT) is missing or could not be loaded."""


class PluginPassError(RuntimeError):
  """A plugin's rewrite pass raised while compiling a kernel; the message names the pass and the plugin."""


class PluginTimeout(RuntimeError):
  """A plugin's import or device probe did not finish in the time the CLI allows (TINY_PLUGINS_TIMEOUT)."""


def call_guarded(fn: Callable[[], Any], what: str, timeout: float | None = None) -> Any:
  """fn() for plugin code: a SystemExit (or any BaseException but KeyboardInterrupt) comes back as an ordinary
  exception, so a plugin calling sys.exit cannot end the host; with `timeout`, fn runs in a daemon thread and a
  call that does not return in time raises PluginTimeout naming `what` (the thread is left behind)."""
  if timeout is None:
    try: return fn()
    except KeyboardInterrupt: raise
    except Exception: raise
    except BaseException as e: raise RuntimeError(f"{what} raised {type(e).__name__}({e})") from e
  box: dict[str, Any] = {}
  def run() -> None:
    try: box["value"] = fn()
    except BaseException as e: box["error"] = e   # re-raised (or converted) in the caller's thread
  thread = threading.Thread(target=run, name=f"tinyplug: {what}", daemon=True)
  thread.start()
  thread.join(timeout)
  if thread.is_alive(): raise PluginTimeout(f"{what} did not finish within {timeout:g} s (does it hang?)")
  if "error" in box:
    e = box["error"]
    if isinstance(e, (Exception, KeyboardInterrupt)): raise e
    raise RuntimeError(f"{what} raised {type(e).__name__}({e})") from e
  return box.get("value")


class EntryPointRecord(NamedTuple):
  id: str
  value: str           # "package.module" or "package.module:attr"
  distribution: str | None
  version: str | None
  entry_point: Any     # importlib.metadata.EntryPoint


@dataclass(frozen=True)
class PluginFailure:
  phase: str           # import | api | register | hook | activate
  type: str
  message: str
  traceback: str = ""

  def __str__(self) -> str: return f"{self.type}: {self.message}" if self.message else self.type


@dataclass
class PluginInfo:
  """Everything known about one installed plugin; `status` is one of STATUSES."""
  id: str
  distribution: str | None
  version: str | None
  module: str
  status: str = "active"
  reason: str = ""
  error: PluginFailure | None = None
  provides: dict[str, list[str]] = field(default_factory=dict)
  builtin: bool = False
  activation: str | None = None
  api: str | None = None
  description: str = ""
  conflicts: list[str] = field(default_factory=list)   # registrations another plugin already held
  devices: dict[str, tuple[bool, str]] = field(default_factory=dict)  # device -> probe result, filled by .plugins
  load_ms: float = 0.0
  exception: BaseException | None = field(default=None, repr=False)

  @property
  def loaded(self) -> bool: return self.status in LOADED_STATUSES

  @property
  def dist_label(self) -> str: return f"{self.distribution or '?'} {self.version or '?'}"


@functools.cache
def discover_entry_points() -> tuple[EntryPointRecord, ...]:
  """Every entry point of the `tinyplug` group, scanned once per process (`reset_plugins` clears it)."""
  from importlib.metadata import entry_points
  records = []
  for ep in entry_points(group=ENTRY_POINT_GROUP):
    dist = getattr(ep, "dist", None)
    records.append(EntryPointRecord(ep.name, ep.value, dist.name if dist else None, dist.version if dist else None, ep))
  return tuple(sorted(records, key=lambda r: (r.id, r.distribution or "")))


def host_version() -> str:
  """Version of the installed `tinyplug` distribution ("unknown" when running from a bare checkout)."""
  from importlib.metadata import PackageNotFoundError, version
  try: return version(CORE_DISTRIBUTION)
  except PackageNotFoundError: return "unknown"


def parse_plugin_request(text: str) -> tuple[set[str], set[str]]:
  """`"viz_web,-cuda"` -> ({"viz_web"}, {"cuda"}): the plugin ids turned on and those turned off."""
  enabled: set[str] = set()
  disabled: set[str] = set()
  for token in (t.strip() for t in text.split(",")):
    if token.startswith("-"): disabled.add(token[1:].strip())
    elif token: enabled.add(token.lstrip("+").strip())
  return enabled - disabled, disabled


def install_hint(plugin_id: str) -> str:
  """How to install a first-party plugin, or an empty string for ids we do not publish."""
  extra = FIRST_PARTY_EXTRAS.get(plugin_id)
  return f"install it with: pip install 'tinyplug[{extra}]'" if extra else ""


def plugin_suggestion(name: str, installed: Iterable[str]) -> str:
  """A did-you-mean for a plugin id, knowing that users often type the pip extra (`cpu`) for the id (`cpu_llvm`)."""
  by_extra = {extra: pid for pid, extra in FIRST_PARTY_EXTRAS.items() if extra != pid}
  if name in by_extra:
    return f" (did you mean {by_extra[name]!r}? {name!r} is the pip extra tinyplug[{name}]; the plugin id is {by_extra[name]!r})"
  return suggest(name, {*installed, *FIRST_PARTY_EXTRAS} - {name})


def _api_problem(declared: Any) -> str | None:
  """Why a plugin built for API `declared` cannot load here, or None when it can (same major, minor not newer)."""
  host_major, host_minor = (int(x) for x in API_VERSION.split("."))
  try:
    major, minor = (int(x) for x in str(declared).split("."))
  except ValueError:
    return f"declares plugin API {declared!r}, which is not of the form 'major.minor'"
  if major != host_major or minor > host_minor:
    return (f"built for plugin API {major}.{minor}, but this tinyplug provides API {API_VERSION} "
            f"(a plugin needs major {host_major} and minor <= {host_minor}); install a matching version of one of them")
  return None


class PluginManager:
  """The loaded plugin set and its registries; one per process via `get_plugin_manager()`.

  Registries map a name to `(spec, plugin_id)` and are filled in plugin-id order, so they never depend on
  install order: devices (keyed by canonical name), renderers (keyed by (device, name)), passes, search and
  commands (keyed by name); listeners is a list.
  """

  def __init__(self, *, requested: str | None = None, autoload: bool | None = None, strict: bool | None = None,
               viz: bool | None = None, quiet: bool = False, entry_points: tuple[EntryPointRecord, ...] | None = None,
               timeout: float | None = None):
    import pluggy

    from tinyplug.hookspecs import HOOKSPEC_MODULES
    self.requested_text = env_str("TINY_PLUGINS") if requested is None else requested
    self.enabled, self.disabled = parse_plugin_request(self.requested_text)
    self.viz = (VIZ.value > 0) if viz is None else viz
    if self.viz and "viz_web" not in self.disabled: self.enabled.add("viz_web")
    self.autoload = env_flag("TINY_PLUGINS_AUTOLOAD", True) if autoload is None else autoload
    self.strict = env_flag("TINY_PLUGINS_STRICT") if strict is None else strict
    self.quiet = quiet
    self.timeout = timeout   # seconds for one plugin's import or probe (the CLI sets it); None: no bound
    self._entry_points = discover_entry_points() if entry_points is None else entry_points
    self._pm = pluggy.PluginManager("tinyplug")
    for module in HOOKSPEC_MODULES: self._pm.add_hookspecs(module)

    self._infos: list[PluginInfo] = []
    self.devices: dict[str, tuple[Any, str]] = {}
    self.device_aliases: dict[str, str] = {}
    self.renderers: dict[tuple[str, str], tuple[Any, str]] = {}
    self.passes: dict[str, tuple[Any, str]] = {}
    self.search: dict[str, tuple[Any, str]] = {}
    self.listeners: list[tuple[Any, str]] = []
    self.commands: dict[str, tuple[Any, str]] = {}
    self.request_errors: list[str] = []
    self._request_causes: list[BaseException] = []
    self._subscriptions: list[tuple[str, Callable[[Any], None]]] = []
    self._probe_cache: dict[str, tuple[bool, str]] = {}
    # facts worked out from this plugin set (the codegen pipeline, pass factories' results): a new set starts empty
    self.derived: dict[str, Any] = {}
    self._statuses_final = False
    self._closed = False

  # ------------------------------------------------------------------------------------------------------------------
  # loading

  def load(self) -> PluginManager:
    """Load every installed plugin (each in its own error handling); never raises for a plugin's fault."""
    for info, record in self._classify():
      start = time.perf_counter()
      self._load_one(info, record)
      info.load_ms = (time.perf_counter() - start) * 1e3
    self._check_requests()
    if not self.quiet: self._warn_failures()
    atexit.register(self._run_unconfigure)
    return self

  def scan(self) -> PluginManager:
    """Statuses from the entry-point metadata alone, importing no plugin code (`list-plugins --no-import`):
    conflicts and disabled plugins as `load` would find them, every other plugin "installed"."""
    for info, _record in self._classify():
      info.status, info.reason = "installed", "not imported (--no-import)"
    self._statuses_final = True   # no devices to probe
    return self

  def _classify(self) -> list[tuple[PluginInfo, EntryPointRecord]]:
    """A PluginInfo per entry point, in plugin-id order; returns those to load (not conflicting, not disabled)."""
    by_id: dict[str, list[EntryPointRecord]] = {}
    for record in self._entry_points: by_id.setdefault(record.id, []).append(record)
    to_load = []
    for plugin_id in sorted(by_id):
      records = by_id[plugin_id]
      if len(records) > 1:
        claimants = " and ".join(f"{r.distribution} {r.version}" for r in records)
        for r in records:
          info = self._new_info(r)
          info.status, info.reason = "conflict", f"plugin id {plugin_id!r} is claimed by {claimants}; uninstall one"
        continue
      info = self._new_info(records[0])
      if plugin_id in self.disabled:
        info.status, info.reason = "disabled", f"disabled by TINY_PLUGINS=-{plugin_id}"
      elif not self.autoload and not info.builtin and plugin_id not in self.enabled:
        info.status, info.reason = "disabled", f"TINY_PLUGINS_AUTOLOAD=0; enable with TINY_PLUGINS={plugin_id}"
      else: to_load.append((info, records[0]))
    return to_load

  def _new_info(self, record: EntryPointRecord) -> PluginInfo:
    info = PluginInfo(record.id, record.distribution, record.version, record.value,
                      builtin=record.distribution == CORE_DISTRIBUTION)
    self._infos.append(info)
    return info

  def _fail(self, info: PluginInfo, phase: str, exc: BaseException) -> None:
    """Mark a plugin failed in `phase`, keeping the exception (for PluginError's cause) and its traceback."""
    info.status, info.exception = "failed", exc
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    info.error = PluginFailure(phase, type(exc).__name__, str(exc), tb)
    info.reason = f"{info.error} (phase={phase})"

  def _load_one(self, info: PluginInfo, record: EntryPointRecord) -> None:
    try:
      plugin = call_guarded(record.entry_point.load, f"importing plugin {info.id!r} ({record.value})", self.timeout)
    except Exception as e:
      return self._fail(info, "import", e)

    meta = getattr(plugin, "TINYPLUG_PLUGIN", None)
    if not isinstance(meta, dict):
      return self._fail(info, "api", TypeError(f"{record.value} has no TINYPLUG_PLUGIN dict "
                                               "(e.g. TINYPLUG_PLUGIN = {'api': '1.0', 'activation': 'default'})"))
    info.api, info.description = meta.get("api"), str(meta.get("description", ""))
    info.activation = meta.get("activation", "default")
    if (problem := _api_problem(info.api)) is not None:
      info.status, info.reason = "incompatible", problem
      return
    if info.activation not in ("default", "explicit"):
      return self._fail(info, "api", ValueError(f"activation {info.activation!r} is not 'default' or 'explicit'"))
    if info.activation == "explicit" and info.id not in self.enabled:
      info.status, info.reason = "opt-in", f"enable with TINY_PLUGINS={info.id}"
      return

    try:
      self._pm.register(plugin, name=info.id)
      for caller in self._pm.get_hookcallers(plugin) or []:
        if not caller.has_spec():
          known = (n for n, c in vars(self._pm.hook).items() if n.startswith("tinyplug_") and c.has_spec())
          hint = suggest(caller.name, known)
          raise AttributeError(f"{caller.name} is not a tinyplug hook{hint}")
    except Exception as e:
      if self._pm.is_registered(plugin): self._pm.unregister(plugin)
      return self._fail(info, "register", e)

    phase = "hook"
    staged: dict[str, list[Any]] = {}
    subscribed: list[tuple[str, Callable[[Any], None]]] = []
    try:
      call_guarded(lambda: self._call_registration_hooks(info.id, staged), f"registering plugin {info.id!r}")
      phase = "activate"
      if staged.get("listeners"):
        from tinyplug import events
        from tinyplug.hookspecs import resolve_ref
        for spec in staged["listeners"]:
          callback = call_guarded(resolve_ref(spec.factory), f"the {spec.kind} listener factory of {info.id!r}")
          if not callable(callback):
            raise TypeError(f"{spec.kind} listener factory returned {type(callback).__name__}, not a callable")
          events.subscribe(spec.kind, callback, info.id)
          subscribed.append((spec.kind, callback))
    except Exception as e:
      self._unsubscribe(subscribed)
      self._pm.unregister(plugin)
      return self._fail(info, phase, e)

    self._subscriptions.extend(subscribed)
    self._commit(info, staged)
    info.status = "builtin" if info.builtin else "active"
    if info.conflicts and not any(info.provides.values()):
      info.status = "conflict"
    if info.conflicts: info.reason = "; ".join(info.conflicts)

  def _call_registration_hooks(self, plugin_id: str, staged: dict[str, list[Any]]) -> None:
    """Call this plugin's implementation of each registration hook, collecting what it registers into `staged`."""
    from tinyplug.hookspecs import REGISTRATION_HOOKS
    for hook_name, (spec_class, registry) in REGISTRATION_HOOKS.items():
      bucket = staged.setdefault(registry, [])

      def register(spec: Any, _cls: type = spec_class, _hook: str = hook_name, _bucket: list = bucket) -> None:
        if not isinstance(spec, _cls):
          raise TypeError(f"{_hook}: register() takes a {_cls.__name__}, got {type(spec).__name__}")
        _bucket.append(spec)

      for impl in getattr(self._pm.hook, hook_name).get_hookimpls():
        if impl.plugin_name == plugin_id: impl.function(*[register for _ in impl.argnames])

  def _commit(self, info: PluginInfo, staged: dict[str, list[Any]]) -> None:
    """Add a plugin's specs to the registries; names another plugin (earlier in id order) holds are conflicts."""
    provides: dict[str, list[str]] = {k: [] for k in ("devices", "renderers", "passes", "search", "listeners", "commands")}

    def taken(kind: str, name: str, owner: str | None) -> bool:
      if owner is None: return False
      who = "a core command" if owner == "" else f"plugin {owner!r}"
      info.conflicts.append(f"conflict: {kind} {name!r} of plugin {info.id!r} is already registered by {who}")
      return True

    for spec in staged.get("devices", []):
      names = (spec.name, *spec.aliases)
      owners = {o for n in names if (o := self._device_owner(n)) is not None}
      if owners and self._claims_device(info.id, spec.name) and not any(self._claims_device(o, spec.name) for o in owners):
        for owner in owners: self._evict_device(owner, names, info.id)
      if any(taken("device", n, self._device_owner(n)) for n in names): continue
      self.devices[spec.name] = (spec, info.id)
      for alias in spec.aliases: self.device_aliases[alias] = spec.name
      provides["devices"].append(spec.name)
    for spec in staged.get("renderers", []):
      key = (spec.device, spec.name)
      if taken("renderer", f"{spec.device}:{spec.name}", self.renderers[key][1] if key in self.renderers else None): continue
      self.renderers[key] = (spec, info.id)
      provides["renderers"].append(f"{spec.device}:{spec.name}")
    for registry, kind in (("passes", "pass"), ("search", "search strategy"), ("commands", "command")):
      table = getattr(self, registry)
      for spec in staged.get(registry, []):
        owner = "" if registry == "commands" and spec.name in CORE_COMMANDS else table[spec.name][1] if spec.name in table else None
        if taken(kind, spec.name, owner): continue
        table[spec.name] = (spec, info.id)
        provides[registry].append(spec.name)
    for spec in staged.get("listeners", []):
      self.listeners.append((spec, info.id))
      provides["listeners"].append(spec.kind)
    info.provides = provides

  def _claims_device(self, plugin_id: str, device: str) -> bool:
    """Whether `plugin_id` has the better claim to a device name: it is the first-party plugin for it (cpu_llvm for
    CPU) or was asked for in TINY_PLUGINS. Then it wins over a plugin that registered the name first."""
    return DEVICE_PLUGINS.get(device.upper()) == plugin_id or plugin_id in self.enabled

  def _evict_device(self, owner: str, names: tuple[str, ...], winner: str) -> None:
    """Take a device (and the owner's renderers for it) back from `owner`, who loses it to `winner`."""
    info = next(i for i in self._infos if i.id == owner)
    for canonical in dict.fromkeys(c for n in names if (c := self.resolve_device(n)) is not None):
      self.devices.pop(canonical, None)
      self.device_aliases = {a: c for a, c in self.device_aliases.items() if c != canonical}
      for key in [k for k, (_, pid) in self.renderers.items() if k[0] == canonical and pid == owner]:
        del self.renderers[key]
        if f"{key[0]}:{key[1]}" in info.provides.get("renderers", []): info.provides["renderers"].remove(f"{key[0]}:{key[1]}")
      if canonical in info.provides.get("devices", []): info.provides["devices"].remove(canonical)
      info.conflicts.append(f"conflict: device {canonical!r} of plugin {owner!r} is also registered by plugin "
                            f"{winner!r}, which keeps it (the first-party plugin for it, or named in TINY_PLUGINS)")
    info.reason = "; ".join(info.conflicts)
    if not any(info.provides.values()): info.status = "conflict"

  def _device_owner(self, name: str) -> str | None:
    canonical = self.resolve_device(name)
    return None if canonical is None else self.devices[canonical][1]

  def _check_requests(self) -> None:
    installed = {i.id: i for i in self._infos}
    for name in sorted(self.enabled):
      info = installed.get(name)
      if info is None:
        why = "VIZ is set, which needs plugin 'viz_web'" if name == "viz_web" and self.viz else \
          f"plugin {name!r} was requested in TINY_PLUGINS"
        hint = plugin_suggestion(name, installed)
        extra = install_hint(name)
        self.request_errors.append(f"{why}, but it is not installed{hint}" + (f"; {extra}" if extra else ""))
      elif info.status in ("failed", "incompatible", "conflict"):
        self.request_errors.append(f"plugin {name!r} ({info.dist_label}) was requested but is {info.status}: {info.reason}")
        if info.exception is not None: self._request_causes.append(info.exception)
    for name in sorted(self.disabled - set(installed) - set(FIRST_PARTY_EXTRAS)):
      if (hint := plugin_suggestion(name, installed)) and not self.quiet:
        print(f"tinyplug: TINY_PLUGINS=-{name} names no installed plugin{hint}", file=sys.stderr)
    if self.strict:
      for info in self._infos:
        if (info.status in ("failed", "incompatible", "conflict") or info.conflicts) and info.id not in self.enabled:
          self.request_errors.append(f"plugin {info.id!r} ({info.dist_label}) is {info.status}: {info.reason} "
                                     "(TINY_PLUGINS_STRICT=1)")
          if info.exception is not None: self._request_causes.append(info.exception)

  def _warn_failures(self) -> None:
    for info in self._infos:
      if info.status not in ("failed", "incompatible", "conflict"): continue
      what = f"failed during {info.error.phase}: {info.error}" if info.error else f"is {info.status}: {info.reason}"
      print(f"tinyplug: plugin {info.id!r} ({info.dist_label}) {what}. See `tinyplug list-plugins`; "
            f"disable it with TINY_PLUGINS=-{info.id}", file=sys.stderr)
      if info.error is not None and DEBUG >= 1: print(info.error.traceback, file=sys.stderr, end="")

  # ------------------------------------------------------------------------------------------------------------------
  # queries

  @property
  def plugins(self) -> list[PluginInfo]:
    """Every installed plugin with its status; probes the devices of loaded plugins (once) to find unavailable ones."""
    if not self._statuses_final:
      for info in self._infos:
        if not info.loaded or not info.provides.get("devices"): continue
        info.devices = {name: self.device_available(name) for name in info.provides["devices"]}
        down = [f"{name}: {reason}" for name, (ok, reason) in info.devices.items() if not ok]
        if len(down) == len(info.devices):
          info.status, info.reason = "unavailable", "; ".join(down)
        elif down:
          info.reason = "; ".join([*info.conflicts, *(f"unavailable: device {d}" for d in down)])
      self._statuses_final = True
    return list(self._infos)

  def get(self, plugin_id: str) -> PluginInfo | None:
    """The plugin with this id (the first one when the id is in conflict), or None."""
    return next((i for i in self.plugins if i.id == plugin_id), None)

  def resolve_device(self, name: str) -> str | None:
    """Canonical device name for a name or alias (case-insensitive), or None when no plugin provides it."""
    for candidate in (name, name.upper()):
      if candidate in self.devices: return candidate
      if candidate in self.device_aliases: return self.device_aliases[candidate]
    return None

  def device_available(self, name: str) -> tuple[bool, str]:
    """(available, reason) for a device: runs its probe once; a probe that raises counts as unavailable."""
    canonical = self.resolve_device(name)
    if canonical is None: return False, self.missing_device_message(name)
    if canonical not in self._probe_cache:
      spec, _ = self.devices[canonical]
      if spec.probe is None: result = (True, "")
      else:
        try:
          from tinyplug.hookspecs import resolve_ref
          ok, reason = call_guarded(lambda: resolve_ref(spec.probe)(), f"the probe of device {canonical}", self.timeout)
          result = (bool(ok), str(reason))
        except Exception as e:
          result = (False, f"probe raised {type(e).__name__}: {e}")
      self._probe_cache[canonical] = result
    return self._probe_cache[canonical]

  def devices_by_priority(self) -> list[str]:
    """Registered device names, highest priority first (ties by name)."""
    return sorted(self.devices, key=lambda n: (-self.devices[n][0].priority, n))

  def renderers_for(self, device: str) -> list[tuple[Any, str]]:
    """(RendererSpec, plugin_id) pairs for a device, highest priority first (ties by name)."""
    canonical = self.resolve_device(device) or device
    found = [v for (dev, _), v in self.renderers.items() if dev == canonical]
    return sorted(found, key=lambda v: (-v[0].priority, v[0].name))

  def missing_device_message(self, name: str) -> str:
    """Why device `name` cannot be used: not provided (did you mean, install hint) or its plugin did not load."""
    msg = f"no active plugin provides device {name!r}"
    known = [*self.devices, *self.device_aliases]
    if (hint := suggest(name.upper(), known)): msg += hint
    elif known: msg += f"; available devices: {', '.join(sorted(self.devices))}"
    plugin_id = DEVICE_PLUGINS.get(name.upper())
    if plugin_id is not None:
      info = next((i for i in self._infos if i.id == plugin_id), None)
      if info is not None: msg += f"; plugin {plugin_id!r} is {info.status}" + (f" ({info.reason})" if info.reason else "")
      elif (extra := install_hint(plugin_id)): msg += f"; {extra}"
    return msg

  @staticmethod
  def load_factory(ref: Any) -> Any:
    """The object a spec's factory names: a callable as is, a "module:attr" string imported now."""
    from tinyplug.hookspecs import resolve_ref
    return resolve_ref(ref)

  # ------------------------------------------------------------------------------------------------------------------
  # teardown

  def _unsubscribe(self, subscriptions: list[tuple[str, Callable[[Any], None]]]) -> None:
    if not subscriptions: return
    from tinyplug import events
    for kind, callback in subscriptions: events.unsubscribe(kind, callback)

  def _run_unconfigure(self) -> None:
    """atexit: call `tinyplug_unconfigure` of each active plugin, in plugin-id order, each in its own try."""
    if self._closed: return
    self._closed = True
    impls = self._pm.hook.tinyplug_unconfigure.get_hookimpls()
    for impl in sorted(impls, key=lambda i: i.plugin_name):
      try: call_guarded(impl.function, f"tinyplug_unconfigure of plugin {impl.plugin_name!r}")
      except Exception as e:
        print(f"tinyplug: plugin {impl.plugin_name!r} raised in tinyplug_unconfigure: {type(e).__name__}: {e}",
              file=sys.stderr)

  def close(self) -> None:
    """Unsubscribe this manager's listeners and drop its atexit hook (used by `reset_plugins`)."""
    self._closed = True
    atexit.unregister(self._run_unconfigure)
    self._unsubscribe(self._subscriptions)
    self._subscriptions = []


_manager: PluginManager | None = None
_manager_lock = threading.RLock()
_loading = False


def get_plugin_manager(check: bool = True, quiet: bool = False, timeout: float | None = None) -> PluginManager:
  """The process-wide plugin manager, loading plugins on first call (thread-safe).

  With `check` (the default), raise PluginError when a requested plugin is missing or failed, every time,
  so the problem is not forgotten; `tinyplug list-plugins` passes check=False to always show the table.
  `quiet` suppresses the stderr lines for failed plugins and `timeout` bounds each plugin's import and device
  probe in seconds (both only matter on the loading call; the CLI passes a timeout, library use does not).
  """
  global _manager, _loading
  manager = _manager
  if manager is None:
    with _manager_lock:
      if _loading:
        raise RuntimeError("a plugin's registration module used the plugin manager while plugins were loading; "
                           "move that code into a lazy factory")
      if _manager is None:
        _loading = True
        try: _manager = PluginManager(quiet=quiet, timeout=timeout).load()
        finally: _loading = False
      manager = _manager
  if check and manager.request_errors:
    cause = manager._request_causes[0] if manager._request_causes else None
    raise PluginError("\n".join(manager.request_errors)) from cause
  return manager


def load_plugins() -> PluginManager:
  """Load plugins now (if not yet) and raise PluginError for requested plugins that are missing or failed."""
  return get_plugin_manager(check=True)


def reset_plugins() -> None:
  """Forget the loaded plugin set: listeners are unsubscribed and the next use rescans entry points (tests)."""
  global _manager
  import importlib
  with _manager_lock:
    if _manager is not None: _manager.close()
    _manager = None
    discover_entry_points.cache_clear()
    importlib.invalidate_caches()
