"""The profiler as a flame view with the user's call sites (issue 21, item 7): spans nest under the span they run
in, and a USER track shows which line of user code (realize, backward, step, item) caused each stretch of work."""
import os
import pytest
from conftest import needs_chromium, ready, record_in_subprocess, served
from tinyplug_viz_web.model import TraceView

@pytest.fixture(scope="module")
def trace(tmp_path_factory):
  return record_in_subprocess(str(tmp_path_factory.mktemp("viz") / "run-flame"), "run-flame", "user_calls")

def line_of(tag: str) -> str:
  here = os.path.join(os.path.dirname(__file__), "tracegen.py")
  return f"tracegen.py:{next(i for i, ln in enumerate(open(here), 1) if f'# {tag}' in ln)}"

def track(prof, name):
  return next(t for t in prof["tracks"] if t["name"] == name)

def test_user_track_and_nesting(trace):
  view = TraceView.open(trace)
  prof = view.profile()
  assert prof["tracks"][0]["name"] == "USER"
  user = track(prof, "USER")
  locs = [ev[5]["loc"] for ev in user["events"]]
  a, b = line_of("USER_LINE_A"), line_of("USER_LINE_B")
  assert any(x.endswith(a) for x in locs) and any(x.endswith(b) for x in locs)
  first = next(ev for ev in user["events"] if ev[5]["loc"].endswith(a))
  assert first[2].startswith("a = Tensor.empty(4, 4).exp().realize()") and first[5]["spans"] >= 2   # its source text
  # every span that ran for line A lies inside A's USER span
  for sp in view.trace.spans:
    if sp.loc and sp.loc.endswith(a) and sp.start - view.trace.t0 < first[0] + first[1]:
      assert first[0] <= sp.start - view.trace.t0 and sp.end - view.trace.t0 <= first[0] + first[1]
  host = track(prof, "HOST")
  depth = {ev[2]: d for ev, d in zip(host["events"], host["depth"])}
  assert depth["outer span"] == 0 and depth["inner span"] == 1 and depth["innermost span"] == 2
  # spans that do not overlap share a row
  assert sorted(set(host["depth"])) == [0, 1, 2]

def test_cli_track_indents_nested_spans_and_names_call_sites(trace):
  from test_kernels import viz
  r = viz("cli", trace, "-s", "HOST")
  assert r.returncode == 0, r.stderr
  lines = {ln.split()[2]: ln for ln in r.stdout.splitlines() if "span" in ln and ln.startswith("***")}
  assert "  inner span" in lines["inner"] and "    innermost span" in lines["innermost"]
  r = viz("cli", trace, "-s", "USER")
  assert r.returncode == 0 and line_of("USER_LINE_B") in r.stdout and "realize()" in r.stdout

url = served("trace")

@needs_chromium
def test_flame_view_and_user_track_in_the_browser(page, url):
  page.set_viewport_size({"width": 1280, "height": 720})
  page.goto(url + "/#view=profiler")
  ready(page, "profiler")
  for span in (19.8e9, 0.9e6, None):                          # time labels never run into each other
    page.evaluate("s => { prof.t0 = 0; prof.t1 = s || prof.data.duration_ns * 1.02; drawProfile(); }", span)
    ticks = page.evaluate("prof.ticks")
    assert len(ticks) >= 2 and all(b[0] - a[0] > a[1] + 3 for a, b in zip(ticks, ticks[1:])), (span, ticks)
  names = page.evaluate("prof.tracks.map(t => t.name)")
  assert names[0] == "USER" and "HOST" in names
  rows = page.evaluate("""() => { const t = prof.tracks.find(t => t.name === 'HOST');
      return Object.fromEntries(t.events.map((ev, i) => [ev[2], t.rows[i]])); }""")
  assert rows["outer span"] == 0 and rows["inner span"] == 1 and rows["innermost span"] == 2
  # nested boxes are drawn one row apart, the inner inside the outer's time range
  boxes = page.evaluate("""() => prof.boxes.filter(b => b.track.name === 'HOST' && b.ev[2].endsWith(' span'))
      .map(b => [b.ev[2], b.x0, b.x1, b.y0])""")
  by = {n: (x0, x1, y0) for n, x0, x1, y0 in boxes}
  assert by["inner span"][2] > by["outer span"][2] and by["outer span"][0] <= by["inner span"][0] + 0.5
  # hovering a USER span names the line of user code
  hit = page.evaluate("""() => { const b = prof.boxes.find(b => b.track.name === 'USER' && b.ev[5].loc.includes('tracegen.py'));
      const r = document.querySelector('#profiler').getBoundingClientRect();
      return [r.left + (b.x0 + Math.min(b.x1, b.x0 + 20)) / 2, r.top + (b.y0 + b.y1) / 2]; }""")
  page.mouse.move(hit[0], hit[1])
  page.wait_for_function("() => !document.querySelector('#tooltip').hidden")
  tip = page.inner_text("#tooltip")
  assert "at " in tip and "tracegen.py:" in tip and "user on USER" in tip
