"""Coordinators fail over (issue 15, item 2), with real processes and real clients.

Three brokers, internal topics with three replicas (the default, capped at the brokers).
In each test the broker leading the coordinator's partition is killed -9 while a client
is using it:

* consumer groups (confluent-kafka, classic and KIP-848 protocol) committing offsets of
  ``__consumer_offsets``: every committed offset read back (during and after the
  failover) is at least what was acknowledged before the read began; a member never
  reads again a record below an offset whose commit it saw acknowledged (Kafka's
  at-least-once: what was not acknowledged may be read again); a new member starts at
  the acknowledged commits; the new coordinator answers, the other survivor answers
  NOT_COORDINATOR;
* a share group's state in ``__share_group_state`` (the share coordinator of the share
  partition's key, neither the topic partition's leader nor the group coordinator):
  a record whose acknowledgement was answered is never delivered again, and the state
  the new share coordinator holds has every such record acknowledged;
* a transactional producer whose ``__transaction_state`` coordinator dies mid-stream:
  the next transactions complete, and a read_committed consumer sees every committed
  transaction whole, nothing of an aborted one.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import (Consumer, KafkaError, KafkaException, Producer, ShareConsumer,
                             TopicPartition)

from hightide.client import NewTopic
from hightide.client.connection import BrokerConnection
from hightide.devcluster import NodeFailed
from hightide.share.records import coordinator_key

from .harness import ClusterHarness

GROUP_KEY, TXN_KEY, SHARE_KEY = 0, 1, 2
NOT_COORDINATOR = 16
QUIET = {"log_level": 0, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 500}

pytestmark = pytest.mark.timeout(150)


# -- helpers ---------------------------------------------------------------------------------
def create_topic(c: ClusterHarness, name: str, partitions: int) -> uuid.UUID:
    """Create ``name`` with three replicas; return its topic id once every partition is
    led with a full ISR."""
    async def create() -> None:
        async with c.admin() as a:
            await a.create_topics([NewTopic(name, partitions, 3)])
    c.run(create())

    async def led() -> uuid.UUID | None:
        async with c.admin() as a:
            md = await a.metadata([name])
        t = md.topics.get(name)
        ok = t is not None and len(t.partitions) == partitions and all(
            p.leader >= 0 and len(p.isr) == 3 for p in t.partitions.values())
        return t.topic_id if ok and t is not None else None
    topic_id: uuid.UUID = c.wait_until(lambda: c.run(led()), 30, what=f"{name} led, ISR complete")
    return topic_id


def produce(c: ClusterHarness, topic: str, partitions: int, per_partition: int) -> None:
    p = Producer({**QUIET, "bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5})
    for part in range(partitions):
        for i in range(per_partition):
            p.produce(topic, b"%d-%d" % (part, i), partition=part)
    assert p.flush(30) == 0


def coordinator(c: ClusterHarness, key: str, key_type: int) -> int:
    """The node FindCoordinator names for ``key`` (retried through a failover)."""
    async def find() -> int:
        async with c.admin() as a:
            return (await a.find_coordinator(key, key_type)).node_id
    return int(c.run(find()))


def key_coordinated_by(c: ClusterHarness, prefix: str, key_type: int, wanted: set[int],
                       fmt: str = "{prefix}-{i}") -> tuple[str, int]:
    """A key ``fmt.format(prefix, i)`` whose coordinator is in ``wanted``, and that node."""
    async def search() -> tuple[str, int]:
        async with c.admin() as a:
            for i in range(300):
                key = fmt.format(prefix=prefix, i=i)
                node = (await a.find_coordinator(key, key_type)).node_id
                if node in wanted:
                    return key, node
        raise AssertionError(f"no {prefix} key coordinated by one of {wanted}")
    found: tuple[str, int] = c.run(search())
    return found


async def raw_request(c: ClusterHarness, node: int, api: int, version: int, body: dict[str, Any]) -> Any:
    host, port = c.address(node).rsplit(":", 1)
    conn = BrokerConnection(host, int(port), "failover-test")
    await conn.connect()
    try:
        return await conn.request(api, version, body)
    finally:
        await conn.close()


def error_name(exc: KafkaException) -> str:
    err = exc.args[0] if exc.args else None
    return str(err.name()) if isinstance(err, KafkaError) else str(exc)


# -- consumer groups ---------------------------------------------------------------------------
@dataclass
class Member:
    """One group member on its own thread: polls at most ``batch`` records, commits what
    it polled synchronously, again and again. Records what it saw."""

    bootstrap: str
    topic: str
    group: str
    protocol: str
    stop: threading.Event = field(default_factory=threading.Event)
    acked: dict[int, int] = field(default_factory=dict)       # partition -> highest acknowledged commit
    acks: list[tuple[float, dict[int, int]]] = field(default_factory=list)  # (time acknowledged, offsets)
    commit_errors: list[str] = field(default_factory=list)
    rereads: list[tuple[int, int, int]] = field(default_factory=list)      # (partition, offset, acked then)
    polled: dict[int, int] = field(default_factory=dict)      # partition -> next offset after what was polled
    lock: threading.Lock = field(default_factory=threading.Lock)
    failure: BaseException | None = None

    def conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {**QUIET, "bootstrap.servers": self.bootstrap, "group.id": self.group,
                                "enable.auto.commit": False, "auto.offset.reset": "earliest"}
        if self.protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": 10_000, "heartbeat.interval.ms": 1000})
        return conf

    def run(self) -> None:
        try:
            c = Consumer(self.conf())
            c.subscribe([self.topic])
            try:
                while not self.stop.is_set():
                    self.poll(c)
                    self.commit(c)
                    time.sleep(0.1)
                self.commit(c)
            finally:
                c.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.failure = exc

    def poll(self, c: Consumer) -> None:
        try:
            msgs = c.consume(10, 0.2)
        except KafkaException:
            return
        for m in msgs:
            if m.error() is not None:
                continue
            part, off = m.partition(), m.offset()
            assert part is not None and off is not None
            if off < self.acked.get(part, 0):
                self.rereads.append((part, off, self.acked[part]))
            self.polled[part] = max(self.polled.get(part, 0), off + 1)

    def commit(self, c: Consumer) -> None:
        offsets = {p: o for p, o in self.polled.items() if o > self.acked.get(p, 0)}
        if not offsets:
            return
        try:
            got = c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()],
                           asynchronous=False)
        except KafkaException as exc:
            self.commit_errors.append(error_name(exc))
            return
        done = {tp.partition: tp.offset for tp in got or [] if tp.error is None}
        with self.lock:
            self.acks.append((time.monotonic(), done))
            for p, o in done.items():
                self.acked[p] = max(self.acked.get(p, 0), o)

    def acked_before(self, t: float) -> dict[int, int]:
        """The highest commit per partition acknowledged before time ``t``."""
        out: dict[int, int] = {}
        with self.lock:
            for when, offsets in self.acks:
                if when < t:
                    for p, o in offsets.items():
                        out[p] = max(out.get(p, 0), o)
        return out


@dataclass
class CommittedReader:
    """Reads a group's committed offsets every 0.2 s with a consumer that is no member."""

    bootstrap: str
    topic: str
    partitions: int
    member: Member
    stop: threading.Event = field(default_factory=threading.Event)
    regressions: list[tuple[int, int, int]] = field(default_factory=list)  # (partition, read, acked before)
    reads: int = 0

    def run(self) -> None:
        c = Consumer({**QUIET, "bootstrap.servers": self.bootstrap, "group.id": self.member.group,
                      "enable.auto.commit": False})
        try:
            while not self.stop.wait(0.2):
                t0 = time.monotonic()
                try:
                    got = c.committed([TopicPartition(self.topic, p) for p in range(self.partitions)], timeout=3)
                except KafkaException:
                    continue
                floor = self.member.acked_before(t0)
                self.reads += 1
                for tp in got:
                    if tp.error is None and max(tp.offset, 0) < floor.get(tp.partition, 0):
                        self.regressions.append((tp.partition, tp.offset, floor[tp.partition]))
        finally:
            c.close()


