"""Transactions end to end with a real client (confluent-kafka / librdkafka): the
transaction coordinator (InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn, markers) and read_committed consumers."""

from __future__ import annotations

import uuid

import pytest

from tests.waiting import wait_until

from .clients import confluent_create_topic

pytestmark = pytest.mark.integration

ck = pytest.importorskip("confluent_kafka")


def _producer(bootstrap: str, txn_id: str, **extra: object) -> "ck.Producer":
    conf = {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5}
    conf.update(extra)
    p = ck.Producer(conf)
    p.init_transactions(15)
    return p


def _consume(bootstrap: str, topic: str, isolation: str, expect: int, partitions: int = 1,
             timeout: float = 20.0) -> list[bytes]:
    """Every value of ``topic`` a consumer with ``isolation`` gets until it reached the end
    (``expect`` values, or the end offsets it can read), in order per partition."""
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                     "isolation.level": isolation, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "enable.partition.eof": True})
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    out: list[bytes] = []
    eof: set[int] = set()

    def done() -> bool:
        m = c.poll(0.2)
        if m is None:
            return False
        if m.error():
            if m.error().code() == ck.KafkaError._PARTITION_EOF:
                eof.add(m.partition())
                return len(eof) == partitions and len(out) >= expect
            raise RuntimeError(m.error())
        out.append(m.value())
        eof.discard(m.partition())
        return False

    try:
        wait_until(done, timeout, what=f"{isolation} consumer reads {expect} records of {topic}")
    finally:
        c.close()
    return out


def test_commit_and_abort_visible_only_as_committed(server, topic_name):
    """A committed transaction is visible to read_committed; an aborted one only to
    read_uncommitted."""
    confluent_create_topic(server.bootstrap, topic_name, 2)
    p = _producer(server.bootstrap, f"tx-{topic_name}")
    p.begin_transaction()
    for i in range(10):
        p.produce(topic_name, value=f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic_name, value=f"a{i}".encode(), partition=i % 2)
    p.flush(10)
    p.abort_transaction(15)
    p.begin_transaction()
    p.produce(topic_name, value=b"last", partition=0)
    p.commit_transaction(15)

    committed = _consume(server.bootstrap, topic_name, "read_committed", 11, partitions=2)
    assert sorted(committed) == sorted([f"c{i}".encode() for i in range(10)] + [b"last"])
    everything = _consume(server.bootstrap, topic_name, "read_uncommitted", 16, partitions=2)
    assert sorted(everything) == sorted([f"c{i}".encode() for i in range(10)] +
                                        [f"a{i}".encode() for i in range(5)] + [b"last"])


def test_zombie_is_fenced(server, topic_name):
    """A second producer with the same transactional.id fences the first: the old one's
    commit fails as fenced, its open transaction is aborted, the new one commits."""
    confluent_create_topic(server.bootstrap, topic_name, 1)
    txn_id = f"zombie-{topic_name}"
    old = _producer(server.bootstrap, txn_id)
    old.begin_transaction()
    old.produce(topic_name, value=b"zombie")
    old.flush(10)
    new = _producer(server.bootstrap, txn_id)  # aborts the old transaction, bumps the epoch
    new.begin_transaction()
    new.produce(topic_name, value=b"fresh")
    new.commit_transaction(15)
    with pytest.raises(ck.KafkaException) as info:
        old.produce(topic_name, value=b"late")
        old.commit_transaction(15)
    err = info.value.args[0]
    assert err.fatal() or err.code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED,
                                         ck.KafkaError.INVALID_PRODUCER_EPOCH), err
    assert _consume(server.bootstrap, topic_name, "read_committed", 1) == [b"fresh"]


