"""The clients of a Jepsen-style run, each on its own thread, recording into one
:class:`~history.History` (event shapes in :mod:`history`):

- :class:`Producers`: idempotent acks=all producers (confluent-kafka) writing unique
  values ``p<producer>-<seq>`` round-robin over the partitions, at a bounded rate;
  delivery reports become ``send`` events (``ok`` with the offset, ``info`` on any
  error: a timed-out produce may still have been written). A producer that hits a
  fatal error (librdkafka's idempotence gives up) is replaced by a new one with a new
  producer number, so each producer's sequence stays one idempotent session.
- :class:`GroupMember`: a consumer-group member (``classic`` or ``consumer`` protocol)
  that polls, records its assignment changes, and every ``commit_every_s`` commits the
  next offset of what it polled on the partitions it owns (synchronously, on its own
  thread, so a commit never races its own rebalance).
- :class:`CommittedReader`: reads every group's committed offsets once a second.
- :class:`ShareMember`: a share-group member (implicit acknowledgement).
- :func:`final_read`: after the faults, reads every partition from offset 0 to its
  high watermark.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer,
                             ShareConsumer, TopicPartition)

from .history import History

__all__ = ["CommittedReader", "GroupMember", "Producers", "ShareMember", "final_read", "set_share_reset"]

_QUIET = {"log_level": 0, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 500}


def _record(m: Message) -> tuple[int, int, str]:
    """(partition, offset, value) of a delivered message (never None for a record)."""
    part, off, value = m.partition(), m.offset(), m.value()
    assert part is not None and off is not None and value is not None
    return part, off, value.decode()


class Producers:
    """``n`` producers, each at most ``rate`` sends per second."""

    def __init__(self, history: History, bootstrap: str, topic: str, partitions: int, n: int, *,
                 rate: float = 100.0, acks: str = "all", idempotent: bool = True, timeout_ms: int = 30_000) -> None:
        self.history, self.topic, self.partitions, self.rate = history, topic, partitions, rate
        self.conf: dict[str, Any] = {**_QUIET, "bootstrap.servers": bootstrap, "acks": acks,
                                     "enable.idempotence": idempotent, "linger.ms": 5,
                                     "message.timeout.ms": timeout_ms, "retry.backoff.ms": 50}
        self.stop = threading.Event()
        self._next_id = n
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,), name=f"producer-{i}", daemon=True)
                        for i in range(n)]
        self.unflushed = 0

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _new_id(self) -> int:
        with self._lock:
            self._next_id += 1
            return self._next_id - 1

    def _run(self, pid: int) -> None:
        while not self.stop.is_set():
            pid = self._session(pid) if pid >= 0 else self._session(self._new_id())

    def _session(self, pid: int) -> int:
        """Produce as producer ``pid`` until stopped (returns -1 after a fatal error:
        the caller starts a new producer)."""
        fatal = threading.Event()
        proc = f"producer-{pid}"

        def report(err: KafkaError | None, msg: Any, seq: int, part: int) -> None:
            value = f"p{pid}-{seq}"
            if err is None:
                self.history.add("send", "ok", proc, producer=pid, seq=seq, value=value, partition=msg.partition(),
                                 offset=msg.offset())
            else:
                self.history.add("send", "info", proc, producer=pid, seq=seq, value=value, partition=part,
                                 error=str(err.name()))
                if err.fatal():
                    fatal.set()

        def on_error(err: KafkaError) -> None:
            if err.fatal():
                fatal.set()

        def callback(seq: int, part: int) -> Callable[[KafkaError | None, Any], None]:
            return lambda err, msg: report(err, msg, seq, part)

        p = Producer({**self.conf, "error_cb": on_error})
        seq, gap = 0, 1.0 / self.rate
        nxt = time.monotonic()
        while not self.stop.is_set() and not fatal.is_set():
            part = seq % self.partitions
            try:
                p.produce(self.topic, value=f"p{pid}-{seq}".encode(), partition=part,
                          on_delivery=callback(seq, part))
                seq += 1
            except BufferError:
                pass
            except KafkaException:
                fatal.set()
                break
            nxt += gap
            p.poll(max(0.0, nxt - time.monotonic()))
        self.unflushed += p.flush(60)
        return -1 if fatal.is_set() else pid

    def join(self) -> None:
        """Stop sending, wait (bounded) for outstanding deliveries."""
        self.stop.set()
        for t in self.threads:
            t.join(120)


class GroupMember:
    """One consumer-group member on its own thread (see the module doc)."""

    def __init__(self, history: History, bootstrap: str, topic: str, group: str, name: str, *,
                 protocol: str = "classic", commit_every_s: float = 0.5) -> None:
        self.history, self.topic, self.group, self.name = history, topic, group, name
        self.commit_every_s = commit_every_s
        conf: dict[str, Any] = {**_QUIET, "bootstrap.servers": bootstrap, "group.id": group,
                                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                "client.id": name}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": 10_000, "heartbeat.interval.ms": 1000})
        self.conf = conf
        self.stop = threading.Event()
        self.owned: dict[int, int] = {}  # partition -> next offset after what was polled (-1: nothing yet)
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _on_assign(self, _: Any, parts: list[TopicPartition]) -> None:
        ps = sorted(tp.partition for tp in parts)
        for p in ps:
            self.owned[p] = -1
        self.history.add("assign", "ok", self.name, group=self.group, partitions=ps)

    def _on_revoke(self, _: Any, parts: list[TopicPartition]) -> None:
        ps = sorted(tp.partition for tp in parts)
        for p in ps:
            self.owned.pop(p, None)
        self.history.add("revoke", "ok", self.name, group=self.group, partitions=ps)

    def _run(self) -> None:
        c = Consumer(self.conf)
        c.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke)
        last_commit = time.monotonic()
        try:
            while not self.stop.is_set():
                self._poll(c)
                if time.monotonic() - last_commit >= self.commit_every_s:
                    self._commit(c)
                    last_commit = time.monotonic()
            self._commit(c)
        finally:
            c.close()

    def _poll(self, c: Consumer) -> None:
        try:
            msgs = c.consume(200, 0.2)
        except KafkaException:
            return
        records = []
        for m in msgs:
            if m.error() is not None:
                continue
            part, off, value = _record(m)
            records.append([part, off, value])
            if part in self.owned:
                self.owned[part] = max(self.owned[part], off + 1)
        if records:
            self.history.add("poll", "ok", self.name, group=self.group, records=records)

    def _commit(self, c: Consumer) -> None:
        offsets = {p: o for p, o in self.owned.items() if o >= 0}
        if not offsets:
            return
        t0 = self.history.now()
        try:
            c.commit(offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()], asynchronous=False)
        except KafkaException as exc:
            self.history.add("commit", "info", self.name, t0=t0, group=self.group, offsets=offsets,
                             error=str(exc.args[0].name() if exc.args else exc))
            return
        self.history.add("commit", "ok", self.name, t0=t0, group=self.group, offsets=offsets)

    def join(self) -> None:
        self.stop.set()
        self.thread.join(60)


class CommittedReader:
    """Reads each group's committed offsets of every partition once per ``every_s``."""

    def __init__(self, history: History, bootstrap: str, topic: str, partitions: int, groups: list[str],
                 every_s: float = 1.0) -> None:
        self.history, self.topic, self.partitions, self.every_s = history, topic, partitions, every_s
        self.readers = {g: Consumer({**_QUIET, "bootstrap.servers": bootstrap, "group.id": g,
                                     "enable.auto.commit": False}) for g in groups}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="committed-reader", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def read_once(self) -> None:
        for g, c in self.readers.items():
            t0 = self.history.now()
            try:
                got = c.committed([TopicPartition(self.topic, p) for p in range(self.partitions)], timeout=5)
            except KafkaException:
                continue
            offsets = {tp.partition: tp.offset if tp.offset >= 0 else -1 for tp in got if tp.error is None}
            self.history.add("committed", "ok", "committed-reader", t0=t0, group=g, offsets=offsets)

    def _run(self) -> None:
        while not self.stop.wait(self.every_s):
            self.read_once()

    def join(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.read_once()
        for c in self.readers.values():
            c.close()


def set_share_reset(bootstrap: str, group: str) -> None:
    """``share.auto.offset.reset=earliest`` for ``group`` (IncrementalAlterConfigs)."""
    from hightide.client import AdminClient
    from hightide.client.configs import AlterOp, ConfigResource, ResourceType

    async def go() -> None:
        async with AdminClient(bootstrap, request_timeout_s=15.0) as admin:
            await admin.incremental_alter_configs(ConfigResource(ResourceType.GROUP, group),
                                                  [("share.auto.offset.reset", AlterOp.SET, "earliest")])
    asyncio.run(go())


class ShareMember:
    """A share-group member; every delivery becomes part of a ``share-poll`` event."""

    def __init__(self, history: History, bootstrap: str, topic: str, group: str, name: str) -> None:
        self.history, self.topic, self.group, self.name = history, topic, group, name
        self.conf = {**_QUIET, "bootstrap.servers": bootstrap, "group.id": group, "client.id": name}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        c = ShareConsumer(self.conf)
        c.subscribe([self.topic])
        try:
            while not self.stop.is_set():
                try:
                    msgs = c.poll(0.2)
                except KafkaException:
                    continue
                records = [list(_record(m)) for m in msgs if m.error() is None]
                if records:
                    self.history.add("share-poll", "ok", self.name, group=self.group, records=records)
        finally:
            c.close()

    def join(self) -> None:
        self.stop.set()
        self.thread.join(60)


def final_read(history: History, bootstrap: str, topic: str, partitions: int, timeout_s: float = 120.0) -> list[str]:
    """Read every partition from offset 0 to its high watermark (asked at the start of the
    read); one ``final-read`` event per partition. Returns the problems met (a partition
    that could not be read completely within ``timeout_s``)."""
    problems = []
    deadline = time.monotonic() + timeout_s
    c = Consumer({**_QUIET, "bootstrap.servers": bootstrap, "group.id": f"{topic}-final",
                  "enable.auto.commit": False, "fetch.max.bytes": 50 << 20})
    try:
        for p in range(partitions):
            got, end = _read_partition(c, topic, p, deadline)
            history.add("final-read", "ok" if got is not None else "fail", "final", partition=p,
                        records=got or [], end=end)
            if got is None:
                problems.append(f"partition {p}: not read to its end {end} within {timeout_s:g} s")
    finally:
        c.close()
    return problems


def _read_partition(c: Consumer, topic: str, p: int, deadline: float) -> tuple[list[list[Any]] | None, int]:
    end = -1
    while end < 0 and time.monotonic() < deadline:
        try:
            _, end = c.get_watermark_offsets(TopicPartition(topic, p), timeout=5)
        except KafkaException:
            time.sleep(0.5)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
    records: dict[int, str] = {}
    nxt = 0
    while nxt < end and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error() is None:
                _, off, value = _record(m)
                records[off] = value
                nxt = max(nxt, off + 1)
    c.unassign()
    if nxt < end:
        return None, end
    return [[o, records[o]] for o in sorted(records) if o < end], end