def started(target: Any) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


Stoppable = tuple[threading.Event, threading.Thread]


@pytest.fixture
def threads() -> Iterator[list[Stoppable]]:
    """Client threads to stop at the end of a test, also when it fails."""
    made: list[Stoppable] = []
    yield made
    for stop, _ in made:
        stop.set()
    for _, t in made:
        t.join(30)


def test_committed_offsets_survive_a_group_coordinator_kill(cluster: Any, threads: list[Stoppable]) -> None:
    c = cluster(3)
    topic, parts, per = "cf", 3, 150
    create_topic(c, topic, parts)
    produce(c, topic, parts, per)
    classic, victim = key_coordinated_by(c, "cf-classic", GROUP_KEY, set(c.broker_ids))
    modern, _ = key_coordinated_by(c, "cf-848", GROUP_KEY, {victim})
    members = [Member(c.bootstrap, topic, classic, "classic"), Member(c.bootstrap, topic, modern, "consumer")]
    readers = [CommittedReader(c.bootstrap, topic, parts, m) for m in members]
    for m in members:
        threads.append((m.stop, started(m.run)))
    for r in readers:
        threads.append((r.stop, started(r.run)))

    def committed_some() -> bool:
        return all(sum(m.acked.values()) >= 60 for m in members)
    c.wait_until(committed_some, 60, what="both groups committed some offsets")
    killed_at = time.monotonic()
    c.kill(victim)

    end = {p: per for p in range(parts)}

    def all_committed_after_the_kill() -> bool:
        for m in members:
            assert m.failure is None, m.failure
        return all(m.acked == end and m.acks[-1][0] > killed_at for m in members)
    c.wait_until(all_committed_after_the_kill, 60,
                 what="both groups consumed and committed everything through the failover")
    for stop, _ in threads:
        stop.set()
    for _, t in threads:
        t.join(30)

    for m, r in zip(members, readers):
        print(f"{m.protocol}: {len(m.acks)} commits, errors {m.commit_errors}, {r.reads} reads")
        assert m.failure is None, m.failure
        assert r.regressions == [], (m.group, "committed offsets read below acknowledged commits", r.regressions)
        assert r.reads > 0
        assert m.rereads == [], (m.group, "records read again below an acknowledged commit", m.rereads)
    # the coordinator moved to a survivor; the other survivor says NOT_COORDINATOR
    survivors = set(c.broker_ids) - {victim}
    for m in members:
        new = coordinator(c, m.group, GROUP_KEY)
        assert new in survivors
        (other,) = survivors - {new}
        body = {"group_id": m.group, "topics": [{"name": topic, "partition_indexes": list(range(parts))}]}
        wrong = c.run(raw_request(c, other, 9, 7, body))
        assert wrong.error_code == NOT_COORDINATOR
        right = c.run(raw_request(c, new, 9, 7, body))
        assert right.error_code == 0
        assert {p.partition_index: p.committed_offset for p in right.topics[0].partitions} == end
        # a new member of the group starts at the acknowledged commits: nothing is left
        fresh = Consumer({**m.conf(), "group.id": m.group})
        fresh.subscribe([topic])
        try:
            deadline, got = time.monotonic() + 6, []
            while time.monotonic() < deadline:
                got += [x for x in fresh.consume(100, 0.5) if x.error() is None]
        finally:
            fresh.close()
        assert got == [], (m.group, [(x.partition(), x.offset()) for x in got][:10])


