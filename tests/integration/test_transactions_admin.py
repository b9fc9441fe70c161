"""The operators' transaction APIs (DescribeProducers, DescribeTransactions,
ListTransactions, abort through WriteTxnMarkers) with kafka-python's admin client (the
KIP-664 calls) and ``hightide transactions ...`` against a real ``hightide serve``."""

from __future__ import annotations

import json
import shutil
import uuid
from typing import Any

import pytest
from click.testing import CliRunner

from hightide.cli import main
from tests.rawkafka import RawClient
from tests.waiting import wait_until

from .clients import confluent_create_topic

pytestmark = pytest.mark.integration

ck = pytest.importorskip("confluent_kafka")
kadmin = pytest.importorskip("kafka.admin")
kafka = pytest.importorskip("kafka")


def _cli(bootstrap: str, *args: str, ok: bool = True) -> Any:
    r = CliRunner().invoke(main, ["transactions", *args, "-b", bootstrap, "-o", "json"], catch_exceptions=False)
    if ok:
        assert r.exit_code == 0, r.output
        return json.loads(r.output)
    return r


def _open_transaction(bootstrap: str, topic: str, tid: str, n: int = 3) -> "ck.Producer":
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5})
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), partition=0)
    assert p.flush(15) == 0
    return p


def _lso_and_hw(bootstrap: str, topic: str) -> tuple[int, int]:
    out = []
    with RawClient(bootstrap) as c:
        for isolation in (1, 0):
            r = c.request(2, 5, {"replica_id": -1, "isolation_level": isolation, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                "timestamp": -1}]}]})
            out.append(r.topics[0].partitions[0].offset)
    return out[0], out[1]


def test_kafka_python_admin_sees_open_then_committed_transaction(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, partitions=1)
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    p = _open_transaction(server.bootstrap, topic_name, tid)
    admin = kadmin.KafkaAdminClient(bootstrap_servers=server.bootstrap)
    tp = kafka.TopicPartition(topic_name, 0)
    try:
        listed = [t for ts in admin.list_transactions().values() for t in ts if t.transactional_id == tid]
        assert [t.state.value for t in listed] == ["Ongoing"]
        pid = listed[0].producer_id
        assert [t.transactional_id for ts in admin.list_transactions(producer_id_filters=[pid]).values()
                for t in ts] == [tid]
        assert not [t for ts in admin.list_transactions(state_filters=["CompleteCommit"],
                                                        producer_id_filters=[pid]).values() for t in ts]
        d = admin.describe_transactions([tid])[tid]
        assert (d.state.value, d.producer_id, d.producer_epoch) == ("Ongoing", pid, 0)
        assert d.topic_partitions == {tp} and d.transaction_timeout_ms == 60000
        assert d.transaction_start_time_ms > 0
        [prod] = admin.describe_producers([tp])[tp].active_producers
        assert (prod.producer_id, prod.producer_epoch, prod.last_sequence) == (pid, 0, 2)
        assert prod.current_transaction_start_offset == 0 and prod.last_timestamp > 0

        p.commit_transaction(15)
        d = admin.describe_transactions([tid])[tid]
        assert d.state.value == "CompleteCommit" and d.topic_partitions == set()
        [prod] = admin.describe_producers([tp])[tp].active_producers
        assert prod.current_transaction_start_offset == -1 and prod.coordinator_epoch == 0
        with pytest.raises(kafka.errors.TransactionalIdNotFoundError):
            admin.describe_transactions([f"never-{tid}"])
        with pytest.raises(kafka.errors.UnknownTopicOrPartitionError):
            admin.describe_producers([kafka.TopicPartition(topic_name, 7)], broker_id=1)
    finally:
        admin.close()


def test_list_transactions_filters_raw(server, topic_name):
    """Unknown state names are echoed and match nothing; v1's duration filter; v2's
    pattern must match the whole id, an invalid one is INVALID_REGULAR_EXPRESSION."""
    confluent_create_topic(server.bootstrap, topic_name, partitions=1)
    tid = f"flt-{uuid.uuid4().hex[:8]}"
    p = _open_transaction(server.bootstrap, topic_name, tid)
    try:
        with RawClient(server.bootstrap) as c:
            def ids(version: int, **body: Any) -> tuple[int, list[str], list[str]]:
                r = c.request(66, version, {"state_filters": [], "producer_id_filters": [], **body})
                return (r.error_code, list(r.unknown_state_filters),
                        [t.transactional_id for t in r.transaction_states if t.transactional_id.startswith("flt-")])
            assert ids(0, state_filters=["Ongoing"])[2] == [tid]
            assert ids(0, state_filters=["Bogus"]) == (0, ["Bogus"], [])
            assert ids(0, state_filters=["Bogus", "Ongoing"]) == (0, ["Bogus"], [tid])
            assert ids(1, duration_filter=3_600_000)[2] == []
            assert ids(1, duration_filter=0)[2] == [tid]
            assert ids(2, transactional_id_pattern="flt-.*")[2] == [tid]
            assert ids(2, transactional_id_pattern="flt")[2] == []
            assert ids(2, transactional_id_pattern="(")[0] == 128  # INVALID_REGULAR_EXPRESSION
    finally:
        p.abort_transaction(15)


