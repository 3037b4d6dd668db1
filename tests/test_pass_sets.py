"""The first-party pass sets (`heuristic`, `simplify`, `vectorize`) are plugins registered through the `tinyplug`
entry-point group: listed with their passes, turned off with TINY_PLUGINS=-<id> with results staying right (and a
slice of the op suite per pass set on PYTHON, CPU and CL: test_pass_sets_ops.py), and the ordered passes are part of
the compiled-program and search cache keys. Decompositions a renderer needs stay in the core."""
from __future__ import annotations
import json, os, pathlib, re, subprocess, sys
import numpy as np
import pytest
from plugin_fixtures import plugin_module, plugin_site  # noqa: F401  (plugin_site is a fixture)

from tinyplug.codegen import get_program, heuristic_actions, pipeline_key, pipeline_steps
from tinyplug.device import Device
from tinyplug.hookspecs.passes import CORE_STAGES
from tinyplug.plugins import get_plugin_manager
from tinyplug.schedule import create_schedule
from tinyplug.tensor import Tensor
from tinyplug.uop import Ops

REPO = pathlib.Path(__file__).resolve().parents[1]
PASS_SETS = {"heuristic": ["heuristic.actions"], "simplify": ["simplify.initial", "simplify.postopt", "simplify.final", "simplify.split_loops"],
             "vectorize": ["vectorize.lanes"]}
# every first-party pass set, the scheduler's (fuse_rows, split_reduce, heuristic.pack: test_schedule_passes.py) included
LISTED = {**PASS_SETS, "heuristic": ["heuristic.actions", "heuristic.pack", "heuristic.thread_rows"], "fuse_rows": ["fuse_rows.rows", "fuse_rows.reuse"], "split_reduce": ["split_reduce.partials"],
          "materialize": ["materialize.broadcasts"]}
RNG = np.random.default_rng(0)

def _off(site, *ids: str) -> None:
  site.monkeypatch.setenv("TINY_PLUGINS", ",".join(f"-{i}" for i in ids))
  site.refresh()

def _matmul(dev: str, n: int = 64, k: int = 48, m: int = 40):
  a, b = RNG.standard_normal((n, k)).astype(np.float32), RNG.standard_normal((k, m)).astype(np.float32)
  return Tensor(a, device=dev).realize() @ Tensor(b, device=dev).realize(), a @ b

def test_pass_sets_are_builtin_plugins_listed_with_their_passes():
  env = {k: v for k, v in os.environ.items() if not k.startswith("TINY_PLUGINS")}
  out = subprocess.run([sys.executable, "-m", "tinyplug", "list-plugins", "--json"], capture_output=True, text=True,
                       env=env, timeout=120, check=True).stdout
  plugins = {p["id"]: p for p in json.loads(out)["plugins"]}
  for pid, passes in LISTED.items():
    assert plugins[pid]["status"] == "builtin" and plugins[pid]["distribution"] == "tinyplug"
    assert plugins[pid]["provides"]["passes"] == passes
    assert plugins[pid]["entry_point"] == f"tinyplug.passes.{pid}_plugin"
  table = subprocess.run([sys.executable, "-m", "tinyplug", "list-plugins", "--all"], capture_output=True, text=True,
                         env={**env, "TINY_PLUGINS": "-vectorize"}, timeout=120, check=True).stdout
  assert re.search(r"^simplify .*builtin +passes: simplify.initial, simplify.postopt, simplify.final, "
                   r"simplify.split_loops", table, re.M)
  assert re.search(r"^vectorize .*disabled .*TINY_PLUGINS=-vectorize", table, re.M)

def test_each_pass_set_is_placed_by_its_stage(plugin_site):
  names = [s.name for s in pipeline_steps()]
  assert names.index("simplify.initial") == names.index("symbolic_initial") + 1
  assert names.index("heuristic.actions") == names.index("opt") + 1
  assert names.index("simplify.postopt") == names.index("symbolic_postopt") + 1
  assert names.index("vectorize.lanes") == names.index("devectorize") + 1
  assert names.index("simplify.final") == names.index("symbolic_final") + 1
  assert names.index("simplify.split_loops") == names.index("simplify.final") + 1
  assert names.index("fuse_rows.reuse") > names.index("linearize")
  _off(plugin_site, *PASS_SETS, "fuse_rows")
  assert [s.name for s in pipeline_steps()] == list(CORE_STAGES)   # the core alone: lowering, no optimisation

