"""Registration module: named by the entry point, imported when tinyplug loads plugins. Keep it light:
it imports only `tinyplug.hookspecs`, and names its implementations as "module:attr" strings."""
from tinyplug.hookspecs import CommandSpec, PassSpec, SearchSpec, hookimpl

TINYPLUG_PLUGIN = {
  "api": "1.0",                # the plugin API this was written for: host major must match, host minor >= 0
  "activation": "default",     # "explicit" would make it opt-in: loaded only when TINY_PLUGINS names it
  "description": "example pass set, search strategy and `hello` command",
}


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
