"""Hooks for `tinyplug <command>` subcommands."""
from __future__ import annotations

from typing import Callable

from tinyplug.hookspecs.markers import hookspec
from tinyplug.hookspecs.specs import CommandSpec


@hookspec
def tinyplug_register_commands(register: Callable[[CommandSpec], None]) -> None:
  """Register CLI subcommands by calling `register(CommandSpec(name=..., help=..., run=...))`.

  When: once per process, while plugins load (the CLI loads plugins to build its parser).
  Receives: `register`, a callback recording the spec and the plugin that registered it.
  Returns: nothing.
  Several plugins: every command becomes a subcommand. A name already used by a core command
  (list-plugins, env) or by a plugin earlier in plugin-id order is a conflict and is not added.
  `add_arguments` runs whenever the parser is built (keep it cheap); `run` is imported only when the
  command runs.
  """
