"""Registration module of the `example_heuristic` plugin: a kernel-optimisation heuristic that replaces the
first-party `heuristic` pass set. Opt-in, and meant to run with the first-party one turned off:

    TINY_PLUGINS=example_heuristic,-heuristic python train.py
"""
from tinyplug.hookspecs import PassSpec, hookimpl

TINYPLUG_PLUGIN = {
  "api": "1.0",
  "activation": "explicit",    # loaded only when TINY_PLUGINS names it
  "description": "example kernel-optimisation heuristic (replaces `heuristic`: TINY_PLUGINS=example_heuristic,-heuristic)",
}


@hookimpl
def tinyplug_register_passes(register):
  # the "opt" stage: after the core applied the actions decided already (BEAM's, NOOPT's none), before expand
  register(PassSpec(name="example_heuristic.actions", stage="opt", rewrite="tinyplug_example.heuristic:make_pass",
                    version="1"))
