"""The kernel table (issue 21, item 2): a schedule's kernels as DEBUG=2 prints them (launch size, time, GFLOP/s,
GB/s), sortable, in the web UI (clicking a schedule), the API and `tinyplug viz cli -k`."""
import json, os, subprocess, sys
import pytest
from conftest import needs_chromium, ready, served
from tinyplug_viz_web.model import TraceView

def viz(*args):
  env = dict(os.environ, NO_COLOR="1")
  env.pop("VIZ", None)
  return subprocess.run([sys.executable, "-m", "tinyplug", "viz", *args], capture_output=True, text=True, env=env,
                        timeout=120)

def expected_estimates() -> dict[str, dict]:
  """What codegen estimates for the kernels of fusion_example's second schedule, computed here independently."""
  from tinyplug.codegen import estimate, kernel_name
  from tinyplug.tensor import Tensor
  items = Tensor.empty(2, 40000).softmax(-1).schedule()
  return {kernel_name(it.ast): estimate(it.ast) for it in items}

def test_schedule_table_has_work_time_and_rates(fusion_trace):
  view = TraceView.open(fusion_trace)
  sched = [c for c in view.trace.contexts if c.kind == "schedule"]
  table = view.kernel_table(sched[1].id)
  rows = table["rows"]
  assert [r["name"] for r in rows] == view.kernel_names(sched[1]) and len(rows) == 3
  want = expected_estimates()
  by_ops = sorted((r["ops"], r["mem"]) for r in rows)
  assert by_ops == sorted((e["ops"], e["mem"]) for e in want.values())
  for r in rows:
    assert r["device"] == "CPU" and r["runs"] == 1 and r["time_ns"] > 0 and r["bufs"] >= 2
    assert r["global"] is not None and all(d >= 1 for d in r["global"])
    run = next(sp for sp in view.trace.spans if sp.kind == "run" and sp.ctx == r["ctx"] and sp.start >= sched[1].start)
    secs = run.info["device_time_s"]
    assert r["gflops"] == pytest.approx(r["ops"] / secs / 1e9) and r["gbs"] == pytest.approx(r["mem"] / secs / 1e9)
  # the whole trace: every compiled kernel once, with all of its runs
  every = view.kernel_table()["rows"]
  assert {r["name"] for r in every} >= {r["name"] for r in rows} and len(every) == 6
  with pytest.raises(KeyError, match="not a schedule"): view.kernel_table(rows[0]["ctx"])

def test_cli_kernel_table_sorted(fusion_trace):
  r = viz("cli", fusion_trace, "-s", "schedule 2")
  assert r.returncode == 0, r.stderr
  assert "GFLOP/s" in r.stdout and "GB/s" in r.stdout and "E_2_40000" in r.stdout
  r = viz("cli", fusion_trace, "-k", "gflops")
  assert r.returncode == 0, r.stderr
  lines = [ln for ln in r.stdout.splitlines()[2:] if ln.strip()]
  rates = [float(ln.split()[-2]) for ln in lines]
  assert len(lines) == 6 and rates == sorted(rates, reverse=True)
  r = viz("cli", fusion_trace, "-s", "schedule 1", "-k", "--json")
  rows = [json.loads(ln) for ln in r.stdout.splitlines()]
  assert len(rows) == 3 and all(x["type"] == "kernel_row" and x["gflops"] > 0 for x in rows)
  r = viz("cli", fusion_trace, "-s", "r_8_4", "-k")
  assert r.returncode == 1 and "not a schedule" in r.stderr

url = served("fusion_trace")

CELLS = "(col) => [...document.querySelectorAll('#kernels tbody tr')].map(tr => tr.children[col].textContent)"

@needs_chromium
def test_clicking_a_schedule_shows_its_sortable_kernel_table(page, url, fusion_trace):
  view = TraceView.open(fusion_trace)
  sched = [c for c in view.trace.contexts if c.kind == "schedule"][1]
  rows = view.kernel_table(sched.id)["rows"]
  page.set_viewport_size({"width": 1280, "height": 720})
  page.goto(url + "/")
  ready(page, "home")
  page.locator(".ctx-head", has_text="schedule 2").click()
  ready(page, f"kernels:{sched.id}")
  assert page.evaluate("(v => v.scrollWidth <= v.clientWidth)(document.querySelector('#kernels-view'))")   # fits
  assert "ALU ops" in page.get_attribute("#kernels tbody tr >> nth=0", "title")
  heads = page.evaluate("[...document.querySelectorAll('#kernels th')].map(th => th.textContent)")
  assert {"kernel", "global", "time", "GFLOP/s", "GB/s"} <= {h.rstrip(" ▴▾") for h in heads}
  assert page.evaluate(CELLS, 1) == [r["name"] for r in rows]                    # run order first
  assert page.locator(".steps .step").count() >= 3                               # its steps stay listed below it
  page.locator("#kernels th", has_text="time").click()                           # slowest first
  assert page.evaluate(CELLS, 1) == [r["name"] for r in sorted(rows, key=lambda r: -r["time_ns"])]
  page.locator("#kernels th", has_text="time").click()                           # again: fastest first
  assert page.evaluate(CELLS, 1) == [r["name"] for r in sorted(rows, key=lambda r: r["time_ns"])]
  page.locator("#kernels th", has_text="GFLOP/s").click()
  assert page.evaluate(CELLS, 8) == [f"{r['gflops']:.2f}" for r in sorted(rows, key=lambda r: -r["gflops"])]
  # a row opens its kernel
  page.locator("#kernels tbody tr", has_text="E_2_40000").click()
  ready(page, "graph:")
  assert f"ctx={next(r['ctx'] for r in rows if r['name'] == 'E_2_40000')}&" in page.url
  # the Kernels entry: every kernel of the trace; the deep link reopens it
  page.click("#nav-kernels")
  ready(page, "kernels:all")
  assert page.locator("#kernels tbody tr").count() == 6
  page.reload()
  ready(page, "kernels:all")
