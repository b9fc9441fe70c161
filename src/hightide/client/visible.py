"""Is a group that looks 1 behind really behind? One Fetch per leader from the committed
offsets answers it (see :mod:`hightide.lag.markers` for the pitfall): for each
``(partition, committed offset)`` the offset of the next record the consumer would be
delivered, so lag math can count a consumer facing only transaction markers (and, for
read_committed, aborted records) as caught up. Works against any Kafka broker: it reads
the batches and the aborted-transactions list a read_committed Fetch returns.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import TYPE_CHECKING, NamedTuple

from ..lag.markers import next_visible_offset
from .types import TopicPartition

if TYPE_CHECKING:
    from .admin import AdminClient

__all__ = ["VisibleProbe", "next_visible_offsets", "probe_visible_offsets"]

_ISOLATION = {"read_uncommitted": 0, "read_committed": 1, 0: 0, 1: 1}


class VisibleProbe(NamedTuple):
    """What :func:`probe_visible_offsets` found: ``found[(tp, committed)]`` the next
    visible offset (or the end); ``unprobed[(tp, committed)]`` why a pair could not be
    settled (``fetch_failed``, ``batch_too_large``, ``run_too_long``)."""

    found: dict[tuple[TopicPartition, int], int]
    unprobed: dict[tuple[TopicPartition, int], str]


async def next_visible_offsets(admin: AdminClient, probes: dict[TopicPartition, tuple[list[int], int]], *,
                               isolation_level: str | int = "read_uncommitted", rounds: int = 3,
                               partition_max_bytes: int = 64 * 1024) -> dict[tuple[TopicPartition, int], int]:
    """:attr:`VisibleProbe.found` of :func:`probe_visible_offsets`."""
    return (await probe_visible_offsets(admin, probes, isolation_level=isolation_level, rounds=rounds,
                                        partition_max_bytes=partition_max_bytes)).found


async def probe_visible_offsets(admin: AdminClient, probes: dict[TopicPartition, tuple[list[int], int]], *,
                                isolation_level: str | int = "read_uncommitted", rounds: int = 3,
                                partition_max_bytes: int = 64 * 1024, solo_max: int = 16,
                                max_batch_bytes: int = 16 * 1024 * 1024) -> VisibleProbe:
    """For each partition ``tp -> (committed offsets, end offset)``: ``(tp, committed) ->``
    the first offset in ``[committed, end)`` whose record the consumer would be delivered,
    or ``end`` when there is none.

    Each round is one Fetch per leader (``partition_max_bytes`` per partition) from where
    the previous round stopped; at most ``rounds`` rounds. A partition whose answer holds
    no whole batch (its first batch is larger than the limit: Kafka, and hightide, answer
    0 bytes — or a cut batch — for such a partition unless it is the first of the Fetch,
    KIP-74) is asked again alone, with the limit its batch needs when the cut header says
    it, at most ``max_batch_bytes`` (a partition alone in its Fetch gets at least its first
    batch whatever the limit); at most ``solo_max`` such Fetches per call. A pair that
    could not be settled is in :attr:`VisibleProbe.unprobed` with the reason: the caller
    keeps the raw lag and says so. Never raises for partition errors; raises
    :class:`~hightide.client.errors.KafkaError` if no broker can be reached."""
    iso = _ISOLATION[isolation_level]
    out: dict[tuple[TopicPartition, int], int] = {}
    unprobed: dict[tuple[TopicPartition, int], str] = {}
    solo_left = solo_max
    # partition -> (fetch from, committed offsets still open, end)
    todo = {tp: (min(cs), sorted(set(cs)), end) for tp, (cs, end) in probes.items() if cs}
    for _ in range(rounds):
        if not todo:
            break
        fetched = await _fetch(admin, {tp: t[0] for tp, t in todo.items()}, iso, partition_max_bytes)
        for tp, (frm, _, _) in todo.items():
            got = fetched.get(tp)
            if got is None or _whole_batch(got[0]):
                continue
            if solo_left <= 0:
                continue
            solo_left -= 1
            need = min(max(partition_max_bytes, _batch_size(got[0])), max_batch_bytes)
            alone = await _fetch(admin, {tp: frm}, iso, need)
            if tp in alone:
                fetched[tp] = alone[tp]
        nxt: dict[TopicPartition, tuple[int, list[int], int]] = {}
        for tp, (frm, cs, end) in todo.items():
            got = fetched.get(tp)
            if got is None:
                unprobed.update(((tp, c), "fetch_failed") for c in cs)
                continue
            records, aborted = got
            if not _whole_batch(records):
                unprobed.update(((tp, c), "batch_too_large") for c in cs)
                continue
            left, resume = [], frm
            for c in cs:
                found, scanned = next_visible_offset(records, max(c, frm), end, read_committed=iso == 1,
                                                     aborted=aborted)
                if found is not None:
                    out[(tp, c)] = found
                else:
                    left.append(c)  # nothing visible in [c, scanned): same answer as from scanned
                    resume = max(resume, scanned)
            if left and resume > frm:
                nxt[tp] = (resume, left, end)
            else:
                unprobed.update(((tp, c), "fetch_failed") for c in left)
        todo = nxt
    for tp, (_, cs, _) in todo.items():
        unprobed.update(((tp, c), "run_too_long") for c in cs)
    return VisibleProbe(out, unprobed)


def _whole_batch(records: bytes | memoryview) -> bool:
    """True when ``records`` holds at least one whole record batch (an empty or cut answer
    from before the end has nothing to walk)."""
    if len(records) < 12:
        return False
    return _batch_size(records) <= len(records)


def _batch_size(records: bytes | memoryview) -> int:
    """Size of the first batch from its (possibly cut) header: 0 when not even the
    length field is there."""
    if len(records) < 12:
        return 0
    return int.from_bytes(bytes(records[8:12]), "big") + 12


async def _fetch(admin: AdminClient, offsets: dict[TopicPartition, int], iso: int, partition_max_bytes: int
                 ) -> dict[TopicPartition, tuple[bytes, list[tuple[int, int]]]]:
    """(records, aborted transactions) from ``offsets[tp]`` of every partition, one Fetch
    per leader without waiting; partitions answering an error are absent."""
    by_leader, _errors = await admin.partition_leaders(offsets)
    out: dict[TopicPartition, tuple[bytes, list[tuple[int, int]]]] = {}

    async def one(node_id: int, tps: list[TopicPartition]) -> None:
        conn = await admin._conn_for_node(node_id)
        v = conn.pick_version(1, 11, 4)
        by_topic: defaultdict[str, list[dict[str, int]]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append({"partition": tp.partition, "current_leader_epoch": -1,
                                       "fetch_offset": offsets[tp], "log_start_offset": -1,
                                       "partition_max_bytes": partition_max_bytes})
        resp = await conn.request(1, v, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 16 * 1024 * 1024,
            "isolation_level": iso, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            "forgotten_topics_data": [], "rack_id": ""})
        for t in resp.responses:
            for p in t.partitions:
                if p.error_code == 0:
                    aborted = [(int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions or ()]
                    out[TopicPartition(t.topic, int(p.partition_index))] = (p.records or b"", aborted)
    await asyncio.gather(*(one(n, tps) for n, tps in by_leader.items()))
    return out
