"""tinyplug's OpenCL backend. Importing the package is free: the renderer and the runtime load on first use."""
from __future__ import annotations
from typing import Any

__all__ = ["OpenCLRenderer", "CLDevice"]

def __getattr__(name: str) -> Any:
  if name == "OpenCLRenderer":
    from tinyplug_opencl.renderer import OpenCLRenderer
    return OpenCLRenderer
  if name == "CLDevice":
    from tinyplug_opencl.runtime import CLDevice
    return CLDevice
  raise AttributeError(f"module 'tinyplug_opencl' has no attribute {name!r}")
