"""Collects consistent lag snapshots from a cluster for the CLI and the exporter.

One :meth:`LagMonitor.snapshot` call reads, in this order: committed offsets together
with end offsets (:meth:`AdminClient.lags` — one OffsetFetch on hightide, OffsetFetch
*then* ListOffsets elsewhere, so lag is never under-reported), group membership, the
max-timestamp anchor of each partition, and the record at each lagging group's
committed offset. It then feeds the pure :mod:`hightide.lag` functions: offset lag and
anomalies, three time-lag methods, and the status tracker, whose sliding window is
made of successive snapshots of the same monitor.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import overload

from ..client import AdminClient, KafkaError, ListOffsetsResult, TopicPartition
from ..client.errors import ErrorCode, KafkaConnectionError, KafkaTimeoutError, UnsupportedVersionError
from ..client.lag import LagRow, groups_lag_rows, lag_row, uncommitted_lag
from ..client.visible import VisibleProbe, probe_visible_offsets
from ..lag import (
    Certainty,
    GroupStatus,
    OffsetHistory,
    OffsetLag,
    PartitionStatus,
    StatusRow,
    StatusRules,
    StatusTracker,
    TimeLag,
    best_time_lag,
    decode_assignment,
    evaluate_group_rows,
    offset_lag,
    time_lag_from_max_timestamp,
    time_lag_from_record,
    time_lag_interpolated,
    time_lags_caught_up_at_markers,
)
from ..lag.endoffsets import DEFAULT_GRACE_MS, EndOffsetMemory, EndOffsets
from ..lag.offsets import uncommitted_estimate
from ..lag.status import unjudged

__all__ = ["GroupReport", "LagMonitor", "PartitionReport", "PartitionReports", "Snapshot", "TopicPartitionReport"]

ALL_METHODS = ("record_timestamp", "interpolation", "max_timestamp_anchor")
_NO_HISTORY = OffsetHistory(2)  # read only: a partition without end-offset samples
LAST_KNOWN = "last_known"
"""The ``source`` of a lag row whose end offsets are the last known ones (STALE_END)."""


@dataclass(frozen=True, slots=True)
class Member:
    consumer_id: str
    host: str
    client_id: str


@dataclass(frozen=True, slots=True)
class PartitionReport:
    group: str
    topic: str
    partition: int
    offsets: OffsetLag
    high_watermark: int | None
    last_stable_offset: int | None
    member: Member | None
    time_lags: tuple[TimeLag, ...]
    time_lag: TimeLag | None
    status: PartitionStatus | None
    source: str
    error: str | None = None

    @property
    def lag(self) -> int | None:
        return self.offsets.lag


@dataclass(frozen=True, slots=True)
class GroupReport:
    group: str
    state: str | None
    """None when the broker cannot describe groups."""
    members: tuple[Member, ...] | None
    protocol_type: str | None
    partitions: Sequence[PartitionReport]
    """Sorted by topic and partition. From :meth:`LagMonitor.snapshot` a
    :class:`PartitionReports` (built on first use), else any sequence."""
    status: GroupStatus | None
    coordinator: int | None = None
    assignment_strategy: str | None = None
    error: str | None = None

    @property
    def total_lag(self) -> int:
        """Sum of the positive partition lags, and of the estimated lags of the partitions
        without a commit (:attr:`OffsetLag.estimated_lag`; see :attr:`total_lag_estimated`)."""
        parts = self.partitions
        if isinstance(parts, PartitionReports):
            return parts.total_lag()
        return sum(p.lag for p in parts if p.lag is not None and p.lag > 0) + sum(
            p.offsets.estimated_lag or 0 for p in parts if p.lag is None)

    @property
    def total_lag_estimated(self) -> bool:
        """True when :attr:`total_lag` holds estimates: partitions without a commit counted
        from where ``auto.offset.reset`` would start the group (docs/lag.md)."""
        parts = self.partitions
        if isinstance(parts, PartitionReports):
            return parts.has_estimates()
        return any(p.offsets.estimated_lag is not None for p in parts)

    @property
    def max_time_lag_ms(self) -> int | None:
        vals = [p.time_lag.ms for p in self.partitions if p.time_lag is not None and p.time_lag.ms is not None]
        return max(vals) if vals else None


@dataclass(frozen=True, slots=True)
class TopicPartitionReport:
    topic: str
    partition: int
    high_watermark: int | None
    log_start_offset: int | None
    max_timestamp: ListOffsetsResult | None
    """(offset, timestamp) of the record with the largest timestamp; (-1, -1) when empty."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    time_ms: int
    groups: dict[str, GroupReport]
    partitions: dict[TopicPartition, TopicPartitionReport]
    duration_s: float
    round_trips: int
    brokers: int = 0
    errors: tuple[str, ...] = field(default=())
    outage: tuple[str, ...] = field(default=())
    """Network errors (a refused or lost connection, a timeout, a coordinator that could
    not be reached) met while taking the snapshot: parts of it are missing or degraded
    because a broker did not answer, not because the cluster is so. A tool that keeps
    snapshots (the console) must not store one with an outage; the CLI and the exporter
    show what they got, the affected groups and partitions marked."""


