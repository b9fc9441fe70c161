"""Offset lag of one partition for one consumer group, with its anomalies.

Pure functions on plain integers (Kafka conventions: ``None`` or a negative offset means
"unknown" / "no commit"). Nothing here clamps: the raw difference is reported and every
condition a lag report should not hide is named in :attr:`OffsetLag.anomalies`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Anomaly", "OffsetLag", "offset_lag"]


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


@dataclass(frozen=True, slots=True)
class OffsetLag:
    """``lag = end_offset - committed`` (raw, may be negative); None when either is unknown.

    ``end_offset`` is the high watermark, or the last stable offset for read_committed.
    ``lost`` is how many records were deleted before the group read them
    (``log_start_offset - committed`` when positive, else 0; None when unknown).
    """

    committed: int | None
    end_offset: int | None
    log_start_offset: int | None
    lag: int | None
    anomalies: tuple[Anomaly, ...] = ()
    read_committed: bool = False

    @property
    def lost(self) -> int | None:
        if self.committed is None or self.log_start_offset is None:
            return None
        return max(0, self.log_start_offset - self.committed)

    @property
    def caught_up(self) -> bool:
        """True when the group has read everything readable (lag is 0 or negative)."""
        return self.lag is not None and self.lag <= 0


def _known(offset: int | None) -> int | None:
    return None if offset is None or offset < 0 else offset


def offset_lag(committed: int | None, high_watermark: int | None, log_start_offset: int | None = None,
               last_stable_offset: int | None = None, *, read_committed: bool = False) -> OffsetLag:
    """The lag of a group on one partition.

    ``committed``: the group's committed offset (the next offset it will read), None or
    -1 for none. ``high_watermark`` / ``last_stable_offset``: the partition's HW and LSO;
    the end offset is the LSO when ``read_committed`` (falling back to nothing: a
    read_committed lag measured to the HW would under-report nothing but over-report
    open transactions, so it is reported as END_UNKNOWN instead). Never raises.
    """
    c = _known(committed)
    end = _known(last_stable_offset if read_committed else high_watermark)
    start = _known(log_start_offset)
    if c is not None and end is not None and c <= end and (start is None or c >= start):
        return OffsetLag(c, end, start, end - c, (), read_committed)  # no anomaly (the usual case)
    anomalies: list[Anomaly] = []
    if c is None:
        anomalies.append(Anomaly.NO_COMMIT)
    if end is None:
        anomalies.append(Anomaly.END_UNKNOWN)
    lag = None if c is None or end is None else end - c
    if lag is not None and lag < 0:
        anomalies.append(Anomaly.COMMITTED_PAST_END)
    if c is not None and start is not None and c < start:
        anomalies.append(Anomaly.COMMITTED_BEFORE_LOG_START)
    return OffsetLag(c, end, start, lag, tuple(anomalies), read_committed)
