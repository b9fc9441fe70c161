"""Classic consumer groups against a real ``hightide serve`` with confluent-kafka,
kafka-python and aiokafka: subscribe, rebalance on join/leave, manual commits,
exactly-once consumption per stable generation, restart, and the admin group APIs."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from ..waiting import wait_until
from .clients import LIBRARIES, Rec, confluent_create_topic, confluent_produce

SERVE_ARGS = ("--set", "group.initial.rebalance.delay.ms=100")
PARTITIONS = 6
SESSION_MS = 6000


# -- one member of a group, whatever the library -----------------------------------------------------
class ConfluentMember:
    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        from confluent_kafka import Consumer
        self.topic = topic
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                           "enable.auto.commit": False, "session.timeout.ms": SESSION_MS,
                           "heartbeat.interval.ms": 300, "topic.metadata.refresh.interval.ms": 1000})
        self.c.subscribe([topic])

    def poll(self, timeout: float) -> list[tuple[int, int, bytes]]:
        msgs = [m for m in self.c.consume(200, timeout) if not m.error()]
        out = [(m.partition(), m.offset(), m.value()) for m in msgs]
        self._commit({p: o + 1 for p, o, _ in out})
        return out

    def _commit(self, positions: dict[int, int], metadata: str = "") -> None:
        if positions:
            try:
                self.c.commit(offsets=[TopicPartition(self.topic, p, o, metadata=metadata)
                                       for p, o in positions.items()], asynchronous=False)
            except KafkaException:
                pass  # a rebalance started: the next owner re-reads from the last commit

    def commit_metadata(self, partition: int, offset: int, metadata: str) -> None:
        self._commit({partition: offset}, metadata)

    def assigned(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def close(self) -> None:
        self.c.close()


class KafkaPythonMember:
    """kafka-python drives JoinGroup from poll(). Its 3.0.12 coordinator discards a join
    that completes after a poll() timed out and sends a fresh JoinGroup (`join_group_async`
    treats a *finished* join task as "start a new one"); a leader's fresh JoinGroup in a
    Stable group rebalances again — with Apache Kafka too. Polling several consumers in
    turn with short timeouts therefore loops forever, so each member polls continuously
    on a thread of its own with a timeout longer than a rebalance, as applications do."""

    POLL_MS = SESSION_MS + 1000  # longer than any rebalance here (session expiry included)

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        import queue
        from kafka import KafkaConsumer
        self.topic = topic
        self.c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                               enable_auto_commit=False, session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
                               metadata_max_age_ms=1000)
        self._records: list[tuple[int, int, bytes]] = []
        self.retried: list[Exception] = []  # retriable errors poll() raised (seen across restarts)
        self._assigned: set[int] = set()
        self._lock = threading.Lock()
        self._commands: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import queue
        from kafka.errors import KafkaError as KPError
        while not self._stop.is_set():
            try:
                batch = self.c.poll(timeout_ms=self.POLL_MS)
            except KPError as exc:
                # kafka-python 3.0.12's poll() raises a retriable KafkaConnectionError when the
                # coordinator lookup is refused while the broker restarts; applications retry.
                if not exc.retriable:
                    raise
                self.retried.append(exc)
                continue
            out = [(tp.partition, m.offset, m.value) for tp, ms in batch.items() for m in ms]
            self._commit({p: o + 1 for p, o, _ in out})
            with self._lock:
                self._records += out
                self._assigned = {tp.partition for tp in self.c.assignment()}
            while True:
                try:
                    fn, done = self._commands.get_nowait()
                except queue.Empty:
                    break
                fn()
                done.set()
        self.c.close()

    def _call(self, fn) -> None:
        done = threading.Event()
        self._commands.put((fn, done))
        assert done.wait(self.POLL_MS / 1000 + 10), "kafka-python member did not answer"

    def poll(self, timeout: float) -> list[tuple[int, int, bytes]]:
        time.sleep(timeout)  # a poll's timeout: the member's thread polls meanwhile, then hand over what came
        with self._lock:
            out, self._records = self._records, []
        return out

    def _commit(self, positions: dict[int, int], metadata: str = "") -> None:
        from kafka import OffsetAndMetadata
        from kafka import TopicPartition as KTP
        from kafka.errors import KafkaError as KPError
        if positions:
            try:
                self.c.commit({KTP(self.topic, p): OffsetAndMetadata(o, metadata, -1) for p, o in positions.items()})
            except KPError:
                pass

    def commit_metadata(self, partition: int, offset: int, metadata: str) -> None:
        self._call(lambda: self._commit({partition: offset}, metadata))

    def assigned(self) -> set[int]:
        with self._lock:
            return set(self._assigned)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(self.POLL_MS / 1000 + 15)


class _Loop:
    """A background event loop for aiokafka (its heartbeats need a running loop)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()  # else its selector sockets leak (ResourceWarning at a later GC)


