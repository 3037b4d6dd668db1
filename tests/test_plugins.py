"""Plugin discovery and loading through real entry points of fake installed distributions."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from plugin_fixtures import REPO_ROOT, plugin_module, plugin_site  # noqa: F401  (plugin_site is a fixture)
from subprocess_checks import run_checked

from tinyplug.helpers import Context
from tinyplug.hookspecs import DeviceSpec, ListenerSpec, PassSpec
from tinyplug.plugins import PluginError, get_plugin_manager, install_hint, parse_plugin_request, reset_plugins

GOOD = plugin_module("""
  @hookimpl
  def tinyplug_register_devices(register):
    register(DeviceSpec(name="FAKE", factory="tp_good.heavy:FakeDevice", priority=5, aliases=("FK",)))

  @hookimpl
  def tinyplug_register_renderers(register):
    register(RendererSpec(device="FAKE", name="FAKEC", factory="tp_good.heavy:FakeRenderer"))

  @hookimpl
  def tinyplug_register_passes(register):
    register(PassSpec(name="good.fold", stage="symbolic_final", rewrite="tp_good.heavy:make_pass"))

  @hookimpl
  def tinyplug_register_search(register):
    register(SearchSpec(name="good_search", factory="tp_good.heavy:Search"))

  @hookimpl
  def tinyplug_register_commands(register):
    register(CommandSpec(name="good-cmd", help="a command", run="tp_good.heavy:run"))
""")
HEAVY = """
  class FakeDevice: pass
  class FakeRenderer: pass
  class Search: pass
  def make_pass(): return lambda sink: sink
  def run(args): return 0
"""


def add_good(site) -> None:
  site.add("tp-good", {"good": GOOD}, extra_files={"heavy.py": HEAVY})


def info_of(plugin_id: str):
  info = get_plugin_manager(check=False).get(plugin_id)
  assert info is not None, f"plugin {plugin_id} not discovered"
  return info


def test_default_plugin_is_active_and_lists_what_it_provides(plugin_site):
  add_good(plugin_site)
  pm = get_plugin_manager()
  info = pm.get("good")
  assert (info.status, info.distribution, info.version, info.module) == ("active", "tp-good", "0.1.0", "tp_good.good")
  assert info.provides["devices"] == ["FAKE"] and info.provides["renderers"] == ["FAKE:FAKEC"]
  assert info.provides["passes"] == ["good.fold"] and info.provides["search"] == ["good_search"]
  assert info.provides["commands"] == ["good-cmd"]
  spec, owner = pm.devices["FAKE"]
  assert isinstance(spec, DeviceSpec) and owner == "good" and spec.priority == 5
  assert pm.resolve_device("fk") == "FAKE" and pm.device_available("FK") == (True, "")
  assert [s.name for s, _ in pm.renderers_for("FAKE")] == ["FAKEC"]
  assert pm.passes["good.fold"][1] == "good" and "good_search" in pm.search and "good-cmd" in pm.commands


def test_factories_are_imported_lazily(plugin_site):
  add_good(plugin_site)
  pm = get_plugin_manager()
  assert "tp_good.good" in sys.modules and "tp_good.heavy" not in sys.modules
  device_class = pm.load_factory(pm.devices["FAKE"][0].factory)
  assert device_class.__name__ == "FakeDevice" and "tp_good.heavy" in sys.modules


def test_a_module_rewritten_in_the_same_second_imports_its_new_code(plugin_site, monkeypatch, tmp_path):
  """With bytecode written (Python's default), a plugin rewritten at the same size and mtime is not read from the
  first version's cached bytecode (the site drops it on every write)."""
  import importlib
  monkeypatch.setattr(sys, "dont_write_bytecode", False)
  monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "pycache"))
  path = plugin_site.root / "tp_ver" / "ver.py"
  plugin_site.add("tp-ver", {"ver": plugin_module("VALUE = 1\n")})
  assert importlib.import_module("tp_ver.ver").VALUE == 1
  assert os.path.exists(importlib.util.cache_from_source(str(path)))   # the first version's bytecode was written
  stat = path.stat()
  plugin_site.add("tp-ver", {"ver": plugin_module("VALUE = 2\n")})
  os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))   # as if written within the same second
  assert path.stat().st_size == stat.st_size
  assert importlib.import_module("tp_ver.ver").VALUE == 2


