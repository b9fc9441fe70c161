"""The read gate (seed 004's read-after-write on a broker) and the forwarding helpers,
without sockets: waits released by the LAO, re-checked against newer content, bounded
with a rate-limited warning; `local` never waits; Envelope's MetadataOffset tag; error
answers for every forwarded API; ApiVersions narrowed to the controller's ranges."""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from hightide.protocol.codec import request_schema
from hightide.protocol.build import materialize
from hightide.protocol.errors import ErrorCode
from hightide.node.forwarding import FORWARDED, Forwarder, client_address, error_response, metadata_offset
from hightide.node.read_gate import ReadGate
from hightide.server.node_routes import gated_routes
from hightide.server.registry import Route


class Offsets:
    def __init__(self) -> None:
        self.lao, self.applied, self.content = -1, 10, 10

    def gate(self, consistency: str = "acknowledged", max_wait_ms: int = 2000) -> ReadGate:
        return ReadGate(consistency, max_wait_ms, lao=lambda: self.lao, applied=lambda: self.applied,
                        content=lambda: self.content)


def test_a_forwarded_write_waits_for_the_lao_and_the_local_copy() -> None:
    async def main() -> None:
        o = Offsets()
        gate = o.gate()
        task = asyncio.ensure_future(gate.wait_write(12, "CreateTopics"))
        await asyncio.sleep(0.01)
        o.lao = 12
        gate.advance()
        await asyncio.sleep(0.01)
        assert not task.done()  # every other broker has 12, this one only 10
        o.applied = 12
        gate.advance()
        assert await asyncio.wait_for(task, 1) is True
    asyncio.run(main())


def test_a_read_waits_for_content_applied_while_it_waited() -> None:
    async def main() -> None:
        o = Offsets()
        gate = o.gate()
        task = asyncio.ensure_future(gate.wait_read("Metadata"))
        await asyncio.sleep(0.01)
        o.applied = o.content = 11  # more content arrived here meanwhile
        o.lao = 10
        gate.advance()
        await asyncio.sleep(0.01)
        assert not task.done()  # 10 is covered, but the reader would now see 11
        o.lao = 11
        gate.advance()
        assert await asyncio.wait_for(task, 1) is True
    asyncio.run(main())


def test_bounded_wait_answers_and_warns_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        o = Offsets()
        gate = o.gate(max_wait_ms=50)
        with caplog.at_level(logging.WARNING, "hightide.read_gate"):
            assert await gate.wait_read("Metadata") is False
            assert await gate.wait_write(10, "DeleteTopics") is False
        assert gate.timeouts == 2
        warnings = [r.getMessage() for r in caplog.records]
        assert len(warnings) == 1 and "metadata.read.max.wait.ms=50" in warnings[0]
        assert "offset 10" in warnings[0] and "lowest acknowledged offset is -1" in warnings[0]
    asyncio.run(main())


def test_local_consistency_never_waits() -> None:
    async def main() -> None:
        gate = Offsets().gate("local", max_wait_ms=10_000)
        assert await asyncio.wait_for(gate.wait_read("Metadata"), 0.5) is True
        assert await asyncio.wait_for(gate.wait_write(99, "CreateTopics"), 0.5) is True
    asyncio.run(main())


def test_wait_applied_in_either_mode_and_wake_all() -> None:
    async def main() -> None:
        o = Offsets()
        gate = o.gate("local")
        task = asyncio.ensure_future(gate.wait_applied(15, 5))
        await asyncio.sleep(0.01)
        o.applied = 15
        gate.advance()
        assert await asyncio.wait_for(task, 1) is True
        held = asyncio.ensure_future(o.gate().wait_write(50, "x"))
        await asyncio.sleep(0)
        assert await gate.wait_applied(16, 0.01) is False
        held.cancel()
    asyncio.run(main())


def test_gated_routes_wait_before_the_handler_runs() -> None:
    async def main() -> None:
        o = Offsets()
        gate = o.gate()
        seen = []
        routes = {3: Route(3, 0, 12, lambda ctx, req: seen.append(o.lao) or "answer", "metadata"),
                  18: Route(18, 0, 4, lambda ctx, req: "versions", "api_versions")}
        gated = gated_routes(routes, gate)
        assert gated[18] is routes[18]  # ApiVersions is not a metadata read
        task = asyncio.ensure_future(gated[3].fn(None, None))
        await asyncio.sleep(0.01)
        assert not seen
        o.lao = 10
        gate.advance()
        assert await asyncio.wait_for(task, 1) == "answer" and seen == [10]
    asyncio.run(main())


