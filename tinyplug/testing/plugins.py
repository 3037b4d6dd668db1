"""Fake plugin distributions for tests, discovered through real `importlib.metadata` entry points (shipped with
tinyplug so a plugin's own tests can install fakes next to it).

`make_dist` writes `<site>/<package>/...` modules and `<site>/<Dist_Name>-<version>.dist-info/` with METADATA
and entry_points.txt, exactly what pip leaves behind. The `plugin_site` fixture puts a fresh site directory
first on sys.path (and PYTHONPATH, for subprocesses), resets the plugin manager before and after the test,
and removes the fake modules from sys.modules afterwards, so tests stay independent under xdist.

    from tinyplug.testing.plugins import plugin_site, plugin_module   # noqa: F401  (fixtures are found by name)

    def test_x(plugin_site):
      plugin_site.add("tp-good", {"good": plugin_module(devices=...)})
      pm = get_plugin_manager()
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import pytest

# the source checkout holding this package (subprocesses put it on PYTHONPATH so they import the same tinyplug)
REPO_ROOT = Path(__file__).resolve().parents[2]
PLUGIN_ENV_VARS = ("TINY_PLUGINS", "TINY_PLUGINS_AUTOLOAD", "TINY_PLUGINS_STRICT", "VIZ", "DEBUG")


def make_dist(site: Path, dist: str, version: str = "0.1.0", entry_points: dict[str, str] | None = None,
              files: dict[str, str] | None = None) -> Path:
  """Write a fake installed distribution into `site`; returns its .dist-info directory.

  entry_points: plugin id -> "module" or "module:attr" (group `tinyplug`); files: relative path -> source text.
  """
  for rel, text in (files or {}).items():
    path = site / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    if path.suffix == ".py": _drop_bytecode(path)
  info = site / f"{re.sub(r'[-_.]+', '_', dist)}-{version}.dist-info"
  info.mkdir(parents=True, exist_ok=True)
  (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
  lines = ["[tinyplug]", *(f"{k} = {v}" for k, v in (entry_points or {}).items())]
  (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
  return info


def _drop_bytecode(path: Path) -> None:
  """Remove the cached bytecode of `path`: Python trusts it while the source's size and mtime (whole seconds) match, so a
  module rewritten within the same second at the same size (a plugin at version "1", then "2") imported the old code."""
  try: os.remove(importlib.util.cache_from_source(str(path)))
  except (OSError, NotImplementedError): pass


def plugin_module(body: str = "", api: str = "1.0", activation: str = "default", description: str = "test plugin") -> str:
  """Source of a registration module: the TINYPLUG_PLUGIN header plus `body` (hookimpls, dedented)."""
  header = ("from tinyplug.hookspecs import hookimpl, DeviceSpec, RendererSpec, PassSpec, SearchSpec, ListenerSpec, "
            "CommandSpec\n"
            f"TINYPLUG_PLUGIN = {{'api': {api!r}, 'activation': {activation!r}, 'description': {description!r}}}\n")
  return header + textwrap.dedent(body)


class PluginSite:
  """A directory of fake distributions that is first on sys.path for the duration of one test."""

  def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch):
    self.root, self.monkeypatch = root, monkeypatch

  def add(self, dist: str, plugins: dict[str, str], version: str = "0.1.0", extra_files: dict[str, str] | None = None,
          package: str | None = None) -> None:
    """Add distribution `dist` providing plugin id -> registration-module source (one package per distribution).

    The package is named after the distribution (`tp-good` -> `tp_good`); plugin `x` lives in `<package>/x.py`.
    """
    package = package or re.sub(r"[-.]+", "_", dist)
    files = {f"{package}/__init__.py": ""}
    files.update({f"{package}/{pid}.py": src for pid, src in plugins.items()})
    files.update({f"{package}/{rel}": src for rel, src in (extra_files or {}).items()})
    make_dist(self.root, dist, version, {pid: f"{package}.{pid}" for pid in plugins}, files)
    self.refresh()

  def refresh(self) -> None:
    from tinyplug.plugins import reset_plugins
    _forget_modules(self.root)
    reset_plugins()

  def env(self, **extra: str) -> dict[str, str]:
    """Environment for a subprocess that sees this site and the repo checkout."""
    env = {k: v for k, v in os.environ.items() if k not in PLUGIN_ENV_VARS}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.root), str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env.update(extra)
    return env

  def run(self, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m tinyplug <args>` in a subprocess seeing this site, with `env` added to its environment.

    Its disk cache is the site's own (empty) one unless `env` names XDG_CACHE_HOME: `doctor` checks every cache
    entry, which on a developer's years-old cache takes longer than any test should. TINY_PLUGINS_TIMEOUT is 300
    unless given."""
    env.setdefault("XDG_CACHE_HOME", str(self.root / "xdg-cache"))
    env.setdefault("TINY_PLUGINS_TIMEOUT", "300")   # the device checks compile cold: slow on a loaded machine
    return subprocess.run([sys.executable, "-m", "tinyplug", *args], capture_output=True, text=True,
                          env=self.env(**env), cwd=self.root, timeout=timeout)


def _forget_modules(root: Path) -> None:
  prefix = str(root)
  for name, module in sys.modules.copy().items():   # copy() is atomic; other threads may import meanwhile
    if (getattr(module, "__file__", None) or "").startswith(prefix): del sys.modules[name]


@pytest.fixture
def plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginSite]:
  from tinyplug.helpers import VIZ
  from tinyplug.plugins import reset_plugins
  site = tmp_path / "site"
  site.mkdir()
  for var in PLUGIN_ENV_VARS: monkeypatch.delenv(var, raising=False)
  monkeypatch.setattr(VIZ, "value", 0)
  monkeypatch.syspath_prepend(str(site))
  reset_plugins()
  yield PluginSite(site, monkeypatch)
  reset_plugins()
  _forget_modules(site)
