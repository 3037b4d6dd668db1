"""Registration module of the `viz_web` plugin (opt-in: VIZ=1 or TINY_PLUGINS=viz_web). Kept light: the recorder
is imported when the listeners are created, the server only at exit."""
from tinyplug.hookspecs import ListenerSpec, hookimpl

TINYPLUG_PLUGIN = {
  "api": "1.0",
  "activation": "explicit",
  "description": "records graph rewrites, kernels and profile spans; serves them in a web UI at exit",
}

CAPTURED_KINDS = ("scope", "rewrite", "schedule", "kernel", "profile")

@hookimpl
def tinyplug_register_listeners(register):
  for kind in CAPTURED_KINDS:
    register(ListenerSpec(kind=kind, factory=f"tinyplug_viz_web.capture:{kind}_listener"))

@hookimpl
def tinyplug_unconfigure():
  from tinyplug_viz_web.capture import finish
  finish()