def test_cli_list_describe_and_producers(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, partitions=1)
    tid = f"cli-{uuid.uuid4().hex[:8]}"
    p = _open_transaction(server.bootstrap, topic_name, tid)
    try:
        [row] = [r for r in _cli(server.bootstrap, "list", "--state", "Ongoing") if r["transactional_id"] == tid]
        assert row["state"] == "Ongoing" and row["coordinator"] == 1
        d = _cli(server.bootstrap, "describe", "--transactional-id", tid)[0]
        assert d["state"] == "Ongoing" and d["partitions"] == [f"{topic_name}-0"] and d["duration_ms"] >= 0
        [prod] = _cli(server.bootstrap, "describe-producers", "--topic", topic_name, "--partition", "0")
        assert prod["producer_id"] == row["producer_id"] and prod["current_txn_start_offset"] == 0
        # an open transaction its coordinator knows about is not hanging, however old
        assert _cli(server.bootstrap, "find-hanging", "--topic", topic_name, "--max-transaction-timeout", "0") == []
        r = CliRunner().invoke(main, ["transactions", "describe", "--transactional-id", "nope-" + tid,
                                      "-b", server.bootstrap])
        assert r.exit_code != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in r.output
        table = CliRunner().invoke(main, ["transactions", "describe-producers", "--topic", topic_name,
                                          "--partition", "0", "-b", server.bootstrap]).output
        assert table.split()[:6] == ["PRODUCER-ID", "PRODUCER-EPOCH", "LATEST-COORDINATOR-EPOCH", "LAST-SEQUENCE",
                                     "LAST-TIMESTAMP", "CURRENT-TRANSACTION-START-OFFSET"]
    finally:
        p.abort_transaction(15)
    assert _cli(server.bootstrap, "describe", "--transactional-id", tid)[0]["state"] == "CompleteAbort"


def test_hanging_transaction_found_and_aborted(fresh_server, topic_name):
    """The coordinator lost its state (``__transaction_state`` gone while the broker was
    down): the partition still holds the open transaction, the LSO is stuck and nothing
    will ever abort it. find-hanging names it; abort --start-offset writes the ABORT
    marker (WriteTxnMarkers), the LSO reaches the end and read_committed skips it."""
    srv = fresh_server()
    confluent_create_topic(srv.bootstrap, topic_name, partitions=1)
    tid = f"hang-{uuid.uuid4().hex[:8]}"
    p = _open_transaction(srv.bootstrap, topic_name, tid)
    srv.kill9()
    del p
    for d in srv.data_dir.glob("__transaction_state-*"):
        shutil.rmtree(d)
    srv = fresh_server(data_dir=srv.data_dir, port=srv.port)
    assert _lso_and_hw(srv.bootstrap, topic_name) == (0, 3)
    assert _cli(srv.bootstrap, "list") == []
    hanging = _cli(srv.bootstrap, "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "0")
    assert [(h["topic"], h["partition"], h["start_offset"]) for h in hanging] == [(topic_name, 0, 0)]
    # a large timeout: the producer wrote moments ago, so it is no candidate yet
    assert _cli(srv.bootstrap, "find-hanging", "--topic", topic_name, "--partition", "0") == []
    r = _cli(srv.bootstrap, "abort", "--topic", topic_name, "--partition", "0", "--start-offset", "5", ok=False)
    assert r.exit_code != 0 and "no open transaction starts at offset 5" in r.output
    [done] = _cli(srv.bootstrap, "abort", "--topic", topic_name, "--partition", "0", "--start-offset", "0")
    assert done["producer_id"] == hanging[0]["producer_id"] and done["result"] == "aborted"
    wait_until(lambda: _lso_and_hw(srv.bootstrap, topic_name) == (4, 4), 10, what="the LSO passes the marker")
    assert _cli(srv.bootstrap, "find-hanging", "--topic", topic_name, "--max-transaction-timeout", "0") == []
    # the same producer aborted twice: an older epoch than the partition's fails as Kafka's
    r = _cli(srv.bootstrap, "abort", "--topic", topic_name, "--partition", "0", "--producer-id",
             str(done["producer_id"]), "--producer-epoch", "-1", "--coordinator-epoch", "0", ok=False)
    assert r.exit_code != 0 and "INVALID_PRODUCER_EPOCH" in r.output