@pytest.mark.parametrize("pass_set", sorted(PASS_SETS))
def test_turning_a_pass_set_off_changes_the_code_not_the_result(plugin_site, pass_set):
  """The compiled-program cache key holds the pipeline: the same kernel after the plugin set changed is compiled
  again (without the pass set), not taken from the cache, and computes the same values."""
  from tinyplug.engine.realize import get_runner
  t, want = _matmul("CPU")
  ast = create_schedule([t.uop])[0][-1].ast
  key_on, spec_on = pipeline_key(), get_runner("CPU", ast).spec
  np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-4)
  _off(plugin_site, pass_set)
  assert not set(PASS_SETS[pass_set]) & {s.name for s in pipeline_steps()} and pipeline_key() != key_on
  spec_off = get_runner("CPU", ast).spec
  assert spec_off.src != spec_on.src
  if pass_set == "heuristic": assert spec_on.applied_opts and spec_off.applied_opts == ()
  if pass_set == "vectorize":
    assert any(u.dtype.count > 1 for u in spec_on.uops) and not any(u.dtype.count > 1 for u in spec_off.uops)
  t2, want2 = _matmul("CPU")
  np.testing.assert_allclose(t2.numpy(), want2, rtol=1e-4, atol=1e-4)
  a = RNG.standard_normal((30, 20)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a, device="CPU") @ Tensor(a.T.copy(), device="CPU")).softmax(-1).numpy(),
                             _softmax(a @ a.T), rtol=1e-4, atol=1e-5)

def _softmax(x: np.ndarray) -> np.ndarray:
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)

def test_search_cache_key_holds_the_pass_ids_and_versions(plugin_site):
  from tinyplug.search.runner import _cache_key
  t, _ = _matmul("CPU")
  ast, r = create_schedule([t.uop])[0][-1].ast, Device["CPU"].renderer
  def key(): return _cache_key("beam", "3", ast, r, "CPU", 2)
  keys = {key()}
  _off(plugin_site, "simplify")
  keys.add(key())
  for version in ("1", "2"):   # the same pass at another version
    plugin_site.add("tp-ver", {"ver": plugin_module(f"""
      @hookimpl
      def tinyplug_register_passes(register):
        register(PassSpec(name="ver.noop", stage="early", rewrite=lambda: (lambda sink: sink), version="{version}"))
    """)})
    keys.add(key())
  assert len(keys) == 4

def test_the_search_starts_from_whichever_heuristic_is_on(plugin_site):
  t, _ = _matmul("CPU", 256, 128, 256)
  ast, r = create_schedule([t.uop])[0][-1].ast, Device["CPU"].renderer
  assert heuristic_actions(ast, r) == list(get_program(ast, r).applied_opts) != []
  _off(plugin_site, "heuristic")
  assert heuristic_actions(ast, r) == [] and get_program(ast, r).applied_opts == ()

def test_decompositions_stay_in_the_core_with_every_pass_set_off(plugin_site):
  """A renderer that lacks transcendentals gets them decomposed by the core, whatever pass sets are on."""
  sys.path.insert(0, str(REPO / "tests"))
  try: from test_decompositions import NoTransRenderer, run_kernel
  finally: sys.path.remove(str(REPO / "tests"))
  from tinyplug.uop.dtype import dtypes
  _off(plugin_site, *PASS_SETS)
  x = np.linspace(-20, 20, 257, dtype=np.float32)
  out, uops = run_kernel(lambda v: (v * v.const_like(0.25)).exp2().sin(), [x], dtypes.float32, dtypes.float32,
                         NoTransRenderer())
  assert not {u.op for u in uops} & {Ops.EXP2, Ops.SIN}
  np.testing.assert_allclose(out, np.sin(np.exp2(x * np.float32(0.25))), rtol=2e-5, atol=2e-5)

def test_noopt_still_turns_the_optimiser_off(plugin_site):
  from tinyplug.helpers import Context
  t, want = _matmul("CPU")
  ast, r = create_schedule([t.uop])[0][-1].ast, Device["CPU"].renderer
  assert get_program(ast, r).applied_opts
  with Context(NOOPT=1): assert get_program(ast, r).applied_opts == ()

def test_no_core_module_imports_a_pass_set():
  """The pipeline finds pass sets through the plugin manager only: outside tinyplug/passes nothing imports them."""
  core = REPO / "tinyplug"
  bad = [str(p.relative_to(core)) for p in core.rglob("*.py") if "passes" not in p.relative_to(core).parts[:1]
         and re.search(r"^\s*(from|import)\s+tinyplug\.passes\b|^\s*from\s+tinyplug\s+import\s+.*\bpasses\b",
                       p.read_text(), re.M)]
  assert bad == []
