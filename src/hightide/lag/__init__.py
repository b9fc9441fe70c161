"""Lag math: offset lag and its anomalies, time lag by three labelled methods, and
Burrow-style status. Pure (no I/O, no asyncio); ``docs/lag.md`` is the reference.

The monitor that feeds it from a cluster is :mod:`hightide.monitoring.monitor`; the
Prometheus exporter is :mod:`hightide.monitoring.exporter`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .assignment import decode_assignment
    from .endoffsets import EndOffsetMemory, EndOffsets
    from .offsets import Anomaly, OffsetLag, offset_lag
    from .status import (
        GroupStatus,
        PartitionStatus,
        Sample,
        Status,
        StatusRow,
        StatusRows,
        StatusRules,
        StatusTracker,
        evaluate_group,
        evaluate_group_rows,
        evaluate_partition,
    )
    from .timelag import (
        CAUGHT_UP_AT_MARKERS,
        Certainty,
        OffsetHistory,
        TimeLag,
        TimeLagMethod,
        best_time_lag,
        time_lag_from_max_timestamp,
        time_lag_from_record,
        time_lag_interpolated,
        time_lags_caught_up_at_markers,
    )

_HOME = {
    "decode_assignment": "assignment",
    **dict.fromkeys(("EndOffsetMemory", "EndOffsets"), "endoffsets"),
    **dict.fromkeys(("Anomaly", "OffsetLag", "offset_lag"), "offsets"),
    **dict.fromkeys(("GroupStatus", "PartitionStatus", "Sample", "Status", "StatusRow", "StatusRows", "StatusRules",
                     "StatusTracker", "evaluate_group", "evaluate_group_rows", "evaluate_partition"), "status"),
    **dict.fromkeys(("CAUGHT_UP_AT_MARKERS", "time_lags_caught_up_at_markers", "Certainty", "OffsetHistory", "TimeLag", "TimeLagMethod", "best_time_lag",
                     "time_lag_from_max_timestamp", "time_lag_from_record", "time_lag_interpolated"), "timelag"),
}


def __getattr__(name: str) -> Any:
    """Names are imported from their module on first use, so the broker, which needs only
    :mod:`.share` (share-partition lag on the wire), does not pay for the status and
    time-lag modules at start-up."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'hightide.lag' has no attribute {name!r}")
    value = getattr(import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "CAUGHT_UP_AT_MARKERS", "time_lags_caught_up_at_markers", "Anomaly", "Certainty", "EndOffsetMemory", "EndOffsets", "GroupStatus", "OffsetHistory", "OffsetLag", "PartitionStatus", "Sample",
    "Status", "StatusRow", "StatusRows", "StatusRules", "StatusTracker", "TimeLag", "TimeLagMethod",
    "best_time_lag", "decode_assignment", "evaluate_group", "evaluate_group_rows", "evaluate_partition", "offset_lag",
    "time_lag_from_max_timestamp", "time_lag_from_record", "time_lag_interpolated",
]
