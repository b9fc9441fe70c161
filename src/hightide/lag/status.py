"""Burrow-style consumer status per partition and per group over a sliding window.

Theory of operation. A monitor samples, for every (group, partition), the committed
offset and the end offset at some interval and feeds the samples to a
:class:`StatusTracker`. The status of a partition is decided from the samples inside
the window ``(now - window_ms, now]`` by the first rule that matches (the same rules
are written in ``docs/lag.md``):

1. **ERR**: the newest sample has no commit, no end offset, a committed offset past the
   end, or a committed offset below the log start offset (records lost to retention).
2. **OK**: the lag was 0 (or less) in at least one sample of the window: the consumer
   caught up recently.
3. **STOP**: the group is known to have no active members (and is behind): nobody is
   consuming. (Groups that commit with ``assign()`` have no members: they show STOP
   while behind, as kafka-consumer-groups.sh shows "no active members".)
4. **OK, incomplete**: fewer than ``max(2, min_samples)`` samples in the
   window; nothing more can be said yet (``complete=False``).
5. **REWIND**: the committed offset went backwards between two samples.
6. **STOP**: the committed offset did not move during the window nor for
   ``stop_after_ms``. **STALL**: it did not move during the window, but for less than
   ``stop_after_ms`` (the consumer may be there but makes no progress while lag stays
   or grows).
7. **WARN**: the committed offset moved but the lag never decreased between two
   consecutive samples: the consumer is falling behind (or not catching up).
8. **OK** otherwise.

A partition whose run after the commit could not be probed for transaction markers
(TAIL_UNPROBED) is not judged: STALL, STOP, WARN and REWIND become OK (incomplete), reason
``tail_unprobed`` (:func:`unjudged`).

A group's status is the most severe status of its partitions, in the order
OK < WARN < REWIND < STALL < STOP < ERR. Everything is pure: time is an argument.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["GroupStatus", "PartitionStatus", "Sample", "Status", "StatusRows", "StatusRules", "StatusRow",
           "StatusTracker", "evaluate_group", "evaluate_group_rows", "evaluate_partition", "unjudged"]


class Status(StrEnum):
    OK = "OK"
    WARN = "WARN"
    REWIND = "REWIND"
    STALL = "STALL"
    STOP = "STOP"
    ERR = "ERR"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


_SEVERITY = {s: i for i, s in enumerate(Status)}


@dataclass(frozen=True, slots=True)
class Sample:
    """One observation; offsets are None (or -1) when unknown."""

    time_ms: int
    committed: int | None
    end_offset: int | None
    log_start_offset: int | None = None

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.end_offset is None or self.committed < 0 or self.end_offset < 0:
            return None
        return self.end_offset - self.committed


@dataclass(frozen=True, slots=True)
class StatusRules:
    """``window_ms``: sliding window length; ``min_samples``: samples needed in it for a
    complete evaluation; ``stop_after_ms``: an unmoving offset for this long is STOP
    (default: twice the window)."""

    window_ms: int = 600_000
    min_samples: int = 10
    stop_after_ms: int | None = None

    def __post_init__(self) -> None:
        if self.window_ms <= 0 or self.min_samples < 1:
            raise ValueError("window_ms must be > 0 and min_samples >= 1")

    @property
    def stop_ms(self) -> int:
        return self.stop_after_ms if self.stop_after_ms is not None else 2 * self.window_ms


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    status: Status
    reason: str
    complete: bool
    lag: int | None = None


@dataclass(frozen=True, slots=True)
class GroupStatus:
    status: Status
    complete: bool
    partitions: Mapping[Hashable, PartitionStatus] = field(default_factory=dict)
    worst: Hashable | None = None
    """The key of the partition that decided the status (largest lag among equals)."""
    total_lag: int = 0


_Row = tuple[int, "int | None", "int | None", "int | None"]
"""A sample as a plain tuple (time, committed, end, log start): what the tracker stores.
Exact tuples of numbers are untracked by the cyclic garbage collector, which matters
for a monitor holding a window of samples for 50,000 group-partitions."""


def _row_lag(r: _Row) -> int | None:
    c, e = r[1], r[2]
    if c is None or e is None or c < 0 or e < 0:
        return None
    return e - c


def _error_reason(r: _Row) -> str | None:
    _, c, e, start = r
    if c is None or c < 0:
        return "no_commit"
    if e is None or e < 0:
        return "end_unknown"
    if c > e:
        return "committed_past_end"
    if start is not None and start >= 0 and c < start:
        return "committed_before_log_start"
    return None


def evaluate_partition(samples: Sequence[Sample], now_ms: int, rules: StatusRules = StatusRules(), *,
                       active_members: int | None = None,
                       committed_since_ms: int | None = None) -> PartitionStatus:
    """The status of one partition from its samples (oldest first, any length; those
    outside the window are ignored except to find when the offset last moved).

    ``active_members``: the group's member count if known (0 turns an unmoving offset
    into STOP at once). ``committed_since_ms``: when the committed offset took its
    current value, if the caller knows it better than ``samples`` do.
    """
    return _evaluate([(s.time_ms, s.committed, s.end_offset, s.log_start_offset) for s in samples],
                     now_ms, rules, active_members, committed_since_ms)


StatusRow = tuple[Status, str, bool, "int | None"]
"""A :class:`PartitionStatus` as a plain tuple (status, reason, complete, lag): what
:meth:`StatusTracker.observe_status` returns, so a monitor evaluating 50,000
partitions builds the objects only for the partitions it shows."""


def _evaluate(rows: Sequence[_Row], now_ms: int, rules: StatusRules, active_members: int | None,
              committed_since_ms: int | None) -> PartitionStatus:
    """:func:`evaluate_partition` on sample rows."""
    return PartitionStatus(*_evaluate_row(rows, now_ms, rules, active_members, committed_since_ms))


def _evaluate_row(rows: Sequence[_Row], now_ms: int, rules: StatusRules, active_members: int | None,
                  committed_since_ms: int | None) -> StatusRow:
    """:func:`_evaluate` as a :data:`StatusRow`, scanning the rows in the window (the
    reference :func:`_evaluate_history` answers like in constant time)."""
    if not rows:
        return Status.ERR, "no_samples", False, None
    last = rows[-1]
    last_lag = _row_lag(last)
    reason = _error_reason(last)
    if reason is not None:
        return Status.ERR, reason, True, last_lag
    start = now_ms - rules.window_ms
    window = [r for r in rows if start < r[0] <= now_ms] or [last]
    for _, c, e, _ in window:  # = any(_row_lag(r) <= 0), without a list
        if c is not None and e is not None and 0 <= e <= c:
            return Status.OK, "caught_up_in_window", len(window) >= rules.min_samples, last_lag
    if active_members == 0:
        return Status.STOP, "no_active_members", len(window) >= rules.min_samples, last_lag
    if len(window) < max(2, rules.min_samples):
        return Status.OK, "window_incomplete", False, last_lag
    commits = [r[1] for r in window]
    if any(b is not None and a is not None and b < a for a, b in zip(commits, commits[1:])):
        return Status.REWIND, "committed_offset_decreased", True, last_lag
    if all(c == commits[0] for c in commits):
        since = committed_since_ms if committed_since_ms is not None else _since(rows)
        if now_ms - since >= rules.stop_ms:
            return Status.STOP, "offset_unchanged_for_stop_after", True, last_lag
        return Status.STALL, "offset_unchanged_lag_not_decreasing", True, last_lag
    lags = [_row_lag(r) for r in window]
    if all(b is not None and a is not None and b >= a for a, b in zip(lags, lags[1:])):
        return Status.WARN, "lag_not_decreasing", True, last_lag
    return Status.OK, "progressing", True, last_lag


def _since(rows: Sequence[_Row]) -> int:
    """Time of the oldest sample of the trailing run with the newest committed offset."""
    current = rows[-1][1]
    since = rows[-1][0]
    for r in reversed(rows):
        if r[1] != current:
            break
        since = r[0]
    return since


def unjudged(keys: Iterable[Hashable], rows: dict[Any, StatusRow]) -> None:
    """Rule 1b, applied after the others: a partition whose offsets after the commit could
    not be probed for transaction markers or aborted records (``keys``;
    :attr:`hightide.lag.Anomaly.TAIL_UNPROBED`) is not judged — its raw lag is only an
    upper bound, the group may be caught up at the markers — so a status other than ERR
    or OK becomes (OK, ``"tail_unprobed"``, incomplete). ``rows`` is changed in place."""
    for k in keys:
        st = rows.get(k)
        if st is not None and st[0] not in (Status.ERR, Status.OK):
            rows[k] = (Status.OK, "tail_unprobed", False, st[3])


class StatusRows(Mapping[Hashable, PartitionStatus]):
    """A read-only mapping of keys to :class:`PartitionStatus` over :data:`StatusRow`
    tuples; each object is built when it is looked up (not kept)."""

    __slots__ = ("_rows",)

    def __init__(self, rows: dict[Any, StatusRow]) -> None:
        self._rows = rows

    def __getitem__(self, key: Hashable) -> PartitionStatus:
        return PartitionStatus(*self._rows[key])

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return dict(self.items()) == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return f"StatusRows({dict(self.items())!r})"


def evaluate_group_rows(rows: dict[Any, StatusRow]) -> GroupStatus:
    """:func:`evaluate_group` over :data:`StatusRow` tuples, the same answer without a
    :class:`PartitionStatus` per partition (:attr:`GroupStatus.partitions` is a
    :class:`StatusRows` view of ``rows``, which must not change afterwards)."""
    if not rows:
        return GroupStatus(Status.OK, True, {}, None, 0)
    worst, worst_key = None, None
    total, complete = 0, True
    for k, (status, _, done, lag) in rows.items():
        key = (_SEVERITY[status], lag or 0)
        if worst_key is None or key > worst_key:  # = max(): the first of equals wins
            worst, worst_key = k, key
        if lag is not None and lag > 0:
            total += lag
        if not done:
            complete = False
    return GroupStatus(rows[worst][0], complete, StatusRows(rows), worst, total)


def evaluate_group(partitions: Mapping[Hashable, PartitionStatus]) -> GroupStatus:
    """Combine partition statuses: the most severe wins (largest lag among equals); an
    empty group is OK and complete."""
    if not partitions:
        return GroupStatus(Status.OK, True, {}, None, 0)
    worst = max(partitions, key=lambda k: (partitions[k].status.severity, partitions[k].lag or 0))
    total = sum(max(0, p.lag) for p in partitions.values() if p.lag is not None)
    return GroupStatus(partitions[worst].status, all(p.complete for p in partitions.values()),
                       dict(partitions), worst, total)


class _History:
    """One partition's samples, oldest first, and what the tracker's O(1) evaluation
    (:func:`_evaluate_history`) reads instead of scanning them. Each ``*_ms`` marker is
    the time of a sample (None: no such sample yet); a marker at or after the oldest
    kept sample's time means that sample is still in the window:

    * ``since_ms``: the first sample of the trailing run with the newest committed offset;
    * ``caught_ms``: the newest sample whose lag was 0 or less;
    * ``rewind_ms``: the earlier sample of the newest consecutive pair whose committed
      offset went down;
    * ``gain_ms``: the earlier sample of the newest consecutive pair whose lag decreased
      or is unknown in either sample (the pair that keeps the window from WARN).

    Samples are only appended at the newest end and dropped from the oldest, so the
    newest such sample (pair) is in the window exactly when any is."""

    __slots__ = ("caught_ms", "gain_ms", "rewind_ms", "samples", "since_ms")

    def __init__(self) -> None:
        self.samples: deque[_Row] = deque()
        self.since_ms: int | None = None
        self.caught_ms: int | None = None
        self.rewind_ms: int | None = None
        self.gain_ms: int | None = None

    def append(self, time_ms: int, committed: int | None, end_offset: int | None, log_start_offset: int | None,
               horizon_ms: int) -> None:
        """Add a sample newer than every kept one; drop those at or before
        ``horizon_ms`` (keeping at least the new one); update the markers."""
        samples = self.samples
        lag = None
        if committed is not None and end_offset is not None and committed >= 0 and end_offset >= 0:
            lag = end_offset - committed
            if lag <= 0:
                self.caught_ms = time_ms
        if samples:
            pt, pc, pe, _ = samples[-1]
            if pc != committed:
                self.since_ms = time_ms
                if committed is not None and pc is not None and committed < pc:
                    self.rewind_ms = pt
            if lag is None or pc is None or pe is None or pc < 0 or pe < 0 or lag < pe - pc:
                self.gain_ms = pt
        else:
            self.since_ms = time_ms
        samples.append((time_ms, committed, end_offset, log_start_offset))
        while samples[0][0] <= horizon_ms and len(samples) > 1:
            samples.popleft()


def _evaluate_history(h: _History, now_ms: int, rules: StatusRules, active_members: int | None) -> StatusRow:
    """:func:`_evaluate_row` of ``h.samples`` when the newest was just added at
    ``now_ms`` (so every kept sample is in the window), in constant time from the
    markers (see :class:`_History`); the same answer."""
    samples = h.samples
    last = samples[-1]
    c, e = last[1], last[2]
    if c is None or c < 0:
        return Status.ERR, "no_commit", True, None
    if e is None or e < 0:
        return Status.ERR, "end_unknown", True, None
    last_lag = e - c
    if c > e:
        return Status.ERR, "committed_past_end", True, last_lag
    start = last[3]
    if start is not None and start >= 0 and c < start:
        return Status.ERR, "committed_before_log_start", True, last_lag
    first = samples[0][0]
    n = len(samples)
    caught = h.caught_ms
    if caught is not None and caught >= first:
        return Status.OK, "caught_up_in_window", n >= rules.min_samples, last_lag
    if active_members == 0:
        return Status.STOP, "no_active_members", n >= rules.min_samples, last_lag
    if n < 2 or n < rules.min_samples:
        return Status.OK, "window_incomplete", False, last_lag
    rewind = h.rewind_ms
    if rewind is not None and rewind >= first:
        return Status.REWIND, "committed_offset_decreased", True, last_lag
    since = h.since_ms
    assert since is not None  # set by the first append
    if since <= first:  # every kept sample has the newest committed offset
        if now_ms - since >= rules.stop_ms:
            return Status.STOP, "offset_unchanged_for_stop_after", True, last_lag
        return Status.STALL, "offset_unchanged_lag_not_decreasing", True, last_lag
    gain = h.gain_ms
    if gain is None or gain < first:
        return Status.WARN, "lag_not_decreasing", True, last_lag
    return Status.OK, "progressing", True, last_lag


class StatusTracker:
    """Keeps each (group, partition)'s recent samples and evaluates statuses.

    Samples older than the window (and than ``stop_after_ms``) are dropped; the time the
    committed offset last changed is remembered separately, so STOP needs no long
    history. Partitions not observed for ``forget_after_ms`` (default 3 windows) are
    forgotten by :meth:`expire`.
    """

    def __init__(self, rules: StatusRules = StatusRules(), forget_after_ms: int | None = None) -> None:
        self.rules = rules
        self.forget_after_ms = forget_after_ms if forget_after_ms is not None else 3 * rules.window_ms
        self._groups: dict[str, dict[Hashable, _History]] = {}

    def observe(self, group: str, key: Hashable, sample: Sample) -> None:
        """Add a sample (ignored unless newer than the partition's newest)."""
        self.observe_values(group, key, sample.time_ms, sample.committed, sample.end_offset,
                            sample.log_start_offset)

    def observe_values(self, group: str, key: Hashable, time_ms: int, committed: int | None,
                       end_offset: int | None, log_start_offset: int | None = None) -> None:
        """:meth:`observe` without building a :class:`Sample`."""
        parts = self._groups.get(group)
        if parts is None:
            parts = self._groups[group] = {}
        h = parts.get(key)
        if h is None:
            h = parts[key] = _History()
        samples = h.samples
        if samples and time_ms <= samples[-1][0]:
            return
        h.append(time_ms, committed, end_offset, log_start_offset, time_ms - self.rules.window_ms)

    def observe_status(self, group: str, key: Hashable, time_ms: int, committed: int | None,
                       end_offset: int | None, log_start_offset: int | None = None,
                       active_members: int | None = None) -> StatusRow:
        """:meth:`observe_values` then the partition's status at ``time_ms`` as a
        :data:`StatusRow` (= :meth:`partition_status` at that time, without the object)."""
        parts = self._groups.get(group)
        if parts is None:
            parts = self._groups[group] = {}
        h = parts.get(key)
        if h is None:
            h = parts[key] = _History()
        samples = h.samples
        rules = self.rules
        if samples and time_ms <= samples[-1][0]:
            return _evaluate_row(samples, time_ms, rules, active_members, h.since_ms)
        h.append(time_ms, committed, end_offset, log_start_offset, time_ms - rules.window_ms)
        # every sample left is in (time_ms - window, time_ms]
        return _evaluate_history(h, time_ms, rules, active_members)

    def observe_rows(self, group: str, time_ms: int, rows: Iterable[Sequence[Any]],
                     active_members: int | None = None, *, read_committed: bool = False,
                     next_visible: Mapping[tuple[Any, int], int] | None = None) -> dict[Any, StatusRow]:
        """:meth:`observe_status` of every row of one group, as a dict key -> status row.

        A row is laid out as :data:`hightide.client.lag.LagRow`: ``row[0]`` the key,
        ``row[1]`` the committed offset, ``row[2]`` the high watermark, ``row[3]`` the log
        start offset, ``row[5]`` the last stable offset (None or negative: unknown). The
        end is the LSO for ``read_committed``, else the high watermark; a committed offset
        whose next visible record (``next_visible[(key, committed)]``, see
        :mod:`hightide.lag.markers`) is at or past that end is observed at the end
        (caught up), as :func:`hightide.lag.offset_lag` counts it. The same answers as
        one :meth:`observe_status` per row, in one loop."""
        parts = self._groups.get(group)
        if parts is None:
            parts = self._groups[group] = {}
        rules = self.rules
        horizon = time_ms - rules.window_ms
        end_at = 5 if read_committed else 2
        out: dict[Any, StatusRow] = {}
        for row in rows:
            key, c, start, end = row[0], row[1], row[3], row[end_at]
            if c is not None and c < 0:
                c = None
            if end is not None and end < 0:
                end = None
            if start is not None and start < 0:
                start = None
            if next_visible and c is not None and end is not None and next_visible.get((key, c), -1) >= end > c:
                end = c  # only markers (or aborted records) left: caught up
            h = parts.get(key)
            if h is None:
                h = parts[key] = _History()
            samples = h.samples
            if samples and time_ms <= samples[-1][0]:
                out[key] = _evaluate_row(samples, time_ms, rules, active_members, h.since_ms)
                continue
            h.append(time_ms, c, end, start, horizon)
            out[key] = _evaluate_history(h, time_ms, rules, active_members)
        return out

    def samples(self, group: str, key: Hashable) -> list[Sample]:
        h = self._groups.get(group, {}).get(key)
        return [Sample(*r) for r in h.samples] if h else []

    def partition_status(self, group: str, key: Hashable, now_ms: int,
                         active_members: int | None = None) -> PartitionStatus:
        h = self._groups.get(group, {}).get(key)
        if h is None:
            return PartitionStatus(Status.ERR, "no_samples", False)
        return _evaluate(h.samples, now_ms, self.rules, active_members, h.since_ms)

    def group_status(self, group: str, now_ms: int, active_members: int | None = None,
                     keys: Iterable[Hashable] | None = None) -> GroupStatus:
        """Status of ``group`` over ``keys`` (default: every partition it was seen on)."""
        parts = self._groups.get(group, {})
        wanted = list(parts) if keys is None else list(keys)
        return evaluate_group({k: self.partition_status(group, k, now_ms, active_members) for k in wanted})

    def expire(self, now_ms: int) -> None:
        """Forget partitions (and groups) without a sample for ``forget_after_ms``."""
        for g in list(self._groups):
            parts = self._groups[g]
            for k in [k for k, h in parts.items() if now_ms - h.samples[-1][0] > self.forget_after_ms]:
                del parts[k]
            if not parts:
                del self._groups[g]
