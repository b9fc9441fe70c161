"""Result and error types of the partition log."""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from .storage import FileRegion

__all__ = ["OFFSET_OUT_OF_RANGE", "OffsetOutOfRange", "AppendResult", "ReadResult", "RecordsRead", "FileSlice",
           "partition_dir"]

OFFSET_OUT_OF_RANGE = 1


class OffsetOutOfRange(Exception):
    """Requested offset outside [log start offset, log end offset] (Kafka error 1)."""

    error_code = OFFSET_OUT_OF_RANGE


class AppendResult(NamedTuple):
    """Outcome of :meth:`PartitionLog.append`. ``duplicate`` is True when an idempotent
    producer re-sent a batch: the offsets are the original ones and nothing was written
    (``log_append_time_ms`` is then the original batch timestamp, as Kafka answers)."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False


class ReadResult(NamedTuple):
    """Whole batches read from the log; ``first_offset`` is the base offset of the first
    batch (-1 when ``data`` is empty)."""

    data: bytes
    first_offset: int
    high_watermark: int
    log_start_offset: int


class RecordsRead(NamedTuple):
    """A :class:`ReadResult` whose ``data`` may be a :class:`~.storage.FileRegion` (a
    large read from a file engine that can make one) instead of bytes; whoever receives
    it owns the region and must close it (see :meth:`PartitionLog.read_records`)."""

    data: bytes | FileRegion
    first_offset: int
    high_watermark: int
    log_start_offset: int


class FileSlice(NamedTuple):
    """A byte range of a segment file holding whole batches. ``file`` (a
    :class:`~.storage.StorageFile`) stays valid until the segment is deleted by
    retention/truncation/cleaning/close."""

    file: Any
    position: int
    size: int
    first_offset: int


def partition_dir(data_dir: str, topic: str, partition: int) -> str:
    """Kafka's partition directory name ``<data-dir>/<topic>-<partition>``."""
    return os.path.join(data_dir, f"{topic}-{partition}")
