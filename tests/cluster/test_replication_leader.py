"""The leader side of replication with real processes (issue 15): an RF=3 partition on three
brokers; acks=all is answered only once the followers have the records; a consumer never
reads past the high watermark; a SIGSTOPped follower leaves the ISR after
replica.lag.time.max.ms (the leader's AlterPartition), acks=all with
min.insync.replicas=3 then answers NOT_ENOUGH_REPLICAS and nothing new becomes visible;
after SIGCONT the follower catches up, rejoins the ISR and the records are committed.
"""

from __future__ import annotations

import time

from hightide.protocol.errors import ErrorCode
from hightide.protocol.records import decode_records, validate_batches
from tests.waiting import wait_until

from .replication_calls import TOPIC, call, on_disk, partition_state, produce

LAG_MS = 1500  # replica.lag.time.max.ms: well under the 3 s session, so the leader shrinks the ISR first


def fetch(address: str) -> tuple[int, list[bytes]]:
    """(high watermark, values) a consumer reads from offset 0 without waiting."""
    resp = call(address, 1, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                 "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                     {"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                                      "fetch_offset": 0, "last_fetched_epoch": -1,
                                                                      "log_start_offset": -1,
                                                                      "partition_max_bytes": 1 << 20}]}],
                                 "forgotten_topics_data": [], "rack_id": ""})
    p = resp.responses[0].partitions[0]
    assert p.error_code == ErrorCode.none, ErrorCode(p.error_code)
    data = bytes(p.records or b"")
    values = [r.value for h in validate_batches(data, client_origin=False)
              for r in decode_records(memoryview(data)[h.position:h.position + h.size])]
    return p.high_watermark, [v for v in values if v is not None]


def latest_offset(address: str) -> int:
    resp = call(address, 2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    p = resp.topics[0].partitions[0]
    assert p.error_code == ErrorCode.none, ErrorCode(p.error_code)
    return int(p.offset)


def test_acks_all_waits_for_the_isr_and_a_stopped_follower_leaves_and_rejoins(cluster):
    c = cluster(3, replica_lag_time_max_ms=LAG_MS)
    created = call(c.address(0), 19, 7, {"topics": [
        {"name": TOPIC, "num_partitions": 1, "replication_factor": 3, "assignments": [],
         "configs": [{"name": "min.insync.replicas", "value": "3"}]}], "timeout": 30_000, "validate_only": False})
    assert created.topics[0].error_code == ErrorCode.none, created.topics[0].error_message
    everyone = set(c.broker_ids)

    def led_with_full_isr() -> tuple[int, set[int]] | None:
        states = [partition_state(c.address(b)) for b in everyone]
        first = states[0]
        return first if first is not None and first[0] >= 0 and first[1] == everyone and all(
            s == first for s in states) else None
    leader, _ = wait_until(led_with_full_isr, 30, what="the RF=3 partition led with a full ISR on every broker")
    lead = c.address(leader)
    follower, other = sorted(everyone - {leader})

    # acks=all answers once every ISR member has the batch: both followers hold it on disk
    assert produce(lead, b"first", acks=-1) == (ErrorCode.none, 0)
    for b in (follower, other):
        assert b"first" in on_disk(c.node(b).spec.data_dir), f"broker {b} lacks an acknowledged record"
    assert latest_offset(lead) == 1

    c.pause(follower)
    try:
        # the stopped follower is still in the ISR: the high watermark cannot pass it
        assert produce(lead, b"second", acks=-1, timeout_ms=300) == (ErrorCode.request_timed_out, 1)
        assert fetch(lead) == (1, [b"first"])  # appended on the leader, not visible to consumers
        wait_until(lambda: partition_state(lead) == (leader, everyone - {follower}), LAG_MS / 1000 + 20,
                   what=f"broker {follower} removed from the ISR")
        assert "Shrinking ISR from" in c.node(leader).output()
        # ISR 2 < min.insync.replicas 3: acks=all refused before appending, acks=1 appended but not committed
        assert produce(lead, b"refused", acks=-1)[0] == ErrorCode.not_enough_replicas
        assert produce(lead, b"third", acks=1) == (ErrorCode.none, 2)
        assert fetch(lead) == (1, [b"first"]) and latest_offset(lead) == 1
    finally:
        c.resume(follower)

    wait_until(lambda: partition_state(lead) == (leader, everyone), 60, what=f"broker {follower} back in the ISR")
    assert "Expanding ISR from" in c.node(leader).output()
    assert produce(lead, b"fourth", acks=-1) == (ErrorCode.none, 3)
    assert fetch(lead) == (4, [b"first", b"second", b"third", b"fourth"])
    for b in everyone - {leader}:
        assert b"fourth" in on_disk(c.node(b).spec.data_dir)