def test_consume_transform_produce_exactly_once(server, topic_name):
    """send_offsets_to_transaction: every input record's output appears once, committed
    offsets match the inputs consumed; an aborted round leaves no output and no offsets."""
    src, dst, group = f"{topic_name}-in", f"{topic_name}-out", f"eos-{topic_name}"
    confluent_create_topic(server.bootstrap, src, 1)
    confluent_create_topic(server.bootstrap, dst, 1)
    seed = ck.Producer({"bootstrap.servers": server.bootstrap})
    for i in range(30):
        seed.produce(src, value=f"in{i}".encode())
    seed.flush(10)
    consumer = ck.Consumer({"bootstrap.servers": server.bootstrap, "group.id": group,
                            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                            "enable.auto.commit": False})
    consumer.subscribe([src])
    p = _producer(server.bootstrap, f"eos-{topic_name}")
    done = 0
    aborted_once = False
    try:
        while done < 30:
            msgs = consumer.consume(10, 1.0)
            if not msgs:
                continue
            p.begin_transaction()
            for m in msgs:
                assert not m.error(), m.error()
                p.produce(dst, value=b"out-" + m.value())
            offsets = [ck.TopicPartition(src, 0, msgs[-1].offset() + 1)]
            p.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 15)
            if not aborted_once:  # abort the first round: its output and offsets vanish
                aborted_once = True
                p.abort_transaction(15)
                consumer.seek(ck.TopicPartition(src, 0, msgs[0].offset()))
                continue
            p.commit_transaction(15)
            done += len(msgs)
    finally:
        consumer.close()
    out = _consume(server.bootstrap, dst, "read_committed", 30)
    assert sorted(out) == sorted(f"out-in{i}".encode() for i in range(30))
    admin = ck.admin.AdminClient({"bootstrap.servers": server.bootstrap})
    fut = admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group)])[group]
    committed = {tp.partition: tp.offset for tp in fut.result(15).topic_partitions}
    assert committed == {0: 30}


def test_open_transaction_is_aborted_by_timeout(fresh_server, topic_name):
    """A producer that never ends its transaction: the coordinator aborts it after
    transaction.timeout.ms (records invisible to read_committed, the LSO moves on) and
    fences the producer."""
    srv = fresh_server("--set", "transaction.abort.timed.out.transaction.cleanup.interval.ms=200")
    confluent_create_topic(srv.bootstrap, topic_name, 1)
    p = _producer(srv.bootstrap, f"slow-{topic_name}", **{"transaction.timeout.ms": 1500})
    p.begin_transaction()
    p.produce(topic_name, value=b"hanging")
    p.flush(10)
    q = ck.Producer({"bootstrap.servers": srv.bootstrap})
    q.produce(topic_name, value=b"plain")
    q.flush(10)
    # read_committed reads past the aborted transaction once it is aborted
    assert _consume(srv.bootstrap, topic_name, "read_committed", 1, timeout=30) == [b"plain"]
    with pytest.raises(ck.KafkaException):
        p.commit_transaction(15)


def test_kill9_mid_transaction_then_restart(fresh_server, topic_name, tmp_path):
    """kill -9 with a transaction open and another decided: after the restart the
    decided one is complete (visible), the open one aborted by its timeout (invisible),
    and the transactional id works again (a new epoch)."""
    args = ("--set", "transaction.abort.timed.out.transaction.cleanup.interval.ms=200")
    srv = fresh_server(*args)
    confluent_create_topic(srv.bootstrap, topic_name, 1)
    done = _producer(srv.bootstrap, f"done-{topic_name}")
    done.begin_transaction()
    done.produce(topic_name, value=b"committed")
    done.commit_transaction(15)
    open_ = _producer(srv.bootstrap, f"open-{topic_name}", **{"transaction.timeout.ms": 2000})
    open_.begin_transaction()
    open_.produce(topic_name, value=b"open")
    open_.flush(10)
    srv.kill9()
    srv2 = fresh_server(*args, data_dir=srv.data_dir, port=srv.port)
    assert _consume(srv2.bootstrap, topic_name, "read_committed", 1, timeout=30) == [b"committed"]
    again = _producer(srv2.bootstrap, f"open-{topic_name}")
    again.begin_transaction()
    again.produce(topic_name, value=b"after")
    again.commit_transaction(15)
    assert _consume(srv2.bootstrap, topic_name, "read_committed", 2) == [b"committed", b"after"]


