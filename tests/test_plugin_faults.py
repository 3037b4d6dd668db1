"""Plugin faults that used to take the host down: sys.exit during import or registration, an import that hangs,
a plugin that grabs a first-party device name by sorting first, a rewrite pass that raises."""
import time
import numpy as np
import pytest
from plugin_fixtures import plugin_module, plugin_site  # noqa: F401  (plugin_site is a fixture)

from tinyplug.plugins import PluginError, PluginPassError, get_plugin_manager

def test_sys_exit_during_import_fails_that_plugin_only(plugin_site):
  plugin_site.add("tp-quitter", {"quitter": "import sys\nsys.exit(3)\n"})
  plugin_site.add("tp-hookquit", {"hookquit": plugin_module("""
    import sys
    @hookimpl
    def tinyplug_register_search(register): sys.exit("bye")
  """)})
  pm = get_plugin_manager(check=False)
  quitter, hookquit = pm.get("quitter"), pm.get("hookquit")
  assert quitter.status == "failed" and quitter.error.phase == "import" and "SystemExit" in quitter.reason
  assert hookquit.status == "failed" and hookquit.error.phase == "hook" and "SystemExit" in hookquit.reason
  assert pm.get("cpu_llvm").status == "active"       # and the process is still here

HANG = "import time\ntime.sleep(3600)\n"

def test_version_imports_no_plugin(plugin_site):
  plugin_site.add("tp-sleepy", {"sleepy": HANG})
  st = time.perf_counter()
  result = plugin_site.run("--version")
  assert result.returncode == 0 and result.stdout.startswith("tinyplug ") and time.perf_counter() - st < 100

@pytest.mark.slow
def test_doctor_names_the_plugin_that_hangs(plugin_site):
  plugin_site.add("tp-sleepy", {"sleepy": HANG})
  # the hang costs the test the import bound; the other devices' cold compiles get a bound of their own, long enough
  # on a loaded machine
  result = plugin_site.run("doctor", TINY_PLUGINS_TIMEOUT="15", TINY_DOCTOR_CHECK_TIMEOUT="300")
  assert result.returncode == 1
  assert "plugin 'sleepy' is failed" in result.stdout and "did not finish within 15 s" in result.stdout, result.stdout
  assert "CPU" in result.stdout and "allocated and ran" in result.stdout   # the rest was still checked

def test_doctor_bounds_a_device_check_by_its_own_setting(monkeypatch):
  """TINY_DOCTOR_CHECK_TIMEOUT bounds each device check apart from the plugins' import bound; unset, that bound."""
  import threading
  from types import SimpleNamespace
  from tinyplug import doctor
  release = threading.Event()
  monkeypatch.setattr(doctor, "check_device", lambda pm, name: release.wait(60))   # a check that hangs
  pm = SimpleNamespace(timeout=None, devices={"HANGS": (None, "tp-hangs")})
  monkeypatch.setenv("TINY_DOCTOR_CHECK_TIMEOUT", "0.5")
  try: report = doctor._bounded_check(pm, "HANGS")
  finally: release.set()
  assert report["status"] == "failed" and "checking device HANGS did not finish within 0.5 s" in report["reason"]
  assert report["plugin"] == "tp-hangs"
  monkeypatch.delenv("TINY_DOCTOR_CHECK_TIMEOUT")
  assert doctor.check_timeout(SimpleNamespace(timeout=7.0)) == 7.0

CPU_GRAB = """
  @hookimpl
  def tinyplug_register_devices(register):
    register(DeviceSpec(name="CPU", factory="tinyplug.runtime.python:PythonDevice", priority=1000))
  @hookimpl
  def tinyplug_register_search(register):
    register(SearchSpec(name="aaa_search", factory=lambda: None))
"""

def test_first_party_device_name_is_not_taken_by_sort_order(plugin_site):
  plugin_site.add("tp-aaa", {"aaa": plugin_module(CPU_GRAB)})   # 'aaa' sorts before 'cpu_llvm'
  pm = get_plugin_manager(check=False)
  assert pm.devices["CPU"][1] == "cpu_llvm"
  aaa = pm.get("aaa")
  assert aaa.provides["devices"] == [] and aaa.conflicts and "'CPU'" in aaa.reason and "'cpu_llvm'" in aaa.reason
  from tinyplug.doctor import doctor_report
  assert any("'aaa'" in p and "'CPU'" in p for p in doctor_report(pm)["problems"])

def test_duplicate_device_fails_strict(plugin_site):
  plugin_site.add("tp-aaa", {"aaa": plugin_module(CPU_GRAB)})
  plugin_site.monkeypatch.setenv("TINY_PLUGINS_STRICT", "1")
  with pytest.raises(PluginError, match="aaa"): get_plugin_manager()

def test_explicitly_requested_plugin_keeps_the_device(plugin_site):
  plugin_site.add("tp-aaa", {"aaa": plugin_module(CPU_GRAB)})
  plugin_site.monkeypatch.setenv("TINY_PLUGINS", "aaa")
  pm = get_plugin_manager(check=False)
  assert pm.devices["CPU"][1] == "aaa"
  assert pm.get("cpu_llvm").conflicts

BAD_PASS = """
  def broken(): return lambda sink: 1 / 0
  @hookimpl
  def tinyplug_register_passes(register):
    register(PassSpec(name="bad.divide", stage="symbolic_final", rewrite=broken))
"""

def test_raising_pass_is_named_with_its_plugin_and_the_fix(plugin_site):
  plugin_site.add("tp-bad", {"bad": plugin_module(BAD_PASS)})
  from tinyplug import Tensor
  with pytest.raises(PluginPassError, match=r"pass 'bad.divide' of plugin 'bad' raised ZeroDivisionError.*TINY_PLUGINS=-bad"):
    (Tensor(np.arange(5, dtype=np.float32), device="PYTHON") * 7.25).numpy()
  result = plugin_site.run("doctor")
  assert result.returncode == 1 and "pass 'bad.divide' of plugin 'bad'" in result.stdout, result.stdout
  assert "TINY_PLUGINS=-bad" in result.stdout
