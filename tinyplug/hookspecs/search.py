"""Hooks for kernel search strategies (what `BEAM=<n>` runs), and the strategy's own contract."""
from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable

from tinyplug.hookspecs.markers import hookspec
from tinyplug.hookspecs.specs import SearchSpec

if TYPE_CHECKING:
  from tinyplug.codegen.kernel import Kernel, Opt


class SearchStrategy:
  """What a `SearchSpec.factory` returns (called with no arguments). Subclass it and implement `search`.

  `search(kernel, timer, width, progress)` is called once per kernel that has no cached answer:
  - kernel: a `tinyplug.codegen.kernel.Kernel` with no actions applied; `kernel.copy()` + `apply_opt(opt)` tries
    actions (KernelOptError for an invalid one); `tinyplug.search.runner.candidate_actions(kernel)` lists the
    actions worth trying next.
  - timer: `timer(opts: list[Opt]) -> float`, seconds to run the kernel with those actions on the real device
    (inf when they do not compile or run); `timer.many(list_of_opts) -> list[float]` times several, built in
    parallel by the compile workers (PARALLEL) and timed in the given order: use it for each step's candidates.
    `tinyplug.search.runner.tensor_core_kernels(kernel)` lists whole tensor-core kernels worth starting from.
  - width: the value of BEAM (how many candidates to keep, or a budget).
  - progress: `progress(text)` shows a status line on a terminal.
  Returns the list of `Opt` actions to use; the core caches it on disk (strategy name and version in the key)."""
  def search(self, kernel: Kernel, timer: Callable[[list[Opt]], float], width: int,
             progress: Callable[[str], None]) -> list[Opt]:
    raise NotImplementedError


def check_strategy(strategy: Any, name: str) -> None:
  """Raise TypeError naming the strategy when it does not have `search(kernel, timer, width, progress)`."""
  search = getattr(strategy, "search", None)
  if not callable(search):
    raise TypeError(f"search strategy {name!r}: {type(strategy).__name__} has no search() method")
  try: inspect.signature(search).bind(None, None, 0, None)
  except TypeError as e:
    raise TypeError(f"search strategy {name!r}: {type(strategy).__qualname__}.search{inspect.signature(search)} does not "
                    f"take (kernel, timer, width, progress): {e}") from None
  except ValueError: pass   # no signature to inspect (a builtin): trust it


@hookspec
def tinyplug_register_search(register: Callable[[SearchSpec], None]) -> None:
  """Register search strategies by calling `register(SearchSpec(name=..., factory=...))`.

  When: once per process, while plugins load.
  Receives: `register`, a callback recording the spec and the plugin that registered it.
  Returns: nothing.
  Several plugins: all strategies are collected; `SEARCH=<name>` selects one (default "beam"). The same
  name from two plugins is a conflict (first plugin id wins). The strategy's name and version are part
  of the search-cache key. The factory returns a `SearchStrategy` (see its docstring for `search`).
  """
