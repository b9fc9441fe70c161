"""Offset lag of one partition for one consumer group, with its anomalies.

Pure functions on plain integers (Kafka conventions: ``None`` or a negative offset means
"unknown" / "no commit"). Nothing here clamps: the raw difference is reported and every
condition a lag report should not hide is named in :attr:`OffsetLag.anomalies`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Anomaly", "OffsetLag", "offset_lag", "pending_offsets", "uncommitted_estimate"]


class Anomaly(StrEnum):
    """Conditions reported next to a lag value instead of being hidden."""

    NO_COMMIT = "no_commit"
    """The group has no committed offset for the partition: lag is unknown (None)."""
    END_UNKNOWN = "end_unknown"
    """The end offset (HW, or LSO for read_committed) could not be read: lag is unknown."""
    COMMITTED_PAST_END = "committed_past_end"
    """committed > end offset: the lag is negative (the log was truncated or recreated,
    or someone committed an offset that does not exist yet)."""
    COMMITTED_BEFORE_LOG_START = "committed_before_log_start"
    """committed < log start offset: records between them were deleted (retention or
    DeleteRecords) before the group read them; the consumer will skip or reset."""
    STALE_END = "stale_end"
    """The end offset is the last one known, not a current reading: the partition's
    leader could not tell it (a leader failover: a new leader's high watermark is not
    known until its followers fetch) or told a smaller one, which a clean failover never
    makes true (:mod:`hightide.lag.endoffsets`). The lag is measured to that last known
    end: it may under-report what was produced meanwhile, never what was already there."""
    TAIL_UNPROBED = "tail_unprobed"
    """The offsets between the commit and the end (a short run, at most the probe's
    limit) could not be checked for transaction markers and aborted records (the probe's
    Fetch failed, or its batches did not fit what the probe may read): the raw lag is
    an upper bound — the group may be caught up at the markers. Not judged by the status
    rules (OK, incomplete) until a probe finishes."""


@dataclass(frozen=True, slots=True)
class OffsetLag:
    """``lag = end_offset - committed`` (raw, may be negative); None when either is unknown.

    ``end_offset`` is the high watermark, or the last stable offset for read_committed.
    ``lost`` is how many records were deleted before the group read them
    (``log_start_offset - committed`` when positive, else 0; None when unknown).

    Transactions (docs/lag.md, "Lag around transactions"): ``pending`` is ``high
    watermark - last stable offset``, the offsets of open transactions and everything
    after the first of them (not yet readable by read_committed consumers, not counted in
    their lag); None when either is unknown. ``invisible_tail`` is how many offsets
    between ``committed`` and the end hold no record the consumer would be delivered
    (transaction markers; for read_committed also aborted records): when it is
    ``end_offset - committed`` the consumer has read everything and ``lag`` is 0.
    """

    committed: int | None
    end_offset: int | None
    log_start_offset: int | None
    lag: int | None
    anomalies: tuple[Anomaly, ...] = ()
    read_committed: bool = False
    pending: int | None = None
    invisible_tail: int = 0
    estimated_lag: int | None = None
    """For a partition without a commit (``no_commit``, ``lag`` None): the lag the group
    will have when it starts reading there, estimated from where ``auto.offset.reset``
    puts it: ``end - log start`` for earliest (the default assumption: it never hides a
    backlog), 0 for latest. Counted in group totals, flagged as an estimate. None when
    not estimated (a commit exists, the end or log start is unknown, or no reset policy
    was given)."""

    @property
    def lost(self) -> int | None:
        if self.committed is None or self.log_start_offset is None:
            return None
        return max(0, self.log_start_offset - self.committed)

    @property
    def caught_up(self) -> bool:
        """True when the group has read everything readable (lag is 0 or negative)."""
        return self.lag is not None and self.lag <= 0


_STALE = (Anomaly.STALE_END,)


def _known(offset: int | None) -> int | None:
    return None if offset is None or offset < 0 else offset


def pending_offsets(high_watermark: int | None, last_stable_offset: int | None) -> int | None:
    """``high_watermark - last_stable_offset`` (offsets held back by open transactions),
    None when either is unknown or they are inconsistent (LSO above the HW)."""
    hw, lso = _known(high_watermark), _known(last_stable_offset)
    if hw is None or lso is None or lso > hw:
        return None
    return hw - lso


def offset_lag(committed: int | None, high_watermark: int | None, log_start_offset: int | None = None,
               last_stable_offset: int | None = None, *, read_committed: bool = False,
               next_visible: int | None = None, stale: bool = False, unprobed: bool = False,
               reset: str | None = None) -> OffsetLag:
    """The lag of a group on one partition.

    ``committed``: the group's committed offset (the next offset it will read), None or
    -1 for none. ``high_watermark`` / ``last_stable_offset``: the partition's HW and LSO;
    the end offset is the LSO when ``read_committed`` (falling back to nothing: a
    read_committed lag measured to the HW would under-report nothing but over-report
    open transactions, so it is reported as END_UNKNOWN instead). ``next_visible``: the
    first offset at or after ``committed`` holding a record the consumer would be
    delivered (:func:`hightide.lag.markers.next_visible_offset`), None if not looked up;
    when it is at or past the end, everything between ``committed`` and the end is
    transaction markers (or aborted records for read_committed) and the lag is 0 with
    ``invisible_tail = end - committed`` (the "stuck at 1" pitfall). ``stale``: the
    offsets are the last known ones, not a current reading (STALE_END is reported,
    see :class:`hightide.lag.endoffsets.EndOffsetMemory`). ``unprobed``: the run after the
    commit could not be probed for markers (TAIL_UNPROBED is reported, the raw lag kept).
    ``reset``: the ``auto.offset.reset`` assumed for a partition without a commit
    (``"earliest"`` or ``"latest"``): it sets :attr:`OffsetLag.estimated_lag`. Never raises.
    """
    c = _known(committed)
    end = _known(last_stable_offset if read_committed else high_watermark)
    start = _known(log_start_offset)
    pending = pending_offsets(high_watermark, last_stable_offset)
    if c is not None and end is not None and c <= end and (start is None or c >= start):
        marked = _STALE if stale else ()  # no other anomaly (the usual case)
        if next_visible is not None and c < end <= next_visible:
            return OffsetLag(c, end, start, 0, marked, read_committed, pending, end - c)
        if unprobed and c < end:
            marked = (*marked, Anomaly.TAIL_UNPROBED)
        return OffsetLag(c, end, start, end - c, marked, read_committed, pending)
    anomalies: list[Anomaly] = [Anomaly.STALE_END] if stale else []
    if c is None:
        anomalies.append(Anomaly.NO_COMMIT)
    if end is None:
        anomalies.append(Anomaly.END_UNKNOWN)
    lag = None if c is None or end is None else end - c
    if lag is not None and lag < 0:
        anomalies.append(Anomaly.COMMITTED_PAST_END)
    if c is not None and start is not None and c < start:
        anomalies.append(Anomaly.COMMITTED_BEFORE_LOG_START)
    return OffsetLag(c, end, start, lag, tuple(anomalies), read_committed, pending,
                     estimated_lag=uncommitted_estimate(end, start, reset) if c is None else None)


def uncommitted_estimate(end: int | None, log_start: int | None, reset: str | None) -> int | None:
    """The estimated lag of a partition without a commit (see
    :attr:`OffsetLag.estimated_lag`): ``end - log_start`` for ``reset="earliest"``, 0 for
    ``"latest"``, None otherwise or when an offset is unknown."""
    end, log_start = _known(end), _known(log_start)
    if end is None or reset not in ("earliest", "latest"):
        return None
    if reset == "latest":
        return 0
    return None if log_start is None else max(0, end - log_start)