class LagMonitor:
    """Takes snapshots through ``admin`` and keeps the history they need (end-offset
    samples for interpolation, status windows). ``clock`` returns seconds (injectable)."""

    def __init__(self, admin: AdminClient, *, rules: StatusRules = StatusRules(),
                 methods: Iterable[str] = ALL_METHODS, isolation_level: str = "read_uncommitted",
                 history_points: int = 120, clock: Callable[[], float] = time.time,
                 record_fetch_rounds: int = 8, marker_probe_max_lag: int = 1000,
                 stale_end_grace_ms: int = DEFAULT_GRACE_MS, uncommitted_reset: str | None = "earliest") -> None:
        self.admin = admin
        self.ends = EndOffsetMemory(stale_end_grace_ms, read_committed=isolation_level in ("read_committed", 1))
        """End offsets never go back from one snapshot to the next because of a leader
        failover: an unknown or smaller reading is replaced by the last known one, marked
        stale (source ``last_known``, anomaly STALE_END), for at most
        ``stale_end_grace_ms`` (see :mod:`hightide.lag.endoffsets`, docs/lag.md)."""
        self.marker_probe_max_lag = marker_probe_max_lag
        """Partitions whose lag is at most this many offsets are checked for the "stuck
        at 1" pitfall (only transaction markers, or aborted records for read_committed,
        between the commit and the end: caught up, see :mod:`hightide.lag.markers`):
        one Fetch per leader at their committed offsets. 0 turns the check off."""
        self.uncommitted_reset = uncommitted_reset
        """Where a group without a commit on a partition it consumes would start
        (``auto.offset.reset``: ``"earliest"``, ``"latest"``, or None for no estimate): its
        lag there is estimated from it (:attr:`OffsetLag.estimated_lag`), counted in the
        group's total (flagged as an estimate) and its time lag measured from that record."""
        self.record_fetch_rounds = record_fetch_rounds
        """At most this many Fetch rounds per snapshot for the record_timestamp method (a
        round answers every wanted offset its batches cover, see :meth:`_records`); offsets
        left unanswered use the other methods."""
        self.methods = tuple(methods)
        self.isolation_level = isolation_level
        self.tracker = StatusTracker(rules)
        self.history_points = history_points
        self.histories: dict[TopicPartition, OffsetHistory] = {}
        self.clock = clock

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def group_ids(self) -> list[str]:
        """Consumer groups (and groups with offsets only), [] if ListGroups is missing.
        Raises :class:`KafkaError` for any other failure (a network error is no "no
        groups")."""
        try:
            listed = await self.admin.list_groups()
        except UnsupportedVersionError:
            return []
        return [g.group_id for g in listed if g.protocol_type in ("consumer", "")]

    async def snapshot(self, groups: Iterable[str] | None = None, *, all_topics: bool = False) -> Snapshot:
        """One snapshot of ``groups`` (default: every listed group). ``all_topics`` adds
        every partition of every topic to :attr:`Snapshot.partitions`, not only those
        the groups committed to. The cyclic garbage collector is paused while it runs
        (see :func:`_gc_paused`)."""
        with _gc_paused():
            return await self._snapshot(groups, all_topics)

    async def _snapshot(self, groups: Iterable[str] | None, all_topics: bool) -> Snapshot:
        t0 = time.perf_counter()
        before = _round_trips(self.admin)
        errors: list[str] = []
        outage: list[str] = []
        ids = list(groups) if groups is not None else await self.group_ids()
        lags = await groups_lag_rows(self.admin, ids, isolation_level=self.isolation_level) if ids else {}
        outage += [f"{_describe_error(r)} (group {g})" for g, r in lags.items() if isinstance(r, KafkaError) and is_network(r)]
        now = self._now_ms()
        described = await self._describe(ids, errors, outage)
        lags = await self._add_assigned(lags, described)
        scan = self._scan(lags, now)
        lags, stale = scan.lags, scan.stale
        visible = await self._visible(scan.probes, outage)
        tps = sorted(scan.bounds)
        if all_topics:
            md = await self.admin.metadata()
            tps = sorted(set(tps) | {TopicPartition(t.name, p) for t in md.topics.values()
                                     if not t.is_internal and t.error == ErrorCode.none for p in t.partitions})
        bounds = await self._bounds(tps, scan.bounds, now, stale)
        self.ends.end_round()
        anchors = await self._anchors(tps)
        records = await self._records(scan.pending, outage)
        for tp, (hw, _) in bounds.items():
            if hw is not None and tp not in stale:  # a stale end is no new sample
                self.histories.setdefault(tp, OffsetHistory(self.history_points)).add(hw, now)
        partitions = {tp: TopicPartitionReport(tp.topic, tp.partition, *bounds.get(tp, (None, None)),
                                               anchors.get(tp)) for tp in tps}
        ctx = _ReportContext(self.methods, self.isolation_level in ("read_committed", 1), anchors, records,
                             {tp: h.copy() for tp, h in self.histories.items() if tp in partitions}, now,
                             visible.found, visible.unprobed, self.uncommitted_reset)
        reports = {g: self._group(g, lags[g], described.get(g), ctx) for g in ids}
        return Snapshot(now, reports, partitions, time.perf_counter() - t0,
                        _round_trips(self.admin) - before, len(self.admin._addrs), tuple(errors), tuple(outage))

    async def _describe(self, ids: list[str], errors: list[str], outage: list[str]) -> dict[str, object]:
        """Each group's description, or its :class:`KafkaError` (GROUP_ID_NOT_FOUND for an
        unknown group or a share group); {} when DescribeGroups itself fails. Network
        errors are added to ``outage``."""
        if not ids:
            return {}
        try:
            got: dict[str, object] = dict(await self.admin.describe_groups(ids, raise_on_error=False))
        except KafkaError as exc:
            errors.append(f"describe_groups: {exc}")
            if is_network(exc):
                outage.append(f"{_describe_error(exc)} (DescribeGroups)")
            return {}
        outage += [f"{_describe_error(d)} (DescribeGroups {g})" for g, d in got.items()
                   if isinstance(d, KafkaError) and is_network(d)]
        return got

    async def _add_assigned(self, lags: dict[str, list[LagRow] | KafkaError], described: dict[str, object]
                            ) -> dict[str, list[LagRow] | KafkaError]:
        """``lags`` plus, per group, the partitions its members own without a commit,
        with their real end offsets (lag unknown: ``no_commit``)."""
        wanted: dict[str, list[TopicPartition]] = {}
        for g, desc in described.items():
            lag = lags.get(g)
            if desc is None or isinstance(desc, KafkaError) or isinstance(lag, KafkaError) or not desc.members:
                continue
            have = {row[0] for row in lag or ()}
            missing = [TopicPartition(*tp) for m in desc.members for tp in decode_assignment(m.assignment)
                       if TopicPartition(*tp) not in have]
            if missing:
                wanted[g] = missing
        if not wanted:
            return lags
        ends = await uncommitted_lag(self.admin, [tp for tps in wanted.values() for tp in tps],
                                     isolation_level=self.isolation_level)
        out = dict(lags)
        for g, tps in wanted.items():
            had = lags.get(g) or []
            assert not isinstance(had, KafkaError)
            out[g] = [*had, *(lag_row(tp, ends[tp]) for tp in tps if tp in ends)]
        return out

    async def _visible(self, probes: dict[TopicPartition, tuple[list[int], int]], outage: list[str]
                       ) -> VisibleProbe:
        """The next visible offset (:func:`~hightide.client.visible.probe_visible_offsets`)
        at each committed offset of ``probes`` (those behind their end by 1 to
        ``marker_probe_max_lag`` offsets, see :meth:`_scan`), and the pairs that could not
        be probed (all of them when the Fetch fails: the raw lag is kept, marked
        ``tail_unprobed``)."""
        if not probes:
            return VisibleProbe({}, {})
        try:
            return await probe_visible_offsets(self.admin, probes, isolation_level=self.isolation_level)
        except KafkaError as exc:
            if is_network(exc):
                outage.append(f"{_describe_error(exc)} (marker probe)")
            return VisibleProbe({}, {(tp, c): "fetch_failed" for tp, (cs, _) in probes.items() for c in cs})

    def _scan(self, lags: dict[str, list[LagRow] | KafkaError], now: int) -> _Scan:
        """One pass over every lag row: each row's end offsets settled by :attr:`ends` (a
        row whose end is unknown or went back, a leader failover, carries the last known
        end offsets instead, its lag measured to them, with source ``last_known``), and,
        from the settled rows, what the rest of the snapshot reads (see :class:`_Scan`).
        A partition's reading is settled once per distinct (high watermark, log start,
        LSO) in a row: settling the same reading again in one round answers the same and
        changes nothing (:meth:`EndOffsetMemory.settle`)."""
        settle, now_ms, read_committed = self.ends.settle, now, self.ends.read_committed
        limit = self.marker_probe_max_lag
        want_records = "record_timestamp" in self.methods
        from_start = self.uncommitted_reset == "earliest"
        stale: set[TopicPartition] = set()
        bounds: dict[TopicPartition, tuple[int | None, int | None]] = {}
        probes: dict[TopicPartition, tuple[list[int], int]] = {}
        pending: dict[TopicPartition, set[int]] = {}
        settled_at: dict[TopicPartition, tuple[int | None, int | None, int | None, EndOffsets | None]] = {}
        out = lags
        for g, rows in lags.items():
            if isinstance(rows, KafkaError):
                continue
            settled = None
            for i, row in enumerate(rows):
                tp, c, hw, start, lag, lst = row[0], row[1], row[2], row[3], row[4], row[5]
                done = settled_at.get(tp)
                if done is not None and done[0] == hw and done[1] == start and done[2] == lst:
                    e = done[3]
                else:
                    e = settle(tp, hw, start, lst, now_ms)
                    settled_at[tp] = (hw, start, lst, e)
                if e is not None:
                    if settled is None:
                        settled = list(rows)
                        if out is lags:
                            out = dict(lags)
                        out[g] = settled
                    hw, start, lst = e.high_watermark, e.log_start_offset, e.last_stable_offset
                    end = lst if read_committed else hw
                    lag = None if c is None or end is None else end - c
                    settled[i] = (tp, c, hw, start, lag, lst, row[6], LAST_KNOWN, row[8])
                    stale.add(tp)
                if tp not in bounds:
                    bounds[tp] = (hw, start)
                if c is None:
                    end = lst if read_committed else hw
                    if want_records and from_start and start is not None and end is not None and end > start:
                        offs = pending.get(tp)
                        if offs is None:
                            offs = pending[tp] = set()
                        offs.add(start)  # no commit: the estimate reads from the log start
                    continue
                end = lst if read_committed else hw
                if end is not None and 0 < end - c <= limit:
                    probe = probes.get(tp)
                    if probe is None:
                        probe = probes[tp] = ([], end)
                    probe[0].append(c)
                if want_records and lag is not None and lag > 0:
                    offs = pending.get(tp)
                    if offs is None:
                        offs = pending[tp] = set()
                    offs.add(c if start is None or start < c else start)  # next read (log start if deleted)
        return _Scan(out, stale, bounds, probes, pending)

    async def _bounds(self, tps: list[TopicPartition], scanned: dict[TopicPartition, tuple[int | None, int | None]],
                      now: int, stale: set[TopicPartition]) -> dict[TopicPartition, tuple[int | None, int | None]]:
        """(high watermark, log start) per partition: ``scanned`` from the (settled) lag
        answers (:meth:`_scan`), and for the partitions no group committed to
        (``all_topics``), from ListOffsets, settled likewise (those reported stale are
        added to ``stale``)."""
        out = dict(scanned)
        rest = [tp for tp in tps if tp not in out]
        if rest:
            latest = await self.admin.list_offsets({tp: "latest" for tp in rest}, raise_on_error=False)
            earliest = await self.admin.list_offsets({tp: "earliest" for tp in rest}, raise_on_error=False)
            for tp in rest:
                hw, start = _offset(latest.get(tp)), _offset(earliest.get(tp))
                e = self.ends.settle(tp, hw, start, None, now) if not self.ends.read_committed else None
                if e is not None:
                    hw, start = e.high_watermark, e.log_start_offset
                    stale.add(tp)
                out[tp] = (hw, start)
        return out

    async def _anchors(self, tps: list[TopicPartition]) -> dict[TopicPartition, ListOffsetsResult]:
        if not tps or "max_timestamp_anchor" not in self.methods:
            return {}
        got = await self.admin.list_offsets({tp: "max_timestamp" for tp in tps}, raise_on_error=False)
        return {tp: r for tp, r in got.items() if isinstance(r, ListOffsetsResult)}

    async def _records(self, pending: dict[TopicPartition, set[int]], outage: list[str]
                       ) -> dict[tuple[TopicPartition, int], int]:
        """Timestamp of the first record at each lagging committed offset (``pending``:
        per partition, where the next read of each lagging group starts, see
        :meth:`_scan`; consumed). Each round is one Fetch per leader at the smallest
        offset still unanswered on each partition, and answers every wanted offset the
        returned batches cover (usually all of them in one round); at most
        ``record_fetch_rounds`` rounds."""
        out: dict[tuple[TopicPartition, int], int] = {}
        for _ in range(self.record_fetch_rounds):
            if not pending:
                break
            try:
                got = await self.admin.first_records_many({tp: sorted(o) for tp, o in pending.items()},
                                                          isolation_level=self.isolation_level)
            except KafkaError as exc:
                if is_network(exc):
                    outage.append(f"{_describe_error(exc)} (record timestamps)")
                    break
                continue
            for tp, offs in list(pending.items()):
                fetched_at = min(offs)
                r = got.get(tp)
                if isinstance(r, dict):
                    for off, rec in r.items():
                        out[(tp, off)] = rec.timestamp
                    offs.difference_update(r)
                offs.discard(fetched_at)  # answered, or no record there (error, end of log)
                if not offs:
                    del pending[tp]
        return out

    def _group(self, group: str, lag: list[LagRow] | KafkaError, desc: object,
               ctx: _ReportContext) -> GroupReport:
        """One group's report. Per partition only the tracker's state and the status row
        are computed here; :class:`PartitionReport` objects (offset lag, time lags,
        status) are built when the report's partitions are first read."""
        members, owner, state, ptype, coord, strategy = None, {}, None, None, None, None
        if isinstance(desc, KafkaError) and desc.code == ErrorCode.group_id_not_found:
            state, members = "Dead", ()  # DescribeGroups v6+ for a group that does not exist
        elif desc is not None and not isinstance(desc, KafkaError):
            state, ptype = desc.state, desc.protocol_type
            coord, strategy = desc.coordinator, desc.protocol or None
            members = tuple(Member(m.member_id, m.client_host, m.client_id) for m in desc.members)
            for m, raw in zip(members, desc.members):
                for tp in decode_assignment(raw.assignment):
                    owner[TopicPartition(*tp)] = m
        if isinstance(lag, KafkaError):
            return GroupReport(group, state, members, ptype, (), None, coord, strategy, str(lag))
        active = None if members is None else len(members)
        # the offsets offset_lag() reports (unknown = None, caught up when only markers are
        # left before the end), without the object
        statuses: dict[TopicPartition, StatusRow] = self.tracker.observe_rows(
            group, ctx.now, lag, active, read_committed=ctx.read_committed, next_visible=ctx.skipped)
        if ctx.unprobed:
            unjudged({row[0] for row in lag if row[1] is not None and (row[0], row[1]) in ctx.unprobed}, statuses)
        # (partitions assigned to a member without any commit are in ``lag`` too, with
        # their end offsets: see _add_assigned; they are no_commit, status ERR)
        # = self.tracker.group_status(group, now, active, keys=list(lag)), without
        # evaluating every partition a second time
        gs = evaluate_group_rows(statuses)
        return GroupReport(group, state, members, ptype, PartitionReports(group, lag, statuses, owner, ctx),
                           gs, coord, strategy)


