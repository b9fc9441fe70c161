"""Time lag: how long the oldest record a group has not read yet has been waiting.

For a group whose next offset on a partition is ``c`` (its committed offset), the time
lag at ``now`` is ``now - time(c)``, where ``time(c)`` is when record ``c`` was written;
0 when the group has read everything (``c >= end offset``). Three methods, each labelled
in its result because they answer with different certainty:

``record_timestamp``
    ``time(c)`` is the timestamp of the record at ``c`` (read with one small Fetch).
    Exact for LogAppendTime topics and for CreateTime when producers' clocks are right.
``interpolation``
    ``time(c)`` is interpolated over a history of ``(end offset, time)`` samples taken
    by the tool itself (as kafka-lag-exporter does): the time at which the end offset
    passed ``c``. Needs no extra request and no trust in record timestamps; its error is
    at most one sampling interval. Before the oldest sample it is a lower bound.
``max_timestamp_anchor``
    Anchored on ListOffsets' max-timestamp spec (seed 003): the record with the largest
    timestamp ``T``. Every unread record has a timestamp ``<= T``, so ``now - T`` is a
    *lower bound* of the time lag whenever the group is behind, from one ListOffsets
    call. With a produce rate (from the history) it extrapolates back from the anchor to
    ``c`` for an estimate.

All functions are pure; times are milliseconds since the epoch; they never raise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["CAUGHT_UP_AT_MARKERS", "Certainty", "OffsetHistory", "TimeLag", "TimeLagMethod", "best_time_lag",
           "time_lag_from_max_timestamp", "time_lag_from_record", "time_lag_interpolated",
           "time_lags_caught_up_at_markers"]

CAUGHT_UP_AT_MARKERS = "caught_up_at_markers"
"""The ``reason`` of a time lag of 0 because only transaction markers (or, for
read_committed, aborted records) lie between the committed offset and the end: the
offset lag is 0 (:attr:`hightide.lag.OffsetLag.invisible_tail`), so is the time lag."""


class TimeLagMethod(StrEnum):
    RECORD_TIMESTAMP = "record_timestamp"
    INTERPOLATION = "interpolation"
    MAX_TIMESTAMP_ANCHOR = "max_timestamp_anchor"


class Certainty(StrEnum):
    EXACT = "exact"
    ESTIMATE = "estimate"
    LOWER_BOUND = "lower_bound"


@dataclass(frozen=True, slots=True)
class TimeLag:
    """``ms`` is None when the method has no answer (``reason`` says why)."""

    ms: int | None
    method: TimeLagMethod
    certainty: Certainty = Certainty.EXACT
    reason: str | None = None

    @property
    def seconds(self) -> float | None:
        return None if self.ms is None else self.ms / 1000.0


def _caught_up(committed: int | None, end_offset: int | None) -> bool:
    return committed is not None and end_offset is not None and committed >= end_offset


def time_lag_from_record(committed: int | None, end_offset: int | None, record_timestamp: int | None,
                         now_ms: int, *, certainty: Certainty = Certainty.EXACT) -> TimeLag:
    """Method ``record_timestamp``: ``now - timestamp(record at committed)``.

    ``record_timestamp`` is the timestamp of the first record at or after ``committed``
    (None or -1 when unknown). Negative results are kept: they mean the record's
    CreateTime is in the future (a producer's clock is ahead). Pass
    ``certainty=LOWER_BOUND`` when the record was read at the log start offset because
    the committed one was deleted.
    """
    m = TimeLagMethod.RECORD_TIMESTAMP
    if committed is None or committed < 0:
        return TimeLag(None, m, reason="no_commit")
    if _caught_up(committed, end_offset):
        return TimeLag(0, m)
    if record_timestamp is None or record_timestamp < 0:
        return TimeLag(None, m, reason="record_timestamp_unknown")
    return TimeLag(now_ms - record_timestamp, m, certainty)


class OffsetHistory:
    """Samples of a partition's end offset over time, bounded to ``max_points``.

    Samples must be added in time order; an older or equal time is ignored. Runs of equal
    offsets keep only their first and last sample (the last one proves the next append
    had not happened yet), so a quiet partition does not use up the history.
    """

    __slots__ = ("max_points", "points")

    def __init__(self, max_points: int = 120, points: Iterable[tuple[int, int]] = ()) -> None:
        if max_points < 2:
            raise ValueError("max_points must be >= 2")
        self.max_points = max_points
        self.points: list[tuple[int, int]] = []
        for offset, t in points:
            self.add(offset, t)

    def add(self, offset: int, time_ms: int) -> None:
        """Record that the end offset was ``offset`` at ``time_ms``. Offsets that go
        backwards (topic recreated, log truncated) restart the history."""
        pts = self.points
        if pts and time_ms <= pts[-1][1]:
            return
        if pts and offset < pts[-1][0]:
            pts.clear()
        if len(pts) >= 2 and pts[-1][0] == offset == pts[-2][0]:
            pts[-1] = (offset, time_ms)
        else:
            pts.append((offset, time_ms))
        if len(pts) > self.max_points:
            del pts[0]

    def __len__(self) -> int:
        return len(self.points)

    def copy(self) -> OffsetHistory:
        """An independent copy (later :meth:`add` calls on either do not affect the other)."""
        h = OffsetHistory.__new__(OffsetHistory)
        h.max_points, h.points = self.max_points, list(self.points)
        return h

    def rate_per_ms(self) -> float | None:
        """Average records appended per millisecond over the history; None without two
        samples or without any append."""
        if len(self.points) < 2:
            return None
        (o0, t0), (o1, t1) = self.points[0], self.points[-1]
        return (o1 - o0) / (t1 - t0) if o1 > o0 else None

    def time_of(self, offset: int) -> tuple[float, Certainty] | None:
        """When record ``offset`` was appended, i.e. when the end offset passed
        ``offset + 1``: linear interpolation between the two samples around it.
        Before the oldest sample: that sample's time as an upper bound of the time
        (LOWER_BOUND of the lag). At or past the newest sample's end offset: None."""
        pts = self.points
        if not pts or offset + 1 > pts[-1][0]:
            return None
        if offset + 1 <= pts[0][0]:
            return float(pts[0][1]), Certainty.LOWER_BOUND
        lo, hi = 0, len(pts) - 1  # invariant: pts[lo][0] < offset+1 <= pts[hi][0]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if pts[mid][0] < offset + 1:
                lo = mid
            else:
                hi = mid
        (o0, t0), (o1, t1) = pts[lo], pts[hi]
        return t0 + (offset + 1 - o0) * (t1 - t0) / (o1 - o0), Certainty.ESTIMATE


def time_lag_interpolated(committed: int | None, end_offset: int | None, history: OffsetHistory,
                          now_ms: int) -> TimeLag:
    """Method ``interpolation`` over ``history`` (which should include a sample of the
    current end offset). 0 when caught up; None when the history is empty or does not
    reach ``committed`` yet (the record was appended after the newest sample)."""
    m = TimeLagMethod.INTERPOLATION
    if committed is None or committed < 0:
        return TimeLag(None, m, reason="no_commit")
    if _caught_up(committed, end_offset):
        return TimeLag(0, m)
    at = history.time_of(committed)
    if at is None:
        return TimeLag(None, m, Certainty.ESTIMATE, "history_too_short")
    t, certainty = at
    return TimeLag(max(0, round(now_ms - t)), m, certainty)


def time_lag_from_max_timestamp(committed: int | None, end_offset: int | None, anchor_offset: int | None,
                                anchor_timestamp: int | None, now_ms: int,
                                rate_per_ms: float | None = None) -> TimeLag:
    """Method ``max_timestamp_anchor``: ``(anchor_offset, anchor_timestamp)`` is the
    answer of ListOffsets' max-timestamp spec. Behind the end, ``now - anchor_timestamp``
    is a lower bound of the time lag (no unread record has a larger timestamp). With a
    produce rate and ``committed <= anchor_offset``, the estimate
    ``now - (anchor_timestamp - (anchor_offset - committed) / rate)`` (never below the
    bound) is returned instead, labelled ESTIMATE."""
    m = TimeLagMethod.MAX_TIMESTAMP_ANCHOR
    if committed is None or committed < 0:
        return TimeLag(None, m, reason="no_commit")
    if _caught_up(committed, end_offset):
        return TimeLag(0, m)
    if anchor_timestamp is None or anchor_timestamp < 0 or anchor_offset is None or anchor_offset < 0:
        return TimeLag(None, m, Certainty.LOWER_BOUND, "max_timestamp_unknown")
    bound = now_ms - anchor_timestamp
    if rate_per_ms and rate_per_ms > 0 and committed <= anchor_offset:
        est = now_ms - (anchor_timestamp - (anchor_offset - committed) / rate_per_ms)
        return TimeLag(max(bound, round(est)), m, Certainty.ESTIMATE)
    return TimeLag(bound, m, Certainty.LOWER_BOUND)


def time_lags_caught_up_at_markers(methods: Iterable[str]) -> tuple[TimeLag, ...]:
    """Every method's answer for a consumer caught up at the markers (offset lag 0 with an
    invisible tail): 0, exact, reason :data:`CAUGHT_UP_AT_MARKERS`. The methods alone
    would measure from the committed offset, which sits on a marker or an aborted record
    that will never be delivered, so their time lag would grow for ever."""
    return tuple(TimeLag(0, TimeLagMethod(m), Certainty.EXACT, CAUGHT_UP_AT_MARKERS) for m in methods)


_PREFERENCE = {Certainty.EXACT: 0, Certainty.ESTIMATE: 1, Certainty.LOWER_BOUND: 2}


def best_time_lag(candidates: Iterable[TimeLag]) -> TimeLag | None:
    """The most certain answer among ``candidates`` (exact, then estimate, then lower
    bound; ties: the larger value, then the order given); None if none has a value."""
    best, best_key = None, None
    for c in candidates:  # = min(with ms, key=(preference, -ms)): the first of equals wins
        if c.ms is None:
            continue
        key = (_PREFERENCE[c.certainty], -c.ms)
        if best_key is None or key < best_key:
            best, best_key = c, key
    return best
