"""Registration of the built-in search strategies: `beam` (BEAM=n, the default) and `random`."""
from tinyplug.hookspecs import SearchSpec, hookimpl

TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default", "description": "kernel search strategies: beam and random"}

@hookimpl
def tinyplug_register_search(register) -> None:
  register(SearchSpec(name="beam", factory="tinyplug.search.strategies:BeamSearch", version="4",
                      description="keeps the BEAM fastest action lists, one action more per step"))
  register(SearchSpec(name="random", factory="tinyplug.search.strategies:RandomSearch", version="3",
                      description="times 16*BEAM random action lists"))
