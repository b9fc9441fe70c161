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
from typing import TYPE_CHECKING

from ..lag.markers import next_visible_offset
from .types import TopicPartition

if TYPE_CHECKING:
    from .admin import AdminClient

__all__ = ["next_visible_offsets"]

_ISOLATION = {"read_uncommitted": 0, "read_committed": 1, 0: 0, 1: 1}


async def next_visible_offsets(admin: AdminClient, probes: dict[TopicPartition, tuple[list[int], int]], *,
                               isolation_level: str | int = "read_uncommitted", rounds: int = 3,
                               partition_max_bytes: int = 64 * 1024) -> dict[tuple[TopicPartition, int], int]:
    """For each partition ``tp -> (committed offsets, end offset)``: ``(tp, committed) ->``
    the first offset in ``[committed, end)`` whose record the consumer would be delivered,
    or ``end`` when there is none. A pair the Fetch answers (at most ``rounds`` rounds, each
    from where the previous stopped) do not settle, or whose partition answered an error,
    is absent: the caller keeps the raw lag for it. Never raises for partition errors;
    raises :class:`~hightide.client.errors.KafkaError` if no broker can be reached."""
    iso = _ISOLATION[isolation_level]
    out: dict[tuple[TopicPartition, int], int] = {}
    # partition -> (fetch from, committed offsets still open, end)
    todo = {tp: (min(cs), sorted(set(cs)), end) for tp, (cs, end) in probes.items() if cs}
    for _ in range(rounds):
        if not todo:
            break
        fetched = await _fetch(admin, {tp: t[0] for tp, t in todo.items()}, iso, partition_max_bytes)
        nxt: dict[TopicPartition, tuple[int, list[int], int]] = {}
        for tp, (frm, cs, end) in todo.items():
            got = fetched.get(tp)
            if got is None:
                continue
            records, aborted = got
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
        todo = nxt
    return out


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
