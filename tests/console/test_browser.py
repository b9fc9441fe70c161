"""The console in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, installed by ``make test``) driven by Selenium against a live
``hightide console`` process and a live broker with lagging, caught-up, stopped and share
groups. One browser session for the module.

Set ``HIGHTIDE_CONSOLE_SCREENSHOTS=DIR`` to save the screenshots docs/console.md shows.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hightide.client import TopicPartition

from ..conftest import free_port
from ..integration.test_cli import run
from ..waiting import wait_until
from .conftest import cli_rows, commit

pytestmark = pytest.mark.integration

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if CHROMIUM is None or DRIVER is None:
    pytest.skip("Debian's chromium and chromium-driver are not installed (make test installs them: "
                "apt-get install chromium chromium-driver)", allow_module_level=True)

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,900"]
SHOTS = os.environ.get("HIGHTIDE_CONSOLE_SCREENSHOTS")


@pytest.fixture(scope="module")
def console(scenario, tmp_path_factory):
    """``hightide console`` on a free port, sampling every 0.5 s, writes allowed."""
    port = free_port()
    log = tmp_path_factory.mktemp("console") / "console.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hightide", "console", "-b", scenario.bootstrap,
                                 "--listen", f"127.0.0.1:{port}", "--interval", "0.5", "--refresh", "0.5",
                                 "--allow-writes"], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            import urllib.request
            assert proc.poll() is None, log.read_text()
            try:
                with urllib.request.urlopen(url + "/groups", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False
        wait_until(up, 30, what="the console to answer")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        assert "Traceback" not in log.read_text(), log.read_text()


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    profile = tempfile.mkdtemp(prefix="hightide-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for f in [*FLAGS, f"--user-data-dir={profile}"]:
        opts.add_argument(f)
    drv = webdriver.Chrome(service=Service(executable_path=DRIVER), options=opts)
    drv.set_page_load_timeout(30)
    try:
        yield drv
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)


def shot(browser, name: str, scroll_to: str | None = None) -> None:
    """Save a screenshot when HIGHTIDE_CONSOLE_SCREENSHOTS is set (64 colours: small PNGs)."""
    if not SHOTS:
        return
    if scroll_to:
        browser.execute_script("document.querySelector(arguments[0]).scrollIntoView();", scroll_to)
    path = Path(SHOTS) / f"console-{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(path))
    from PIL import Image
    Image.open(path).convert("RGB").quantize(colors=64).save(path, optimize=True)


def cells(browser, table_id: str) -> dict[int, dict[str, str]]:
    """{partition: {last class of a cell: its text}} of a table's rows with data-partition,
    read in one script (htmx swaps the live part in place every refresh)."""
    got = browser.execute_script("""
        const out = {};
        for (const row of document.querySelectorAll('#' + arguments[0] + ' tr[data-partition]')) {
          const r = {};
          for (const td of row.querySelectorAll('td[class]'))
            r[td.classList[td.classList.length - 1]] = td.innerText.trim();
          out[row.dataset.partition] = r;
        }
        return out;""", table_id)
    return {int(k): v for k, v in got.items()}


def text(browser, css: str) -> str:
    return browser.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText.trim() : null;", css)


def test_pages_show_the_cli_numbers(server, scenario, console, browser):
    browser.get(console + "/groups")
    wait_until(lambda: browser.find_elements("css selector", f'tr[data-group="{scenario.share}"]'), 10,
               what="the share group in the list")
    for g in (scenario.lagging, scenario.caught_up, scenario.stopped, scenario.share):
        assert browser.find_elements("css selector", f'tr[data-group="{g}"]'), g
    shot(browser, "groups")
    for group in (scenario.lagging, scenario.caught_up):
        browser.get(f"{console}/groups/{group}")
        shown = cells(browser, "partitions")
        cli = cli_rows(server, group)
        assert len(shown) == len(cli) == 3
        for (topic, p), r in cli.items():
            assert (shown[p]["committed"], shown[p]["end"], shown[p]["lag"]) == (
                str(r["current_offset"]), str(r["log_end_offset"]), str(r["lag"])), group
            assert shown[p]["method"] == f'{r["time_lag_method"]} · {r["time_lag_certainty"]}'
        assert text(browser, "#total-lag") == str(sum(r["lag"] for r in cli.values()))
        if group == scenario.lagging:
            assert "rule 3 (STOP)" in text(browser, "#status-rule")
            shot(browser, "group")
    browser.get(f"{console}/share-groups/{scenario.share}")
    rows = json.loads(run(server, "share-groups", "describe", scenario.share, "-o", "json").stdout)
    shown = cells(browser, "share-partitions")
    assert {p: int(c["lag"]) for p, c in shown.items()} == {r["partition"]: r["lag"] for r in rows} == {0: 7, 1: 2}
    assert {p: c["start"] for p, c in shown.items()} == {r["partition"]: str(r["start_offset"]) for r in rows}
    shot(browser, "share-group")


def test_topic_cluster_and_not_found_pages(scenario, console, browser):
    browser.get(f"{console}/topics/{scenario.topic}")
    shown = cells(browser, "topic-partitions")
    assert {p: c["end"] for p, c in shown.items()} == {0: "10", 1: "10", 2: "10"}
    shot(browser, "topic")
    browser.get(console + "/topics")
    assert browser.find_elements("css selector", f'tr[data-topic="{scenario.climbing}"]')
    browser.get(console + "/cluster")
    assert "not served" not in text(browser, "#quorum")  # the single node answers DescribeQuorum (55)
    assert browser.find_elements("css selector", "#quorum tbody tr")  # its one voter
    assert len(browser.find_elements("css selector", "#brokers tbody tr")) == 1
    shot(browser, "cluster")
    browser.get(console + "/groups/no-such-group")
    assert text(browser, "#error-message") == "Consumer group 'no-such-group' does not exist."


def test_stopped_group_chart_climbs_without_reload(scenario, console, browser):
    browser.get(f"{console}/groups/{scenario.stopped}")
    browser.execute_script("window.__notReloaded = true;")
    charts = browser.find_element("css selector", "#charts")  # outside the live part: never swapped
    assert len(browser.find_elements("css selector", "#chart-lag canvas")) == 1  # uPlot drew

    def points() -> int:
        return int(charts.get_attribute("data-points") or 0)

    def last_lag() -> int:
        return int(charts.get_attribute("data-last-lag") or -1)
    wait_until(lambda: points() >= 2, 15, what="the chart's first points")
    first_points, first_lag = points(), last_lag()
    first_total = int(text(browser, "#total-lag"))
    wait_until(lambda: points() >= first_points + 3 and last_lag() > first_lag, 15,
               what="the stopped group's chart to climb")
    wait_until(lambda: int(text(browser, "#total-lag")) > first_total, 10, what="the table to update in place")
    assert browser.execute_script("return window.__notReloaded === true;")  # htmx swapped, no reload
    assert "STOP" in text(browser, "#group-status")
    if SHOTS:  # a longer climb for the picture
        wait_until(lambda: points() >= 30, 60, what="30 points")
    shot(browser, "history", scroll_to="#charts")


def test_reset_with_preview_and_confirm(server, scenario, console, browser):
    from selenium.webdriver.support.ui import Select
    group = scenario.resettable
    browser.get(f"{console}/groups/{group}")
    Select(browser.find_element("id", "reset-to")).select_by_value("earliest")
    browser.find_element("id", "reset-preview").click()
    wait_until(lambda: browser.find_elements("id", "reset-plan"), 10, what="the preview")
    assert "Dry run: nothing has changed yet." in text(browser, "#reset-description")
    assert [e.text for e in browser.find_elements("css selector", "#reset-plan td.new")] == ["0", "0", "0"]
    assert {k: r["current_offset"] for k, r in cli_rows(server, group).items()} == {
        (scenario.topic, p): 5 for p in range(3)}
    shot(browser, "reset-preview")
    browser.find_element("id", "reset-confirm").click()
    wait_until(lambda: browser.find_elements("id", "reset-done"), 10, what="the reset to apply")
    assert {k: r["current_offset"] for k, r in cli_rows(server, group).items()} == {
        (scenario.topic, p): 0 for p in range(3)}
    commit(scenario.bootstrap, group, {TopicPartition(scenario.topic, p): 5 for p in range(3)})


def test_page_works_offline(console, browser):
    """Every script and style comes from the console itself (no CDN)."""
    browser.get(console + "/groups")
    srcs = browser.execute_script(
        "return [...document.querySelectorAll('script[src],link[href]')].map(e => e.src || e.href);")
    assert srcs and all(s.startswith(console + "/static/") for s in srcs), srcs
    assert browser.execute_script("return typeof htmx !== 'undefined' && typeof uPlot !== 'undefined';")


def test_share_group_status_chart_and_groups_filters(scenario, console, browser):
    """Issue 30 item 5 in the browser: the share group page's status and its lag chart
    (points arrive without a reload); the groups list filtered by typing a name and
    choosing a status, sorted by a column header, the live refresh keeping the choice."""
    browser.get(f"{console}/share-groups/{scenario.share}")
    assert text(browser, "#group-status").startswith("STOP")
    assert "rule 3 (STOP)" in text(browser, "#status-rule")
    assert {p: c["status"] for p, c in cells(browser, "share-partitions").items()} == {0: "STOP", 1: "STOP"}
    charts = browser.find_element("css selector", "#charts")
    assert len(browser.find_elements("css selector", "#chart-lag canvas")) == 1
    assert not browser.find_elements("css selector", "#chart-time")
    wait_until(lambda: int(charts.get_attribute("data-points") or 0) >= 3, 15, what="the share group's chart")
    assert charts.get_attribute("data-last-lag") == "9"
    shot(browser, "share-group")

    tag = scenario.topic.split("-")[-1]
    browser.get(console + "/groups")
    box = browser.find_element("id", "filter-name")
    box.send_keys(f"ed-{tag}")  # stopped-<tag>; the form submits after a pause in typing
    wait_until(lambda: "q=" in browser.current_url, 10, what="the name filter to apply")
    wait_until(lambda: [e.get_attribute("data-group") for e in browser.find_elements("css selector", "#groups tr[data-group]")]
               == [scenario.stopped], 10, what="only the stopped group")
    browser.get(f"{console}/groups?q={tag}")
    from selenium.webdriver.support.ui import Select
    Select(browser.find_element("id", "filter-status")).select_by_value("problems")
    wait_until(lambda: "status=problems" in browser.current_url, 10, what="the status filter to apply")
    shown = lambda: [e.get_attribute("data-group") for e in browser.find_elements("css selector", "#groups tr[data-group]")]
    assert scenario.caught_up not in shown() and scenario.lagging in shown()
    browser.find_element("css selector", 'a[data-sort="lag"]').click()
    wait_until(lambda: "sort=lag" in browser.current_url, 10, what="the sort by lag")
    browser.execute_script("window.__notReloaded = true;")
    first = shown()
    browser.execute_script("document.querySelector('#live').dataset.seen = '1';")
    # the live part is swapped by htmx (the marker disappears) and keeps the filter and sort
    wait_until(lambda: browser.execute_script("return document.querySelector('#live').dataset.seen !== '1';"), 10,
               what="an htmx refresh")
    assert browser.execute_script("return window.__notReloaded === true;")
    assert set(shown()) == set(first) and scenario.caught_up not in shown()
    lags = [e.text.split()[0] for e in browser.find_elements("css selector", "#groups td.lag")]
    known = [int(v) for v in lags if v != "-"]
    assert known == sorted(known, reverse=True), lags
    shot(browser, "groups-filtered")