# -- share groups ------------------------------------------------------------------------------
@dataclass
class ShareMember:
    """A share consumer in explicit mode: acknowledges (ACCEPT) every record it gets and
    commits synchronously; an acknowledgement counts once its commit answered success."""

    bootstrap: str
    topic: str
    group: str
    stop: threading.Event = field(default_factory=threading.Event)
    acked: set[int] = field(default_factory=set)
    redelivered: list[int] = field(default_factory=list)  # offsets delivered again after an answered ack
    deliveries: list[int] = field(default_factory=list)
    commit_errors: list[str] = field(default_factory=list)
    failure: BaseException | None = None

    def run(self) -> None:
        try:
            sc = ShareConsumer({**QUIET, "bootstrap.servers": self.bootstrap, "group.id": self.group,
                                "share.acknowledgement.mode": "explicit"})
            sc.subscribe([self.topic])
            try:
                while not self.stop.is_set():
                    self.round(sc)
                    time.sleep(0.1)
            finally:
                sc.close()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.failure = exc

    def round(self, sc: ShareConsumer) -> None:
        try:
            msgs = [m for m in sc.poll(0.3) if m.error() is None]
        except KafkaException:
            return
        offsets = []
        for m in msgs:
            off = m.offset()
            assert off is not None
            if off in self.acked:
                self.redelivered.append(off)
            self.deliveries.append(off)
            offsets.append(off)
            sc.acknowledge(m)
        if not offsets:
            return
        try:
            results = sc.commit_sync(10)
        except KafkaException as exc:
            self.commit_errors.append(error_name(exc))
            return
        if all(err is None for err in results.values()):
            self.acked.update(offsets)
        else:
            self.commit_errors += [str(e) for e in results.values() if e is not None]


