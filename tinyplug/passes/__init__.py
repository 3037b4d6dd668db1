"""The first-party pass sets: what makes kernels faster or smaller, as plugins of the core distribution.

Each is registered through the `tinyplug` entry-point group like a third party's (`*_plugin.py` are the registration
modules the entry points name) and can be turned off with `TINY_PLUGINS=-<id>`; results stay correct without them.
No core module imports this package: the codegen pipeline finds the passes through the plugin manager."""
