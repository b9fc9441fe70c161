"""The metadata log: ``__cluster_metadata-0`` on disk, replayed into a
:class:`MetadataImage` at start-up.

Changes are written through Raft (``hightide.node.metadata_runtime``, also on the
single node, a one-voter quorum): a batch is appended, fsynced by the flusher
(``flush.messages=1``, off the event loop), committed, and only then applied with
:meth:`MetadataLog.apply`, so nothing observes metadata that a crash could take back.

Single node: this process is the controller (combined mode, as Kafka's KRaft). In
cluster mode brokers will follow this same log from the controller; handlers only ever
read the image, so nothing above this module changes.

Snapshots (:mod:`hightide.cluster.snapshot`): the image is loaded from the newest
snapshot that decodes whole (``<end offset>-<epoch>.checkpoint`` in the log directory)
plus the log from its end offset; without one, from the whole log. A log whose end is
below that snapshot (its tail was lost, or a broker installed the snapshot and stopped
before resetting the log) is emptied and restarted at the snapshot's end (Kafka's
``truncateToLatestSnapshot``). :meth:`MetadataLog.trim_to_snapshot` moves the log start
to a snapshot's end, deleting whole segments below it and the older snapshots;
:meth:`MetadataLog.install_snapshot` replaces log and image by a snapshot fetched from
the leader. A log that starts past offset 0 without a usable snapshot covering its start
cannot be replayed: a broker's copy (``refetchable``) is emptied and fetched again, a
controller refuses to start (:class:`MetadataLogGap`).
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
from typing import Sequence

from ..log.config import LogConfig
from ..log.partition_log import PartitionLog
from ..log.storage import POSIX, Storage
from ..protocol.records import decode_records, validate_batches
from .image import MetadataImage
from .raft.messages import OffsetAndEpoch
from .records import MetadataRecord, decode, encode
from .snapshot import SnapshotStore, load_latest

METADATA_TOPIC = "__cluster_metadata"
log = logging.getLogger("hightide.metadata")


class MetadataLogGap(OSError):
    """The metadata log starts past offset 0 and no usable snapshot covers its start (an
    OSError about the log directory: ``hightide serve`` reports it in one line)."""


class MetadataLog:
    """``segment_bytes``: the log's ``segment.bytes`` (Kafka's
    ``metadata.log.segment.bytes``); ``refetchable``: this is a broker's copy of the
    controller's log (a gap empties it instead of raising :class:`MetadataLogGap`)."""

    def __init__(self, data_dir: str, now_ms: int, clean_shutdown: bool, *, storage: Storage = POSIX,
                 segment_bytes: int | None = None, refetchable: bool = False) -> None:
        path = os.path.join(data_dir, f"{METADATA_TOPIC}-0")
        cfg = LogConfig(retention_ms=-1, retention_bytes=-1, flush_interval_messages=1)
        if segment_bytes is not None:
            cfg = dataclasses.replace(cfg, segment_bytes=segment_bytes)
        self.log = PartitionLog.open(path, cfg, now_ms, clean_shutdown=clean_shutdown, storage=storage)
        self.snapshots = SnapshotStore(path, storage)
        self.snapshots.remove_partial()
        #: The snapshot the image was loaded from or installed (None: the log from 0).
        self.snapshot_id: OffsetAndEpoch | None = None
        self.image = MetadataImage()
        self._load(refetchable)

    def _load(self, refetchable: bool) -> None:
        """The image from the newest usable snapshot plus the log after it (see the
        module doc)."""
        loaded = load_latest(self.snapshots)
        if loaded is not None and self.log.log_start_offset <= loaded[0].offset:
            self.snapshot_id, self.image = loaded
            if self.log.log_end_offset < self.snapshot_id.offset:
                log.warning("metadata log ends at %d, before snapshot %s: restarting it at offset %d",
                            self.log.log_end_offset, self.snapshots.path(self.snapshot_id), self.snapshot_id.offset)
                self.log.truncate_fully_and_start_at(self.snapshot_id.offset)
        elif self.log.log_start_offset > 0:
            msg = (f"the metadata log starts at offset {self.log.log_start_offset} but no usable snapshot ends there "
                   "(the latest is corrupt or missing)")
            if not refetchable:
                raise MetadataLogGap(errno.EIO, msg + "; restore the snapshot file or the data directory from a "
                                     "backup", self.log.path)
            log.warning("%s in %s: emptying the local copy to fetch it again from the controller", msg, self.log.path)
            self.snapshots.delete_all()
            self.log.truncate_fully_and_start_at(0)
        start = self.snapshot_id.offset if self.snapshot_id is not None else 0
        count = replay_into(self.image, self.log, start)
        log.info("metadata image loaded: %s%d records from the log, %d topics",
                 f"snapshot {self.snapshots.path(self.snapshot_id)} + " if self.snapshot_id else "", count,
                 len(self.image.topics))

    def trim_to_snapshot(self, sid: OffsetAndEpoch) -> None:
        """Snapshot ``sid`` (written, durable, at most the committed end) is now the
        latest: move the log start offset to its end, delete the segments wholly below it
        and every older snapshot (a few unlinks, on the caller's thread). A snapshot older
        than the current one (installed meanwhile) changes nothing."""
        if self.snapshot_id is not None and sid.offset < self.snapshot_id.offset:
            return
        self.snapshot_id = sid
        if sid.offset > self.log.log_start_offset:
            self.log.delete_records_before(min(sid.offset, self.log.high_watermark))
        self.snapshots.delete_before(sid)

    def install_snapshot(self, sid: OffsetAndEpoch, image: MetadataImage) -> None:
        """Replace the log and the image by snapshot ``sid`` (already written to the
        store, ``image`` loaded from it): the log restarts empty at ``sid.offset``, the
        older snapshots are deleted."""
        self.log.truncate_fully_and_start_at(sid.offset)
        self.image = image
        self.snapshot_id = sid
        self.snapshots.delete_before(sid)

    def truncate_to(self, offset: int) -> None:
        """A broker's copy: keep only offsets below ``offset`` and rebuild the image from
        the newest snapshot ending at or below it plus the log (snapshots past ``offset``
        are deleted; a copy left without a snapshot covering its start is emptied to
        offset 0, to be fetched again)."""
        for sid in self.snapshots.ids():
            if sid.offset > offset:
                self.snapshots.delete(sid)
        self.log.truncate_to(offset)
        self.snapshot_id, self.image = None, MetadataImage()
        self._load(refetchable=True)

    @staticmethod
    def encode_records(records: Sequence[MetadataRecord]) -> list[tuple[None, bytes]]:
        """(key, value) of each record as stored (metadata records have no key)."""
        return [(None, encode(r)) for r in records]

    def apply(self, records: Sequence[MetadataRecord], offsets: Sequence[int]) -> None:
        """Apply committed (durable) records, stored at ``offsets``, to the image."""
        for r, offset in zip(records, offsets):
            self.image.apply(r, offset)

    def close(self) -> None:
        self.log.close()


def replay_into(image: MetadataImage, plog: PartitionLog, start: int) -> int:
    """Apply every metadata record of ``plog`` from offset ``max(start, log start)`` to
    ``image``, skipping control batches (Raft's LeaderChange, snapshot markers). Returns
    the number of records applied."""
    offset = max(start, plog.log_start_offset)
    count = 0
    while offset < plog.log_end_offset:
        chunk = plog.read(offset, 1 << 20)
        if not chunk.data:
            break
        for header in validate_batches(chunk.data, client_origin=False):
            if not header.is_control:
                batch = memoryview(chunk.data)[header.position:header.position + header.size]
                for rec in decode_records(batch):
                    if rec.offset >= offset and rec.value is not None:
                        image.apply(decode(rec.value), rec.offset)
                        count += 1
            offset = header.last_offset + 1
    return count
