"""Readability at 1280x720 (issue 21, item 4): links readable on the dark panels, the search box stays in view
when the sidebar scrolls, the selected node's ring shows on pale nodes, the status line does not sit on nodes."""
import os
import pytest
from conftest import CHROMIUM, ready, served
if not os.path.exists(CHROMIUM) and not os.environ.get("CI"):
  pytest.skip("needs /usr/bin/chromium", allow_module_level=True)

CONTRAST = """(sel) => {
  const lum = (c) => { const v = c.match(/\\d+(\\.\\d+)?/g).slice(0, 3).map(x => { x = +x / 255;
    return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); }); return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; };
  const el = document.querySelector(sel);
  let bg = el, c = getComputedStyle(el).backgroundColor;
  while (bg && (c === 'rgba(0, 0, 0, 0)' || c === 'transparent')) { bg = bg.parentElement; c = bg ? getComputedStyle(bg).backgroundColor : 'rgb(0,0,0)'; }
  const a = lum(getComputedStyle(el).color), b = lum(c);
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); }"""

url = served("fusion_trace")

def test_readable_at_1280x720(browser, url):
  page = browser.new_page(viewport={"width": 1280, "height": 720})
  try:
    page.goto(url + "/")
    ready(page, "home")
    page.locator(".ctx-head", has_text="schedule 1").click()
    ready(page, "kernels:")
    assert page.locator("#details a").count() >= 1
    assert page.evaluate(CONTRAST, "#details a") >= 4.5          # WCAG AA for normal text
    assert page.locator("#toolbar").bounding_box()["height"] <= 40  # one row
    assert page.locator("#profile-tools").is_hidden() and page.locator("#graph-tools").is_hidden()   # a table
    # a long sidebar scrolled to its end still shows the search box
    for name in ("r_4_8_8", "r_8_4", "schedule 2", "r_2_40000", "E_2_40000"):   # expand contexts until it scrolls
      page.locator(".ctx-head", has_text=name).first.click()
      page.wait_for_function("() => (document.body.dataset.ready || '') !== ''")
      if page.evaluate("document.querySelector('#left').scrollHeight > document.querySelector('#left').clientHeight + 200"):
        break
    page.evaluate("document.querySelector('#left').scrollTop = 1e6")
    assert page.evaluate("document.querySelector('#left').scrollTop") > 100
    box, left = page.locator("#search").bounding_box(), page.locator("#left").bounding_box()
    assert left["y"] <= box["y"] and box["y"] + box["height"] <= left["y"] + 80
    # the selected node's ring differs clearly from white/pale fills; the status line has its own background
    page.evaluate("location.hash = '#ctx=0&step=0'")
    ready(page, "graph:0:0")
    assert page.locator("#graph-tools").is_visible() and page.locator("#toolbar").bounding_box()["height"] <= 40
    page.locator("g.node").first.click()
    ring = page.evaluate("getComputedStyle(document.querySelector('g.node.selected rect')).stroke")
    assert ring not in ("rgb(255, 255, 255)", "none")
    assert page.evaluate("getComputedStyle(document.querySelector('#graph-status')).backgroundColor") not in \
      ("rgba(0, 0, 0, 0)", "transparent")
  finally: page.close()

def test_side_panels_resize_collapse_and_stay(browser, url):
  page = browser.new_page(viewport={"width": 1280, "height": 720})
  try:
    page.goto(url + "/#ctx=0&step=0")
    ready(page, "graph:0:0")
    width = lambda sel: page.locator(sel).bounding_box()["width"]
    left, centre = width("#left"), width("#center")
    bar = page.locator("#resize-left").bounding_box()
    x, y = bar["x"] + bar["width"] / 2, bar["y"] + 200
    page.mouse.move(x, y); page.mouse.down(); page.mouse.move(x + 120, y, steps=4); page.mouse.up()
    assert abs(width("#left") - (left + 120)) <= 2 and abs(width("#center") - (centre - 120)) <= 2
    page.dblclick("#resize-right")                                    # hide the right panel: the graph gets its room
    assert width("#right") == 0 and width("#center") > centre
    page.reload()                                                     # both kept across a reload
    ready(page, "graph:0:0")
    assert abs(width("#left") - (left + 120)) <= 2 and width("#right") == 0
    page.dblclick("#resize-right")
    assert width("#right") > 200
  finally:
    page.evaluate("localStorage.clear()")
    page.close()
