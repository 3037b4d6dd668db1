"""The scheduler's pass sets (`fuse_rows` at the fusion stage, `split_reduce` at tensor_graph) are plugins like the
codegen ones: listed with their passes (test_pass_sets.py), turned off with TINY_PLUGINS=-<id> (fewer fused kernels, the same values),
replaceable by a third party's pass through the FusionPass contract, and part of the schedule cache's key."""
from __future__ import annotations
import numpy as np
import pytest
from plugin_fixtures import plugin_module, plugin_site  # noqa: F401  (plugin_site is a fixture)

from tinyplug.codegen import pipeline_steps
from tinyplug.hookspecs import SCHEDULE_STAGES
from tinyplug.plugins import PluginPassError
from tinyplug.schedule import create_schedule
from tinyplug.schedule.passes import schedule_key, schedule_steps
from tinyplug.tensor import Tensor

RNG = np.random.default_rng(1)
SCHEDULE_PASS_SETS = {"fuse_rows": ["fuse_rows.rows"], "split_reduce": ["split_reduce.partials"],
                      "materialize": ["materialize.broadcasts"], "heuristic": ["heuristic.pack"]}

def _off(site, *ids: str) -> None:
  site.monkeypatch.setenv("TINY_PLUGINS", ",".join(f"-{i}" for i in ids))
  site.refresh()

def _kernels(t: Tensor) -> int:
  return sum(1 for it in create_schedule([t.uop])[0] if it.ast.op.name == "SINK")

def _softmax_case(rows: int = 6, cols: int = 50):
  a = RNG.standard_normal((rows, cols)).astype(np.float32)
  e = np.exp(a - a.max(-1, keepdims=True))
  return Tensor(a, device="CPU").realize().softmax(-1), e / e.sum(-1, keepdims=True)

def test_placed_in_the_scheduler_pipeline_not_in_codegen(plugin_site):
  names = [s.name for s in schedule_steps()]
  assert names == ["tensor_graph", "heuristic.pack", "split_reduce.partials", "fusion", "fuse_rows.rows", "materialize", "materialize.broadcasts"]
  assert not {"heuristic.pack", "split_reduce.partials", "fuse_rows.rows"} & {s.name for s in pipeline_steps()}
  _off(plugin_site, *SCHEDULE_PASS_SETS)
  assert [s.name for s in schedule_steps()] == list(SCHEDULE_STAGES)

def test_without_fuse_rows_softmax_is_three_kernels_with_the_same_values(plugin_site):
  t, want = _softmax_case()
  assert _kernels(t) == 1   # max, sum and the normalised write in one row kernel
  np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-6)
  key_on = schedule_key()
  _off(plugin_site, "fuse_rows")
  assert schedule_key() != key_on
  t, want = _softmax_case()   # the same graph structure: the schedule cache must not hand back the fused schedule
  assert _kernels(t) == 3
  np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-6)

def test_without_split_reduce_a_huge_sum_is_one_kernel_with_the_same_value(plugin_site):
  a = RNG.standard_normal(1 << 18).astype(np.float32)
  t = Tensor(a, device="CPU").realize().sum()
  assert _kernels(t) == 2   # partial sums, then the sum of those
  np.testing.assert_allclose(t.item(), a.astype(np.float64).sum(), rtol=1e-4)
  _off(plugin_site, "split_reduce")
  t = Tensor(a, device="CPU").realize().sum()
  assert _kernels(t) == 1
  np.testing.assert_allclose(t.item(), a.astype(np.float64).sum(), rtol=1e-4)

def test_materialize_computes_an_expensive_broadcast_once(plugin_site):
  """A softmax-cross-entropy-like gradient (an exp per element) broadcast into a weight-gradient matmul: computed in a
  kernel of its own, not inside the matmul once per weight column; without the pass set, inlined, same values."""
  from tinyplug.codegen import get_program
  from tinyplug.device import Device
  rng = np.random.default_rng(3)
  logits, x = rng.standard_normal((16, 10)).astype(np.float32), rng.standard_normal((16, 300)).astype(np.float32)
  e = np.exp(logits - logits.max(1, keepdims=True))
  want = (e / e.sum(1, keepdims=True)).T @ x
  def run():
    g = Tensor(logits, device="CPU").realize().softmax(1)
    dw = g.T @ Tensor(x, device="CPU").realize()
    items = [it for it in create_schedule([dw.uop])[0] if it.ast.op.name == "SINK"]
    # the kernels' graphs, not their programs: the CPU renders EXP2 as a polynomial, no EXP2 left in the program
    asts = {get_program(it.ast, Device["CPU"].renderer).name: it.ast for it in items}
    np.testing.assert_allclose(dw.numpy(), want, rtol=1e-4, atol=1e-4)
    matmul = next(a for name, a in asts.items() if name.startswith("r_10_300"))
    return len(items), any(u.op.name == "EXP2" for u in matmul.toposort())
  n_on, exp_in_matmul_on = run()
  assert not exp_in_matmul_on
  _off(plugin_site, "materialize")
  n_off, exp_in_matmul_off = run()
  assert exp_in_matmul_off and n_off == n_on - 1

