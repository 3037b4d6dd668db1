"""The pluggy markers of the `tinyplug` project. Plugins import `hookimpl` from `tinyplug.hookspecs`."""
import pluggy

PROJECT = "tinyplug"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