def slow_producer(bootstrap: str, topic: str, total: int, per_round: int, stop: threading.Event) -> None:
    """Produce ``total`` records to partition 0, ``per_round`` every 0.1 s (acks=all)."""
    p = Producer({**QUIET, "bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1,
                  "message.timeout.ms": 60_000})
    sent = 0
    while sent < total and not stop.is_set():
        for _ in range(min(per_round, total - sent)):
            p.produce(topic, b"s%d" % sent, partition=0)
            sent += 1
        p.flush(0.1)
        time.sleep(0.1)
    p.flush(60)


async def share_state(c: ClusterHarness, node: int, group: str, topic_id: uuid.UUID) -> tuple[int, list[Any]]:
    """(SPSO, state batches) of share partition 0 as ``node`` holds it. Raises
    RuntimeError naming the error it answers (not the coordinator, loading)."""
    resp = await raw_request(c, node, 84, 0, {"group_id": group, "topics": [
        {"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": -1}]}]})
    p = resp.results[0].partitions[0]
    if p.error_code:
        raise RuntimeError(f"ReadShareGroupState on {node}: error {p.error_code} {p.error_message}")
    return p.start_offset, list(p.state_batches)


def acknowledged_in(state: tuple[int, list[Any]], offset: int) -> bool:
    spso, batches = state
    return offset < spso or any(b.first_offset <= offset <= b.last_offset and b.delivery_state == 2
                                for b in batches)