class AiokafkaMember:
    def __init__(self, bootstrap: str, topic: str, group: str, loop: _Loop) -> None:
        from aiokafka import AIOKafkaConsumer
        self.topic, self.loop = topic, loop

        async def make():
            c = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                 enable_auto_commit=False, session_timeout_ms=SESSION_MS,
                                 heartbeat_interval_ms=300, metadata_max_age_ms=1000)
            await c.start()
            return c
        self.c = loop.run(make())

    def poll(self, timeout: float) -> list[tuple[int, int, bytes]]:
        batches = self.loop.run(self.c.getmany(timeout_ms=int(timeout * 1000)))
        out = [(tp.partition, m.offset, m.value) for tp, ms in batches.items() for m in ms]
        self._commit({p: o + 1 for p, o, _ in out})
        return out

    def _commit(self, positions: dict[int, int], metadata: str = "") -> None:
        from aiokafka import TopicPartition as ATP
        from aiokafka.errors import KafkaError as AKError
        if positions:
            try:
                self.loop.run(self.c.commit({ATP(self.topic, p): (o, metadata) for p, o in positions.items()}))
            except AKError:
                pass

    def commit_metadata(self, partition: int, offset: int, metadata: str) -> None:
        self._commit({partition: offset}, metadata)

    def assigned(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def close(self) -> None:
        self.loop.run(self.c.stop())


@pytest.fixture
def member_factory():
    loops: list[_Loop] = []

    def make(lib: str, bootstrap: str, topic: str, group: str):
        if lib == "confluent":
            return ConfluentMember(bootstrap, topic, group)
        if lib == "kafka-python":
            return KafkaPythonMember(bootstrap, topic, group)
        if not loops:
            loops.append(_Loop())
        return AiokafkaMember(bootstrap, topic, group, loops[0])

    yield make
    for loop in loops:
        loop.stop()


# -- helpers ---------------------------------------------------------------------------------------------
def _records(prefix: str, n: int) -> list[Rec]:
    return [Rec(i % PARTITIONS, None, f"{prefix}-{i}".encode(), (), 0) for i in range(n)]


def _settle(members, sizes: list[int], timeout: float = 20.0) -> None:
    """Poll every member until the assignment sizes are ``sizes`` (a stable generation)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            assert m.poll(0.05) == [], "records arrived before they were produced"
        got = sorted(len(m.assigned()) for m in members)
        union = set().union(*(m.assigned() for m in members))
        if got == sorted(sizes) and len(union) == PARTITIONS:
            return
    raise AssertionError(f"group did not settle to {sizes}: {[sorted(m.assigned()) for m in members]}")


def _consume(members, expected: int, timeout: float = 20.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        for m in members:
            got += [v for _, _, v in m.poll(0.05)]
    for m in members:  # nothing more arrives
        got += [v for _, _, v in m.poll(0.05)]
    return got


def _describe(admin: AdminClient, group: str):
    return admin.describe_consumer_groups([group], request_timeout=10)[group].result()


def _committed(admin: AdminClient, group: str, topic: str) -> dict[int, tuple[int, str]]:
    """Committed (offset, metadata) per partition. Offsets come from confluent's admin API;
    metadata is read on the wire, because librdkafka/confluent-kafka can append heap
    garbage to metadata strings (seen as a stray trailing byte about 1 read in 300 with
    the broker's bytes verified identical; cf. librdkafka issue #4649)."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    res = admin.list_consumer_group_offsets([req], request_timeout=10)[group].result()
    offsets = {tp.partition: tp.offset for tp in res.topic_partitions}
    from ..rawkafka import RawClient
    bootstrap = admin_bootstrap(admin)
    with RawClient(bootstrap) as c:
        r = c.request(9, 7, {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(range(PARTITIONS))}],
                             "require_stable": False})
    # confluent-kafka's commit() sends the metadata's C string terminator too ('abc\x00' on
    # the wire; verified), and the broker stores bytes as sent, like Kafka: strip it here.
    meta = {p.partition_index: (p.metadata or "").removesuffix("\x00") for t in r.topics for p in t.partitions}
    return {p: (offsets[p], meta[p]) for p in offsets}


_BOOTSTRAPS: dict[int, str] = {}


def admin_bootstrap(admin: AdminClient) -> str:
    return _BOOTSTRAPS[id(admin)]


def make_admin(bootstrap: str) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    _BOOTSTRAPS[id(admin)] = bootstrap
    return admin


