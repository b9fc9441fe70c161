"""Console parts without a broker: the sampler's bounded history, --command-config,
the reset form and the plan book."""

from __future__ import annotations

import pytest

from hightide.console.actions import PlanBook, ResetError, spec_from_form
from hightide.console.client_config import ClientConfigError, admin_options_from, parse_properties
from hightide.console.sampler import Sampler
from hightide.lag import Certainty, TimeLag
from hightide.lag.timelag import TimeLagMethod
from hightide.monitoring.monitor import GroupReport, Snapshot

from .test_views import _group, _partition


def _snap(t_ms, groups):
    return Snapshot(t_ms, groups, {}, 0.01, 1)


def test_history_is_bounded_by_points_and_time_and_keeps_certainty():
    s = Sampler("127.0.0.1:1", interval_s=1, history_s=10, max_points=5)
    bound = TimeLag(30_000, TimeLagMethod.MAX_TIMESTAMP_ANCHOR, Certainty.LOWER_BOUND)
    exact = TimeLag(2_000, TimeLagMethod.RECORD_TIMESTAMP)
    for i in range(8):
        tl = bound if i % 2 else exact
        s._record(_snap(1_000_000 + i * 1000, {"g": _group("g", [_partition("g", "t", 0, 1, 10 + i, tl=tl)])}))
    ser = s.series("g")
    assert ser["t"] == [1003.0, 1004.0, 1005.0, 1006.0, 1007.0]  # the newest max_points
    assert ser["lag"] == [12, 13, 14, 15, 16]  # a stopped group: climbing
    assert ser["time_lag_s"] == [None, 2.0, None, 2.0, None]
    assert ser["time_lag_bound_s"] == [30.0, None, 30.0, None, 30.0]
    # time bound: a point older than history_s is dropped, a group gone from the cluster ages out
    s._record(_snap(1_020_000, {}))
    assert "g" not in s.history
    assert s.series("g") == {"t": [], "lag": [], "time_lag_s": [], "time_lag_bound_s": []}


def test_empty_group_has_unknown_lag_in_history():
    s = Sampler("127.0.0.1:1")
    s._record(_snap(5000, {"e": GroupReport("e", "Empty", (), "consumer", (), None)}))
    assert s.series("e")["lag"] == [None]


def test_properties_and_command_config(tmp_path):
    assert parse_properties("# c\n! c\na=1\nb : x=y\n c.d = 3 \nflag\n") == {"a": "1", "b": "x=y", "c.d": "3",
                                                                               "flag": ""}
    f = tmp_path / "client.properties"
    f.write_text("client.id=ops\nrequest.timeout.ms=2500\nbootstrap.servers=h:9\nlinger.ms=5\n")
    opts, boot, warnings = admin_options_from(str(f))
    assert opts == {"client_id": "ops", "request_timeout_s": 2.5} and boot == "h:9"
    assert warnings == [f"{f}: the configuration 'linger.ms' was supplied but isn't a known config."]
    assert admin_options_from(None) == ({}, None, [])
    # security the client cannot honour is refused, never ignored
    for text, word in (("security.protocol=SASL_SSL\n", "sasl.mechanism=GSSAPI is not supported"),
                       ("security.protocol=QUIC\n", "security.protocol=QUIC"),
                       ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n", "needs a user"),
                       ("security.protocol=SSL\nssl.truststore.type=JKS\n", "PEM files only"),
                       ("security.protocol=SSL\nssl.truststore.location=/nonexistent.pem\n", "cannot be loaded")):
        f.write_text(text)
        with pytest.raises(ClientConfigError, match=word):
            admin_options_from(str(f))
    f.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config="
                 "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"alice\" "
                 "password=\"s3cret\";\n")
    opts, _, warnings = admin_options_from(str(f))
    sec = opts["security"]
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == ("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice",
                                                                         "s3cret")
    assert "s3cret" not in repr(sec) and warnings == []
    f.write_text("request.timeout.ms=soon\n")
    with pytest.raises(ClientConfigError, match="soon"):
        admin_options_from(str(f))
    with pytest.raises(ClientConfigError, match="cannot read"):
        admin_options_from(str(tmp_path / "missing"))


