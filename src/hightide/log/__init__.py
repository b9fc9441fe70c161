"""Partition log: segments, offset and time indexes, recovery, retention, producer state."""

from .cleaner import CleanResult, clean, validate_compacted_batch
from .config import LogConfig
from .partition_log import AppendResult, FileSlice, OffsetOutOfRange, PartitionLog, ReadResult, partition_dir
from .producer_state import (
    ACCEPTED,
    Accepted,
    Duplicate,
    ProducerStateError,
    ProducerStateManager,
    Rejected,
)

__all__ = [
    "clean",
    "CleanResult",
    "validate_compacted_batch",
    "LogConfig",
    "PartitionLog",
    "AppendResult",
    "ReadResult",
    "FileSlice",
    "OffsetOutOfRange",
    "partition_dir",
    "ProducerStateManager",
    "ProducerStateError",
    "Accepted",
    "ACCEPTED",
    "Duplicate",
    "Rejected",
]
