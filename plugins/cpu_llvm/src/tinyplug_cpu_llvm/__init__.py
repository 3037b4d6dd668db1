"""tinyplug's CPU backend. `from tinyplug_cpu_llvm import LLVMRenderer` (imported lazily: this package is cheap)."""
__version__ = "0.1.0"
__all__ = ["LLVMRenderer", "LLVMCompiler", "CPUDevice"]

_LAZY = {"LLVMRenderer": "renderer", "LLVMCompiler": "compiler", "CPUDevice": "runtime"}

def __getattr__(name: str):
  if name in _LAZY:
    import importlib
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