def test_materialize_computes_a_reread_activation_once(plugin_site):
  """A bias add and ReLU read by a stride-2 convolution (each element read ~60 times): the activation gets a kernel of
  its own, which the first convolution writes (its sum fused there: no extra kernel), and the second convolution
  loads it instead of recomputing it; without the pass set, inlined, the same values."""
  import torch
  from tinyplug.codegen import get_program
  from tinyplug.device import Device
  rng = np.random.default_rng(4)
  x, w1, b1 = rng.standard_normal((8, 1, 28, 28)), rng.standard_normal((32, 1, 3, 3)), rng.standard_normal(32)
  w2 = rng.standard_normal((64, 32, 3, 3))
  x, w1, b1, w2 = (a.astype(np.float32) for a in (x, w1, b1, w2))
  act = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w1), torch.tensor(b1)).relu()
  want = torch.nn.functional.conv2d(act, torch.tensor(w2), stride=2).numpy()
  def run():
    c = lambda a: Tensor(a, device="CPU").realize()
    out = c(x).conv2d(c(w1), c(b1)).relu().conv2d(c(w2), stride=2)
    items = [it for it in create_schedule([out.uop])[0] if it.ast.op.name == "SINK"]
    conv2 = get_program(items[-1].ast, Device["CPU"].renderer)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-3)
    return len(items), any(u.op.name == "WHERE" for u in conv2.uops)
  n_on, relu_in_conv_on = run()
  assert not relu_in_conv_on
  _off(plugin_site, "materialize")
  n_off, relu_in_conv_off = run()
  assert relu_in_conv_off and n_off == n_on   # off: the first convolution's raw sum is the kernel of its own

THIRD_PARTY_FUSION = """
  from tinyplug.hookspecs import FusionPass, FusionRefusal
  from tinyplug.uop.ops import Ops

  class FuseMaxOnly(FusionPass):
    '''Fuses only MAX reductions, whatever their shape: a different policy than the first-party row kernels.'''
    def fuse(self, graph):
      for r in reversed(graph.nodes):
        if r in graph.candidates and r.arg[0] is Ops.MAX: graph.fuse(r, "max-only", "this plugin fuses every max")
    def why_not(self, graph, r):
      return None if r.arg[0] is Ops.MAX else FusionRefusal("not-a-max", "the max-only plugin leaves sums alone", True)

  @hookimpl
  def tinyplug_register_passes(register):
    register(PassSpec(name="maxonly.fuse", stage="fusion", rewrite=FuseMaxOnly))
"""

def test_a_third_party_fusion_pass_replaces_fuse_rows(plugin_site):
  plugin_site.add("tp-maxonly", {"maxonly": plugin_module(THIRD_PARTY_FUSION)})
  _off(plugin_site, "fuse_rows")
  assert "maxonly.fuse" in [s.name for s in schedule_steps()]
  t, want = _softmax_case()
  assert _kernels(t) == 2   # the max joins the sum's kernel; the sum stays a kernel of its own
  np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-6)

def test_the_visualizer_hears_a_third_party_pass_s_reasons(plugin_site):
  from tinyplug import events
  plugin_site.add("tp-maxonly", {"maxonly": plugin_module(THIRD_PARTY_FUSION)})
  _off(plugin_site, "fuse_rows")
  got: list = []
  events.subscribe("schedule", got.append)
  try:
    t, _ = _softmax_case(7, 33)
    create_schedule([t.uop])
  finally: events.unsubscribe("schedule", got.append)
  rules = {d.rule: d for e in got for d in e.get("decisions", ())}
  assert not rules["max-only"].realized and rules["max-only"].file.endswith("maxonly.py")
  assert rules["not-a-max"].realized and "leaves sums alone" in rules["not-a-max"].detail

@pytest.mark.parametrize("body, message", [
  ("""
  from tinyplug.hookspecs import FusionPass
  class Greedy(FusionPass):
    def fuse(self, graph):
      for n in graph.nodes:
        if graph.is_realized(n): graph.fuse(n, "all", "everything")
  @hookimpl
  def tinyplug_register_passes(register):
    register(PassSpec(name="greedy.fuse", stage="fusion", rewrite=Greedy))
  """, r"pass 'greedy.fuse' of plugin 'greedy' raised ValueError: .*not a candidate.*TINY_PLUGINS=-greedy"),
  ("""
  @hookimpl
  def tinyplug_register_passes(register):
    register(PassSpec(name="greedy.fuse", stage="fusion", rewrite=lambda: (lambda graph: None)))
  """, r"pass 'greedy.fuse' \(plugin 'greedy'\) in the scheduler's 'fusion' stage: its rewrite factory must return a FusionPass"),
  ("""
  @hookimpl
  def tinyplug_register_passes(register):
    register(PassSpec(name="greedy.fuse", stage="tensor_graph", rewrite=lambda: (lambda sink: sink)))
  """, r"'tensor_graph' stage: its rewrite factory must return a PatternMatcher"),
])
def test_a_broken_scheduler_pass_is_named_in_the_error(plugin_site, body, message):
  plugin_site.add("tp-greedy", {"greedy": plugin_module(body)})
  t, _ = _softmax_case(5, 17)
  with pytest.raises((PluginPassError, TypeError), match=message): create_schedule([t.uop])
  _off(plugin_site, "greedy")   # the process stays usable: without the plugin the same graph schedules and runs
  t, want = _softmax_case(5, 17)
  np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-6)
