"""The plugin fixtures now ship as `tinyplug.testing.plugins`; kept importable under this name for the repo's tests."""
from tinyplug.testing.plugins import (PLUGIN_ENV_VARS, REPO_ROOT, PluginSite, make_dist, plugin_module,  # noqa: F401
                                      plugin_site)
