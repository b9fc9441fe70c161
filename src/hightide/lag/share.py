"""Share-partition lag (seed 002, KIP-932 share groups): pure functions on plain integers.

``lag = LEO - SPSO - DeliveryCompleteCount``: every offset from the share-partition start
offset (SPSO) up to the log end offset that is not yet ACKNOWLEDGED or ARCHIVED — records
in flight (available or acquired) and records past the in-flight window. Unknown (-1 on
the wire, None here) while the share partition is uninitialised (SPSO -1), while the
DeliveryCompleteCount is unknown, or when the end offset could not be read.

The in-flight state counts come from ReadShareGroupState state batches: persisted states
are AVAILABLE (0; acquired records are persisted as available), ACKNOWLEDGED (2) and
ARCHIVED (4); offsets at or above the SPSO that no batch covers are not persisted yet
(never delivered, or acquired since the last state write).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["UNKNOWN", "InFlightCounts", "ShareLag", "desired_consumers", "group_share_lag", "in_flight_counts",
           "share_lag", "wire_lag"]

UNKNOWN = -1

_AVAILABLE, _ACKNOWLEDGED, _ARCHIVED = 0, 2, 4


@dataclass(frozen=True, slots=True)
class ShareLag:
    start_offset: int | None  # SPSO; None while uninitialised
    end_offset: int | None  # LEO; None when unknown
    delivery_complete_count: int | None
    lag: int | None


def _known(v: int | None) -> int | None:
    return None if v is None or v < 0 else v


def share_lag(end_offset: int | None, start_offset: int | None, delivery_complete_count: int | None) -> ShareLag:
    """The lag of one share partition; ``lag`` is None when any input is unknown (< 0)."""
    end, start, dcc = _known(end_offset), _known(start_offset), _known(delivery_complete_count)
    lag = None if end is None or start is None or dcc is None else end - start - dcc
    return ShareLag(start, end, dcc, lag)


def wire_lag(end_offset: int | None, start_offset: int, delivery_complete_count: int) -> int:
    """The Lag field of DescribeShareGroupOffsets v1: the lag, or -1 when unknown."""
    lag = share_lag(end_offset, start_offset, delivery_complete_count).lag
    return UNKNOWN if lag is None else lag


class _Batch(Protocol):
    first_offset: int
    last_offset: int
    delivery_state: int


@dataclass(frozen=True, slots=True)
class InFlightCounts:
    """Offsets of one share partition by state: inside the persisted in-flight window
    (``available``, ``acknowledged``, ``archived``, at or above the SPSO) and past its end
    up to the LEO (``not_persisted``; None when the LEO is unknown).

    ``not_persisted`` offsets are past the persisted window: never delivered, *or*
    acquired by a consumer since the share state was last written (acquisitions are not
    persisted, as in Kafka): the persisted state cannot tell these apart, so they are not
    called "not delivered"."""

    available: int
    acknowledged: int
    archived: int
    not_persisted: int | None


def in_flight_counts(start_offset: int, batches: Iterable[_Batch], end_offset: int | None) -> InFlightCounts:
    """Counts per state of the batches clipped at the SPSO; offsets between the SPSO and
    the LEO that no batch covers count as not delivered."""
    counts = {_AVAILABLE: 0, _ACKNOWLEDGED: 0, _ARCHIVED: 0}
    covered = 0
    for b in batches:
        first = max(b.first_offset, start_offset) if start_offset >= 0 else b.first_offset
        if b.last_offset < first:
            continue
        if end_offset is not None and end_offset >= 0:
            last = min(b.last_offset, end_offset - 1)
        else:
            last = b.last_offset
        n = last - first + 1
        if n <= 0:
            continue
        counts[b.delivery_state] = counts.get(b.delivery_state, 0) + n
        covered += n
    rest = None
    if end_offset is not None and end_offset >= 0 and start_offset >= 0:
        rest = max(0, end_offset - start_offset - covered)
    return InFlightCounts(counts[_AVAILABLE], counts[_ACKNOWLEDGED], counts[_ARCHIVED], rest)


# -- autoscaling ------------------------------------------------------------------------------
def group_share_lag(lags: Iterable[int | None]) -> int | None:
    """A share group's lag: the sum of its known share-partition lags (negative ones count
    0); None when none is known."""
    known = [max(0, v) for v in lags if v is not None]
    return sum(known) if known else None


def desired_consumers(lag: int | None, target_per_consumer: int) -> int | None:
    """The autoscaling rule of thumb: ``ceil(share lag / target per consumer)`` share
    consumers (0 when there is no lag: scale to zero, as KEDA does at activation 0); None
    when the lag is unknown. Raises ValueError for a target below 1."""
    if target_per_consumer < 1:
        raise ValueError(f"target per consumer must be at least 1, got {target_per_consumer}")
    if lag is None:
        return None
    return -(-max(0, lag) // target_per_consumer)
