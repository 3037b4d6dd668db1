"""tinyplug's Metal backend. Importing the package is free: the renderer and the Objective-C runtime load on first use."""
from __future__ import annotations
from typing import Any

__all__ = ["MetalRenderer", "MetalDevice"]

def __getattr__(name: str) -> Any:
  if name == "MetalRenderer":
    from tinyplug_metal.renderer import MetalRenderer
    return MetalRenderer
  if name == "MetalDevice":
    from tinyplug_metal.runtime import MetalDevice
    return MetalDevice
  raise AttributeError(f"module 'tinyplug_metal' has no attribute {name!r}")
