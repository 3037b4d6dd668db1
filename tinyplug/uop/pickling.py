"""Pickling what Python will not pickle by name: code objects, modules, and functions that are not importable
(lambdas and local functions in pattern tables), so a PatternMatcher or a graph can go to another process.

Importing this module registers reducers for code objects (as marshal bytes, valid for this Python version) and
modules (by import name) with copyreg, as tinygrad does.
"""
from __future__ import annotations
import copyreg, importlib, marshal, sys, types
from typing import Any, Callable

def _code_from_bytes(data: bytes) -> types.CodeType: return marshal.loads(data)
copyreg.pickle(types.CodeType, lambda code: (_code_from_bytes, (marshal.dumps(code),)))
copyreg.pickle(types.ModuleType, lambda module: (importlib.import_module, (module.__name__,)))

def _names(code: types.CodeType) -> set[str]:
  # globals may be read from nested code objects too (comprehensions and lambdas inside the function)
  return set(code.co_names).union(*(_names(c) for c in code.co_consts if isinstance(c, types.CodeType)))

def deconstruct_function(fn: Callable) -> tuple:
  """`(code, globals, name, defaults, closure)` of a Python function: `types.FunctionType(*parts)` builds it again.

  `globals` holds only the names the code reads, so the parts pickle where the function's whole module would not."""
  if not isinstance(fn, types.FunctionType): raise TypeError(f"deconstruct_function needs a Python function, not {fn!r}")
  used = _names(fn.__code__)
  return fn.__code__, {k: v for k, v in fn.__globals__.items() if k in used}, fn.__name__, fn.__defaults__, fn.__closure__

def importable(fn: Any) -> bool:
  """Whether pickle can store `fn` by its module and name (a module-level function or class)."""
  module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
  if module is None or qualname is None or "<" in qualname: return False
  obj = sys.modules.get(module)
  for part in qualname.split("."): obj = getattr(obj, part, None)
  return obj is fn

class PortableFunction:
  """Stands for a function in a pickle: by reference when it is importable, else by its code, the globals it reads
  and its closure's values (functions among those are made portable the same way)."""
  __slots__ = ("fn",)
  def __init__(self, fn: Callable): self.fn = fn
  def __reduce__(self):
    fn = self.fn
    if not isinstance(fn, types.FunctionType) or importable(fn): return _identity, (fn,)
    code, glb, name, defaults, closure = deconstruct_function(fn)
    cells = None if closure is None else tuple(portable(c.cell_contents) for c in closure)
    return _rebuild_function, (code, {k: portable(v) for k, v in glb.items()}, name, defaults, cells, fn.__module__)

def portable(x: Any) -> Any:
  """`x`, wrapped so that it pickles if it is a function pickle could not store by name."""
  return PortableFunction(x) if isinstance(x, types.FunctionType) and not importable(x) else x

def _identity(x: Any) -> Any: return x

def _rebuild_function(code: types.CodeType, glb: dict, name: str, defaults: tuple | None, cells: tuple | None,
                      module: str) -> types.FunctionType:
  # the rebuilt function sees its module's globals where that module is loaded here, with the pickled ones on top
  home = getattr(sys.modules.get(module), "__dict__", None)
  env = {**home, **glb} if home is not None else {"__builtins__": __builtins__, **glb}
  closure = None if cells is None else tuple(types.CellType(v) for v in cells)
  fn = types.FunctionType(code, env, name, defaults, closure)
  fn.__module__ = module
  return fn
