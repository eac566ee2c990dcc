"""The dashboard in a real browser: headless Chromium driven by selenium.

CI installs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run``); the
tests skip only where they are not installed, and say so. A screenshot of
the page is kept under pytest's temporary directory (``artifacts/``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

import eddyline as ed
from support.loops import collatz_body

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")

MISSING = "Chromium is not installed here (apt-get install chromium chromium-driver; CI does)"
if (CHROMIUM is None or DRIVER is None) and os.environ.get("CI"):
    # In CI a missing install step fails, never skips.
    raise RuntimeError(MISSING)
pytestmark = pytest.mark.skipif(CHROMIUM is None or DRIVER is None, reason=MISSING)


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1600,1400",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_the_page_shows_the_graph_the_loop_and_a_checkpoint(
    browser: Any, tmp_path: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    env = ed.StreamEnvironment(
        2, batch_size=256, checkpoint=ed.CheckpointConfig(tmp_path / "chk", interval="100ms")
    )
    numbers = env.from_sequence(1, 10**12).set_parallelism(1).name("numbers")
    start = numbers.with_columns(x=ed.col("value"), steps=ed.lit(0)).name("prepare")
    done = start.iterate(collatz_body)
    stamped = done.with_columns(k=ed.col("value") % 3).assign_timestamps("value").name("stamp")
    stamped.key_by("k").window(ed.Tumbling("1s")).sum("steps").name("steps-per-second").collect()
    client = env.execute_async("browser", dashboard=0)
    try:
        assert client.dashboard_url is not None
        plan = _plan(client.dashboard_url)
        browser.get(client.dashboard_url)
        wait = WebDriverWait(browser, 30)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#graph g.node")) == len(plan))
        # Drawn by dagre-d3 (on D3 3.x) from the XStatic packages, not by hand.
        assert browser.execute_script(
            "return [typeof dagreD3.render, d3.version.split('.')[0], dagreD3.version]"
        ) == ["function", "3", "0.4.17"]
        shown = {
            e.get_attribute("data-name")
            for e in browser.find_elements(By.CSS_SELECTOR, "#graph g.node")
        }
        assert shown == {n["name"] for n in plan}
        texts = {e.text for e in browser.find_elements(By.CSS_SELECTOR, "#graph text.title")}
        for name in ("numbers", "prepare", "stamp", "steps-per-second"):
            assert name in texts
        # dagre placed every operator somewhere else (a layout, not a pile).
        boxes = browser.execute_script(_BOXES, "#graph g.node rect")
        assert len({(round(b["x"]), round(b["y"])) for b in boxes}) == len(plan)
        # The loop's cycle: a feedback edge from the body back into the loop head.
        head = next(n for n in plan if n["feedback_from"] is not None)
        feedback = browser.find_elements(By.CSS_SELECTOR, "#graph g.edgePath.feedback")
        assert [(e.get_attribute("data-from"), e.get_attribute("data-to")) for e in feedback] == [
            (str(head["feedback_from"]), str(head["id"]))
        ]
        assert feedback[0].find_element(By.CSS_SELECTOR, "path.path").get_attribute("d")
        # The edges show their partitioning; the keyed window's input is hashed on k.
        labels = {e.text for e in browser.find_elements(By.CSS_SELECTOR, "#graph g.edgeLabel")}
        assert "HASH(k)" in labels and "feedback" in labels
        # The loop scope is a dagre cluster whose box holds every operator of the loop.
        loop = head["scope"][-1]
        cluster = browser.execute_script(_BOXES, f'#graph g.cluster[data-loop="{loop}"] > rect')
        assert len(cluster) == 1
        inside = [n for n in plan if loop in n["scope"]]
        assert len(inside) >= 3  # the head and the body's operators
        for n in inside:
            (box,) = browser.execute_script(_BOXES, f'#graph g.node[data-id="{n["id"]}"] rect')
            assert _contains(cluster[0], box), n["name"]
        outside = next(n for n in plan if n["name"] == "numbers")
        (box,) = browser.execute_script(_BOXES, f'#graph g.node[data-id="{outside["id"]}"] rect')
        assert not _contains(cluster[0], box)
        # The loop table shows the head's loop metrics.
        # The tables and the chart are redrawn every second: their attributes are
        # read by one script, as a found element may be replaced before it is read.
        wait.until(lambda d: _attrs(d, "#loops tbody tr", "data-name"))
        assert _attrs(browser, "#loops tbody tr", "data-name")[0] == head["name"]
        wait.until(
            lambda d: d.find_elements(By.CSS_SELECTOR, '#checkpoints tr[data-status="COMPLETED"]')
        )
        # The D3 chart: a bar per completed checkpoint, with axes.
        wait.until(lambda d: _attrs(d, "#checkpoint-chart rect.bar", "data-id"))
        bar = _attrs(browser, "#checkpoint-chart rect.bar", "data-id")[0]
        assert int(bar) in {c.id for c in client.checkpoints}
        assert browser.find_elements(By.CSS_SELECTOR, "#checkpoint-chart g.axis .tick")
        row = _attrs(browser, '#checkpoints tr[data-status="COMPLETED"]', "data-id")[0]
        assert int(row) in {c.id for c in client.checkpoints}
        assert set(_attrs(browser, "#operators tbody tr", "data-name")) == shown
        artifacts = tmp_path_factory.mktemp("artifacts")
        shot = artifacts / "dashboard.png"
        assert browser.save_screenshot(str(shot))
        print(f"screenshot: {shot}")
        assert shot.stat().st_size > 10_000
    finally:
        client.cancel()
        with pytest.raises(ed.EddylineError):
            client.wait(30)


def test_nested_loops_are_nested_clusters_each_closed_by_its_feedback_edge(
    browser: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def inner(t: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        nxt = t.with_columns(n=ed.col("n") - 1).name("inner-step")
        return nxt.filter(ed.col("n") > 0), nxt.filter(ed.col("n") <= 0)

    def outer(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        back = s.with_columns(n=ed.col("m")).iterate(inner).with_columns(m=ed.col("m") - 1)
        return back.filter(ed.col("m") > 0), back.filter(ed.col("m") <= 0)

    env = ed.StreamEnvironment(1, batch_size=64)
    src = env.from_sequence(0, 10**12).name("numbers")
    src.with_columns(m=ed.col("value") % 4 + 1, n=ed.lit(0)).iterate(outer).collect()
    client = env.execute_async("nested", dashboard=0)
    try:
        assert client.dashboard_url is not None
        plan = _plan(client.dashboard_url)
        browser.get(client.dashboard_url)
        WebDriverWait(browser, 30).until(
            lambda d: len(d.find_elements(By.CSS_SELECTOR, "#graph g.node")) == len(plan)
        )
        heads = [n for n in plan if n["feedback_from"] is not None]
        assert len(heads) == 2
        feedback = {
            (e.get_attribute("data-from"), e.get_attribute("data-to"))
            for e in browser.find_elements(By.CSS_SELECTOR, "#graph g.edgePath.feedback")
        }
        assert feedback == {(str(h["feedback_from"]), str(h["id"])) for h in heads}
        outer_head, inner_head = sorted(heads, key=lambda h: len(h["scope"]))
        out_loop, in_loop = outer_head["scope"][-1], inner_head["scope"][-1]
        assert inner_head["scope"] == [out_loop, in_loop]
        (outer_box,) = browser.execute_script(
            _BOXES, f'#graph g.cluster[data-loop="{out_loop}"] > rect'
        )
        (inner_box,) = browser.execute_script(
            _BOXES, f'#graph g.cluster[data-loop="{in_loop}"] > rect'
        )
        assert _contains(outer_box, inner_box) and outer_box != inner_box
        for n in plan:
            (box,) = browser.execute_script(_BOXES, f'#graph g.node[data-id="{n["id"]}"] rect')
            assert _contains(inner_box, box) == (in_loop in n["scope"]), n["name"]
            assert _contains(outer_box, box) == (out_loop in n["scope"]), n["name"]
        shot = tmp_path_factory.mktemp("artifacts") / "nested-loops.png"
        assert browser.save_screenshot(str(shot))
        print(f"screenshot: {shot}")
    finally:
        client.cancel()
        with pytest.raises(ed.EddylineError):
            client.wait(30)


# The page boxes (x, y, width, height) of the elements a CSS selector finds.
_BOXES = """
return [...document.querySelectorAll(arguments[0])].map(e => {
  const r = e.getBoundingClientRect();
  return {x: r.x, y: r.y, width: r.width, height: r.height};
});
"""


def _attrs(browser: Any, selector: str, name: str) -> list[str | None]:
    """Attribute ``name`` of every element ``selector`` finds, read in one script."""
    values: list[str | None] = browser.execute_script(
        "return [...document.querySelectorAll(arguments[0])]"
        ".map(e => e.getAttribute(arguments[1]));",
        selector,
        name,
    )
    return values


def _contains(outer: dict[str, float], inner: dict[str, float]) -> bool:
    return (
        outer["x"] <= inner["x"]
        and outer["y"] <= inner["y"]
        and inner["x"] + inner["width"] <= outer["x"] + outer["width"]
        and inner["y"] + inner["height"] <= outer["y"] + outer["height"]
    )


def _plan(url: str) -> list[dict[str, Any]]:
    import json
    import urllib.request

    with urllib.request.urlopen(url + "api/v1/jobs", timeout=10) as r:
        jid = json.loads(r.read())["jobs"][0]["id"]
    with urllib.request.urlopen(f"{url}api/v1/jobs/{jid}/plan", timeout=10) as r:
        nodes: list[dict[str, Any]] = json.loads(r.read())["plan"]["nodes"]
    return nodes