@dataclass(frozen=True, slots=True)
class _Scan:
    """What :meth:`LagMonitor._scan` reads from the lag rows in one pass."""

    lags: dict[str, list[LagRow] | KafkaError]
    """The rows with their end offsets settled."""
    stale: set[TopicPartition]
    """Partitions reported with their last known end offsets."""
    bounds: dict[TopicPartition, tuple[int | None, int | None]]
    """(high watermark, log start) of every partition with a row, from its first row."""
    probes: dict[TopicPartition, tuple[list[int], int]]
    """Partition -> (committed offsets behind the end by 1 to ``marker_probe_max_lag``
    offsets, end): the "stuck at 1" check (:mod:`hightide.lag.markers`); {} when off."""
    pending: dict[TopicPartition, set[int]]
    """Partition -> where each lagging group's next read starts (its committed offset,
    or the log start when that was deleted): the record_timestamp method's Fetches."""


@dataclass(frozen=True, slots=True)
class _ReportContext:
    """What a snapshot's partition reports are built from, frozen at snapshot time
    (``histories`` are copies: later snapshots add to the monitor's own)."""

    methods: tuple[str, ...]
    read_committed: bool
    anchors: dict[TopicPartition, ListOffsetsResult]
    records: dict[tuple[TopicPartition, int], int]
    histories: dict[TopicPartition, OffsetHistory]
    now: int
    visible: dict[tuple[TopicPartition, int], int] = field(default_factory=dict)
    """(partition, committed offset) -> next visible offset, where it was looked up."""
    unprobed: dict[tuple[TopicPartition, int], str] = field(default_factory=dict)
    """(partition, committed offset) -> why the run after it could not be probed."""
    reset: str | None = "earliest"
    """The ``auto.offset.reset`` assumed for partitions without a commit."""
    skipped: dict[tuple[TopicPartition, int], int] = field(init=False)
    """The entries of :attr:`visible` whose next visible offset is past the committed
    one (markers or aborted records there): the only ones that can change a lag, so
    the per-partition status pass looks up nothing when no partition has any."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "skipped", {k: v for k, v in self.visible.items() if v > k[1]})

    def time_lags(self, tp: TopicPartition, ol: OffsetLag) -> tuple[TimeLag, ...]:
        """Every method's time lag. Caught up at the markers (offset lag 0, an invisible
        tail): 0 by every method, reason ``caught_up_at_markers``. No commit, with an
        estimated lag: measured from where the group would start, certainty ESTIMATE
        (exact answers downgraded: the start is an assumption)."""
        methods = self.methods
        if ol.invisible_tail and ol.lag == 0:
            return time_lags_caught_up_at_markers(methods)
        if ol.committed is None and ol.estimated_lag is not None and ol.end_offset is not None:
            at = ol.end_offset - ol.estimated_lag  # the log start (earliest) or the end (latest)
            return tuple(t if t.ms is None else
                         TimeLag(t.ms, t.method, Certainty.ESTIMATE if t.certainty == Certainty.EXACT else t.certainty,
                                 "no_commit_estimate")
                         for t in self._time_lags(tp, at, ol.end_offset, None))
        return self._time_lags(tp, ol.committed, ol.end_offset, ol.log_start_offset)

    def _time_lags(self, tp: TopicPartition, committed: int | None, end: int | None, start: int | None
                   ) -> tuple[TimeLag, ...]:
        out = []
        methods = self.methods
        now = self.now
        hist = self.histories.get(tp)
        if hist is None:
            hist = _NO_HISTORY
        if "record_timestamp" in methods:
            lost = committed is not None and start is not None and start > committed  # ol.lost > 0
            at = max(committed or 0, start or 0)
            out.append(time_lag_from_record(
                committed, end, self.records.get((tp, at)), now,
                certainty=Certainty.LOWER_BOUND if lost else Certainty.EXACT))
        if "interpolation" in methods:
            out.append(time_lag_interpolated(committed, end, hist, now))
        if "max_timestamp_anchor" in methods:
            anchor = self.anchors.get(tp)
            out.append(time_lag_from_max_timestamp(
                committed, end, anchor.offset if anchor else None,
                anchor.timestamp if anchor else None, now, hist.rate_per_ms()))
        return tuple(out)


class PartitionReports(Sequence[PartitionReport]):
    """A group's :class:`PartitionReport` s, sorted by topic and partition, built on
    first access (all of them, then kept) from the snapshot's columns: a snapshot of
    500 groups x 100 partitions computes offsets and statuses for all of them but builds
    the ~8 objects per partition a report is made of only for the groups that are read.
    The values are those of the snapshot's moment whenever they are built."""

    __slots__ = ("_built", "_ctx", "_group", "_lag", "_owner", "_statuses")

    def __init__(self, group: str, lag: list[LagRow], statuses: dict[TopicPartition, StatusRow],
                 owner: dict[TopicPartition, Member], ctx: _ReportContext) -> None:
        self._group, self._lag, self._statuses, self._owner, self._ctx = group, lag, statuses, owner, ctx
        self._built: tuple[PartitionReport, ...] | None = None

    def total_lag(self) -> int:
        """Sum of the positive partition lags and of the estimated lags of partitions
        without a commit, without building the reports."""
        total = sum(r[3] for r in self._statuses.values() if r[3] is not None and r[3] > 0)
        return total + sum(e for e in self._estimates() if e is not None)

    def has_estimates(self) -> bool:
        """True when a partition without a commit has an estimated lag."""
        return any(e is not None for e in self._estimates())

    def _estimates(self) -> Iterator[int | None]:
        ctx = self._ctx
        if ctx.reset is None:
            return
        rc = ctx.read_committed
        for row in self._lag:
            if row[1] is None:
                yield uncommitted_estimate(row[5] if rc else row[2], row[3], ctx.reset)

    def _reports(self) -> tuple[PartitionReport, ...]:
        built = self._built
        if built is None:
            built = self._built = tuple(self._build(row) for row in sorted(self._lag, key=_partition_of))
        return built

    def _build(self, row: LagRow) -> PartitionReport:
        tp, committed, hw, start, _, lst, _, source, error = row
        ctx = self._ctx
        ol = offset_lag(committed, hw, start, lst, read_committed=ctx.read_committed,
                        next_visible=None if committed is None else ctx.visible.get((tp, committed)),
                        stale=source == LAST_KNOWN,
                        unprobed=committed is not None and (tp, committed) in ctx.unprobed, reset=ctx.reset)
        tls = ctx.time_lags(tp, ol)
        return PartitionReport(self._group, tp.topic, tp.partition, ol, hw, lst, self._owner.get(tp), tls,
                               best_time_lag(tls), PartitionStatus(*self._statuses[tp]), source,
                               None if error == ErrorCode.none else error.name)

    @overload
    def __getitem__(self, i: int) -> PartitionReport: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[PartitionReport, ...]: ...

    def __getitem__(self, i: int | slice) -> PartitionReport | tuple[PartitionReport, ...]:
        return self._reports()[i]

    def __iter__(self) -> Iterator[PartitionReport]:
        return iter(self._reports())

    def __len__(self) -> int:
        return len(self._lag)

    def __bool__(self) -> bool:
        return bool(self._lag)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PartitionReports({self._reports()!r})"


