"""Raw requests the replication tests make of one broker about partition 0 of
``TOPIC`` (an RF=3 topic): Metadata's leader and ISR, a one-record Produce, the
partition's segment bytes on disk."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from hightide.client import BrokerConnection
from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import build_batch

TOPIC = "replicated"


def call(address: str, api: int, version: int, body: dict[str, Any], timeout_s: float = 30.0) -> Any:
    """One request on a fresh connection to the broker at ``address``."""
    async def run() -> Any:
        host, port = address.rsplit(":", 1)
        conn = BrokerConnection(host, int(port), "test-replication", request_timeout_s=timeout_s)
        await conn.connect()
        try:
            return await conn.request(api, version, body)
        finally:
            await conn.close()
    return asyncio.run(run())


def partition_state(address: str) -> tuple[int, set[int]] | None:
    """(leader, ISR) of partition 0 as the broker at ``address`` has it, None if unknown."""
    resp = call(address, 3, 12, {"topics": [{"name": TOPIC, "topic_id": None}], "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False})
    parts = resp.topics[0].partitions
    if resp.topics[0].error_code or not parts or parts[0].error_code:
        return None
    return int(parts[0].leader_id), set(parts[0].isr_nodes)


def produce(address: str, value: bytes, acks: int, timeout_ms: int = 10_000) -> tuple[ErrorCode, int]:
    """(error, base offset) of a one-record batch produced to partition 0."""
    batch = build_batch([(None, value, [], int(time.time() * 1000))])
    resp = call(address, 0, 9, {"transactional_id": None, "acks": acks, "timeout": timeout_ms, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]})
    p = resp.responses[0].partition_responses[0]
    return ErrorCode(p.error_code), int(p.base_offset)


def on_disk(data_dir: Path) -> bytes:
    """Every segment byte of the partition's replica in ``data_dir`` (b"" when absent)."""
    return b"".join(f.read_bytes() for f in sorted((data_dir / f"{TOPIC}-0").glob("*.log")))
