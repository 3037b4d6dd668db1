"""The `tinyplug` command line, run as `python -m tinyplug` in subprocesses and through `main()` in-process."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from plugin_fixtures import plugin_module, plugin_site  # noqa: F401  (plugin_site is a fixture)

from tinyplug.cli import format_table, main

GREETER = plugin_module("""
  def add_arguments(parser):
    parser.add_argument("--name", default="world")
    parser.add_argument("--fail", action="store_true")

  @hookimpl
  def tinyplug_register_commands(register):
    register(CommandSpec(name="greet", help="say hello", add_arguments=add_arguments, run="tp_greeter.run_greet:run"))

  @hookimpl
  def tinyplug_register_devices(register):
    register(DeviceSpec(name="GREETDEV", factory="tp_greeter.heavy:Device"))
""")
RUN_GREET = """
  def run(args):
    if args.fail: raise RuntimeError("greeting failed")
    print(f"hello {args.name}")
    return 3 if args.name == "three" else 0
"""


@pytest.fixture
def site(plugin_site):
  plugin_site.add("tp-greeter", {"greeter": GREETER}, version="1.2.3",
                  extra_files={"run_greet.py": RUN_GREET, "heavy.py": "raise RuntimeError('heavy module imported')\n"})
  plugin_site.add("tp-optin", {"optin": plugin_module(activation="explicit")})
  plugin_site.add("tp-broken", {"broken": "raise ImportError('libbroken.so: cannot open')\n"})
  return plugin_site


def rows_by_id(table: str) -> dict[str, str]:
  return {line.split()[0]: line for line in table.splitlines()[1:]}


def test_list_plugins_table(site):
  result = site.run("list-plugins")
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  header = lines[0]
  assert header.split() == ["NAME", "DISTRIBUTION", "VERSION", "STATUS", "PROVIDES", "NOTE"]
  rows = rows_by_id(result.stdout)
  greeter, optin, broken = rows["greeter"], rows["optin"], rows["broken"]
  for column, value in (("DISTRIBUTION", "tp-greeter"), ("VERSION", "1.2.3"), ("STATUS", "active")):
    assert greeter.index(value) == header.index(column), f"{column} column is not aligned"
  assert "devices: GREETDEV" in greeter and "commands: greet" in greeter
  assert "opt-in" in optin and "enable with TINY_PLUGINS=optin" in optin
  assert "failed" in broken and "ImportError: libbroken.so: cannot open (phase=import)" in broken
  assert "broken" not in result.stderr  # the table reports failures itself


def test_list_plugins_json_document(site):
  result = site.run("list-plugins", "--json", TINY_PLUGINS="-optin")
  assert result.returncode == 0, result.stderr
  doc = json.loads(result.stdout)
  assert doc["schema_version"] == 1 and doc["host"]["name"] == "tinyplug" and doc["host"]["api"] == "1.0"
  assert doc["env"]["TINY_PLUGINS"] == "-optin" and doc["errors"] == []
  plugins = {p["id"]: p for p in doc["plugins"]}
  greeter = plugins["greeter"]
  assert (greeter["distribution"], greeter["version"], greeter["status"]) == ("tp-greeter", "1.2.3", "active")
  assert greeter["provides"]["commands"] == ["greet"] and greeter["provides"]["devices"] == ["GREETDEV"]
  assert greeter["devices"] == [{"name": "GREETDEV", "available": True, "reason": ""}] and greeter["error"] is None
  assert set(greeter["provides"]) == {"devices", "renderers", "passes", "search", "listeners", "commands"}
  assert plugins["optin"]["status"] == "disabled"
  assert plugins["broken"]["error"] == {"type": "ImportError", "message": "libbroken.so: cannot open", "phase": "import"}
  for p in doc["plugins"]:
    assert {"id", "distribution", "version", "status", "reason", "error", "provides"} <= set(p)


def test_list_plugins_shows_the_table_even_when_a_requested_plugin_is_missing(site):
  result = site.run("list-plugins", TINY_PLUGINS="greeterr")
  assert result.returncode == 0 and "greeter" in result.stdout
  assert "error: plugin 'greeterr' was requested in TINY_PLUGINS, but it is not installed (did you mean 'greeter'?)" in result.stderr
  doc = json.loads(site.run("list-plugins", "--json", TINY_PLUGINS="greeterr").stdout)
  assert len(doc["errors"]) == 1 and "greeterr" in doc["errors"][0]


def test_plugin_command_runs_with_its_arguments(site):
  result = site.run("greet", "--name", "tests")
  assert result.returncode == 0 and result.stdout.strip() == "hello tests"
  assert "broken" in result.stderr  # other commands still warn about a failed plugin, in one line
  assert site.run("greet", "--name", "three").returncode == 3


def test_plugin_command_failure_exits_1(site):
  result = site.run("greet", "--fail")
  assert result.returncode == 1 and "greeting failed" in result.stderr and "'greeter'" in result.stderr


def test_plugin_command_refuses_to_run_when_a_requested_plugin_is_missing(site):
  result = site.run("greet", TINY_PLUGINS="nosuchplugin")
  assert result.returncode == 1 and "nosuchplugin" in result.stderr and "hello" not in result.stdout


def test_help_lists_plugin_commands_without_importing_implementations(site):
  code = ("import sys; from tinyplug.cli import main; rc = main(['--help']); "
          "print('RC', rc, 'LOADED', sorted(m for m in sys.modules if m.startswith(('numpy', 'tp_greeter.'))))")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=site.env(), timeout=60)
  assert "greet" in result.stdout and "say hello [plugin greeter]" in result.stdout
  assert "RC 0 LOADED ['tp_greeter.greeter']" in result.stdout, result.stdout


@pytest.mark.parametrize("argv", [[], ["no-such-command"], ["list-plugins", "--bogus"]])
def test_usage_errors_exit_2(site, argv, capsys):
  assert main(argv) == 2
  assert "usage:" in capsys.readouterr().err


def test_env_command(site):
  result = site.run("env", DEBUG="3")
  assert result.returncode == 0
  rows = rows_by_id(result.stdout)
  assert rows["DEBUG"].split()[1] == "3" and "generated code" in rows["DEBUG"]
  assert "TINY_PLUGINS" in rows and "DEV" in rows
  doc = {v["name"]: v for v in json.loads(site.run("env", "--json", JIT="0").stdout)}
  assert doc["JIT"]["value"] == "0" and doc["JIT"]["default"] == 1 and doc["JIT"]["kind"] == "context"


def test_in_process_list_plugins(site, capsys):
  assert main(["list-plugins"]) == 0
  out = capsys.readouterr().out
  assert "greeter" in out and "tp-greeter" in out


def test_format_table_aligns_colored_cells():
  from tinyplug.helpers import colored
  table = format_table(["A", "B"], [[colored("x", "red"), "1"], ["long", "2"]]).splitlines()
  from tinyplug.helpers import ansistrip
  assert [ansistrip(line).index(cell) for line, cell in zip(table, ["B", "1", "2"])] == [6, 6, 6]


NOGPU = plugin_module("""
  @hookimpl
  def tinyplug_register_devices(register):
    register(DeviceSpec(name="NOGPU", factory="tp_nogpu.nogpu:missing", probe=lambda: (False, "libnogpu.so not found")))
