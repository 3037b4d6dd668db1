"""The tinyplug plugin contract: pluggy hookspecs, one module per concern, and the spec objects plugins register.

A plugin module declares `TINYPLUG_PLUGIN = {"api": "1.0", "activation": "default", "description": "..."}`
and implements some of these hooks with `@hookimpl`:

  tinyplug_register_devices(register)    devices.py    DeviceSpec
  tinyplug_register_renderers(register)  renderers.py  RendererSpec
  tinyplug_register_passes(register)     passes.py     PassSpec   (placed among CORE_STAGES or SCHEDULE_STAGES by order_passes)
  tinyplug_register_search(register)     search.py     SearchSpec
  tinyplug_register_listeners(register)  listeners.py  ListenerSpec (callbacks on the tinyplug.events bus)
  tinyplug_register_commands(register)   commands.py   CommandSpec  (`tinyplug <name>` subcommands)
  tinyplug_unconfigure()                 lifecycle.py  at process exit

See docs/plugin_guide.md for a complete example.
"""
from tinyplug.hookspecs import commands, devices, lifecycle, listeners, passes, renderers, search
from tinyplug.hookspecs.markers import PROJECT, hookimpl, hookspec
from tinyplug.hookspecs.passes import CORE_STAGES, SCHEDULE_STAGES, FusionPass, FusionRefusal, PipelineStep, order_passes, passes_for, \
  pipeline_fingerprint
from tinyplug.hookspecs.specs import (LISTENER_KINDS, CommandSpec, DeviceSpec, ListenerSpec, PassSpec, RendererSpec,
                                      SearchSpec, resolve_ref)

# every module with hookspecs, in the order the plugin manager adds them
HOOKSPEC_MODULES = (devices, renderers, passes, search, listeners, commands, lifecycle)

# registration hooks -> (spec class, name of the registry on PluginManager), in the order they are called
REGISTRATION_HOOKS = {
  "tinyplug_register_devices": (DeviceSpec, "devices"),
  "tinyplug_register_renderers": (RendererSpec, "renderers"),
  "tinyplug_register_passes": (PassSpec, "passes"),
  "tinyplug_register_search": (SearchSpec, "search"),
  "tinyplug_register_listeners": (ListenerSpec, "listeners"),
  "tinyplug_register_commands": (CommandSpec, "commands"),
}

__all__ = ["PROJECT", "hookimpl", "hookspec", "HOOKSPEC_MODULES", "REGISTRATION_HOOKS", "CORE_STAGES", "SCHEDULE_STAGES",
           "FusionPass", "FusionRefusal", "passes_for", "PipelineStep", "order_passes", "pipeline_fingerprint", "LISTENER_KINDS", "CommandSpec", "DeviceSpec", "ListenerSpec",
           "PassSpec", "RendererSpec", "SearchSpec", "resolve_ref"]
