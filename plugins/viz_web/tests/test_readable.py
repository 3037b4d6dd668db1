"""Big graphs and long step lists made readable (issue 21, item 3): constants folded into their users' labels,
enum args shown as names, consecutive steps of one pass grouped (collapsible), substitute-driven steps named after
the code that called substitute, not the lookup rule inside the core."""
import os
import pytest
from conftest import needs_chromium, ready, record_in_subprocess, served
from tinyplug_viz_web.model import TraceView

@pytest.fixture(scope="module")
def trace(tmp_path_factory):
  return record_in_subprocess(str(tmp_path_factory.mktemp("viz") / "run-readable"), "run-readable",
                              "many_steps", "simplify_example", "deep_chain")

def substitute_line() -> int:
  here = os.path.join(os.path.dirname(__file__), "tracegen.py")
  return next(i for i, ln in enumerate(open(here), 1) if "# SUBSTITUTE_LINE" in ln)

def test_substitute_steps_name_their_caller_and_args_are_clean(trace):
  view = TraceView.open(trace)
  c = next(c for c in view.trace.contexts if c.name == "many_steps")
  assert [s.title for s in c.steps] == ["expand: swap const"] * 4
  where = f"tracegen.py:{substitute_line()}"
  for s in c.steps:
    assert s.caller.endswith(where) and s.matches
    assert all(f"{m.file}:{m.line}".endswith(where) for m in s.matches)
  assert view.trace.source_line(c.steps[0].caller).startswith("g = g.substitute(")   # the captured source line
  args = {n.arg for _, n in view.trace.nodes.items() if n.op == "REDUCE"}
  assert args == {"Ops.ADD"}

url = served("trace")

LABELS = "[...document.querySelectorAll('g.node text')].map(t => [...t.querySelectorAll('tspan')].map(s => s.textContent))"

@needs_chromium
def test_grouped_steps_folded_constants_clean_labels(page, url):
  page.goto(url + "/")
  ready(page, "home")
  page.locator(".ctx-head", has_text="many_steps").click()
  ready(page, "graph:")
  group = page.locator(".group", has_text="expand")
  assert "4 steps" in group.inner_text() and page.locator(".group-steps .step").count() == 4   # open: holds the step
  group.click()
  assert page.locator(".group-steps").count() == 0 and "selected" in group.get_attribute("class")
  group.click()
  page.locator(".group-steps .step").nth(2).click()
  ready(page, "graph:")
  labels = page.evaluate(LABELS)
  ops = [ln[0] for ln in labels]
  assert "CONST" not in ops and "RANGE" not in ops and int(page.get_attribute("#graph", "data-folded")) >= 3
  assert "◂ RANGE 0 ‹16›" in labels[ops.index("REDUCE")]                    # a loop range, with its bound
  assert any("◂ CONST 3" in ln for lab in labels for ln in lab)             # step 3's constant, in its users' labels
  reduce_label = next(lab for lab in labels if lab[0] == "REDUCE")
  assert "Ops.ADD" in reduce_label and not any("<" in ln for ln in reduce_label)
  page.keyboard.press("ArrowRight")
  page.wait_for_function("() => document.querySelector('#match-info').textContent.includes('Replaced')")
  assert "tracegen.py" in page.inner_text("#match-info") and "ops.py" not in page.inner_text("#match-info .loc")
  assert page.locator("g.node.changed").count() >= 1                          # a folded change marks its user
  # the Consts button draws constants as nodes again
  n_folded = len(labels)
  page.click("#btn-fold")
  page.wait_for_function("() => document.querySelector('#graph').dataset.folded === '0'")
  assert {"CONST", "RANGE"} <= {ln[0] for ln in page.evaluate(LABELS)}
  assert page.locator("g.node").count() > n_folded

def test_cli_prints_constants_inline_and_steps_with_their_caller(trace):
  from test_kernels import viz
  r = viz("cli", trace, "-s", "many_steps", "-i", "0")
  assert r.returncode == 0, r.stderr
  assert "CONST int 1" in r.stdout and "= CONST" not in r.stdout       # inline where used, never a named reference
  assert "REDUCE int Ops.ADD" in r.stdout and f"tracegen.py:{substitute_line()}" in r.stdout
  r = viz("cli", trace, "-s", "many_steps")
  head = next(ln for ln in r.stdout.splitlines() if "4 steps" in ln)
  assert head.strip().startswith("expand: 4 steps") and r.stdout.count("    ") >= 4   # the group's steps indented

def test_schedule_steps_that_made_a_kernel_name_it(fusion_trace):
  view = TraceView.open(fusion_trace)
  for c in (c for c in view.trace.contexts if c.kind == "schedule"):
    names = view.kernel_names(c)
    simplify = [s.title for s in c.steps if s.name.startswith("simplify kernel")]
    assert simplify and all(t.split(": ")[-1] in names for t in simplify), simplify
    assert len(set(simplify)) == len(simplify)      # one per kernel, each named after its own

@needs_chromium
def test_fit_shows_a_deep_graph_whole(page, url):
  """A chain 600 ops deep is cut into bands of ranks stacked like lines of text: fitted, it fills the view
  instead of being a thin strip (it was 40 times wider than the view's shape)."""
  page.goto(url + "/")
  ready(page, "home")
  page.locator(".ctx-head", has_text="deep_chain").click()
  ready(page, "graph:")
  w, h, vw, vh = page.evaluate("[graphGeom.width, graphGeom.height, graphSize().width, graphSize().height]")
  assert int(page.get_attribute("#graph", "data-nodes")) >= 600
  assert 1 / 3 <= (h / w) / (vh / vw) <= 3, (w, h, vw, vh)