def test_explicit_plugin_is_opt_in_until_named(plugin_site):
  plugin_site.add("tp-opt", {"optin": plugin_module(activation="explicit", body="""
    @hookimpl
    def tinyplug_register_search(register):
      register(SearchSpec(name="fancy", factory=lambda: None))
  """)})
  info = info_of("optin")
  assert info.status == "opt-in" and "TINY_PLUGINS=optin" in info.reason
  assert "fancy" not in get_plugin_manager().search
  plugin_site.monkeypatch.setenv("TINY_PLUGINS", "optin")
  reset_plugins()
  assert info_of("optin").status == "active" and "fancy" in get_plugin_manager().search


def test_minus_name_disables_without_importing(plugin_site):
  add_good(plugin_site)
  plugin_site.monkeypatch.setenv("TINY_PLUGINS", "-good")
  info = info_of("good")
  assert info.status == "disabled" and "TINY_PLUGINS=-good" in info.reason
  assert "tp_good.good" not in sys.modules and "FAKE" not in get_plugin_manager().devices


def test_import_failure_is_isolated(plugin_site, capsys):
  add_good(plugin_site)
  plugin_site.add("tp-broken", {"broken": "raise ImportError('libfoo.so.1: cannot open shared object file')\n"})
  pm = get_plugin_manager()
  broken = pm.get("broken")
  assert broken.status == "failed" and broken.error.phase == "import" and "libfoo.so.1" in broken.reason
  assert pm.get("good").status == "active" and "FAKE" in pm.devices
  err = capsys.readouterr().err
  lines = [line for line in err.splitlines() if "'broken'" in line]
  assert len(lines) == 1 and "failed during import" in lines[0] and "TINY_PLUGINS=-broken" in lines[0]
  assert "tp-broken 0.1.0" in lines[0]


def test_failing_registration_hook_is_rolled_back(plugin_site):
  add_good(plugin_site)
  plugin_site.add("tp-halfway", {"halfway": plugin_module("""
    @hookimpl
    def tinyplug_register_devices(register):
      register(DeviceSpec(name="HALF", factory=lambda: None))

    @hookimpl
    def tinyplug_register_passes(register):
      register(PassSpec(name="halfway.p", stage="opt", rewrite=lambda: None))
      raise RuntimeError("boom in passes")
  """)})
  pm = get_plugin_manager(check=False)
  info = pm.get("halfway")
  assert info.status == "failed" and info.error.phase == "hook" and "boom in passes" in info.reason
  assert "HALF" not in pm.devices and "halfway.p" not in pm.passes and not any(info.provides.values())
  assert not pm._pm.has_plugin("halfway")
  assert pm.get("good").status == "active"


def test_registering_a_wrong_object_fails_the_hook(plugin_site):
  plugin_site.add("tp-wrong", {"wrong": plugin_module("""
    @hookimpl
    def tinyplug_register_devices(register):
      register("CPU")
  """)})
  info = info_of("wrong")
  assert info.status == "failed" and info.error.phase == "hook" and "DeviceSpec" in info.reason


def test_misspelled_hook_fails_registration_with_did_you_mean(plugin_site):
  plugin_site.add("tp-typo", {"typo": plugin_module("""
    @hookimpl
    def tinyplug_register_device(register): pass
  """)})
  info = info_of("typo")
  assert info.status == "failed" and info.error.phase == "register"
  assert "tinyplug_register_devices" in info.reason