def test_kafka_python_transactions(server, topic_name):
    """kafka-python's transactional producer: a committed and an aborted transaction;
    read_committed sees only the committed one."""
    from kafka import KafkaProducer
    confluent_create_topic(server.bootstrap, topic_name, 1)
    p = KafkaProducer(bootstrap_servers=server.bootstrap, transactional_id=f"kp-{topic_name}")
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic_name, value=b"kp-commit")
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic_name, value=b"kp-abort")
        p.flush()
        p.abort_transaction()
    finally:
        p.close()
    assert _consume(server.bootstrap, topic_name, "read_committed", 1) == [b"kp-commit"]
    assert sorted(_consume(server.bootstrap, topic_name, "read_uncommitted", 2)) == [b"kp-abort", b"kp-commit"]


def test_aiokafka_transactions_and_send_offsets(server, topic_name):
    """aiokafka: a transaction with send_offsets_to_transaction commits output and the
    group's offsets together; an aborted one commits neither."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition
    confluent_create_topic(server.bootstrap, topic_name, 1)
    group = f"aio-{topic_name}"

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=server.bootstrap, transactional_id=f"aio-{topic_name}")
        await p.start()
        try:
            async with p.transaction():
                await p.send_and_wait(topic_name, b"aio-1")
                await p.send_offsets_to_transaction({TopicPartition(topic_name, 0): 1}, group)
            with pytest.raises(RuntimeError):
                async with p.transaction():
                    await p.send_and_wait(topic_name, b"aio-aborted")
                    await p.send_offsets_to_transaction({TopicPartition(topic_name, 0): 2}, group)
                    raise RuntimeError("abort this one")
        finally:
            await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group, enable_auto_commit=False)
        await c.start()
        try:
            tp = TopicPartition(topic_name, 0)
            assert await c.committed(tp) == 1
        finally:
            await c.stop()

    asyncio.run(run())
    assert _consume(server.bootstrap, topic_name, "read_committed", 1) == [b"aio-1"]


def test_transactions_are_atomic_across_kill9_restarts(fresh_server, topic_name):
    """A transactional producer commits transactions of 4 records over 2 partitions while
    the broker is killed with SIGKILL (3 times, at random moments) and restarted: every
    transaction is wholly visible to read_committed or not at all, and every one whose
    commit returned is visible."""
    import random
    import threading
    import time

    args = ("--set", "transaction.abort.timed.out.transaction.cleanup.interval.ms=200")
    srv = fresh_server(*args)
    confluent_create_topic(srv.bootstrap, topic_name, 2)
    txn_id = f"crash-{topic_name}"
    confirmed: list[str] = []
    errors: list[BaseException] = []
    rng = random.Random(16)

    def produce_until_killed(round_: int) -> None:
        try:
            p = _producer(srv.bootstrap, txn_id, **{"transaction.timeout.ms": 4000, "message.timeout.ms": 3000})
        except Exception as exc:  # cannot even start: reported by the wait below
            errors.append(exc)
            return
        try:
            for n in range(10_000):
                name = f"r{round_}-t{n}"
                p.begin_transaction()
                for i in range(4):
                    p.produce(topic_name, value=f"{name}-{i}".encode(), partition=i % 2)
                p.commit_transaction(5)
                confirmed.append(name)
        except Exception:  # the broker went away mid-transaction
            return

    for round_ in range(3):
        t = threading.Thread(target=produce_until_killed, args=(round_,), daemon=True)
        t.start()
        wait_until(lambda: errors or any(c.startswith(f"r{round_}-") for c in confirmed), 30,
                   what=f"round {round_} committed a transaction")
        assert not errors, errors
        time.sleep(rng.uniform(0.05, 0.5))  # a random moment: the kill point is what varies
        srv.kill9()
        t.join(30)
        assert not t.is_alive()
        srv = fresh_server(*args, data_dir=srv.data_dir, port=srv.port)
    # the same transactional id: init_transactions returns once any transaction left open is
    # complete (aborted by the coordinator); then a last committed transaction marks the end
    last = _producer(srv.bootstrap, txn_id)
    last.begin_transaction()
    last.produce(topic_name, value=b"end", partition=0)
    last.produce(topic_name, value=b"end", partition=1)
    last.commit_transaction(15)
    seen = _consume(srv.bootstrap, topic_name, "read_committed", 2 + 4 * len(confirmed), partitions=2, timeout=60)
    counts: dict[str, int] = {}
    for v in seen:
        if v != b"end":
            counts[v.decode().rsplit("-", 1)[0]] = counts.get(v.decode().rsplit("-", 1)[0], 0) + 1
    assert all(n == 4 for n in counts.values()), {k: n for k, n in counts.items() if n != 4}
    assert set(confirmed) <= set(counts)
    assert seen.count(b"end") == 2


def test_read_committed_consumer_waits_for_offsets_pending_in_a_transaction(server, topic_name):
    """KIP-447: while a transaction holds the group's offset, a read_committed consumer's
    OffsetFetch (require_stable) answers UNSTABLE_OFFSET_COMMIT and librdkafka retries;
    once the transaction commits, the consumer starts at the transaction's offset."""
    import time

    confluent_create_topic(server.bootstrap, topic_name, 1)
    group = f"stable-{topic_name}"
    seed = ck.Producer({"bootstrap.servers": server.bootstrap})
    for i in range(10):
        seed.produce(topic_name, value=f"m{i}".encode())
    seed.flush(10)
    unjoined = ck.Consumer({"bootstrap.servers": server.bootstrap, "group.id": group})
    p = _producer(server.bootstrap, f"stable-{topic_name}")
    p.begin_transaction()
    p.send_offsets_to_transaction([ck.TopicPartition(topic_name, 0, 5)], unjoined.consumer_group_metadata(), 15)
    unjoined.close()
    c = ck.Consumer({"bootstrap.servers": server.bootstrap, "group.id": group, "isolation.level": "read_committed",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic_name])
    try:
        wait_until(lambda: c.poll(0.1) is None and bool(c.assignment()), 30, what="the consumer's assignment")
        deadline = time.monotonic() + 2  # assigned, the transaction open: nothing may be consumed
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            assert m is None or m.error(), f"consumed offset {m.offset()} while the offset was pending"
        p.commit_transaction(15)
        first: list = []

        def got() -> bool:
            m = c.poll(0.2)
            if m is not None and not m.error():
                first.append(m.offset())
            return bool(first)
        wait_until(got, 30, what="the consumer's first record after the commit")
        assert first[0] == 5
    finally:
        c.close()