""")


def test_list_plugins_hides_disabled_and_unavailable_until_all(site):
  site.add("tp-nogpu", {"nogpu": NOGPU})
  result = site.run("list-plugins", TINY_PLUGINS="-optin")
  assert result.returncode == 0, result.stderr
  table, _, footer = result.stdout.partition(" more not shown: ")
  rows = rows_by_id(table)
  assert "optin" not in rows and "nogpu" not in rows and "greeter" in rows and "broken" in rows
  # (other installed plugins may be unavailable too: cuda without a GPU)
  assert "nogpu (unavailable)" in footer and "optin (disabled)" in footer and "--all" in footer
  rows = rows_by_id(site.run("list-plugins", "--all", TINY_PLUGINS="-optin").stdout)
  assert "disabled" in rows["optin"] and "disabled by TINY_PLUGINS=-optin" in rows["optin"]
  assert "unavailable" in rows["nogpu"] and "NOGPU: libnogpu.so not found" in rows["nogpu"]


def test_list_plugins_no_import_reads_metadata_only(site):
  site.add("tp-twin-a", {"twin": plugin_module()})
  site.add("tp-twin-b", {"twin": plugin_module()}, package="tp_twin_b")
  result = site.run("list-plugins", "--no-import", TINY_PLUGINS="-optin")
  assert result.returncode == 0, result.stderr
  assert result.stdout.splitlines()[0].split() == ["NAME", "DISTRIBUTION", "VERSION", "STATUS", "ENTRY", "POINT", "NOTE"]
  rows = rows_by_id(result.stdout)
  # the broken module raises on import: listed as installed, not failed, because it was never imported
  assert "installed" in rows["broken"] and "tp_broken.broken" in rows["broken"] and "failed" not in rows["broken"]
  assert "1.2.3" in rows["greeter"] and "tp_greeter.greeter" in rows["greeter"]
  assert "disabled by TINY_PLUGINS=-optin" in rows["optin"]
  assert "conflict" in rows["twin"] and "claimed by tp-twin-a 0.1.0 and tp-twin-b 0.1.0" in rows["twin"]
  assert result.stderr == ""
  strict = site.run("list-plugins", "--no-import", "--strict")
  assert strict.returncode == 1 and "plugin 'twin' is conflict" in strict.stderr


def test_list_plugins_no_import_in_process_imports_no_plugin_module(site, capsys):
  code = ("import sys; from tinyplug.cli import main; rc = main(['list-plugins', '--no-import', '--json']); "
          "print('RC', rc, 'LOADED', sorted(m for m in sys.modules if m.startswith('tp_')))")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=site.env(), timeout=60)
  assert "RC 0 LOADED []" in result.stdout, result.stdout + result.stderr
  doc = json.loads(result.stdout[:result.stdout.rindex("RC")])
  plugins = {p["id"]: p for p in doc["plugins"]}
  assert plugins["greeter"]["status"] == "installed" and plugins["greeter"]["entry_point"] == "tp_greeter.greeter"


def test_list_plugins_strict_exit_code(site):
  result = site.run("list-plugins", "--strict")
  assert result.returncode == 1 and "error: plugin 'broken' is failed: ImportError: libbroken.so" in result.stderr
  assert "greeter" in result.stdout   # the table is still printed
  assert site.run("list-plugins").returncode == 0
  assert site.run("list-plugins", "--strict", TINY_PLUGINS="-broken").returncode == 0   # disabled is not a failure
  assert site.run("list-plugins", "--strict", "--json").returncode == 1


def test_doctor_reports_plugins_devices_cache_and_default(site, tmp_path):
  result = site.run("doctor", DEV="PYTHON", XDG_CACHE_HOME=str(tmp_path / "xdg"), TINY_PLUGINS="-opencl")
  assert result.returncode == 1, result.stderr   # the broken plugin and GREETDEV are problems
  out = result.stdout
  assert f"python     {sys.version.split()[0]}" in out and "plugin API 1.0" in out
  assert f"cache dir  {tmp_path / 'xdg' / 'tinyplug'}" in out and "CACHELEVEL=2" in out
  assert "default    PYTHON (DEV=PYTHON)" in out
  plugins = rows_by_id(out.split("plugins:\n")[1].split("\n\n")[0])
  assert "active" in plugins["greeter"] and "failed" in plugins["broken"] and "disabled" in plugins["opencl"]
  devices = rows_by_id(out.split("devices:\n")[1].split("\n\n")[0])
  assert devices["PYTHON"].split()[1:3] == ["python", "ok"] and "ran a 1-element kernel" in devices["PYTHON"]
  assert devices["GREETDEV"].split()[1:3] == ["greeter", "failed"]
  assert "open: RuntimeError: device GREETDEV (plugin 'greeter') failed to open" in devices["GREETDEV"]
  assert "- plugin 'broken' is failed: ImportError: libbroken.so: cannot open" in out
  assert "- device GREETDEV is available but does not work" in out


def test_doctor_json_healthy(plugin_site, tmp_path):
  # a cold cache builds every device's first kernels (the emulator's runtime too): on a loaded 2-core machine that
  # took longer than the default per-device limit, which the hanging-plugin tests cover
  result = plugin_site.run("doctor", "--json", DEV="PYTHON", XDG_CACHE_HOME=str(tmp_path), TINY_PLUGINS_TIMEOUT="300",
                             timeout=900)
  doc = json.loads(result.stdout)
  assert doc["schema_version"] == 1 and doc["default_device"] == {"name": "PYTHON", "source": "DEV=PYTHON", "error": None}
  devices = {d["name"]: d for d in doc["devices"]}
  assert devices["PYTHON"]["status"] == "ok" and doc["cache"]["dir"] == str(tmp_path / "tinyplug")
  assert all(d["status"] in ("ok", "unavailable") for d in doc["devices"]), doc["devices"]
  assert (result.returncode == 0) == (doc["problems"] == []) and doc["problems"] == []

def test_cache_shows_its_size_and_clear_empties_it(tmp_path):
  import json, os, subprocess, sys
  env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
  cli = lambda *a: subprocess.run([sys.executable, "-m", "tinyplug", "cache", *a], capture_output=True, text=True,
                                  env=env, timeout=120)
  assert "not created yet" in cli().stdout
  run = subprocess.run([sys.executable, "-c", "from tinyplug import Tensor; print((Tensor([1.0, 2.0]) * 3).tolist())"],
                       capture_output=True, text=True, env={**env, "DEV": "CPU"}, timeout=300)
  assert run.stdout.strip() == "[3.0, 6.0]", run.stderr
  info = json.loads(cli("--json").stdout)
  assert info["exists"] and info["bytes"] > 0 and info["bytes"] == sum(info["parts"].values())
  assert "codegen.sqlite" in info["parts"] and "codegen.sqlite" in cli().stdout
  out = cli("clear")
  assert out.returncode == 0 and "freed" in out.stdout
  assert os.listdir(tmp_path / "tinyplug") == [] and json.loads(cli("--json").stdout)["bytes"] == 0
  (tmp_path / "tinyplug" / "keep").write_text("x")
  os.chmod(tmp_path / "tinyplug", 0o777)   # a directory others may write to is not treated as ours
  out = cli("clear")
  assert out.returncode == 1 and "writable by group or others" in out.stderr and (tmp_path / "tinyplug" / "keep").exists()