@pytest.mark.parametrize("api", ["2.0", "1.9", "0.9"])
def test_incompatible_api_versions(plugin_site, api):
  add_good(plugin_site)
  plugin_site.add("tp-future", {"future": plugin_module(api=api, body="""
    @hookimpl
    def tinyplug_register_search(register):
      register(SearchSpec(name="future", factory=lambda: None))
  """)})
  pm = get_plugin_manager()
  info = pm.get("future")
  assert info.status == "incompatible" and f"plugin API {api}" in info.reason and "provides API 1.0" in info.reason
  assert "future" not in pm.search and pm.get("good").status == "active"


def test_missing_plugin_header_fails_api_phase(plugin_site):
  plugin_site.add("tp-bare", {"bare": "x = 1\n"})
  info = info_of("bare")
  assert info.status == "failed" and info.error.phase == "api" and "TINYPLUG_PLUGIN" in info.reason


def test_two_distributions_claiming_one_id_conflict(plugin_site):
  plugin_site.add("tp-one", {"same": plugin_module()})
  plugin_site.add("tp-two", {"same": plugin_module()})
  infos = [i for i in get_plugin_manager().plugins if i.id == "same"]
  assert sorted(i.distribution for i in infos) == ["tp-one", "tp-two"]
  assert all(i.status == "conflict" and "tp-one" in i.reason and "tp-two" in i.reason for i in infos)
  assert "tp_one.same" not in sys.modules and "tp_two.same" not in sys.modules


def test_same_device_from_two_plugins_is_a_conflict_for_the_later_id(plugin_site):
  device = """
    @hookimpl
    def tinyplug_register_devices(register):
      register(DeviceSpec(name="MYDEV", factory=lambda: None, description="{who}"))
    @hookimpl
    def tinyplug_register_search(register):
      register(SearchSpec(name="{who}_search", factory=lambda: None))
  """
  plugin_site.add("tp-zeta", {"zeta": plugin_module(device.format(who="zeta"))})
  plugin_site.add("tp-alpha", {"alpha": plugin_module(device.format(who="alpha"))})
  pm = get_plugin_manager()
  assert pm.devices["MYDEV"] == (pm.devices["MYDEV"][0], "alpha") and pm.devices["MYDEV"][0].description == "alpha"
  zeta = pm.get("zeta")
  assert zeta.status == "active" and zeta.provides["devices"] == [] and zeta.provides["search"] == ["zeta_search"]
  assert "'MYDEV'" in zeta.reason and "'zeta'" in zeta.reason and "'alpha'" in zeta.reason


def test_plugin_whose_only_registration_conflicts_has_conflict_status(plugin_site):
  src = plugin_module("""
    @hookimpl
    def tinyplug_register_commands(register):
      register(CommandSpec(name="list-plugins", help="shadow", run=lambda args: 0))
  """)
  plugin_site.add("tp-shadow", {"shadow": src})
  info = info_of("shadow")
  assert info.status == "conflict" and "core command" in info.reason


def test_probe_results_make_devices_unavailable(plugin_site):
  plugin_site.add("tp-gpu", {"gpu": plugin_module("""
    @hookimpl
    def tinyplug_register_devices(register):
      register(DeviceSpec(name="GPU0", factory=lambda: None, probe=lambda: (False, "libgpu.so not found")))
  """), "mixed": plugin_module("""
    def broken_probe(): raise OSError("driver exploded")
    @hookimpl
    def tinyplug_register_devices(register):
      register(DeviceSpec(name="OKDEV", factory=lambda: None, probe=lambda: (True, "")))
      register(DeviceSpec(name="BADDEV", factory=lambda: None, probe=broken_probe))
  """)})
  pm = get_plugin_manager()
  gpu = pm.get("gpu")
  assert gpu.status == "unavailable" and "libgpu.so not found" in gpu.reason
  assert pm.device_available("GPU0") == (False, "libgpu.so not found")
  mixed = pm.get("mixed")
  assert mixed.status == "active" and "BADDEV" in mixed.reason and "driver exploded" in mixed.reason
  assert mixed.devices["OKDEV"] == (True, "")
  ok, reason = pm.device_available("BADDEV")
  assert not ok and "OSError" in reason


