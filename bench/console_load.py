"""Page load times of ``hightide console`` with many groups: is it still responsive?

Run:  .venv/bin/python bench/console_load.py [--groups 500] [--partitions 100] [--repeat 10]

Set-up (as bench/lag_scrape.py, whose ``setup`` it reuses): a real ``hightide serve``, one
topic of P partitions with records, G groups whose offsets are committed with
``AdminClient.alter_consumer_group_offsets``. Then a real ``hightide console`` process
(default sampling interval, 5 s), and, once its first sample is in:

* ``http``: server time of each page (HTTP GET, a fresh connection each, R times): the
  group list (G rows), one group (P partitions), its live fragment (what htmx fetches
  every refresh), its JSON, its history, the topic page (P partitions, three ListOffsets),
  the topic list and the cluster page;
* ``during_sampling``: the group page fetched back to back for two sampling intervals, so
  some requests wait for the sampler's snapshot (the event loop is shared);
* ``browser``: headless Chromium (Debian's) loading the group list and a group page:
  navigation timing (response end, DOMContentLoaded, load) and when the chart drew,
  skipped with a reason if chromium is not installed.

Prints one JSON document (progress on stderr) with the same-run physical limits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _limits  # noqa: E402
from lag_scrape import setup  # noqa: E402
from produce_consume import Broker, free_port  # noqa: E402

log = _limits.log
TARGET_PAGE_S = 1.0
"""A page (server time) of the console must answer within this, at the median."""


def get(url: str) -> tuple[float, int, int]:
    """(seconds, status, bytes) of one GET on a fresh connection."""
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            body = r.read()
            status = r.status
    except urllib.error.HTTPError as exc:
        body, status = exc.read(), exc.code
    return time.perf_counter() - t0, status, len(body)


def stats(times: list[float]) -> dict:
    s = sorted(times)
    return {"median_s": round(statistics.median(s), 4), "p95_s": round(s[int(0.95 * (len(s) - 1))], 4),
            "max_s": round(s[-1], 4), "n": len(s)}


def wait_for_sample(base: str, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base + "/api/status", timeout=5) as r:
                st = json.loads(r.read())
            if st["samples"] >= 1:
                return st
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the console took no sample")


def browser_timing(base: str, paths: list[str], repeat: int) -> dict:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        return {"skipped": "Debian's chromium and chromium-driver are not installed"}
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    profile = tempfile.mkdtemp(prefix="hightide-bench-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for f in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              f"--user-data-dir={profile}", "--window-size=1280,900"]:
        opts.add_argument(f)
    drv = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    out = {}
    try:
        for path in paths:
            rows = []
            for _ in range(repeat):
                drv.get(base + path)
                t = drv.execute_script("""const n = performance.getEntriesByType('navigation')[0];
                    return [n.responseEnd, n.domContentLoadedEventEnd, n.loadEventEnd];""")
                chart = None
                if "/groups/" in path:
                    t0 = time.perf_counter()
                    points = "return (document.getElementById('charts') || {dataset: {}}).dataset.points"
                    while time.perf_counter() - t0 < 10 and drv.execute_script(points) in (None, "0"):
                        time.sleep(0.01)
                    chart = drv.execute_script("return performance.now();")
                rows.append((t[0] / 1000, t[1] / 1000, t[2] / 1000, chart / 1000 if chart else None))
            out[path] = {"response_end": stats([r[0] for r in rows]), "dom_content_loaded": stats([r[1] for r in rows]),
                         "load": stats([r[2] for r in rows])}
            if rows[0][3] is not None:
                out[path]["chart_drawn"] = stats([r[3] for r in rows])
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=500)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--interval", type=float, default=5.0, help="the console's sampling interval")
    args = ap.parse_args()
    topic = "console-bench"
    with tempfile.TemporaryDirectory() as tmp:
        limits = _limits.measure(tmp, seconds=0.5)
        broker = Broker(Path(tmp))
        broker.start()
        console = None
        try:
            groups = [f"bench-group-{i:04d}" for i in range(args.groups)]
            t0 = time.perf_counter()
            asyncio.run(setup(broker.bootstrap, topic, groups, args.partitions))
            log(f"set-up: {args.groups} groups x {args.partitions} partitions in {time.perf_counter() - t0:.1f}s")
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            console_log = open(Path(tmp) / "console.log", "wb")
            t0 = time.perf_counter()
            console = subprocess.Popen([sys.executable, "-m", "hightide", "console", "-b", broker.bootstrap,
                                        "--listen", f"127.0.0.1:{port}", "--interval", str(args.interval)],
                                       stdout=console_log, stderr=subprocess.STDOUT)
            status = wait_for_sample(base)
            first_sample_s = time.perf_counter() - t0
            log(f"console: first sample after {first_sample_s:.1f}s: {status}")
            g = groups[len(groups) // 2]
            pages = {"group_list": "/groups", "group": f"/groups/{g}", "group_fragment": f"/groups/{g}?fragment=1",
                     "group_json": f"/api/groups/{g}", "group_history": f"/api/groups/{g}/history",
                     "topic": f"/topics/{topic}", "topic_list": "/topics", "cluster": "/cluster"}
            http = {}
            for name, path in pages.items():
                runs = [get(base + path) for _ in range(args.repeat)]
                assert all(r[1] == 200 for r in runs), (path, runs[0])
                http[name] = {**stats([r[0] for r in runs]), "bytes": runs[0][2]}
                log(f"{name}: {http[name]}")
            t_end = time.perf_counter() + 2 * args.interval
            during = []
            while time.perf_counter() < t_end:
                during.append(get(base + f"/groups/{g}")[0])
            during_stats = stats(during)
            log(f"during sampling: {during_stats}")
            browser = browser_timing(base, ["/groups", f"/groups/{g}"], max(3, args.repeat // 2))
            log(f"browser: {browser}")
            with urllib.request.urlopen(base + "/api/status", timeout=10) as r:
                status = json.loads(r.read())
        finally:
            if console is not None:
                console.terminate()
                console.wait(20)
            broker.stop()
    print(json.dumps({
        "benchmark": "console_load", "groups": args.groups, "partitions": args.partitions,
        "group_partitions": args.groups * args.partitions, "repeat": args.repeat,
        "sampling_interval_s": args.interval, "first_sample_s": round(first_sample_s, 2),
        "sample_duration_s": status["last_sample_s"], "samples": status["samples"],
        "http": http, "during_sampling": during_stats, "browser": browser,
        "targets": {"page_median_s_max": TARGET_PAGE_S,
                    "met": all(v["median_s"] < TARGET_PAGE_S for v in http.values())},
        "limits": limits, "machine": _limits.machine(),
    }, indent=2))


if __name__ == "__main__":
    main()
