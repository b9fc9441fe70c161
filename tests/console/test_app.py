"""The console's web app against a live broker, through Starlette's test client (no
browser): numbers equal the CLI's JSON, 404s, CSRF, read-only, resets, the banner."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import warnings

import pytest

with warnings.catch_warnings():  # starlette asks for httpx2, which is not released; httpx works the same
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from hightide.client import AdminClient, NewTopic, TopicPartition
from hightide.console.app import CSRF_COOKIE, ConsoleConfig, create_app
from hightide.console.sampler import Sampler

from ..conftest import free_port
from ..integration.clients import Rec, confluent_produce
from ..integration.test_cli import run
from ..waiting import wait_until
from .conftest import cli_rows, commit

pytestmark = pytest.mark.integration


def make_client(bootstrap: str, *, allow_writes: bool = False, interval: float = 0.3) -> TestClient:
    sampler = Sampler(bootstrap, interval_s=interval, client_options={"request_timeout_s": 3.0})
    return TestClient(create_app(sampler, ConsoleConfig(bootstrap, allow_writes=allow_writes, refresh_s=1)),
                      raise_server_exceptions=False)


@pytest.fixture(scope="module")
def web(scenario):
    with make_client(scenario.bootstrap, allow_writes=True) as c:
        yield c


@pytest.fixture(scope="module")
def readonly(scenario):
    with make_client(scenario.bootstrap) as c:
        yield c


def token(client: TestClient, path: str) -> str:
    r = client.get(path)
    assert r.status_code == 200, r.text
    return client.cookies[CSRF_COOKIE]


KEYS = ("current_offset", "log_end_offset", "log_start_offset", "lag", "anomalies", "time_lag_method",
        "time_lag_certainty", "consumer_id", "host", "client_id", "source")


def test_group_numbers_equal_the_cli_json(server, scenario, web):
    for group in (scenario.lagging, scenario.caught_up, scenario.stopped):
        api = web.get(f"/api/groups/{group}").json()
        cli = cli_rows(server, group)
        assert set(cli) == {(r["topic"], r["partition"]) for r in api["rows"]}
        # the stopped group's topic grows between the two reads: its end and lag may differ
        keys = [k for k in KEYS if group != scenario.stopped or k not in ("log_end_offset", "lag")]
        for r in api["rows"]:
            c = cli[(r["topic"], r["partition"])]
            assert {k: r[k] for k in keys} == {k: c[k] for k in keys}, group
            if r["time_lag_ms"] is not None:  # measured at two moments: equal up to the time between them
                assert abs(r["time_lag_ms"] - c["time_lag_ms"]) < 30_000
    lag = {(r["topic"], r["partition"]): r["lag"] for r in web.get(f"/api/groups/{scenario.lagging}").json()["rows"]}
    assert lag == {(scenario.topic, p): 8 for p in range(3)}
    page = web.get(f"/groups/{scenario.lagging}").text
    for p in range(3):
        row = re.search(rf'data-partition="{p}">(.*?)</tr>', page, re.S).group(1)
        assert re.search(r'class="num committed">2<', row) and re.search(r'class="num end">10<', row)
        assert re.search(r'class="num lag">8<', row) and "record_timestamp · exact" in row
    assert 'id="total-lag">24<' in page
    assert "rule 3 (STOP): behind and the group has no active members" in page


def test_share_group_page_equals_the_cli(server, scenario, web):
    page = web.get(f"/share-groups/{scenario.share}")
    assert page.status_code == 200
    rows = json.loads(run(server, "share-groups", "describe", scenario.share, "-o", "json").stdout)
    for r in rows:
        row = re.search(rf'data-partition="{r["partition"]}">(.*?)</tr>', page.text, re.S).group(1)
        assert f'class="num lag">{r["lag"]}<' in row and f'class="num start">{r["start_offset"]}<' in row
    assert {r["partition"]: r["lag"] for r in rows} == scenario.share_lags == {0: 7, 1: 2}
    # the seed's example on partition 0: 6 available, 1 acknowledged, 1 archived, 1 not persisted
    row0 = re.search(r'data-partition="0">(.*?)</tr>', page.text, re.S).group(1)
    assert re.findall(r'class="num">(\d+)<', row0)[-4:] == ["6", "1", "1", "1"]
    listing = web.get("/groups").text
    assert f'href="/share-groups/{scenario.share}"' in listing and f'href="/groups/{scenario.lagging}"' in listing


def test_unknown_group_topic_and_wrong_kind_are_404_with_a_sentence(scenario, web):
    r = web.get("/groups/no-such-group")
    assert r.status_code == 404 and "Consumer group &#39;no-such-group&#39; does not exist." in r.text
    r = web.get("/topics/no-such-topic")
    assert r.status_code == 404 and "Topic &#39;no-such-topic&#39; does not exist." in r.text
    r = web.get(f"/groups/{scenario.share}")
    assert r.status_code == 404 and "is a share group" in r.text
    r = web.get(f"/share-groups/{scenario.lagging}")
    assert r.status_code == 404 and "is a consumer group" in r.text
    assert web.get("/api/groups/no-such-group/history").status_code == 404
    r = web.get("/nowhere")
    assert r.status_code == 404 and "There is no page at /nowhere." in r.text


def test_topics_cluster_and_liveness(scenario, web):
    r = web.get("/topics")
    assert r.status_code == 200 and f'data-topic="{scenario.topic}"' in r.text
    assert "__consumer_offsets" not in r.text and "__consumer_offsets" in web.get("/topics?internal=1").text
    t = web.get(f"/topics/{scenario.topic}").text
    sizes = []
    for p in range(3):
        row = re.search(rf'<tr data-partition="{p}">(.*?)</tr>', t, re.S).group(1)
        assert 'class="num end">10<' in row and "ACTIVE" in row
        sizes.append(int(re.search(r'class="num size" title="(\d+) bytes"', row).group(1)))  # DescribeLogDirs
    assert all(s > 0 for s in sizes) and f'<dt>Size</dt><dd title="{sum(sizes)} bytes">' in t
    row = re.search(rf'<tr data-topic="{scenario.topic}">(.*?)</tr>', r.text, re.S).group(1)
    assert f'class="num size" title="{sum(sizes)} bytes"' in row
    assert f'href="/groups/{scenario.lagging}"' in t  # read by
    c = web.get("/cluster")
    assert c.status_code == 200 and 'id="brokers"' in c.text
    # the single node answers DescribeQuorum (55): itself, the only voter, leads the metadata log
    quorum = c.text.split('<div id="quorum">', 1)[1].split("</div>", 1)[0]
    assert "<dt>Leader</dt><dd>1</dd>" in quorum and "not served" not in quorum


def test_live_fragment_and_history(scenario, web):
    frag = web.get(f"/groups/{scenario.stopped}?fragment=1").text
    assert frag.startswith('<div id="live"') and "<html" not in frag and 'id="charts"' not in frag
    first = web.get(f"/api/groups/{scenario.stopped}/history").json()
    wait_until(lambda: len(web.get(f"/api/groups/{scenario.stopped}/history").json()["t"]) >= len(first["t"]) + 3,
               10, what="three more samples")
    h = web.get(f"/api/groups/{scenario.stopped}/history").json()
    assert h["lag"][-1] > h["lag"][0]  # the stopped group's lag climbs as records arrive
    assert all(b >= a for a, b in zip(h["t"], h["t"][1:]))


def test_writes_need_allow_writes_and_csrf(scenario, web, readonly):
    path = f"/groups/{scenario.resettable}"
    page = readonly.get(path).text
    assert 'id="read-only"' in page and 'id="reset-form"' not in page
    tok = token(readonly, path)
    r = readonly.post(path + "/reset", data={"csrf": tok, "scope": "all", "to": "earliest"})
    assert r.status_code == 403 and "read-only" in r.text
    tok = token(web, path)
    r = web.post(path + "/reset", data={"scope": "all", "to": "earliest"})
    assert r.status_code == 403 and "CSRF token is missing or does not match" in r.text
    r = web.post(path + "/reset", data={"csrf": tok + "x", "scope": "all", "to": "earliest"})
    assert r.status_code == 403
    r = web.post(path + "/reset", data={"csrf": tok, "scope": "all", "to": "earliest"},
                 headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and "Cross-site request refused" in r.text


def test_reset_preview_then_confirm(server, scenario, web):
    path = f"/groups/{scenario.resettable}"
    tok = token(web, path)
    r = web.post(path + "/reset", data={"csrf": tok, "scope": scenario.topic, "to": "offset", "value": "99"})
    assert r.status_code == 200 and "Dry run: nothing has changed yet." in r.text
    assert re.findall(r'class="num new">(\d+)<', r.text) == ["10", "10", "10"]  # clamped to the end
    assert {k: v["current_offset"] for k, v in cli_rows(server, scenario.resettable).items()} == {
        (scenario.topic, p): 5 for p in range(3)}  # the preview changed nothing
    plan = re.search(r'name="plan" value="([^"]+)"', r.text).group(1)
    r = web.post(path + "/reset/confirm", data={"csrf": tok, "plan": plan})
    assert r.status_code == 200 and 'id="reset-done"' in r.text
    assert {k: v["current_offset"] for k, v in cli_rows(server, scenario.resettable).items()} == {
        (scenario.topic, p): 10 for p in range(3)}
    r = web.post(path + "/reset/confirm", data={"csrf": tok, "plan": plan})
    assert r.status_code == 409 and "already used" in r.text
    r = web.post(path + "/reset", data={"csrf": tok, "scope": "all", "to": "offset", "value": "soon"})
    assert r.status_code == 400 and "an offset must be an integer" in r.text
    commit(scenario.bootstrap, scenario.resettable, {TopicPartition(scenario.topic, p): 5 for p in range(3)})


def test_reset_refused_for_an_active_group(server, scenario, web):
    from confluent_kafka import Consumer
    group = f"active-{scenario.topic}"
    c = Consumer({"bootstrap.servers": scenario.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([scenario.topic])
    stop = threading.Event()
    assigned = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            c.poll(0.1)
            if c.assignment():
                assigned.set()
    t = threading.Thread(target=poll, daemon=True)
    t.start()
    try:
        assert assigned.wait(20), "the consumer got no assignment"
        wait_until(lambda: web.get(f"/groups/{group}").status_code == 200, 10, what="the group on the page")
        path = f"/groups/{group}"
        wait_until(lambda: 'id="active-warning"' in web.get(path).text, 10, what="the active warning")
        tok = token(web, path)
        r = web.post(path + "/reset", data={"csrf": tok, "scope": "all", "to": "earliest"})
        assert r.status_code == 200 and "has active members (state Stable)" in r.text
        plan = re.search(r'name="plan" value="([^"]+)"', r.text)
        if plan is not None:
            r = web.post(path + "/reset/confirm", data={"csrf": tok, "plan": plan.group(1)})
            assert r.status_code == 409
            assert (f"Assignments can only be reset if the group &#39;{group}&#39; is inactive, but the current "
                    f"state is Stable.") in r.text
    finally:
        stop.set()
        t.join(10)
        c.close()


def test_broker_down_shows_a_banner_not_a_stack_trace():
    with make_client(f"127.0.0.1:{free_port()}", interval=0.2) as c:
        for path in ("/groups", "/groups/x", "/topics", "/topics/x", "/cluster", "/share-groups/x"):
            r = c.get(path)
            assert r.status_code == 503, (path, r.status_code)
            assert 'class="banner"' in r.text and "Cannot reach the cluster at 127.0.0.1:" in r.text, path
            assert "Traceback" not in r.text and "cannot reach 127.0.0.1:" in r.text and "(connection refused)" in r.text


def test_any_group_id_has_a_working_page(scenario, web):
    """Group ids may hold '/', '?', '#', spaces and non-ASCII: links and live updates are quoted."""
    from urllib.parse import quote
    group = "team a/b?c#d é"
    commit(scenario.bootstrap, group, {TopicPartition(scenario.topic, 0): 4})
    href = "/groups/" + quote(group, safe="")
    wait_until(lambda: f'href="{href}"' in web.get("/groups").text, 10, what="the group in the list")
    page = web.get(href)
    assert page.status_code == 200 and 'id="total-lag">6<' in page.text
    assert f'hx-get="{quote("/groups/" + group)}?fragment=1"' in page.text
    assert web.get(quote("/groups/" + group) + "?fragment=1").status_code == 200
    hist = web.get(quote(f"/api/groups/{group}/history")).json()
    assert hist["group"] == group and hist["lag"][-1] == 6
    tok = token(web, href)
    r = web.post(href + "/reset", data={"csrf": tok, "scope": "all", "to": "latest"})
    assert r.status_code == 200 and re.findall(r'class="num new">(\d+)<', r.text) == ["10"]


def test_broker_lost_then_back_keeps_the_last_data_under_a_banner(fresh_server):
    srv = fresh_server()

    async def topic() -> None:
        async with AdminClient(srv.bootstrap) as a:
            await a.create_topics([NewTopic("lost", 1, 1)])
    asyncio.run(topic())
    confluent_produce(srv.bootstrap, "lost", [Rec(0, None, b"x", (), 0) for _ in range(3)])
    commit(srv.bootstrap, "g-lost", {TopicPartition("lost", 0): 1})
    with make_client(srv.bootstrap, interval=0.2) as web:
        wait_until(lambda: 'id="total-lag">2<' in web.get("/groups/g-lost").text, 10, what="the group's lag")
        srv.stop()
        wait_until(lambda: 'class="banner"' in web.get("/groups").text, 20, what="the banner")
        r = web.get("/groups/g-lost")
        assert r.status_code == 200 and 'id="total-lag">2<' in r.text  # the last data, under the banner
        assert "Showing the last data, from" in r.text and "Traceback" not in r.text
        # the banner may come first from two intervals without a whole sample; the sample's
        # own error follows once the client gives up on the stopped broker
        wait_until(lambda: (web.get("/api/status").json()["error"] or "").startswith("KafkaConnectionError"), 20,
                   what="the sample's error")
        fresh_server(data_dir=srv.data_dir, port=srv.port)
        wait_until(lambda: 'class="banner"' not in web.get("/groups").text, 20, what="the banner to go")
        assert web.get("/api/status").json()["error"] is None


def test_share_group_status_and_lag_history(scenario, web):
    """Issue 30 item 5: the share group page has a status with its rule (the seed's
    example: members gone, lag 7 and 2, nothing moving: rule 3 STOP), and a lag history
    from the console's samples, as consumer groups have."""
    page = web.get(f"/share-groups/{scenario.share}").text
    assert re.search(r'id="group-status">STOP', page), page
    assert "rule 3 (STOP): behind and the group has no active members" in page
    for p in (0, 1):
        row = re.search(rf'data-partition="{p}">(.*?)</tr>', page, re.S).group(1)
        assert 'class="st st-STOP">STOP<' in row
    assert f'data-api="/api/share-groups/{scenario.share}/history"' in page and 'id="chart-lag"' in page
    wait_until(lambda: len(web.get(f"/api/share-groups/{scenario.share}/history").json()["t"]) >= 3, 15,
               what="three share-group samples")
    h = web.get(f"/api/share-groups/{scenario.share}/history").json()
    assert set(h["lag"]) == {sum(scenario.share_lags.values())} == {9}
    assert h["time_lag_s"] == [None] * len(h["t"])
    assert web.get("/api/share-groups/no-such-group/history").status_code == 404
    assert web.get(f"/api/share-groups/{scenario.lagging}/history").status_code == 404
    listing = web.get("/groups").text
    row = re.search(rf'data-group="{scenario.share}">(.*?)</tr>', listing, re.S).group(1)
    assert 'class="st st-STOP">STOP<' in row and 'class="num lag">9<' in row