# -- the lifecycle, per library --------------------------------------------------------------------------
@pytest.mark.parametrize("lib", LIBRARIES)
def test_group_lifecycle(fresh_server, member_factory, lib):
    srv = fresh_server(*SERVE_ARGS)
    topic, group = f"cg-{lib}-{uuid.uuid4().hex[:6]}", f"g-{lib}-{uuid.uuid4().hex[:6]}"
    confluent_create_topic(srv.bootstrap, topic, PARTITIONS)
    admin = make_admin(srv.bootstrap)
    members = [member_factory(lib, srv.bootstrap, topic, group) for _ in range(3)]
    try:
        # three members share six partitions; every record exactly once in this generation
        _settle(members, [2, 2, 2])
        first = _records("a", 60)
        confluent_produce(srv.bootstrap, topic, first)
        got = _consume(members, 60)
        assert sorted(got) == sorted(r.value for r in first)

        # one leaves: the other two take over its partitions from its commits
        members.pop().close()
        _settle(members, [3, 3])
        second = _records("b", 60)
        confluent_produce(srv.bootstrap, topic, second)
        got2 = _consume(members, 60)
        assert sorted(got2) == sorted(r.value for r in second)

        # committed offsets (and metadata) read back through the admin API
        owner = next(m for m in members if 0 in m.assigned())
        owner.commit_metadata(0, 20, f"meta-{lib}")
        committed = _committed(admin, group, topic)
        assert committed[0] == (20, f"meta-{lib}")
        assert {p: o for p, (o, _) in committed.items()} == {p: 20 for p in range(PARTITIONS)}

        desc = _describe(admin, group)
        assert desc.state == ConsumerGroupState.STABLE and len(desc.members) == 2
        member_ids = sorted(m.member_id for m in desc.members)

        # restart: group state and offsets come back from __consumer_offsets
        srv.stop()
        srv = fresh_server(*SERVE_ARGS, data_dir=srv.data_dir, port=srv.port)
        admin = make_admin(srv.bootstrap)
        desc = _describe(admin, group)
        assert desc.state == ConsumerGroupState.STABLE
        assert sorted(m.member_id for m in desc.members) == member_ids
        assert _committed(admin, group, topic)[0] == (20, f"meta-{lib}")

        # the members carry on: only new records arrive
        third = _records("c", 12)
        confluent_produce(srv.bootstrap, topic, third)
        got3 = _consume(members, 12, timeout=45.0)  # clients reconnect after the restart at their own pace
        assert sorted(got3) == sorted(r.value for r in third)
    finally:
        for m in members:
            m.close()
    wait_until(lambda: _describe(admin, group).state == ConsumerGroupState.EMPTY, what="group to become Empty")
    admin.delete_consumer_groups([group], request_timeout=10)[group].result()
    assert group not in {g.group_id for g in admin.list_consumer_groups(request_timeout=10).result().valid}


def test_admin_group_apis(fresh_server, member_factory):
    from confluent_kafka import ConsumerGroupType
    srv = fresh_server(*SERVE_ARGS)
    topic, group = f"cg-admin-{uuid.uuid4().hex[:6]}", f"g-admin-{uuid.uuid4().hex[:6]}"
    confluent_create_topic(srv.bootstrap, topic, PARTITIONS)
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    m = member_factory("confluent", srv.bootstrap, topic, group)
    try:
        _settle([m], [PARTITIONS])
        listed = admin.list_consumer_groups(request_timeout=10, states={ConsumerGroupState.STABLE}).result().valid
        assert group in {g.group_id for g in listed}
        listed = admin.list_consumer_groups(request_timeout=10, states={ConsumerGroupState.EMPTY}).result().valid
        assert group not in {g.group_id for g in listed}
        listed = admin.list_consumer_groups(request_timeout=10, types={ConsumerGroupType.CLASSIC}).result().valid
        assert group in {g.group_id for g in listed}
        listed = admin.list_consumer_groups(request_timeout=10, types={ConsumerGroupType.CONSUMER}).result().valid
        assert group not in {g.group_id for g in listed}
        desc = _describe(admin, group)
        assert desc.partition_assignor == "range" or desc.partition_assignor
        assert len(desc.members[0].assignment.topic_partitions) == PARTITIONS
        with pytest.raises(KafkaException) as exc:
            admin.delete_consumer_groups([group], request_timeout=10)[group].result()
        assert exc.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    finally:
        m.close()
    with pytest.raises(KafkaException) as exc:
        admin.delete_consumer_groups(["no-such-group"], request_timeout=10)["no-such-group"].result()
    assert exc.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
