"""The scheduler's decisions (issue 21, item 1): recorded as data and as a step, the tensor graph coloured by kernel,
and "why didn't these two kernels fuse" answered in the web UI, the API and `tinyplug viz cli`."""
import json, os, subprocess, sys
import pytest
from conftest import needs_chromium, ready, served
from tinyplug_viz_web.model import TraceView

def schedules(view):
  return [c for c in view.trace.contexts if c.kind == "schedule"]

def test_decisions_are_recorded_with_rules_and_locations(fusion_trace):
  view = TraceView.open(fusion_trace)
  first, second = schedules(view)[:2]
  split = view.splits[first.id]
  rules = {k["name"]: k["rule"] for k in split.kernels}
  assert len(split.kernels) == 3 and list(rules.values())[-1] == "target"
  assert "reduce-then-expand" in rules.values()                      # max(0) is broadcast back: its own kernel
  row = [d for d in split.decisions if d["rule"] == "row-kernel"]
  assert len(row) == 2 and all(not d["realized"] for d in row)        # softmax's max and sum: inside the last kernel
  for d in split.decisions:   # the core's rules live in the scheduler, row kernels in the fuse_rows pass set
    rule_home = ("passes", "fuse_rows.py") if d["rule"].startswith("row-") else ("schedule", "__init__.py")
    assert d["file"].endswith(os.path.join(*rule_home)) and d["line"] > 0
    assert view.trace.source_lines(d["file"], d["line"])              # the rule's source is in the trace
  limit = view.splits[second.id]
  assert [k["rule"] for k in limit.kernels] == ["row-fuse-limit", "row-fuse-limit", "target"]
  assert "40000 elements is over ROW_FUSE_MAX=32768" in limit.kernels[0]["detail"]
  # every node of the tensor graph that a kernel computes is coloured by that kernel
  assert set(split.group.values()) >= {0, 1, 2}

def test_why_not_fused(fusion_trace):
  view = TraceView.open(fusion_trace)
  c = schedules(view)[0]
  split = view.splits[c.id]
  b = next(b for b in view.step_graph(c.id, 0)["split"]["boundaries"])
  d = view.why(c.id, b["b"], b["a"])                                   # either order
  assert d["relation"] == "reads" and d["producer"] == b["a"] and d["rule"] == split.kernels[b["a"]]["rule"]
  assert "is a kernel of its own because" in d["text"]
  with pytest.raises(KeyError): view.why(c.id, 0, 9)
  k = next(x for x in view.trace.contexts if x.kind == "kernel")
  with pytest.raises(KeyError, match="no recorded scheduler decisions"): view.why(k.id, 0, 1)

def test_split_step_replays_the_decisions(fusion_trace):
  view = TraceView.open(fusion_trace)
  c = schedules(view)[0]
  step = next(s for s in c.steps if s.title.endswith("split into 3 kernels"))
  g = view.step_graph(c.id, step.index, upto=len(step.matches))
  assert g["total"] == len(view.splits[c.id].decisions) == 5
  labels = [rec for d in g["deltas"] for rec in d["added"].values()]
  assert sum(1 for op, _, arg, _ in labels if op == "KERNEL") == 3
  assert any("row-kernel" in arg for _, _, arg, _ in labels)
  m = view.match_detail(c.id, step.index, 1)
  assert m["owner"] == "schedule" and m["source"]

def viz(*args):
  env = dict(os.environ, NO_COLOR="1")
  env.pop("VIZ", None)
  return subprocess.run([sys.executable, "-m", "tinyplug", "viz", *args], capture_output=True, text=True, env=env,
                        timeout=120)

def test_cli_lists_boundaries_and_answers_why(fusion_trace):
  r = viz("cli", fusion_trace, "-s", "schedule 2")
  assert r.returncode == 0, r.stderr
  assert "why each is a kernel of its own:" in r.stdout and "[row-fuse-limit]" in r.stdout
  assert "kernel boundaries (producer -> consumer): 3" in r.stdout
  r = viz("cli", fusion_trace, "-s", "schedule 2", "--why", "0", "E_2_40000")
  assert r.returncode == 0, r.stderr
  assert "E_2_40000 reads the output of r_2_40000" in r.stdout and "ROW_FUSE_MAX=32768" in r.stdout
  r = viz("cli", fusion_trace, "-s", "schedule 2", "--why", "0", "E_2_40000", "--json")
  d = json.loads(r.stdout)
  assert d["type"] == "why" and d["rule"] == "row-fuse-limit" and d["loc"].endswith(".py:" + d["loc"].rsplit(":", 1)[1])
  r = viz("cli", fusion_trace, "-s", "schedule 2", "--why", "0", "nope")
  assert r.returncode == 1 and "no kernel 'nope'" in r.stderr and "Traceback" not in r.stderr

# ---- in the browser ----

url = served("fusion_trace")

@needs_chromium
def test_tensor_graph_coloured_by_kernel_and_why_panel(page, url):
  page.goto(url + "/")
  ready(page, "home")
  page.locator(".ctx-head", has_text="schedule 1").click()
  page.locator(".step", has_text="View tensor graph").click()
  ready(page, "graph:")
  expect_rows = page.locator("#kernel-legend .kernel-row")
  assert expect_rows.count() == 3
  fills = page.evaluate("[...new Set([...document.querySelectorAll('g.node rect')].map(r => r.getAttribute('fill')))]")
  swatches = page.evaluate("[...document.querySelectorAll('#kernel-legend .swatch')].map(s => getComputedStyle(s).backgroundColor)")
  assert len(set(swatches)) == 3 and len(fills) >= 4      # three kernels, plus inputs that no kernel computes
  page.wait_for_function("() => document.querySelector('#why-answer').textContent.includes('reads the output of')")
  # pick the first and the last kernel: the last reads the middle one, not the first
  page.select_option("#why-a", "0")
  page.select_option("#why-b", "2")
  page.wait_for_function("() => document.querySelector('#why-answer').dataset.rule === 'independent'")
  assert "share no data" in page.inner_text("#why-answer")
  page.locator("#boundaries .boundary").last.click()
  page.wait_for_function("() => document.querySelector('#why-answer').dataset.rule === 'reduce-then-expand'")
  assert "schedule/__init__.py" in page.inner_text("#why-answer")
  # a kernel in the legend selects its node; the node panel names its kernel and the rule
  page.locator("#kernel-legend .kernel-row").nth(1).click()
  page.wait_for_function("() => document.querySelector('#node-info').textContent.includes('kernel:')")
  assert "reduce-then-expand" in page.inner_text("#node-info")

@needs_chromium
def test_split_step_walks_through_the_decisions(page, url):
  page.goto(url + "/")
  ready(page, "home")
  page.locator(".ctx-head", has_text="schedule 2").click()
  page.locator(".step", has_text="split into 3 kernels").click()
  ready(page, "graph:")
  page.keyboard.press("ArrowRight")
  page.wait_for_function("() => document.querySelector('#match-info').textContent.includes('Replaced')")
  assert "passes/fuse_rows.py" in page.inner_text("#match-info") and "row-fuse-limit" in page.inner_text("#diff")
  assert page.locator("g.node.changed").count() >= 1
