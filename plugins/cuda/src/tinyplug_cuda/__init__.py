"""tinyplug's CUDA backend. Importing the package is free: the renderers, NVRTC and the driver load on first use."""
from __future__ import annotations
from typing import Any

__all__ = ["CUDARenderer", "CUDADevice"]

def __getattr__(name: str) -> Any:
  if name == "CUDARenderer":
    from tinyplug_cuda.renderer import CUDARenderer
    return CUDARenderer
  if name == "CUDADevice":
    from tinyplug_cuda.runtime import CUDADevice
    return CUDADevice
  raise AttributeError(f"module 'tinyplug_cuda' has no attribute {name!r}")
