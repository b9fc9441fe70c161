"""The transaction APIs on the wire (raw requests): the answers and error codes Kafka
gives, including the version-dependent ones clients never exercise (PRODUCER_FENCED vs
INVALID_PRODUCER_EPOCH, the batched verify-only AddPartitionsToTxn v4, WriteTxnMarkers)."""

from __future__ import annotations

import pytest

from hightide.protocol.records import build_batch

from ..rawkafka import RawClient
from .clients import confluent_create_topic

pytestmark = pytest.mark.integration

NONE, UNKNOWN_TOPIC, INVALID_REQUEST, INVALID_EPOCH, INVALID_TXN_STATE, MAPPING = 0, 3, 42, 47, 48, 49
INVALID_TIMEOUT, NOT_ATTEMPTED, FENCED = 50, 55, 90


def _add(c: RawClient, version: int, tid: str, pid: int, epoch: int, topics: dict[str, list[int]]) -> dict:
    r = c.request(24, version, {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
                                "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [
                                    {"name": t, "partitions": ps} for t, ps in topics.items()]})
    return {(t.name, p.partition_index): int(p.partition_error_code)
            for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}


def _produce(c: RawClient, tid: str | None, topic: str, partition: int, pid: int, epoch: int, seq: int) -> int:
    batch = build_batch([(None, b"v", [], 1_700_000_000_000)], producer_id=pid, producer_epoch=epoch,
                        base_sequence=seq, is_transactional=True)
    r = c.request(0, 9, {"transactional_id": tid, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    return int(r.responses[0].partition_responses[0].error_code)


def _end(c: RawClient, version: int, tid: str, pid: int, epoch: int, commit: bool) -> int:
    return int(c.request(26, version, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                       "committed": commit}).error_code)


def test_transaction_apis_answer_as_kafka(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, 2)
    tid = f"wire-{topic_name}"
    with RawClient(server.bootstrap) as c:
        fc = c.request(10, 4, {"key_type": 1, "coordinator_keys": [tid, ""]})
        assert [(int(e.error_code), e.node_id >= 0) for e in fc.coordinators] == [(NONE, True), (INVALID_REQUEST, False)]
        too_long = c.request(22, 4, {"transactional_id": tid, "transaction_timeout": 900_001,
                                     "producer_id": -1, "producer_epoch": -1})
        assert too_long.error_code == INVALID_TIMEOUT
        init = c.request(22, 4, {"transactional_id": tid, "transaction_timeout": 60_000,
                                 "producer_id": -1, "producer_epoch": -1})
        assert (init.error_code, init.producer_epoch) == (NONE, 0)
        pid = init.producer_id
        again = c.request(22, 1, {"transactional_id": tid, "transaction_timeout": 60_000})
        assert (again.error_code, again.producer_id, again.producer_epoch) == (NONE, pid, 1)

        assert _add(c, 3, tid, pid, 1, {topic_name: [0], "no-such-topic": [0]}) == {
            (topic_name, 0): NOT_ATTEMPTED, ("no-such-topic", 0): UNKNOWN_TOPIC}
        assert _add(c, 1, tid, pid, 0, {topic_name: [0]}) == {(topic_name, 0): INVALID_EPOCH}  # before KIP-588
        assert _add(c, 3, tid, pid, 0, {topic_name: [0]}) == {(topic_name, 0): FENCED}
        assert _add(c, 3, tid, pid + 1, 1, {topic_name: [0]}) == {(topic_name, 0): MAPPING}
        assert _add(c, 3, tid, pid, 1, {topic_name: [0]}) == {(topic_name, 0): NONE}

        verify = c.request(24, 4, {"transactions": [
            {"transactional_id": tid, "producer_id": pid, "producer_epoch": 1, "verify_only": True,
             "topics": [{"name": topic_name, "partitions": [0, 1]}]},
            {"transactional_id": "unknown-" + tid, "producer_id": pid, "producer_epoch": 1, "verify_only": True,
             "topics": [{"name": topic_name, "partitions": [0]}]}]})
        assert verify.error_code == NONE
        got = {(r.transactional_id, p.partition_index): int(p.partition_error_code)
               for r in verify.results_by_transaction for t in r.topic_results for p in t.results_by_partition}
        assert got == {(tid, 0): NONE, (tid, 1): INVALID_TXN_STATE, ("unknown-" + tid, 0): MAPPING}

        assert _produce(c, tid, topic_name, 1, pid, 1, 0) == INVALID_TXN_STATE  # KIP-890: not added
        assert _produce(c, tid, topic_name, 0, pid, 1, 0) == NONE
        assert _end(c, 3, tid, pid, 1, True) == NONE
        assert _end(c, 3, tid, pid, 1, False) == INVALID_TXN_STATE  # the other outcome than the one completed
        assert _end(c, 3, tid, pid, 1, True) == NONE  # a retry
        assert _end(c, 1, tid, pid, 0, True) == INVALID_EPOCH
        assert _end(c, 3, tid, pid, 0, True) == FENCED
        lso = c.request(2, 7, {"replica_id": -1, "isolation_level": 1, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
        assert lso.topics[0].partitions[0].offset == 2  # the record and the COMMIT marker

        markers = c.request(27, 1, {"markers": [{"producer_id": 999_999, "producer_epoch": 0, "transaction_result": False,
                                                 "coordinator_epoch": 0, "topics": [
                                                     {"name": topic_name, "partition_indexes": [1, 7]}]}]})
        got = {(t.name, p.partition_index): int(p.error_code) for m in markers.markers for t in m.topics
               for p in t.partitions}
        assert got == {(topic_name, 1): NONE, (topic_name, 7): UNKNOWN_TOPIC}


def test_end_txn_while_ongoing_init_aborts_and_fences(server, topic_name):
    """InitProducerId while a transaction is ongoing: CONCURRENT_TRANSACTIONS until the
    coordinator's abort is complete, then a bumped epoch; the old epoch is fenced."""
    confluent_create_topic(server.bootstrap, topic_name, 1)
    tid = f"wire2-{topic_name}"
    with RawClient(server.bootstrap) as c:
        init = c.request(22, 4, {"transactional_id": tid, "transaction_timeout": 60_000,
                                 "producer_id": -1, "producer_epoch": -1})
        pid = init.producer_id
        assert _add(c, 3, tid, pid, 0, {topic_name: [0]}) == {(topic_name, 0): NONE}
        assert _produce(c, tid, topic_name, 0, pid, 0, 0) == NONE
        codes = []
        for _ in range(50):
            r = c.request(22, 4, {"transactional_id": tid, "transaction_timeout": 60_000,
                                  "producer_id": -1, "producer_epoch": -1})
            codes.append(int(r.error_code))
            if r.error_code == NONE:
                break
        assert codes[0] == 51 and codes[-1] == NONE  # CONCURRENT_TRANSACTIONS, then the new epoch
        assert r.producer_epoch == 2  # one bump to fence (the abort's markers), one for this producer
        assert _produce(c, tid, topic_name, 0, pid, 0, 1) == INVALID_EPOCH  # the zombie
        assert _end(c, 3, tid, pid, 0, True) == FENCED
