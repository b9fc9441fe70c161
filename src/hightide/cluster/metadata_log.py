"""The metadata log: ``__cluster_metadata-0`` on disk, replayed into a
:class:`MetadataImage` at start-up.

Changes are written by the coordinator runtime (``hightide.server.metadata_runtime``):
it appends a batch, waits until the flusher has fsynced it (``flush.messages=1``, off the
event loop), and only then calls :meth:`MetadataLog.apply`, so nothing observes metadata
that a crash could take back.

Single node: this process is the controller (combined mode, as Kafka's KRaft). In
cluster mode brokers will follow this same log from the controller; handlers only ever
read the image, so nothing above this module changes.
"""

from __future__ import annotations

import logging
import os
from typing import Sequence

from ..log.config import LogConfig
from ..log.partition_log import PartitionLog
from ..log.storage import POSIX, Storage
from ..protocol.records import decode_records, validate_batches
from .image import MetadataImage
from .records import MetadataRecord, decode, encode

METADATA_TOPIC = "__cluster_metadata"
log = logging.getLogger("hightide.metadata")


class MetadataLog:
    def __init__(self, data_dir: str, now_ms: int, clean_shutdown: bool, *, storage: Storage = POSIX) -> None:
        path = os.path.join(data_dir, f"{METADATA_TOPIC}-0")
        cfg = LogConfig(retention_ms=-1, retention_bytes=-1, flush_interval_messages=1)
        self.log = PartitionLog.open(path, cfg, now_ms, clean_shutdown=clean_shutdown, storage=storage)
        self.image = MetadataImage()
        self._replay()

    def _replay(self) -> None:
        offset = self.log.log_start_offset
        count = 0
        while offset < self.log.log_end_offset:
            chunk = self.log.read(offset, 1 << 20)
            if not chunk.data:
                break
            for header in validate_batches(chunk.data, client_origin=False):
                batch = memoryview(chunk.data)[header.position:header.position + header.size]
                for rec in decode_records(batch):
                    if rec.offset >= offset and rec.value is not None:
                        self.image.apply(decode(rec.value), rec.offset)
                        count += 1
                offset = header.last_offset + 1
        log.info("metadata image loaded: %d records, %d topics", count, len(self.image.topics))

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
