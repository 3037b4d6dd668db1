"""tinyplug: a small deep-learning framework and tensor compiler whose every backend and pass is a plugin."""
from __future__ import annotations
import importlib
from typing import Any

__version__ = "0.1.0"

# name -> module that defines it; imported on first use so `import tinyplug` stays fast
_LAZY = {
  "Tensor": "tinyplug.tensor", "Device": "tinyplug.device", "TinyJit": "tinyplug.engine.jit",
  "dtypes": "tinyplug.uop.dtype", "DType": "tinyplug.uop.dtype",
  "UOp": "tinyplug.uop.ops", "Ops": "tinyplug.uop.ops", "GroupOp": "tinyplug.uop.ops",
  "UPat": "tinyplug.uop.upat", "PatternMatcher": "tinyplug.uop.upat", "graph_rewrite": "tinyplug.uop.rewrite",
  "Context": "tinyplug.helpers", "getenv": "tinyplug.helpers", "GlobalCounters": "tinyplug.helpers",
  "Variable": "tinyplug.uop.ops", "hookimpl": "tinyplug.hookspecs",
}

def __getattr__(name: str) -> Any:
  if name in _LAZY:
    mod = importlib.import_module(_LAZY[name])
    value = getattr(mod, name) if name != "Variable" else mod.UOp.variable
    globals()[name] = value
    return value
  raise AttributeError(f"module 'tinyplug' has no attribute {name!r}")

def __dir__() -> list[str]: return sorted(list(globals()) + list(_LAZY))

def reset() -> None:
  """Forget what tinyplug remembers between calls: compiled programs, schedule and graph templates, constants,
  kernel names (every `tinyplug.caches.BoundedCache`, plugins' included). Tensors and their data are untouched."""
  from tinyplug.caches import reset_caches
  reset_caches()

__all__ = list(_LAZY) + ["reset"]

def _load_requested_plugins() -> None:
  # a recorder asked for on the command line (VIZ=1, TINY_PLUGINS=...) must see the program from its first rewrite
  # (only turning a plugin on needs this: `TINY_PLUGINS=-x tinyplug list-plugins --no-import` must import nothing)
  from tinyplug.helpers import env_str
  from tinyplug.plugins import get_plugin_manager, parse_plugin_request
  if parse_plugin_request(env_str("TINY_PLUGINS"))[0] or env_str("VIZ") not in ("", "0"):
    get_plugin_manager(check=False)

_load_requested_plugins()