_gc_pauses = 0  # snapshots running with the collector paused (they may overlap)
_gc_was_enabled = False


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a snapshot is taken, awaits included. A
    snapshot of 500 groups x 100 partitions allocates ~250,000 small containers (decoded
    OffsetFetch entries, rows, samples, status rows) of which ~150,000 survive it, so the
    collections it would trigger (~190 young, ~17 middle and 1-2 full collections per
    snapshot, the full ones scanning the tracker's samples and the previous snapshot)
    free almost nothing and cost ~30 % of the snapshot. Reference counting still frees
    everything without cycles meanwhile (other tasks' cyclic garbage waits until the
    snapshot ends, whose duration the client's request timeout bounds); collection
    resumes with its counters intact when the last overlapping snapshot ends, and only
    if it was enabled when the first one began."""
    global _gc_pauses, _gc_was_enabled
    if _gc_pauses == 0:
        _gc_was_enabled = gc.isenabled()
        gc.disable()
    _gc_pauses += 1
    try:
        yield
    finally:
        _gc_pauses -= 1
        if _gc_pauses == 0 and _gc_was_enabled:
            gc.enable()


_NETWORK_CODES = frozenset({ErrorCode.network_exception, ErrorCode.request_timed_out,
                            ErrorCode.coordinator_not_available})


def is_network(exc: KafkaError) -> bool:
    """True for an error that says a broker did not answer (a refused or lost connection,
    a timeout, a coordinator that could not be reached after the client's retries), not
    something about the cluster's data."""
    return isinstance(exc, (KafkaConnectionError, KafkaTimeoutError)) or exc.code in _NETWORK_CODES


def _describe_error(exc: object) -> str:
    return f"{type(exc).__name__}: {exc}"


def _partition_of(row: LagRow) -> TopicPartition:
    return row[0]


def _offset(r: object) -> int | None:
    return r.offset if isinstance(r, ListOffsetsResult) and r.offset >= 0 else None


def _round_trips(admin: AdminClient) -> int:
    conns = {id(c): c for c in [*admin._conns.values(), admin._bootstrap_conn] if c is not None}
    return sum(sum(c.requests_sent.values()) for c in conns.values())