def test_unknown_device_message_has_install_hint(plugin_site):
  pm = get_plugin_manager()
  ok, reason = pm.device_available("CUDA")
  if pm.get("cuda") is None:
    assert not ok and "pip install 'tinyplug[cuda]'" in reason
  ok, reason = pm.device_available("NOPE")
  assert not ok and "'NOPE'" in reason


def test_viz_maps_to_viz_web_and_missing_plugin_errors_with_hint(plugin_site):
  with Context(VIZ=1):
    reset_plugins()
    if get_plugin_manager(check=False).get("viz_web") is not None: pytest.skip("a real viz_web plugin is installed")
    with pytest.raises(PluginError) as e:
      get_plugin_manager()
  assert "viz_web" in str(e.value) and "pip install 'tinyplug[viz]'" in str(e.value) and "VIZ" in str(e.value)


def test_viz_turns_on_an_installed_viz_web(plugin_site):
  if get_plugin_manager(check=False).get("viz_web") is not None: pytest.skip("a real viz_web plugin is installed")
  plugin_site.add("tinyplug-viz-web-fake", {"viz_web": plugin_module(activation="explicit")}, package="tp_vizfake")
  assert info_of("viz_web").status == "opt-in"
  with Context(VIZ=1):
    reset_plugins()
    assert get_plugin_manager().get("viz_web").status == "active"


def test_requested_missing_plugin_has_did_you_mean(plugin_site):
  add_good(plugin_site)
  plugin_site.monkeypatch.setenv("TINY_PLUGINS", "goood")
  with pytest.raises(PluginError, match="did you mean 'good'"):
    get_plugin_manager()
  pm = get_plugin_manager(check=False)  # still usable, e.g. for list-plugins
  assert pm.get("good").status == "active"


def test_requested_failing_plugin_raises_with_cause(plugin_site):
  plugin_site.add("tp-broken", {"broken": "raise ImportError('libfoo.so.1 missing')\n"})
  plugin_site.monkeypatch.setenv("TINY_PLUGINS", "broken")
  with pytest.raises(PluginError, match="libfoo.so.1 missing") as e:
    get_plugin_manager()
  assert isinstance(e.value.__cause__, ImportError)


def test_unrequested_failures_do_not_raise_unless_strict(plugin_site):
  plugin_site.add("tp-broken", {"broken": "raise ImportError('nope')\n"})
  assert get_plugin_manager().get("broken").status == "failed"
  plugin_site.monkeypatch.setenv("TINY_PLUGINS_STRICT", "1")
  reset_plugins()
  with pytest.raises(PluginError, match="TINY_PLUGINS_STRICT"):
    get_plugin_manager()


def test_autoload_off_loads_only_named_plugins(plugin_site):
  add_good(plugin_site)
  plugin_site.add("tp-other", {"other": plugin_module()})
  plugin_site.monkeypatch.setenv("TINY_PLUGINS_AUTOLOAD", "0")
  plugin_site.monkeypatch.setenv("TINY_PLUGINS", "other")
  pm = get_plugin_manager()
  assert pm.get("good").status == "disabled" and pm.get("other").status == "active"


def test_registries_follow_plugin_ids_not_install_order(plugin_site):
  for pid in ("zz", "mm", "aa"):
    plugin_site.add(f"tp-{pid}", {pid: plugin_module(f"""
      @hookimpl
      def tinyplug_register_passes(register):
        register(PassSpec(name="{pid}.p", after=("opt",), rewrite=lambda: None))
    """)})
  pm = get_plugin_manager()
  ours = [i.id for i in pm.plugins if i.id in ("zz", "mm", "aa")]
  assert ours == ["aa", "mm", "zz"]
  assert [n for n in pm.passes if n.endswith(".p")] == ["aa.p", "mm.p", "zz.p"]


