"""Producer-state snapshot files of a partition (Kafka's ``<offset>.snapshot``).

A snapshot named ``<20-digit offset>.snapshot`` holds the idempotent-producer state
built from every batch below that offset. The log writes one when a segment rolls (at
the new segment's base offset), after an unclean start that had to replay batches (at
the log end) and at a clean shutdown (at the log end); at start-up the newest usable one
at or below the recovered log end is loaded and only the batches after it are replayed.

File format: one line with the CRC32C (8 hex digits) of the rest, then JSON
``{"offset": N, "last_batch": [base offset, crc] | null, "state": {...}}``, where
``last_batch`` identifies the batch ending at ``N - 1`` so that a snapshot whose
batches were replaced (truncated away, then re-appended) is recognised as stale. A
torn, empty or otherwise damaged file fails the CRC and is skipped: snapshots only
save work, the log stays the source of truth.

Read and written through the log's :class:`~.storage.Storage` engine like the segments.
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

from ..protocol.crc import crc32c

from .producer_state import ProducerStateManager
from .segment import segment_name
from .storage import Storage, read_small_file, write_small_file

__all__ = [
    "SNAPSHOT_SUFFIX",
    "Snapshot",
    "SnapshotCorrupt",
    "delete_snapshot",
    "list_snapshots",
    "read_snapshot",
    "snapshot_path",
    "write_snapshot",
]

SNAPSHOT_SUFFIX = ".snapshot"


class SnapshotCorrupt(ValueError):
    """The snapshot file is damaged or not a snapshot of this format."""


class Snapshot(NamedTuple):
    offset: int
    last_batch: tuple[int, int] | None  # (base offset, CRC) of the batch ending at offset - 1
    state: ProducerStateManager


def snapshot_path(directory: str, offset: int) -> str:
    return os.path.join(directory, segment_name(offset) + SNAPSHOT_SUFFIX)


def list_snapshots(storage: Storage, directory: str) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    out = []
    for name in storage.listdir(directory):
        stem, dot, ext = name.partition(".")
        if dot and ext == "snapshot" and len(stem) == 20 and stem.isdigit():
            out.append(int(stem))
    out.sort()
    return out


def _encode(offset: int, last_batch: tuple[int, int] | None, state: dict[str, Any]) -> bytes:
    body = json.dumps(
        {"offset": offset, "last_batch": None if last_batch is None else list(last_batch), "state": state},
        separators=(",", ":"),
    ).encode()
    return b"%08x\n" % crc32c(body) + body


def write_snapshot(
    storage: Storage,
    directory: str,
    offset: int,
    last_batch: tuple[int, int] | None,
    state: ProducerStateManager,
    *,
    sync: bool,
) -> str:
    """Write the snapshot at ``offset`` (temp file, then rename); fsync it first if
    ``sync``. Returns its path. Raises OSError (the temp file is removed)."""
    path = snapshot_path(directory, offset)
    write_small_file(storage, path, _encode(offset, last_batch, state.to_json()), sync=sync)
    return path


def read_snapshot(storage: Storage, directory: str, offset: int) -> Snapshot:
    """Read and check the snapshot at ``offset``. Raises SnapshotCorrupt when the file
    is damaged, OSError when it cannot be read."""
    raw = read_small_file(storage, snapshot_path(directory, offset))
    head, nl, body = raw.partition(b"\n")
    try:
        if not nl or len(head) != 8 or int(head, 16) != crc32c(body):
            raise SnapshotCorrupt("checksum mismatch")
        data = json.loads(body)
        if int(data["offset"]) != offset:
            raise SnapshotCorrupt(f"file says offset {data['offset']}")
        lb = data["last_batch"]
        last_batch = None if lb is None else (int(lb[0]), int(lb[1]))
        return Snapshot(offset, last_batch, ProducerStateManager.from_json(data["state"]))
    except SnapshotCorrupt:
        raise
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise SnapshotCorrupt(str(e)) from e


def delete_snapshot(storage: Storage, directory: str, offset: int) -> None:
    """Unlink the snapshot at ``offset`` if present (errors other than a missing file
    propagate)."""
    try:
        storage.unlink(snapshot_path(directory, offset))
    except FileNotFoundError:
        pass
