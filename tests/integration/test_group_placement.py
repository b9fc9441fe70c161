"""Issue 20 item 5: a group lives in ``__consumer_offsets`` partition
``Utils.abs(groupId.hashCode()) % partitions``, as in Kafka. hightide used to compute
``(hash & 0x7FFFFFFF) % partitions`` (``toPositive``), which differs for every negative
hash: group ``g-cmp-5a109cd5`` (hash -4695597) belongs in partition 47 of 50 and was stored
in 1. Existing data dirs are migrated at start-up: the records of a misplaced group are
copied into the right partition (fsynced), then tombstoned at the old place, before the
partitions are served.

The old layout is written the way the old code wrote it: the broker creates the topics,
stops, and the group's OffsetCommit record is appended to partition 1 with the record
codec (the same bytes the old broker appended there).
"""

from __future__ import annotations

import time

from hightide.group.records import OffsetKey, OffsetValue, encode_key, encode_value
from hightide.group.shard import decode_record
from hightide.log.config import LogConfig
from hightide.log.partition_log import PartitionLog
from hightide.protocol.records import build_batch, decode_records, validate_batches
from tests.rawkafka import RawClient
from tests.waiting import wait_until

GROUP = "g-cmp-5a109cd5"  # Java hashCode -4695597: Kafka's partition 47 of 50, the old code's 1
KAFKA_PARTITION, OLD_PARTITION = 47, 1
HOME_GROUP = "placement-home"  # a group the old code already placed right (untouched)
LOAD_IN_PROGRESS = 14


def _create_topic(c: RawClient, name: str) -> None:
    resp = c.request(19, 7, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                         "assignments": [], "configs": []}],
                             "timeout": 10_000, "validate_only": False})
    assert resp.topics[0].error_code == 0


def _commit(c: RawClient, group: str, offset: int) -> None:
    resp = c.request(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                            "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                                {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                                 "committed_metadata": ""}]}]})
    assert resp.topics[0].partitions[0].error_code == 0


def _fetched(c: RawClient, group: str) -> int | None:
    """The committed offset, None while the coordinator is loading."""
    resp = c.request(9, 7, {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}],
                            "require_stable": False})
    if resp.error_code == LOAD_IN_PROGRESS:
        return None
    assert resp.error_code == 0, resp
    return resp.topics[0].partitions[0].committed_offset


def _offsets_log(data, partition: int) -> PartitionLog:
    return PartitionLog.open(str(data / f"__consumer_offsets-{partition}"), LogConfig(), int(time.time() * 1000),
                             clean_shutdown=True)


def _records(data, partition: int) -> list[tuple[int, object, object]]:
    """(offset, key, value) of every record of a partition, decoded."""
    plog = _offsets_log(data, partition)
    try:
        out = []
        chunk = plog.read(plog.log_start_offset, 1 << 24, max_offset=plog.high_watermark)
        if not chunk.data:
            return out
        for h in validate_batches(chunk.data, client_origin=False):
            for rec in decode_records(memoryview(chunk.data)[h.position:h.position + h.size]):
                k, v = decode_record(bytes(rec.key), None if rec.value is None else bytes(rec.value))
                out.append((rec.offset, k, v))
        return out
    finally:
        plog.close()


def _log_ends(data) -> dict[int, int]:
    ends = {}
    for p in range(50):
        plog = _offsets_log(data, p)
        ends[p] = plog.log_end_offset
        plog.close()
    return ends


def _write_as_the_old_code_did(data) -> None:
    now = int(time.time() * 1000)
    plog = _offsets_log(data, OLD_PARTITION)
    try:
        batch = build_batch([(encode_key(OffsetKey(GROUP, "t", 0)),
                              encode_value(OffsetValue(42, -1, "from-old-layout", now)), [], now)])
        plog.append(batch, validate_batches(batch, client_origin=False), now)
    finally:
        plog.close()


def _served_offset(srv, group: str) -> int:
    with RawClient(srv.bootstrap) as c:
        return wait_until(lambda: _fetched(c, group), 20, what=f"OffsetFetch of {group} after the load")