def test_listeners_are_subscribed_and_reset_unsubscribes(plugin_site):
  from tinyplug import events
  plugin_site.add("tp-listen", {"listen": plugin_module("""
    SEEN = []
    def make_listener():
      return SEEN.append
    @hookimpl
    def tinyplug_register_listeners(register):
      register(ListenerSpec(kind="log", factory=make_listener))
  """)})
  pm = get_plugin_manager()
  assert pm.get("listen").provides["listeners"] == ["log"] and [s.kind for s, _ in pm.listeners] == ["log"]
  module = sys.modules["tp_listen.listen"]
  assert events.enabled("log")
  events.emit("log", "hello")
  assert module.SEEN == ["hello"]
  reset_plugins()
  events.emit("log", "after reset")
  assert module.SEEN == ["hello"]


def test_failing_listener_factory_rolls_back_the_plugin(plugin_site):
  from tinyplug import events
  plugin_site.add("tp-badlisten", {"badlisten": plugin_module("""
    def ok(): return lambda payload: None
    def bad(): raise RuntimeError("no display")
    @hookimpl
    def tinyplug_register_listeners(register):
      register(ListenerSpec(kind="kernel", factory=ok))
      register(ListenerSpec(kind="kernel", factory=bad))
  """)})
  pm = get_plugin_manager()
  info = pm.get("badlisten")
  assert info.status == "failed" and info.error.phase == "activate" and "no display" in info.reason
  assert not [p for _, p in pm.listeners if p == "badlisten"]
  assert "badlisten" not in [owner for _, owner in events._subscribers.get("kernel", [])]  # the first one was undone


def test_unconfigure_runs_at_exit(plugin_site, tmp_path):
  marker = tmp_path / "unconfigured.txt"
  plugin_site.add("tp-exit", {"atexit_plugin": plugin_module(f"""
    @hookimpl
    def tinyplug_unconfigure():
      open({str(marker)!r}, "w").write("bye")
  """)})
  code = "from tinyplug.plugins import get_plugin_manager; get_plugin_manager(check=False)"
  run_checked([sys.executable, "-c", code], env=plugin_site.env(), timeout=60)
  assert marker.read_text() == "bye"


def test_parse_plugin_request_and_install_hints():
  assert parse_plugin_request(" viz_web, -cuda ,,+opencl") == ({"viz_web", "opencl"}, {"cuda"})
  assert parse_plugin_request("cuda,-cuda") == (set(), {"cuda"})
  assert install_hint("viz_web").endswith("pip install 'tinyplug[viz]'")
  assert install_hint("cpu_llvm").endswith("pip install 'tinyplug[cpu]'")
  assert install_hint("cuda").endswith("pip install 'tinyplug[cuda]'") and install_hint("someone_elses") == ""


def test_spec_validation():
  with pytest.raises(ValueError, match="module:attribute"):
    DeviceSpec(name="X", factory="not a reference")
  with pytest.raises(TypeError):
    DeviceSpec("X", "a:b")  # keyword-only
  with pytest.raises(ValueError, match="stage or at least one"):
    PassSpec(name="p", rewrite=lambda: None)
  with pytest.raises(ValueError, match="listener kind"):
    ListenerSpec(kind="nope", factory=lambda: None)


def test_listener_kinds_match_the_event_bus():
  from tinyplug import events
  from tinyplug.hookspecs import LISTENER_KINDS
  assert set(LISTENER_KINDS) == set(events.KINDS)