def test_transactions_with_an_fsync_before_every_answer(fresh_server, topic_name):
    """log.flush.interval.messages=1: the decision, the markers and the offsets are each
    fsynced before they count; a committed transaction and its offsets survive kill -9."""
    srv = fresh_server("--set", "log.flush.interval.messages=1")
    confluent_create_topic(srv.bootstrap, topic_name, 1)
    group = f"fsync-{topic_name}"
    meta_source = ck.Consumer({"bootstrap.servers": srv.bootstrap, "group.id": group})
    p = _producer(srv.bootstrap, f"fsync-{topic_name}")
    p.begin_transaction()
    p.produce(topic_name, value=b"durable")
    p.send_offsets_to_transaction([ck.TopicPartition(topic_name, 0, 7)], meta_source.consumer_group_metadata(), 15)
    p.commit_transaction(15)
    meta_source.close()
    srv.kill9()
    srv = fresh_server(data_dir=srv.data_dir, port=srv.port)
    assert _consume(srv.bootstrap, topic_name, "read_committed", 1) == [b"durable"]
    admin = ck.admin.AdminClient({"bootstrap.servers": srv.bootstrap})
    fut = admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group)])[group]
    assert {tp.partition: tp.offset for tp in fut.result(15).topic_partitions} == {0: 7}