def test_share_state_survives_a_share_coordinator_kill(cluster: Any, threads: list[Stoppable]) -> None:
    c = cluster(3)
    topic, total = "sf", 400
    tid = create_topic(c, topic, 1)

    async def leader() -> int:
        async with c.admin() as a:
            return (await a.metadata([topic])).topics[topic].partitions[0].leader
    tp_leader = c.run(leader())

    async def pick() -> tuple[str, int, int]:
        async with c.admin() as a:
            for i in range(300):
                g = f"sf-{i}"
                gc = (await a.find_coordinator(g, GROUP_KEY)).node_id
                sc = (await a.find_coordinator(coordinator_key(g, tid, 0), SHARE_KEY)).node_id
                if len({tp_leader, gc, sc}) == 3:
                    return g, gc, sc
        raise AssertionError("no share group whose share coordinator is neither leader nor group coordinator")
    group, _, victim = c.run(pick())
    body = {"resources": [{"resource_type": 32, "resource_name": group, "configs": [
        {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"}]}], "validate_only": False}
    assert c.run(raw_request(c, tp_leader, 44, 1, body)).responses[0].error_code == 0

    stop_producing = threading.Event()
    threads.append((stop_producing, started(lambda: slow_producer(c.bootstrap, topic, total, 5, stop_producing))))
    member = ShareMember(c.bootstrap, topic, group)
    threads.append((member.stop, started(member.run)))
    c.wait_until(lambda: len(member.acked) >= 60 or member.failure, 60, what="acknowledgements before the kill")
    assert member.failure is None, member.failure
    acked_before_kill = set(member.acked)
    c.kill(victim)

    new = c.wait_until(lambda: (n := coordinator(c, coordinator_key(group, tid, 0), SHARE_KEY)) != victim and (n,), 30,
                       what="a new share coordinator")[0]
    state = c.wait_until(lambda: c.run(share_state(c, new, group, tid)), 30, what="the new coordinator's state")
    lost = sorted(o for o in acked_before_kill if not acknowledged_in(state, o))
    assert lost == [], f"acknowledged before the kill, not acknowledged in the new coordinator's state: {lost[:20]}"

    try:
        c.wait_until(lambda: len(member.acked) == total or member.failure, 60,
                     what="every record acknowledged through the failover")
    except NodeFailed as exc:
        missing = sorted(set(range(total)) - member.acked)
        raise AssertionError(f"{exc}: {len(missing)} not acknowledged (first {missing[:10]}), commit errors "
                             f"{member.commit_errors[-10:]}, last deliveries {member.deliveries[-10:]}, redelivered {member.redelivered[:10]}, state "
                             f"{c.run(share_state(c, new, group, tid))}") from exc
    member.stop.set()
    for _, t in threads:
        t.join(30)
    assert member.failure is None, member.failure
    print(f"share: {len(member.deliveries)} deliveries, commit errors {member.commit_errors}")
    # the share-partition leader retries the state write until the new coordinator
    # answers (Kafka's persister does): the failover delays acknowledgements, never fails them
    assert member.commit_errors == []
    assert member.redelivered == [], f"delivered again after an answered acknowledgement: {member.redelivered[:20]}"
    final = c.wait_until(lambda: c.run(share_state(c, new, group, tid)), 30, what="the final state")
    assert final[0] == total, final


# -- transactions ------------------------------------------------------------------------------
@dataclass
class Transactions:
    """Transactions of 10 records each, one after the other, recording each outcome:
    ``committed`` (commit_transaction returned), ``aborted`` (aborted after an abortable
    error), ``unknown`` (the producer failed fatally during it)."""

    bootstrap: str
    topic: str
    txn_id: str
    stop: threading.Event = field(default_factory=threading.Event)
    outcomes: list[tuple[int, str, float]] = field(default_factory=list)  # (txn number, outcome, time)
    errors: list[str] = field(default_factory=list)
    failure: BaseException | None = None

    def producer(self) -> Producer:
        p = Producer({**QUIET, "bootstrap.servers": self.bootstrap, "transactional.id": self.txn_id,
                      "transaction.timeout.ms": 60_000, "message.timeout.ms": 30_000})
        p.init_transactions(30)
        return p

    def run(self) -> None:
        try:
            p, n = self.producer(), 0
            while not self.stop.is_set():
                outcome = self.one(p, n)
                self.outcomes.append((n, outcome, time.monotonic()))
                if outcome == "unknown":
                    p = self.producer()
                n += 1
                time.sleep(0.05)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.failure = exc

    def one(self, p: Producer, n: int) -> str:
        try:
            p.begin_transaction()
            for i in range(10):
                p.produce(self.topic, b"t%d-%d" % (n, i), partition=i % 3)
            p.commit_transaction(30)
            return "committed"
        except KafkaException as exc:
            err = exc.args[0]
            self.errors.append(error_name(exc))
            if err.txn_requires_abort():
                try:
                    p.abort_transaction(30)
                    return "aborted"
                except KafkaException as again:
                    self.errors.append("abort: " + error_name(again))
            return "unknown"


def read_committed(bootstrap: str, topic: str, partitions: int) -> list[str]:
    """Every record of ``topic`` a read_committed consumer sees (up to the LSO)."""
    c = Consumer({**QUIET, "bootstrap.servers": bootstrap, "group.id": f"{topic}-reader",
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    out: list[str] = []
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        pos = {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + 30
        while any(pos[p] < ends[p] for p in pos) and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                if m.error() is None:
                    out.append(m.value().decode())  # type: ignore[union-attr]
                    pos[m.partition()] = m.offset() + 1  # type: ignore[index,operator]
            for p in pos:  # control records and aborted data move the position without a message
                got = c.position([TopicPartition(topic, p)])[0].offset
                pos[p] = max(pos[p], got)
    finally:
        c.close()
    return out


def test_next_transaction_completes_after_a_transaction_coordinator_kill(cluster: Any, threads: list[Stoppable]) -> None:
    c = cluster(3)
    topic = "tf"
    create_topic(c, topic, 3)
    txns = Transactions(c.bootstrap, topic, "tf-producer")
    threads.append((txns.stop, started(txns.run)))
    c.wait_until(lambda: sum(o == "committed" for _, o, _ in txns.outcomes) >= 5 or txns.failure, 60,
                 what="transactions before the kill")
    assert txns.failure is None, txns.failure
    victim = coordinator(c, txns.txn_id, TXN_KEY)
    killed_at = time.monotonic()
    c.kill(victim)

    def committed_after_the_kill() -> int:
        assert txns.failure is None, txns.failure
        return sum(o == "committed" and t > killed_at for _, o, t in txns.outcomes) >= 3
    c.wait_until(committed_after_the_kill, 60, what="transactions committed after the coordinator's kill")
    txns.stop.set()
    for _, t in threads:
        t.join(60)
    assert txns.failure is None, txns.failure
    assert coordinator(c, txns.txn_id, TXN_KEY) != victim
    print(f"transactions: {[o for _, o, _ in txns.outcomes]}, errors {txns.errors}")

    seen = read_committed(c.bootstrap, topic, 3)
    by_txn: dict[int, int] = {}
    for v in seen:
        n = int(v[1:].split("-")[0])
        by_txn[n] = by_txn.get(n, 0) + 1
    assert len(seen) == len(set(seen)), "a record seen twice"
    for n, outcome, _ in txns.outcomes:
        got = by_txn.get(n, 0)
        if outcome == "committed":
            assert got == 10, (n, outcome, got, txns.errors)
        elif outcome == "aborted":
            assert got == 0, (n, outcome, got, txns.errors)
        else:
            assert got in (0, 10), (n, outcome, got, txns.errors)
