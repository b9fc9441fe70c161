"""The request log (issue 20 item 11): ``hightide.request`` at DEBUG writes one line per
request -- API, version, client id, correlation id, peer, the error codes of its answer
and its latency -- and nothing when that logger is off."""

from __future__ import annotations

import re
import struct

from confluent_kafka import Producer

from ..rawkafka import RawClient
from ..waiting import wait_until

LINE = re.compile(r"hightide\.request: (?P<api>\w+) v(?P<v>\d+) client_id=(?P<client>\S+) "
                  r"correlation_id=(?P<corr>-?\d+) peer=(?P<peer>\S+) errors=(?P<errors>.+?) "
                  r"latency_ms=(?P<ms>[0-9.]+)$")


def _requests_with_errors(bootstrap: str, topic: str) -> None:
    with RawClient(bootstrap) as c:
        c.corr = 100
        r = c.request(3, 12, {"topics": [{"name": f"{topic}-a", "topic_id": None},
                                         {"name": f"{topic}-b", "topic_id": None}],
                              "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        assert [t.error_code for t in r.topics] == [3, 3]
        c.request(1, 4, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                         "isolation_level": 0, "topics": [
                             {"topic": f"{topic}-a", "partitions": [
                                 {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                                 for p in range(3)]}]})
        c.send_bytes(struct.pack(">ihhih", 10, 18, 99, 777, -1))  # ApiVersions v99
        assert struct.unpack_from(">ih", c.recv_frame(), 0) == (777, 35)
    p = Producer({"bootstrap.servers": bootstrap, "client.id": "reqlog-client"})
    try:
        p.produce(f"{topic}-c", b"v")
        assert p.flush(20) == 0
    finally:
        del p


def _lines(output: str) -> list[dict]:
    return [m.groupdict() for m in map(LINE.search, output.splitlines()) if m]


def test_request_log_lines(fresh_server, topic_name):
    srv = fresh_server("--log-level", "hightide.request=debug")
    _requests_with_errors(srv.bootstrap, topic_name)
    wait_until(lambda: any(x["api"] == "Produce" and x["client"] == "reqlog-client" for x in _lines(srv.output())),
               10, what="the producer's Produce line")
    lines = _lines(srv.output())
    by_corr = {(x["api"], x["corr"]): x for x in lines if x["client"] == "rawkafka"}
    meta = by_corr[("Metadata", "101")]
    assert meta["v"] == "12" and meta["errors"] == "UNKNOWN_TOPIC_OR_PARTITION x2"
    assert re.fullmatch(r"127\.0\.0\.1:\d+", meta["peer"])
    fetch = by_corr[("Fetch", "102")]  # a pre-encoded (RawResponse) answer: per-partition errors
    assert fetch["v"] == "4" and fetch["errors"] == "UNKNOWN_TOPIC_OR_PARTITION x3"
    versions = [x for x in lines if x["api"] == "ApiVersions" and x["corr"] == "777"]
    assert versions and versions[0]["v"] == "99" and versions[0]["errors"] == "UNSUPPORTED_VERSION x1"
    produce = [x for x in lines if x["api"] == "Produce" and x["client"] == "reqlog-client"]
    assert produce[-1]["errors"] == "NONE" and float(produce[-1]["ms"]) >= 0
    # the client's own handshake is there too, in order of correlation id
    apis = [x["api"] for x in lines if x["client"] == "reqlog-client"]
    assert apis[0] == "ApiVersions" and "Metadata" in apis
    assert "DEBUG hightide.server" not in srv.output()  # only that logger was lowered


def test_request_log_off_by_default(fresh_server, topic_name):
    srv = fresh_server()
    _requests_with_errors(srv.bootstrap, topic_name)
    with RawClient(srv.bootstrap) as c:  # a rejected request is still a warning
        c.send_bytes(struct.pack(">ihhih", 10, 999, 0, 5, -1))
        assert c.is_closed()
    wait_until(lambda: "unknown api key 999" in srv.output(), 10, what="the rejected request's warning")
    assert "WARNING hightide.server: closing connection from 127.0.0.1:" in srv.output()
    assert "hightide.request" not in srv.output()
    assert not _lines(srv.output())