def _listed(client, query: str) -> list[str]:
    r = client.get("/groups" + query)
    assert r.status_code == 200, r.text
    return re.findall(r'<tr data-group="([^"]+)">', r.text)


def test_groups_list_sorts_and_filters(scenario, web):
    """Issue 30 item 5: by name (default), status (worst first), lag (largest first), the
    other way round with order=asc/desc; filtered by status and by a part of the name."""
    mine = (scenario.lagging, scenario.caught_up, scenario.stopped, scenario.share)  # lag 24, 0, climbing, 9
    wait_until(lambda: set(mine) <= set(_listed(web, "")), 15, what="the scenario's groups")
    assert _listed(web, "") == sorted(_listed(web, ""))
    for query, desc in (("?sort=lag", True), ("?sort=lag&order=asc", False)):
        page = web.get("/groups" + query).text
        lags = [None if v == "-" else int(v) for v in re.findall(r'class="num lag">(-?\d+|-)', page)]
        known = [v for v in lags if v is not None]
        assert known == sorted(known, reverse=desc) and lags == known + [None] * (len(lags) - len(known)), lags
        order = [g for g in re.findall(r'<tr data-group="([^"]+)">', page) if g in mine]
        assert (order.index(scenario.lagging) < order.index(scenario.share) < order.index(scenario.caught_up)) == desc
    by_status = _listed(web, "?sort=status")
    page = web.get("/groups?sort=status").text
    statuses = [re.search(rf'data-group="{re.escape(g)}">.*?class="st st-([A-Z-]+)"', page, re.S).group(1)
                for g in by_status]
    severity = {"ERR": 5, "STOP": 4, "STALL": 3, "REWIND": 2, "WARN": 1, "OK": 0, "-": -1}
    assert [severity[s] for s in statuses] == sorted((severity[s] for s in statuses), reverse=True), statuses
    tag = scenario.topic.split("-")[-1]
    # (other tests of the module add groups with the tag and move the resettable one)
    tagged = _listed(web, f"?q={tag.upper()}")
    assert set(mine) <= set(tagged) and all(tag in g for g in tagged)
    assert _listed(web, f"?q=caught-up-{tag}") == [scenario.caught_up]
    ok = _listed(web, f"?status=OK&q={tag}")
    assert scenario.caught_up in ok and not {scenario.lagging, scenario.stopped, scenario.share} & set(ok)
    problems = _listed(web, f"?status=problems&q={tag}")
    assert scenario.caught_up not in problems and scenario.lagging in problems
    r = web.get("/groups?status=ERR&q=no-such-group-at-all")
    assert "No group matches the filters." in r.text and 'href="/groups" id="filters-clear"' in r.text
    # the live part refreshes with the same query; the column headers flip the order
    page = web.get(f"/groups?sort=lag&status=problems&q={tag}").text
    assert f'hx-get="/groups?sort=lag&amp;status=problems&amp;q={tag}&amp;fragment=1"' in page
    assert 'href="?sort=lag&amp;status=problems&amp;q=' + tag + '&amp;order=asc"' in page
    frag = web.get(f"/groups?sort=lag&status=problems&q={tag}&fragment=1").text
    assert frag.startswith('<div id="live"') and 'id="group-filters"' not in frag
    assert web.get("/groups?sort=%3Cscript%3E&status=%3Cb%3E&order=x").status_code == 200  # ignored
