"""tinyplug's AMD backend. Importing the package is free: the renderers, llvmlite, the linker and HIP load on first use."""
from __future__ import annotations
from typing import Any

__all__ = ["AMDGPURenderer", "AMDDevice"]

def __getattr__(name: str) -> Any:
  if name == "AMDGPURenderer":
    from tinyplug_amd.renderer import AMDGPURenderer
    return AMDGPURenderer
  if name == "AMDDevice":
    from tinyplug_amd.runtime import AMDDevice
    return AMDDevice
  raise AttributeError(f"module 'tinyplug_amd' has no attribute {name!r}")