def test_reset_form():
    spec, what = spec_from_form({"scope": "all", "to": "earliest"}, ["t"])
    assert spec.all_topics and spec.to == "earliest"
    assert what == "Reset every partition with offsets to the earliest offset"
    spec, what = spec_from_form({"scope": "t", "to": "offset", "value": " 7 "}, ["t"])
    assert spec.topics == ("t",) and spec.to_offset == 7 and not spec.all_topics
    spec.check()  # the CLI's own validation accepts what the form builds
    spec, _ = spec_from_form({"scope": "t", "to": "datetime", "value": "2026-01-01T00:00:00"}, ["t"])
    assert spec.to_datetime == "2026-01-01T00:00:00"
    for form, msg in (({"to": "sideways"}, "choose where"), ({"scope": "u", "to": "latest"}, "no offsets for topic"),
                      ({"to": "offset", "value": "x"}, "integer"), ({"to": "datetime"}, "give a time")):
        with pytest.raises(ResetError, match=msg):
            spec_from_form(form, ["t"])


def test_plan_book_takes_once_per_group_and_expires(monkeypatch):
    from hightide.console import actions
    book = PlanBook(max_plans=2, ttl_s=10)
    mk = lambda i, g="g": actions.Plan(f"p{i}", g, {}, (), "d", None, 100.0)  # noqa: E731
    monkeypatch.setattr(actions.time, "monotonic", lambda: 105.0)
    for i in range(3):
        book.add(mk(i))
    with pytest.raises(ResetError, match="unknown or was already used"):
        book.take("p0", "g")  # evicted: at most max_plans
    with pytest.raises(ResetError, match="unknown"):
        book.take("p1", "other")  # another group's plan
    assert book.take("p2", "g").id == "p2"
    with pytest.raises(ResetError, match="already used"):
        book.take("p2", "g")
    book.add(mk(3))
    monkeypatch.setattr(actions.time, "monotonic", lambda: 111.0)
    with pytest.raises(ResetError, match="expired"):
        book.take("p3", "g")


def test_serving_never_imports_the_console():
    """``hightide serve`` does not pay for the console: its libraries are imported only by
    ``hightide console``, and listing the commands does not import them either."""
    import subprocess
    import sys
    code = ("import sys, click, hightide.cli as c, hightide.server.broker\n"
            "ctx = click.Context(c.main)\n"
            "assert 'console' in c.main.list_commands(ctx)\n"
            "c.main.get_command(ctx, 'serve')\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'jinja2', 'uvicorn')\n"
            "             or m.startswith('hightide.console'))\n"
            "assert not bad, bad\n"
            "c.main.get_command(ctx, 'console')\n"
            "assert 'hightide.cli.console' in sys.modules and 'starlette' not in sys.modules\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_group_history_columns_bounds_and_order():
    from hightide.console.history import GroupHistory
    h = GroupHistory(3)
    h.add(1000, 5, 200, "exact")
    h.add(1000, 9, 9, "exact")  # not newer: ignored
    h.add(2000, None, None, None)
    h.add(3000, -1, -7, "estimate")  # raw values kept, negative ones too
    h.add(4000, 7, 9000, "lower_bound")
    assert len(h) == 3
    assert h.columns() == {"t": [2.0, 3.0, 4.0], "lag": [None, -1, 7], "time_lag_s": [None, -0.007, None],
                           "time_lag_bound_s": [None, None, 9.0]}
    h.trim(3500)
    assert h.columns()["t"] == [4.0]
    h.trim(10_000)
    assert len(h) == 0 and h.columns() == {"t": [], "lag": [], "time_lag_s": [], "time_lag_bound_s": []}
    with pytest.raises(ValueError):
        GroupHistory(0)


def test_share_groups_have_a_bounded_history_of_their_total_lag():
    """Issue 30 item 5: a point per share group per sample (the sum of its positive
    share-partition lags; None when none is known), bounded like a consumer group's, and
    dropped once the group is gone and its points aged out."""
    from hightide.monitoring.share_monitor import ShareGroupReport, SharePartitionReport, ShareSnapshot
    s = Sampler("127.0.0.1:1", interval_s=1, history_s=10, max_points=3)
    for i in range(5):
        parts = (SharePartitionReport("t", 0, 2, 7 + i, 11 + i), SharePartitionReport("t", 1, None, None))
        s._record_share(ShareSnapshot(1_000_000 + i * 1000, {"s": ShareGroupReport("s", "Stable", 1, parts),
                                                             "u": ShareGroupReport("u", "Empty", 0, parts[1:])}),
                        1_000_000 + i * 1000)
    ser = s.series("s", share=True)
    assert ser["t"] == [1002.0, 1003.0, 1004.0] and ser["lag"] == [9, 10, 11]
    assert ser["time_lag_s"] == [None] * 3 and s.series("s")["t"] == []  # not a consumer group's
    assert s.series("u", share=True)["lag"] == [None, None, None]
    s._record_share(None, 1_020_000)  # the cluster stopped serving share groups, 20 s later
    assert s.share_history == {}
