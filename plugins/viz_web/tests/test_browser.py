"""The web UI in real headless Chromium (Playwright): open, click a kernel, step with the arrow keys, open the code
and the profiler, search, reload a deep link, and the speed of a big graph.

Skipped only when /usr/bin/chromium is missing and CI is not set; in CI these must run."""
import os, re
import pytest
from conftest import CHROMIUM, ready, serve_in_thread, stop_server
if not os.path.exists(CHROMIUM) and not os.environ.get("CI"):
  pytest.skip("needs /usr/bin/chromium (apt-get install -y chromium); runs in CI", allow_module_level=True)
from playwright.sync_api import expect   # noqa: E402 (in CI a missing playwright is an error)

@pytest.fixture(scope="module")
def urls(small_trace, big_trace):
  servers = [serve_in_thread(small_trace), serve_in_thread(big_trace)]
  yield [s[3] for s in servers]
  for s in servers: stop_server(s)

def graph_state(pg):
  return pg.evaluate("[document.querySelector('#graph').dataset.nodes, document.querySelector('#viewport').innerHTML.length,"
                     " document.querySelectorAll('g.node.changed').length]")

def test_click_kernel_and_step_with_arrow_keys(page, urls):
  page.goto(urls[0] + "/")
  ready(page, "home")
  expect(page.locator("#ctx-list")).to_contain_text("E_3")
  page.locator(".ctx-head", has_text="E_3").click()
  ready(page, "graph:")
  assert re.search(r"ctx=\d+&step=\d+", page.url)
  first = page.evaluate("document.body.dataset.ready")
  before = graph_state(page)
  assert int(before[0]) > 5 and before[2] == 0
  page.keyboard.press("ArrowRight")
  ready(page, first[:-1] + "1")                       # graph:<ctx>:<step>:1
  after = graph_state(page)
  assert after != before and after[2] > 0             # the graph changed and the change is highlighted
  expect(page.locator("#match-info")).to_contain_text("symbolic.py" if "symbolic" in page.inner_text("#crumb") else ".py:")
  expect(page.locator("#diff")).to_contain_text("+")
  page.keyboard.press("ArrowLeft")
  ready(page, first)
  assert graph_state(page) == before

def test_up_down_and_enter(page, urls):
  page.goto(urls[0] + "/")
  ready(page, "home")
  page.keyboard.press("ArrowDown")
  ready(page, "graph:0:")
  page.keyboard.press("Enter")
  expect(page.locator(".steps").first).to_be_visible()
  page.keyboard.press("Enter")
  expect(page.locator(".steps")).to_have_count(0)
  page.keyboard.press("ArrowDown")
  page.wait_for_function("() => !(document.body.dataset.ready || '').startsWith('graph:0:') && document.body.dataset.ready !== ''")
  assert "ctx=1" in page.url

def test_code_uops_and_profiler(page, urls):
  page.goto(urls[0] + "/")
  ready(page, "home")
  page.locator(".ctx-head", has_text="E_3").click()
  ready(page, "graph:")
  page.click("#btn-code")
  ready(page, "code:")
  expect(page.locator("#code")).to_contain_text("E_3")
  assert page.locator("#code span.hl-kw").count() > 0        # syntax highlighted
  page.click("#btn-uops")
  ready(page, "uops:")
  assert page.locator("#uops tr").count() > 5
  page.click("#nav-profiler")
  ready(page, "profiler")
  expect(page.locator("#match-info")).to_contain_text("tracks")
  # hover a kernel span: the tooltip shows its details; click it: its code opens
  box = page.locator("#profiler").bounding_box()
  find = """() => { const b = prof.boxes.find(b => b.track.type === 'spans' && b.ev[3] === 'run');
      const r = document.querySelector('#profiler').getBoundingClientRect();
      return b ? [r.left + (b.x0 + b.x1) / 2, r.top + (b.y0 + b.y1) / 2, b.ev[2]] : null; }"""
  found = page.evaluate(find)
  assert found, "no kernel run span drawn"
  page.mouse.move(found[0], found[1])
  page.mouse.wheel(0, -300)                                   # zoom in around the span: it stays drawn
  page.wait_for_timeout(100)
  found = page.evaluate(find)
  assert found, "the kernel span disappeared after zooming"
  page.mouse.move(found[0], found[1])
  expect(page.locator("#tooltip")).to_contain_text(found[2])
  page.mouse.click(found[0], found[1])
  ready(page, "code:")
  assert "view=code" in page.url

def test_search_jumps(page, urls):
  page.goto(urls[0] + "/")
  ready(page, "home")
  page.fill("#search", "E_16")
  expect(page.locator("#search-results .result").first).to_contain_text("E_16")
  page.locator("#search-results .result").first.click()
  ready(page, "graph:")
  expect(page.locator("#crumb")).to_contain_text("E_16")
  page.fill("#search", "SPECIAL")
  expect(page.locator("#search-results .result .kind.node").first).to_be_visible()
  page.locator("#search-results .result").first.click()
  ready(page, "graph:")
  assert "node=" in page.url
  expect(page.locator("#node-info")).to_contain_text("SPECIAL")

def test_deep_link_reopens_the_same_view(page, urls):
  page.goto(urls[0] + "/")
  ready(page, "home")
  page.locator(".ctx-head", has_text="E_3").click()
  ready(page, "graph:")
  page.keyboard.press("ArrowRight")
  page.wait_for_function("() => (document.body.dataset.ready || '').endsWith(':1')")
  url, crumb, state = page.url, page.inner_text("#crumb"), graph_state(page)
  page.reload()
  page.wait_for_function("() => (document.body.dataset.ready || '').endsWith(':1')")
  assert page.url == url and page.inner_text("#crumb") == crumb and graph_state(page) == state
  page.goto(urls[0] + "/#view=profiler")
  ready(page, "profiler")

def test_hot_rules_and_exports(page, urls):
  page.goto(urls[0] + "/#view=hot")
  ready(page, "hot")
  rows = page.locator("#hot tr.click")
  assert rows.count() >= 1
  rows.first.click()
  ready(page, "graph:")
  assert page.get_attribute("#export-dot", "href").startswith("/api/export/graph.dot?ctx=")

def test_big_graph_draws_and_steps(page, urls):
  """A 5,000-node graph is drawn (on the canvas renderer) and its 2,500 matches step, chunk by chunk.
  Speed is measured by benchmarks/viz_ui_speed.py, not asserted here."""
  page.goto(urls[1] + "/#ctx=0&step=0")
  ready(page, "graph:0:0:0", timeout=60000)
  assert int(page.get_attribute("#graph", "data-nodes")) >= 5000
  assert page.get_attribute("#graph", "data-renderer") == "canvas"
  # Fit is an overview: 1,250 inputs of one sum wrap into columns instead of a strip 40 times taller than wide
  w, h, vw, vh = page.evaluate("[graphGeom.width, graphGeom.height, graphSize().width, graphSize().height]")
  assert 1 / 3 <= (h / w) / (vh / vw) <= 3
  page.keyboard.press("ArrowRight")
  ready(page, "graph:0:0:1", timeout=60000)
  page.evaluate("location.hash = 'ctx=0&step=0&match=2000'")   # beyond the first chunk: fetched on demand
  ready(page, "graph:0:0:2000", timeout=60000)
  expect(page.locator("#crumb")).to_contain_text("match 2000 of 2500")