def test_a_group_with_a_negative_hash_is_moved_to_kafkas_partition(fresh_server, tmp_path):
    data = tmp_path / "data"
    srv = fresh_server()
    with RawClient(srv.bootstrap) as c:
        _create_topic(c, "t")
        assert c.request(10, 3, {"key": GROUP, "key_type": 0}).error_code == 0  # creates __consumer_offsets
        _commit(c, HOME_GROUP, 7)
    assert srv.stop() == 0
    _write_as_the_old_code_did(data)

    srv = fresh_server(data_dir=data)
    assert _served_offset(srv, GROUP) == 42  # found although it was stored in the wrong partition
    assert _served_offset(srv, HOME_GROUP) == 7
    assert srv.stop() == 0
    moved = [(k, v) for _, k, v in _records(data, KAFKA_PARTITION) if getattr(k, "group", None) == GROUP]
    assert moved and moved[-1][1].offset == 42 and moved[-1][1].metadata == "from-old-layout"
    left = [(k, v) for _, k, v in _records(data, OLD_PARTITION) if getattr(k, "group", None) == GROUP]
    assert left and left[-1][1] is None  # tombstoned at the old place (compaction drops it)
    assert f"from __consumer_offsets-{OLD_PARTITION} to their partition" in srv.output()
    ends = _log_ends(data)

    srv = fresh_server(data_dir=data)  # a second start moves nothing
    assert _served_offset(srv, GROUP) == 42
    assert srv.stop() == 0
    assert _log_ends(data) == ends
    assert "Kafka's placement" not in srv.output()


def _old_partition_for(group_id: str, num_partitions: int) -> int:
    """What hightide computed before the fix (``toPositive``)."""
    from hightide.group.records import java_string_hash
    return (java_string_hash(group_id) & 0x7FFFFFFF) % num_partitions


class _EmbeddedBroker:
    """An in-process broker on its own event-loop thread over ``data_dir``."""

    def __init__(self, data_dir) -> None:
        import asyncio
        import threading

        from hightide import Broker, BrokerConfig
        self.loop = asyncio.new_event_loop()
        self.broker = Broker(BrokerConfig.load(overrides={}), data_dir=str(data_dir), listen=("127.0.0.1", 0))
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.broker.start(), self.loop).result(30)
        self.bootstrap = f"127.0.0.1:{self.broker.port}"

    def stop(self) -> None:
        import asyncio
        try:
            asyncio.run_coroutine_threadsafe(self.broker.stop(), self.loop).result(30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


def test_a_consumer_group_written_with_the_old_placement_keeps_its_members_and_offsets(tmp_path, monkeypatch):
    """A KIP-848 consumer group (member, assignment and epoch records) and its offsets, all
    written by a broker placing groups the old way, are served after a restart with the
    right placement: same member, same epoch, same offset; nothing left in partition 1."""
    import uuid

    from hightide.coordinator import groups as group_runtime
    monkeypatch.setattr(group_runtime, "partition_for", _old_partition_for)
    b = _EmbeddedBroker(tmp_path)
    try:
        with RawClient(b.bootstrap) as c:
            _create_topic(c, "t")
            member = str(uuid.uuid4())
            hb = c.request(68, 0, {"group_id": GROUP, "member_id": member, "member_epoch": 0,
                                   "rebalance_timeout": 30000, "subscribed_topic_names": ["t"],
                                   "topic_partitions": []})
            assert hb.error_code == 0 and hb.member_epoch > 0
            epoch = hb.member_epoch
            resp = c.request(8, 9, {"group_id": GROUP, "generation_id_or_member_epoch": epoch, "member_id": member,
                                    "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                                        {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
                                         "committed_metadata": ""}]}]})
            assert resp.topics[0].partitions[0].error_code == 0
    finally:
        b.stop()
    assert any(getattr(k, "group_id", None) == GROUP for _, k, _ in _records(tmp_path, OLD_PARTITION))
    monkeypatch.undo()

    b = _EmbeddedBroker(tmp_path)
    try:
        with RawClient(b.bootstrap) as c:
            assert wait_until(lambda: _fetched(c, GROUP), 20, what="OffsetFetch after the load") == 42
            described = c.request(69, 0, {"group_ids": [GROUP], "include_authorized_operations": False}).groups[0]
            assert described.error_code == 0
            assert [m.member_id for m in described.members] == [member]
            assert described.group_epoch == epoch
        shards = b.broker.groups.runtime.active_shards()
        assert shards[KAFKA_PARTITION].consumer.get(GROUP) is not None
        assert shards[OLD_PARTITION].consumer.get(GROUP) is None
    finally:
        b.stop()
