"""Lag math: offset lag and its anomalies, time lag by three labelled methods, and
Burrow-style status. Pure (no I/O, no asyncio); ``docs/lag.md`` is the reference.

The monitor that feeds it from a cluster is :mod:`hightide.monitoring.monitor`; the
Prometheus exporter is :mod:`hightide.monitoring.exporter`.
"""

from .assignment import decode_assignment
from .offsets import Anomaly, OffsetLag, offset_lag
from .status import (
    GroupStatus,
    PartitionStatus,
    Sample,
    Status,
    StatusRules,
    StatusTracker,
    evaluate_group,
    evaluate_partition,
)
from .timelag import (
    Certainty,
    OffsetHistory,
    TimeLag,
    TimeLagMethod,
    best_time_lag,
    time_lag_from_max_timestamp,
    time_lag_from_record,
    time_lag_interpolated,
)

__all__ = [
    "Anomaly", "Certainty", "GroupStatus", "OffsetHistory", "OffsetLag", "PartitionStatus", "Sample",
    "Status", "StatusRules", "StatusTracker", "TimeLag", "TimeLagMethod", "best_time_lag",
    "decode_assignment", "evaluate_group", "evaluate_partition", "offset_lag",
    "time_lag_from_max_timestamp", "time_lag_from_record", "time_lag_interpolated",
]
