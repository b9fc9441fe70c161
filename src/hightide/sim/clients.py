"""Simulated clients: hightide's own :class:`~hightide.client.AdminClient` speaking the real
protocol over the simulated network, driven in loops that report what they saw to the
:class:`~.checker.Checker`.

- :class:`Producer`: an idempotent acks=all producer (InitProducerId, then batches with
  its id, epoch and per-partition sequence numbers). A batch is retried, unchanged,
  until it is acknowledged (the broker recognises a batch it already has as a
  duplicate), so every value is acknowledged at most once and in sequence order. Its
  values are ``b"<producer>:<seq>"``.
- :class:`Committer`: commits growing offsets for its group (an admin "simple" commit:
  OffsetCommit with no member) and fetches them back; every acknowledged commit must
  still be there (:meth:`~.checker.Checker.fetched`), as the run goes and, for every
  group and partition, once more after the faults (:meth:`Committer.final_check`).
- :class:`Reader`: reads whole partitions from offset 0 up to the high watermark and
  hands the values to the checker (no loss, no change, no duplicate, no reorder; the
  high watermark never goes back).

Errors the clients meet during faults (timeouts, lost connections, NOT_LEADER, ...)
are expected: the client backs off and tries again. Anything the checker rejects is an
:class:`~.checker.Anomaly`, which ends the run.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from ..aio.transport import Transport
from ..client import AdminClient
from ..client.errors import KafkaError
from ..client.types import TopicPartition
from ..protocol.records import build_batch, decode_records, iter_headers
from .checker import Anomaly, Checker

__all__ = ["Committer", "Producer", "Reader"]

RETRY_S = 0.2
#: Each client call's own deadline (the AdminClient's request_timeout_s).
CALL_TIMEOUT_S = 10.0


def _admin(bootstrap: list[str], client_id: str, transport: Transport) -> AdminClient:
    return AdminClient(bootstrap, client_id=client_id, request_timeout_s=CALL_TIMEOUT_S, transport=transport)


class _Client:
    def __init__(self, name: str, bootstrap: list[str], transport: Transport, checker: Checker, rng: random.Random,
                 trace: Callable[[str], None], now: Callable[[], float]) -> None:
        self.name, self.bootstrap, self.transport, self.checker, self.rng = name, bootstrap, transport, checker, rng
        self.trace, self.now = trace, now
        self.admin: AdminClient | None = None
        self.errors = 0
        self.progress_at = 0.0  # simulated time of the last acknowledged operation

    async def _connected(self) -> AdminClient:
        if self.admin is None:
            admin = _admin(self.bootstrap, self.name, self.transport)
            await admin.start()
            self.admin = admin
        return self.admin

    async def _reset(self) -> None:
        admin, self.admin = self.admin, None
        if admin is not None:
            await admin.close()

    async def close(self) -> None:
        await self._reset()

    async def _failed(self, exc: BaseException) -> None:
        self.errors += 1
        if not isinstance(exc, KafkaError) or exc.retriable:
            await self._reset()
        await asyncio.sleep(RETRY_S * (1 + self.rng.random()))


def append_values(values: list[bytes], data: bytes, end: int, where: str) -> None:
    """Append to ``values`` (the values of offsets 0, 1, ... so far) those of the record
    batches in ``data`` at the next offsets below ``end``: a record's value, ``b""`` for a
    control record's offset. Raises :class:`Anomaly` when an offset below ``end`` is
    skipped."""
    for h in iter_headers(data):
        if h.base_offset > len(values) and h.base_offset < end:
            raise Anomaly(f"{where}: offsets {len(values)}..{h.base_offset - 1} missing below {end}")
        if h.is_control:
            recs = [(o, b"") for o in range(h.base_offset, h.next_offset)]
        else:
            recs = [(r.offset, r.value or b"") for r in decode_records(data[h.position:h.position + h.size])]
        for off, value in recs:
            if off == len(values) and off < end:
                values.append(value)


class Producer(_Client):
    """See the module doc. ``stop_after`` values in all (None: until cancelled)."""

    def __init__(self, *args: Any, topic: str, partitions: int, batch: int = 3, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.topic, self.partitions, self.batch = topic, partitions, batch
        self.seq = 0
        self.next_seq: dict[int, int] = {}
        self.pending: tuple[int, int, list[bytes]] | None = None  # (partition, base sequence, values)
        self.acked = 0
        self.pid: tuple[int, int] | None = None

    async def run(self) -> None:
        while True:
            try:
                admin = await self._connected()
                if self.pid is None:
                    p = await admin.init_producer_id()
                    self.pid = (p.producer_id, p.epoch)
                if self.pending is None:
                    part = self.rng.randrange(self.partitions)
                    base = self.next_seq.get(part, 0)
                    values = [f"{self.name}:{self.seq + i}".encode() for i in range(self.batch)]
                    self.seq += self.batch
                    self.next_seq[part] = base + self.batch
                    self.pending = (part, base, values)
                part, base, values = self.pending
                batch = build_batch([(None, v, [], 0) for v in values], producer_id=self.pid[0],
                                    producer_epoch=self.pid[1], base_sequence=base)
                tp = TopicPartition(self.topic, part)
                offsets = await admin.produce({tp: batch}, acks=-1, timeout_ms=int(CALL_TIMEOUT_S * 1000))
                self.checker.acked((self.topic, part), offsets[tp], values)
                self.trace(f"{self.name} acked {self.topic}-{part}@{offsets[tp]} x{len(values)}")
                self.pending = None
                self.acked += len(values)
                self.progress_at = self.now()
                await asyncio.sleep(self.rng.uniform(0.0, 0.05))
            except Anomaly:
                raise
            except (KafkaError, OSError, TimeoutError) as exc:
                if isinstance(exc, KafkaError) and not exc.retriable and exc.code not in _PRODUCE_RETRY:
                    raise Anomaly(f"{self.name}: produce failed for good: {exc}") from exc
                await self._failed(exc)


#: Produce errors a retry of the same batch resolves (the rest are anomalies for an
#: idempotent producer whose state the cluster must keep).
_PRODUCE_RETRY = frozenset({6, 7, 8, 19, 20, 3, 5, 13, 14, 15, 56, 74})


class Committer(_Client):
    """See the module doc. It commits for several ``groups`` (their coordinators are on
    different ``__consumer_offsets`` partitions, so a fault of any broker hits one)."""

    def __init__(self, *args: Any, groups: tuple[str, ...], topic: str, partitions: int, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.groups, self.topic, self.partitions = groups, topic, partitions
        self.offset = 0
        self.commits = 0

    async def run(self) -> None:
        while True:
            try:
                admin = await self._connected()
                group = self.rng.choice(self.groups)
                part = self.rng.randrange(self.partitions)
                tp = TopicPartition(self.topic, part)
                key = (self.topic, part)
                if self.rng.random() < 0.7:
                    self.offset += self.rng.randint(1, 10)
                    errors = await admin.alter_consumer_group_offsets(group, {tp: self.offset})
                    if errors.get(tp) is None:
                        self.checker.committed(group, key, self.offset)
                        self.trace(f"{self.name} committed {group} {self.topic}-{part}={self.offset}")
                        self.commits += 1
                        self.progress_at = self.now()
                else:
                    floor = self.checker.commit_floor(group, key)
                    got = await admin.list_consumer_group_offsets(group, [tp])
                    self.checker.fetched(group, key, got[tp].offset, since=floor)
                await asyncio.sleep(self.rng.uniform(0.0, 0.1))
            except Anomaly:
                raise
            except (KafkaError, OSError, TimeoutError) as exc:
                await self._failed(exc)

    async def final_check(self, deadline: float) -> None:
        """After the faults healed and the clients stopped: each group's committed offset
        of every partition is at least its highest acknowledged commit. An acknowledged
        commit that no later one overwrote is checked here even if the run never fetched
        it back (as the final read checks every acknowledged record). Retried until
        ``deadline`` (simulated time), then an anomaly."""
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        for group in self.groups:
            while True:
                floors = {tp: self.checker.commit_floor(group, (tp.topic, tp.partition)) for tp in tps}
                try:
                    admin = await self._connected()
                    got = await admin.list_consumer_group_offsets(group, tps)
                    break
                except (KafkaError, OSError, TimeoutError) as exc:
                    if self.now() > deadline:
                        raise Anomaly(f"final offset fetch of group {group} failed: {exc}") from exc
                    await self._failed(exc)
            for tp in tps:
                self.checker.fetched(group, (tp.topic, tp.partition), got[tp].offset, since=floors[tp])


class Reader(_Client):
    """See the module doc."""

    def __init__(self, *args: Any, topic: str, partitions: int, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.topic, self.partitions = topic, partitions

    async def read_all(self, part: int) -> tuple[list[bytes], int]:
        """The partition's values from 0 to its high watermark (``b""`` at offsets that
        hold no data record: control records), and that high watermark."""
        admin = await self._connected()
        tp = TopicPartition(self.topic, part)
        values: list[bytes] = []
        got = await admin.fetch(tp, 0, max_wait_ms=0)
        hw = got.high_watermark
        self.checker.high_watermark((self.topic, part), hw)
        while len(values) < hw:
            before = len(values)
            data = bytes(got.records)
            append_values(values, data, hw, f"{self.topic}-{part}")
            if len(values) >= hw or not data:
                break
            if len(values) == before:
                raise Anomaly(f"{self.topic}-{part}: a fetch at offset {before} returned no record at or past it "
                              f"below the high watermark {hw}")
            got = await admin.fetch(tp, len(values), max_wait_ms=0)
        return values[:hw], hw

    async def run(self) -> None:
        while True:
            try:
                part = self.rng.randrange(self.partitions)
                values, hw = await self.read_all(part)
                self.checker.read((self.topic, part), 0, values, hw)
                self.progress_at = self.now()
                await asyncio.sleep(self.rng.uniform(0.1, 0.5))
            except Anomaly:
                raise
            except (KafkaError, OSError, TimeoutError) as exc:
                await self._failed(exc)