@pytest.mark.slow
def test_example_plugin_installs_into_a_venv(tmp_path):
  """Build and install examples/plugin_example with pip, then list plugins and run its command.

  The venv sees this test environment's packages (pip, setuptools>=70.1 as the build backend without `wheel`, the
  core) through a .pth file, not the base interpreter's, so the build requirements are the ones requirements-dev.txt
  declares wherever the tests run."""
  source = tmp_path / "plugin_example"
  shutil.copytree(REPO_ROOT / "examples" / "plugin_example", source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
  env_dir = tmp_path / "venv"
  venv.create(env_dir, system_site_packages=False, with_pip=False)
  python = str(env_dir / "bin" / "python")
  site_dir = run_checked([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
  (Path(site_dir) / "outer_env.pth").write_text(f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n")
  env = {k: v for k, v in os.environ.items() if k not in ("TINY_PLUGINS", "VIZ", "PYTHONPATH")}
  env["PYTHONPATH"] = str(REPO_ROOT)  # the core from this checkout, installed or not
  run_checked([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q", str(source)],
              env=env, timeout=300)
  out = run_checked([python, "-m", "tinyplug", "list-plugins", "--json"], env=env, timeout=60).stdout
  example = next(p for p in json.loads(out)["plugins"] if p["id"] == "example")
  assert example["distribution"] == "tinyplug-example" and example["status"] == "active"
  assert example["provides"]["passes"] == ["example.fold_double_neg"] and example["provides"]["commands"] == ["hello"]
  assert example["provides"]["search"] == ["example_random"]
  hello = run_checked([python, "-m", "tinyplug", "hello", "--name", "venv"], env=env, timeout=60)
  assert "hello, venv" in hello.stdout


# ---------------------------------------------------------------------------------------------------------------------
# pass ordering

from tinyplug.hookspecs import CORE_STAGES, order_passes, pipeline_fingerprint  # noqa: E402


def P(name, **kw) -> PassSpec:
  return PassSpec(name=name, rewrite=lambda: None, **kw)


def names(steps) -> list[str]: return [s.name for s in steps]


def test_core_stages_alone_keep_their_order():
  steps = order_passes(CORE_STAGES, [])
  assert names(steps) == list(CORE_STAGES) and all(s.is_core and s.plugin is None for s in steps)


def test_stage_after_and_before_placement():
  steps = order_passes(CORE_STAGES, [
    (P("a.in_devec", stage="devectorize"), "a"),
    (P("b.after_opt", after=("opt",)), "b"),
    (P("c.before_linearize", before=("linearize",)), "c"),
    (P("d.between", after=("expand",), before=("gpudims",)), "d"),
  ])
  order = names(steps)
  assert order.index("a.in_devec") == order.index("devectorize") + 1
  assert order.index("b.after_opt") == order.index("opt") + 1
  assert order.index("c.before_linearize") == order.index("linearize") - 1
  assert order.index("expand") < order.index("d.between") < order.index("gpudims")
  step = steps[order.index("a.in_devec")]
  assert step.plugin == "a" and not step.is_core and step.spec.name == "a.in_devec"


def test_ties_break_by_plugin_id_then_name_whatever_the_input_order():
  passes = [(P("z.one", stage="opt"), "zplug"), (P("a.two", stage="opt"), "aplug"), (P("a.one", stage="opt"), "aplug")]
  expected = ["opt", "a.one", "a.two", "z.one", "expand"]
  for perm in (passes, passes[::-1], passes[1:] + passes[:1]):
    order = names(order_passes(CORE_STAGES, perm))
    assert order[order.index("opt"):order.index("expand") + 1] == expected


def test_anchors_on_other_plugin_passes():
  order = names(order_passes(CORE_STAGES, {
    "x.second": (P("x.second", after=("a.first",)), "a"),   # plugin id "a" sorts first, but must run after x's pass
    "a.first": (P("a.first", stage="opt"), "x"),
  }))
  assert order.index("opt") < order.index("a.first") < order.index("x.second") < order.index("expand")


def test_unknown_anchor_names_the_plugin_and_valid_ids():
  with pytest.raises(ValueError) as e:
    order_passes(CORE_STAGES, [(P("p.x", after=("devectorise",)), "myplugin")])
  msg = str(e.value)
  assert "'myplugin'" in msg and "'devectorise'" in msg and "devectorize" in msg and "symbolic_final" in msg
  with pytest.raises(ValueError, match="unknown stage"):
    order_passes(CORE_STAGES, [(P("p.y", stage="p.z"), "q"), (P("p.z", stage="opt"), "q")])


def test_cycle_is_reported_with_plugins():
  with pytest.raises(ValueError, match="cycle") as e:
    order_passes(CORE_STAGES, [(P("a.x", after=("b.y",)), "a"), (P("b.y", after=("a.x",)), "b")])
  assert "a.x (plugin a)" in str(e.value) and "b.y (plugin b)" in str(e.value)
  with pytest.raises(ValueError, match="cycle") as e:  # against the core order: after linearize, before early
    order_passes(CORE_STAGES, [(P("c.z", after=("linearize",), before=("early",)), "c")])
  assert "c.z (plugin c)" in str(e.value) and "(core stage)" in str(e.value)


def test_pass_named_like_a_core_stage_or_registered_twice_is_rejected():
  with pytest.raises(ValueError, match="core stage"):
    order_passes(CORE_STAGES, [(P("opt", after=("early",)), "a")])
  with pytest.raises(ValueError, match="both plugin"):
    order_passes(CORE_STAGES, [(P("x", stage="opt"), "a"), (P("x", stage="opt"), "b")])


def test_pipeline_fingerprint_is_stable_and_tracks_versions():
  a = [(P("a.x", stage="opt"), "a"), (P("b.y", stage="final"), "b")]
  base = pipeline_fingerprint(order_passes(CORE_STAGES, a))
  assert base == pipeline_fingerprint(order_passes(CORE_STAGES, a[::-1]))
  bumped = [(P("a.x", stage="opt", version="2"), "a"), a[1]]
  assert pipeline_fingerprint(order_passes(CORE_STAGES, bumped)) != base
  assert pipeline_fingerprint(order_passes(CORE_STAGES, [])) != base
  assert len(base) == 16 and int(base, 16) >= 0


def test_failure_traceback_is_printed_at_debug_1(plugin_site, capsys):
  plugin_site.add("tp-broken", {"broken": "def f(): raise ImportError('deep cause')\nf()\n"})
  with Context(DEBUG=1):
    get_plugin_manager()
  err = capsys.readouterr().err
  assert "Traceback (most recent call last)" in err and "deep cause" in err


def test_example_plugin_pass_works(monkeypatch):
  monkeypatch.syspath_prepend(str(REPO_ROOT / "examples" / "plugin_example" / "src"))
  from tinyplug.hookspecs import resolve_ref
  from tinyplug.uop import UOp, graph_rewrite
  x = UOp.variable("x", 0, 10)
  fold = resolve_ref("tinyplug_example.passes:fold_double_neg")()
  assert graph_rewrite(-(-(x + 1)), fold) is x + 1
  # the strategy holds to the contract the core checks before calling it
  from tinyplug.hookspecs.search import SearchStrategy, check_strategy
  strategy = resolve_ref("tinyplug_example.search:RandomSearch")()
  assert isinstance(strategy, SearchStrategy)
  check_strategy(strategy, "example_random")


def test_concurrent_first_use_loads_once(plugin_site):
  import threading
  plugin_site.add("tp-count", {"count": plugin_module("""
    LOADS = []
    @hookimpl
    def tinyplug_register_devices(register):
      LOADS.append(1)
      register(DeviceSpec(name="LOW", factory=lambda: None, priority=1))
      register(DeviceSpec(name="HIGH", factory=lambda: None, priority=9))
  """)})
  managers, barrier = [], threading.Barrier(8)
  def use() -> None:
    barrier.wait()
    managers.append(get_plugin_manager())
  threads = [threading.Thread(target=use) for _ in range(8)]
  for t in threads: t.start()
  for t in threads: t.join()
  assert len(managers) == 8 and all(m is managers[0] for m in managers)
  assert sys.modules["tp_count.count"].LOADS == [1]
  order = managers[0].devices_by_priority()
  assert order.index("HIGH") < order.index("LOW")
