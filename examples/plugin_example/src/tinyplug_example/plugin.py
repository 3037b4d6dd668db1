"""Registration module: named by the entry point, imported when tinyplug loads plugins. Keep it light:
it imports only `tinyplug.hookspecs`, and names its implementations as "module:attr" strings."""
import os
import shutil

from tinyplug.hookspecs import CommandSpec, DeviceSpec, PassSpec, RendererSpec, SearchSpec, hookimpl

TINYPLUG_PLUGIN = {
  "api": "1.0",                # the plugin API this was written for: host major must match, host minor >= 0
  "activation": "default",     # "explicit" would make it opt-in: loaded only when TINY_PLUGINS names it
  "description": "example device (C via the system compiler), pass set, search strategy and `hello` command",
}


def find_cc() -> str | None:
  """The C compiler the EXAMPLE device uses: $CC, else clang, else cc or gcc."""
  for name in (os.environ.get("CC"), "clang", "clang-19", "cc", "gcc"):
    if name and (path := shutil.which(name)): return path
  return None


def probe() -> tuple[bool, str]:
  """Cheap availability check (nothing is compiled): is there a C compiler?"""
  return (True, "") if find_cc() else (False, "no C compiler found (set CC, or install clang or gcc)")


@hookimpl
def tinyplug_register_devices(register):
  # priority below CPU and CL: it is used when asked for (DEV=EXAMPLE), not picked by default
  register(DeviceSpec(name="EXAMPLE", factory="tinyplug_example.device:ExampleDevice", priority=-10,
                      probe=probe, description="C kernels built by the system C compiler"))


@hookimpl
def tinyplug_register_renderers(register):
  register(RendererSpec(device="EXAMPLE", name="C", factory="tinyplug_example.device:CRenderer"))


@hookimpl
def tinyplug_register_passes(register):
  register(PassSpec(name="example.fold_double_neg", stage="symbolic_final",
                    rewrite="tinyplug_example.passes:fold_double_neg", version="1"))


@hookimpl
def tinyplug_register_search(register):
  register(SearchSpec(name="example_random", factory="tinyplug_example.search:RandomSearch", version="1",
                      description="tries random optimisation actions and keeps the fastest"))


def _hello_arguments(parser):
  parser.add_argument("--name", default="world", help="who to greet")


@hookimpl
def tinyplug_register_commands(register):
  register(CommandSpec(name="hello", help="print a greeting (example plugin command)",
                       add_arguments=_hello_arguments, run="tinyplug_example.commands:hello"))
