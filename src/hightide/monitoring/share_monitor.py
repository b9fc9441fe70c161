"""One consistent read of share-group lag for the exporter and tools (seed 002).

:func:`share_snapshot` asks, per share group, DescribeShareGroupOffsets (start offset and
lag per share partition, v1) and ShareGroupDescribe (state, members); and per initialised
share partition ReadShareGroupState (its persisted state batches) plus the partition's end
offset, from which :func:`hightide.lag.share.in_flight_counts` derives how many offsets are
available, acknowledged, archived or not persisted yet. ReadShareGroupState is served to
clients by hightide only; against other brokers the counts are left out (None).

Persisted state never says ACQUIRED: an acquisition lock does not survive a restart, so
acquired records are persisted (and counted) as available.

:func:`judge_share_groups` gives each share group a status by the consumer-group status
rules (docs/lag.md), pure, from snapshots kept over time.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from ..client.errors import KafkaError, UnsupportedVersionError
from ..client.types import TopicPartition
from ..lag.share import InFlightCounts, in_flight_counts
from ..lag.status import GroupStatus, StatusTracker, evaluate_group_rows

log = logging.getLogger("hightide.exporter")

__all__ = ["ShareGroupReport", "SharePartitionReport", "ShareSnapshot", "judge_share_groups", "share_position",
           "share_snapshot", "share_total_lag"]


@dataclass(frozen=True, slots=True)
class SharePartitionReport:
    topic: str
    partition: int
    start_offset: int | None  # None while uninitialised
    lag: int | None
    end_offset: int | None = None
    counts: InFlightCounts | None = None


@dataclass(frozen=True, slots=True)
class ShareGroupReport:
    group: str
    state: str | None = None
    members: int | None = None
    partitions: tuple[SharePartitionReport, ...] = ()
    error: str | None = None
    status: GroupStatus | None = None
    """Set by :func:`judge_share_groups` (None: not judged)."""


@dataclass(frozen=True, slots=True)
class ShareSnapshot:
    time_ms: int
    groups: dict[str, ShareGroupReport] = field(default_factory=dict)


async def share_snapshot(admin: Any, groups: list[str] | None = None) -> ShareSnapshot | None:
    """Share lag of the share groups among ``groups`` (every share group when None; names
    of other group types are ignored). None only when the cluster does not support share
    groups (UNSUPPORTED_VERSION: no ListGroups v5 / DescribeShareGroupOffsets). A network
    error (a refused or lost connection, a timeout, an unreachable coordinator) is raised,
    never read as "not supported" nor as a group's error: the caller has an outage, not an
    answer."""
    try:
        names = [g.group_id for g in await admin.list_share_groups() if groups is None or g.group_id in groups]
    except UnsupportedVersionError:
        return None
    except KafkaError as exc:
        if _network(exc):
            raise
        log.warning("listing share groups failed: %s", exc)
        return None
    now = int(time.time() * 1000)
    topic_ids: dict[str, Any] = {}
    out: dict[str, ShareGroupReport] = {}
    for g in names:
        try:
            out[g] = await _group(admin, g, topic_ids)
        except UnsupportedVersionError:
            return None
        except KafkaError as exc:
            if _network(exc):
                raise
            out[g] = ShareGroupReport(g, error=f"{type(exc).__name__}: {exc}")
    return ShareSnapshot(now, out)


def share_total_lag(rep: ShareGroupReport) -> int | None:
    """A share group's total lag (the console's, as the consumer groups' total): the sum
    of its positive share-partition lags, None when no partition's lag is known."""
    lags = [p.lag for p in rep.partitions if p.lag is not None]
    return sum(x for x in lags if x > 0) if lags else None


def share_position(p: SharePartitionReport) -> int | None:
    """Where a share partition stands for the status rules, as a consumer group's committed
    offset does: ``end - lag``, the end less what is left to deliver and acknowledge (the
    start offset plus the records acknowledged or archived above it), so that ``end -
    position`` is the share-partition lag and the position moves whenever records are
    acknowledged, not only when the start offset does. The start offset when the lag is
    unknown but the start is known; None while the share partition is uninitialised."""
    if p.start_offset is None:
        return None
    if p.lag is not None and p.end_offset is not None:
        return p.end_offset - p.lag
    return p.start_offset


def judge_share_groups(snap: ShareSnapshot, tracker: StatusTracker) -> ShareSnapshot:
    """``snap`` with each share group's :attr:`ShareGroupReport.status`, by the rules of
    consumer groups (:mod:`hightide.lag.status`, docs/lag.md) over the samples ``tracker``
    keeps across snapshots: per share partition the committed offset is
    :func:`share_position`, the end its end offset, the active members the group's
    members. So an uninitialised share partition (no start offset) is rule 1 ERR
    ``no_commit``, one nobody acknowledges in while records wait STALL then STOP, a group
    without members behind STOP. A group that could not be described is not judged."""
    out: dict[str, ShareGroupReport] = {}
    for name, rep in snap.groups.items():
        if rep.error is not None:
            out[name] = rep
            continue
        rows = [(TopicPartition(p.topic, p.partition), share_position(p), p.end_offset, None, None, None)
                for p in rep.partitions]
        statuses = tracker.observe_rows(name, snap.time_ms, rows, rep.members)
        out[name] = ShareGroupReport(rep.group, rep.state, rep.members, rep.partitions, rep.error,
                                     evaluate_group_rows(statuses))
    tracker.expire(snap.time_ms)
    return ShareSnapshot(snap.time_ms, out)


def _network(exc: KafkaError) -> bool:
    from .monitor import is_network
    return is_network(exc)


async def _group(admin: Any, group: str, topic_ids: dict[str, Any]) -> ShareGroupReport:
    desc = await admin.describe_share_group(group)
    offsets = await admin.list_share_group_offsets(group)
    live = [tp for tp, o in offsets.items() if o.start_offset >= 0]
    ends: dict[TopicPartition, Any] = (await admin.list_offsets({tp: "latest" for tp in live}, raise_on_error=False)
                                             if live else {})
    for r in ends.values():
        if isinstance(r, KafkaError) and _network(r):
            raise r
    missing = sorted({tp.topic for tp in live} - set(topic_ids))
    if missing:
        for name, t in (await admin.describe_topics(missing)).items():
            topic_ids[name] = getattr(t, "topic_id", None)
    wanted = [(topic_ids[tp.topic], tp.partition) for tp in live if topic_ids.get(tp.topic) is not None]
    states = await admin.read_share_group_states(group, wanted) if wanted else None
    parts = []
    for tp, o in sorted(offsets.items()):
        start = o.start_offset if o.start_offset >= 0 else None
        end, counts = None, None
        if start is not None:
            r = ends.get(tp)
            end = r.offset if r is not None and not isinstance(r, KafkaError) and r.offset >= 0 else None
            state = (states or {}).get((topic_ids.get(tp.topic), tp.partition))
            if state is not None:
                counts = in_flight_counts(state.start_offset, state.batches, end)
        parts.append(SharePartitionReport(tp.topic, tp.partition, start, o.lag, end, counts))
    return ShareGroupReport(group, desc.state, len(desc.members), tuple(parts))
