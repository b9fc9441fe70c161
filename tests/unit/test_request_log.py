"""The request log (issue 20 item 11), sans sockets: error codes from kio entities and
pre-encoded responses, the line format, the serve command's per-logger levels, and a
connection that does nothing for it while ``hightide.request`` is off."""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections import Counter
from collections.abc import Callable

import click
import pytest
from kio.index import load_response_schema
from kio.schema.list_groups.v4.response import ListGroupsResponse

from hightide.cli import _parse_log_levels
from hightide.protocol.build import materialize
from hightide.protocol.codec import RequestHeader
from hightide.protocol.errors import ErrorCode
from hightide.protocol.fetch_response import PartitionData, TopicData, encode_fetch_response
from hightide.server import request_log
from hightide.server.registry import RawResponse

from tests.unit.test_connection import SYNC_KEY, harness, routes  # noqa: F401 (fixture)
from tests.unit.test_connection import encode_request

E = ErrorCode


def _metadata(errors: list[tuple[int, list[int]]]):
    topics = [{"error_code": te, "name": f"t{i}", "topic_id": None, "is_internal": False,
               "partitions": [{"error_code": pe, "partition_index": j, "leader_id": 1, "leader_epoch": 0,
                               "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}
                              for j, pe in enumerate(parts)], "topic_authorized_operations": -2147483648}
              for i, (te, parts) in enumerate(errors)]
    return materialize(load_response_schema(3, 12), {"throttle_time": 0, "brokers": [], "cluster_id": "c",
                                                      "controller_id": 1, "topics": topics})


def test_error_codes_top_level_and_nested() -> None:
    header = RequestHeader(3, 12, 1, "c")
    body = _metadata([(E.unknown_topic_or_partition, []), (0, [0, E.not_leader_or_follower, 0]),
                      (E.unknown_topic_or_partition, [])])
    codes = request_log.error_codes(header, body)
    assert codes == Counter({E.unknown_topic_or_partition: 2, E.not_leader_or_follower: 1})
    assert request_log.error_summary(codes) == "UNKNOWN_TOPIC_OR_PARTITION x2,NOT_LEADER_OR_FOLLOWER x1"
    assert request_log.error_summary(request_log.error_codes(header, _metadata([(0, [0])]))) == "NONE"
    assert request_log.error_summary(Counter({9999: 1})) == "ERROR_9999 x1"
    assert request_log.error_summary(None) == "?"
    top = ListGroupsResponse(throttle_time=0, error_code=E.coordinator_load_in_progress, groups=())
    assert request_log.error_codes(RequestHeader(16, 4, 1, "c"), top) == Counter({E.coordinator_load_in_progress: 1})


@pytest.mark.parametrize("version", [4, 12, 16])
def test_error_codes_of_a_raw_fetch_response(version: int) -> None:
    topics = [TopicData("t", None, [PartitionData(0, E.offset_out_of_range), PartitionData(1, 0, records=b""),
                                    PartitionData(2, E.offset_out_of_range)])]
    if version >= 13:
        import uuid
        topics[0].topic_id = uuid.uuid4()
    buffers, _ = encode_fetch_response(version, 7, topics, error_code=0, session_id=0, node_endpoints=[])
    codes = request_log.error_codes(RequestHeader(1, version, 7, "c"), RawResponse(buffers))
    assert codes == Counter({E.offset_out_of_range: 2})


def test_undecodable_raw_response_is_unknown_not_an_error() -> None:
    header = RequestHeader(1, 12, 7, "c")
    assert request_log.error_codes(header, RawResponse([b"\x00\x00\x00\x07", b"garbage"])) is None
    assert request_log.error_codes(header, None) == Counter()  # acks=0: no response


def test_walk_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(request_log, "MAX_ENTITIES", 3)  # the response and its first two topics
    body = _metadata([(E.unknown_topic_or_partition, [])] * 10)
    assert request_log.error_codes(RequestHeader(3, 12, 1, "c"), body) == Counter({E.unknown_topic_or_partition: 2})


def test_api_names() -> None:
    assert [request_log.api_name(k) for k in (0, 1, 3, 18, 68, 9999)] == [
        "Produce", "Fetch", "Metadata", "ApiVersions", "ConsumerGroupHeartbeat", "api9999"]


def test_log_level_option() -> None:
    assert _parse_log_levels("INFO") == ("INFO", {})
    assert _parse_log_levels("debug") == ("DEBUG", {})
    assert _parse_log_levels("hightide.request=debug") == ("INFO", {"hightide.request": "DEBUG"})
    assert _parse_log_levels("warning, hightide.request=DEBUG,hightide.group=info") == (
        "WARNING", {"hightide.request": "DEBUG", "hightide.group": "INFO"})
    for bad in ("verbose", "hightide.request=loud", "=debug"):
        with pytest.raises(click.BadParameter):
            _parse_log_levels(bad)


def _error_handler(ctx, req):
    return ListGroupsResponse(throttle_time=datetime.timedelta(0), error_code=E.coordinator_not_available,
                              groups=())


@pytest.fixture
def request_logger():
    logger = logging.getLogger("hightide.request")
    old = logger.level
    yield logger
    logger.setLevel(old)


def test_connection_logs_each_request_when_enabled(routes: Callable, request_logger, caplog) -> None:  # noqa: F811
    from kio.schema.list_groups.v4.request import ListGroupsRequest
    request_logger.setLevel(logging.DEBUG)

    async def scenario() -> None:
        h = harness(routes)
        routes(SYNC_KEY, 0, 4, _error_handler)
        h.receive(encode_request(SYNC_KEY, 4, 41, "cli-1", ListGroupsRequest(states_filter=())))
        assert h.transport.correlation_ids() == [41]
        assert h.conn._started == {}

    with caplog.at_level(logging.DEBUG, logger="hightide.request"):
        asyncio.run(scenario())
    lines = [r.getMessage() for r in caplog.records if r.name == "hightide.request"]
    assert len(lines) == 1
    assert lines[0].startswith("ListGroups v4 client_id=cli-1 correlation_id=41 peer=127.0.0.1:54321 "
                               "errors=COORDINATOR_NOT_AVAILABLE x1 latency_ms=")


def test_connection_does_nothing_for_the_log_when_off(routes: Callable, request_logger, caplog,  # noqa: F811
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from kio.schema.list_groups.v4.request import ListGroupsRequest
    request_logger.setLevel(logging.INFO)

    def must_not_run(*args, **kwargs):
        raise AssertionError("request log work while the logger is off")

    for name in ("log_completed", "log_answered", "error_codes", "error_summary"):
        monkeypatch.setattr(request_log, name, must_not_run)

    async def scenario() -> None:
        h = harness(routes)
        routes(SYNC_KEY, 0, 4, _error_handler)
        h.receive(encode_request(SYNC_KEY, 4, 41, "cli-1", ListGroupsRequest(states_filter=())))
        h.receive(b"\x00\x00\x00\x0a" + (18).to_bytes(2, "big") + (99).to_bytes(2, "big")
                  + (42).to_bytes(4, "big") + b"\xff\xff")  # ApiVersions v99: answered by the connection
        assert h.transport.correlation_ids() == [41, 42]
        assert h.conn._started == {}

    with caplog.at_level(logging.DEBUG, logger="hightide.server"):
        asyncio.run(scenario())
    assert not [r for r in caplog.records if r.name == "hightide.request"]