def test_metadata_offset_tag_and_client_address() -> None:
    assert metadata_offset({1: {10000: struct.pack(">q", 42)}}) == 42
    assert metadata_offset({1: {7: b"x"}}) is None and metadata_offset({}) is None
    assert client_address("127.0.0.1:5555") == bytes([127, 0, 0, 1])
    assert len(client_address("[::1]:5555")) == 16 and client_address("?") == b""


@pytest.mark.parametrize("api_key", sorted(FORWARDED))
def test_error_response_for_every_forwarded_api(api_key: int) -> None:
    from kio.schema.index import api_key_map, schema_name_map
    version = max(schema_name_map[api_key_map[api_key]])
    bodies: dict[int, dict[str, Any]] = {
        19: {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                         "configs": []}], "timeout": 1000},
        20: {"topics": [{"name": "t", "topic_id": uuid.UUID(int=0)}], "timeout": 1000},
        33: {"resources": [{"resource_type": 2, "resource_name": "t", "configs": []}], "validate_only": False},
        37: {"topics": [{"name": "t", "count": 2, "assignments": None}], "timeout": 1000, "validate_only": False},
        44: {"resources": [{"resource_type": 2, "resource_name": "t", "configs": []}], "validate_only": False},
        57: {"feature_updates": [], "timeout": 1000},
        30: {"creations": [{"resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
                            "principal": "User:a", "host": "*", "operation": 3, "permission_type": 3}]},
        31: {"filters": [{"resource_type_filter": 2, "resource_name_filter": "t", "pattern_type_filter": 3,
                          "principal_filter": None, "host_filter": None, "operation": 3, "permission_type": 3}]},
        51: {"deletions": [{"name": "u", "mechanism": 1}], "upsertions": []},
        55: {"topics": []},
        43: {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0]}], "timeout": 1000},
        45: {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "replicas": [1]}]}], "timeout": 1000},
        46: {"topics": None, "timeout": 1000}, 64: {"broker_id": 3},
        49: {"entries": [{"entity": [{"entity_type": "user", "entity_name": None}],
                          "ops": [{"key": "producer_byte_rate", "value": 1.0, "remove": False}]}],
             "validate_only": False},
        80: {"cluster_id": None, "timeout": 1000, "voter_id": 3, "voter_directory_id": uuid.UUID(int=1),
             "listeners": [{"name": "CONTROLLER", "host": "h", "port": 1}]},
        81: {"cluster_id": None, "voter_id": 3, "voter_directory_id": uuid.UUID(int=1)}}
    req = materialize(request_schema(api_key, version), bodies[api_key])
    resp = error_response(api_key, version, req, ErrorCode.request_timed_out, "no controller")
    items = (getattr(resp, "topics", None) or getattr(resp, "results", None)
             or getattr(resp, "filter_results", None) or getattr(resp, "entries", None))
    if api_key == 43:  # per partition, in topics
        items = [p for t in resp.replica_election_results for p in t.partition_result]
    elif api_key == 45:
        items = [p for t in resp.responses for p in t.partitions]
    elif items is None:
        items = getattr(resp, "responses", None)
    codes = [int(i.error_code) for i in items] if items else [int(resp.error_code)]
    assert codes == [ErrorCode.request_timed_out]


def test_api_versions_narrowed_to_the_controller() -> None:
    channel = SimpleNamespace(api_versions={})
    fwd = Forwarder(channel, Offsets().gate())  # type: ignore[arg-type]
    ranges = [{"api_key": 19, "min_version": 2, "max_version": 7}, {"api_key": 3, "min_version": 0,
                                                                      "max_version": 12},
              {"api_key": 57, "min_version": 0, "max_version": 2}]
    assert fwd.narrow(ranges) == ranges  # the controller's versions are not known yet
    channel.api_versions = {19: (0, 5), 3: (0, 1)}
    assert fwd.narrow(ranges) == [{"api_key": 19, "min_version": 2, "max_version": 5},
                                  {"api_key": 3, "min_version": 0, "max_version": 12}]  # 57: not at the controller


def test_a_read_waits_while_the_broker_is_behind_the_lao() -> None:
    """A broker the LAO does not count (fenced, or its metadata copy stopped) holds less
    than writes answered elsewhere: its reads wait until it has applied the LAO."""
    async def main() -> None:
        o = Offsets()
        o.lao = 50  # every unfenced broker applied 50; this one stopped at 10
        gate = o.gate()
        task = asyncio.ensure_future(gate.wait_read("Metadata"))
        await asyncio.sleep(0.01)
        assert not task.done()
        o.applied = o.content = 50
        gate.advance()
        assert await asyncio.wait_for(task, 1) is True
        o.lao = 60
        assert await o.gate(max_wait_ms=50).wait_read("Metadata") is False
    asyncio.run(main())
