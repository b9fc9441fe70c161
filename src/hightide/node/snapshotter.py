"""Metadata snapshots in a running process: when the controller snapshots its image
(Kafka's ``SnapshotGenerator``), writing it off the event loop, and installing a
snapshot fetched from the controller with FetchSnapshot (59) on a broker.

Theory of operation
-------------------
**Creating** (:class:`Snapshotter`, on every process that writes the metadata log: the
controller, and the single node in combined mode). A task waits for metadata commits
(the same wake-up as the observers' long-polling Fetch) or the interval timer. A snapshot
is due when records have been committed since the last one and either
``metadata.log.max.record.bytes.between.snapshots`` bytes of log lie past its end offset,
or ``metadata.log.max.snapshot.interval.ms`` has passed since it (0 turns the timer off).
Then, at most one at a time:

1. *capture*, on the event loop, between two metadata writes: the end offset ``E`` =
   ``applied_end()`` (every record below it is applied to the image), the epoch and
   append time of the batch holding ``E - 1`` (the snapshot id is ``(E, epoch)``), and
   a copy of the image (:func:`~hightide.cluster.snapshot.copy_image`: dict copies,
   about 1 µs per partition; the image goes on changing afterwards);
2. *encode and write*, in a worker thread: the copy as records, the batches, then
   ``….checkpoint.part``, fsync, rename, directory fsync;
3. *created*, on the event loop: ``on_created(sid, data)``. The default (one voter, no
   Raft) is :meth:`Snapshotter.trim`: the log start moves to ``E``, whole segments below
   it and older snapshots are deleted.

A failed write is logged (ERROR) and tried again at the next due check, at most every
``RETRY_S``; nothing is trimmed then.

A broker-only node snapshots its local copy of the log the same way (Kafka's brokers
do too), so its restart replays little; it checks every ``BROKER_POLL_S`` instead of
waking at commits, and a snapshot it installed from the controller meanwhile supersedes
the one it was writing (deleted).

**Installing** (:func:`install_snapshot`): a broker whose metadata Fetch is answered with
a ``SnapshotId`` (its fetch offset is below the controller's log start) downloads it
with :func:`fetch_snapshot` (FetchSnapshot chunks by position until ``Size`` bytes),
then the bytes are checked and decoded into a new image and written as its own snapshot
file off the loop, and on the loop the local copy restarts empty at ``E`` and the image
is replaced; the broker fetches on from ``E``.

API for the Raft shell (issue 14's quorum) — the core's actions map to:

* ``SnapshotCreated`` (the shell feeds it to the core): pass
  ``on_created=lambda sid, data: <step SnapshotCreated(sid, data)>`` and
  ``applied_end=<the committed offset applied to the image>``; the snapshotter never
  snapshots past it, and the snapshot id's epoch is that of the batch holding ``E - 1``.
* ``TrimLog(sid)``: :meth:`Snapshotter.trim` (``MetadataLog.trim_to_snapshot``).
* ``InstallSnapshot(sid, data)``: ``await install_snapshot(metadata, sid, data)``
  (raises :class:`~hightide.cluster.snapshot.SnapshotError` for bad bytes; nothing is
  changed then).
* Serving FetchSnapshot from the files: ``server/handlers/fetch_snapshot.py`` reads
  ``MetadataLog.snapshots``; at start-up the core gets the latest snapshot's id and bytes
  from ``metadata.snapshot_id`` and ``metadata.snapshots.read(sid)``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ..aio.clock import SYSTEM_CLOCK, Clock
from ..cluster.image import MetadataImage
from ..cluster.metadata_log import METADATA_TOPIC, MetadataLog
from ..cluster.raft.messages import OffsetAndEpoch
from ..cluster.settings import ClusterSettings
from ..cluster.raft.voters import VoterSet
from ..cluster.snapshot import (
    SnapshotError,
    SnapshotStore,
    copy_image,
    encode_snapshot,
    image_from_snapshot,
    image_records,
)
from ..log.partition_log import PartitionLog
from ..protocol.errors import ErrorCode
from ..protocol.records import parse_header

log = logging.getLogger("hightide.snapshots")

#: A failed snapshot write is tried again at most this often.
RETRY_S = 5.0
#: The longest the snapshotter sleeps without a commit before checking the interval.
MAX_SLEEP_S = 60.0
#: FetchSnapshot chunk size (Kafka's followers ask for up to their fetch max bytes).
FETCH_SNAPSHOT_CHUNK = 1 << 20
FETCH_SNAPSHOT_VERSION_MAX = 1
#: How often a broker-only node checks whether its local copy is due for a snapshot.
BROKER_POLL_S = 1.0

OnCreated = Callable[[OffsetAndEpoch, bytes], None]


def bytes_below(plog: PartitionLog, offset: int) -> int:
    """Bytes of ``plog``'s files that hold offsets below ``offset`` (whole batches)."""
    total = 0
    for seg in plog.segments:
        if seg.next_offset <= offset:
            total += seg.size
            continue
        if seg.base_offset < offset:
            h = seg.find_batch(offset)
            total += h.position if h is not None else seg.size
        break
    return total


class Snapshotter:
    """Snapshots ``metadata``'s image when due (see the module doc). ``applied_end``: the
    offset below which every record is committed and applied to the image;
    ``wait_commit(timeout_s)``: resolves at the next metadata commit (or the timeout);
    ``on_created``: what to do with a written snapshot (default: :meth:`trim`);
    ``clock``: the interval, the retry time and the snapshots' append times;
    ``voters_at(end)``: a dynamic quorum's voter set in effect at a snapshot's end, written
    into it (None: a static quorum, no voter set)."""

    def __init__(self, metadata: MetadataLog, *, max_bytes: int, interval_ms: int,
                 applied_end: Callable[[], int], wait_commit: Callable[[float], Awaitable[Any]],
                 on_created: OnCreated | None = None, clock: Clock = SYSTEM_CLOCK,
                 voters_at: Callable[[int], VoterSet | None] | None = None) -> None:
        self.metadata = metadata
        self._voters_at = voters_at
        self.clock = clock
        self.max_bytes = max_bytes
        self.interval_ms = interval_ms
        self._applied_end = applied_end
        self._wait_commit = wait_commit
        self._on_created = on_created or (lambda sid, data: self.trim(sid))
        self.last_end = metadata.snapshot_id.offset if metadata.snapshot_id is not None else 0
        self.last_ms = clock.now_ms()
        self._below = bytes_below(metadata.log, self.last_end)
        self._retry_at = 0.0
        self.created = 0  # snapshots written (tests, metrics)
        self.last_stats: dict[str, float] = {}

    # -- when --------------------------------------------------------------------------
    def bytes_since(self) -> int:
        """Bytes of log past the latest snapshot's end offset."""
        return max(0, self.metadata.log.size_bytes - self._below)

    def _sync(self) -> None:
        """Follow a snapshot installed meanwhile (a broker loading the controller's)."""
        sid = self.metadata.snapshot_id
        if sid is not None and sid.offset > self.last_end:
            self.last_end = sid.offset
            self._below = bytes_below(self.metadata.log, self.last_end)

    def due(self, at_ms: int) -> bool:
        """Records past the last snapshot, and enough bytes of them or the interval
        passed."""
        self._sync()
        if self._applied_end() <= self.last_end or self.clock.monotonic() < self._retry_at:
            return False
        if self.bytes_since() >= self.max_bytes:
            return True
        return self.interval_ms > 0 and at_ms - self.last_ms >= self.interval_ms

    async def run(self) -> None:
        """Snapshot whenever due, forever (cancel to stop)."""
        wrote = False
        while True:
            # Commits while a snapshot was written woke nobody: one still due is taken now.
            if not (wrote and self.due(self.clock.now_ms())):
                timeout = MAX_SLEEP_S
                if self.interval_ms > 0:
                    timeout = min(timeout, max(0.01, (self.last_ms + self.interval_ms - self.clock.now_ms()) / 1000))
                await self._wait_commit(timeout)
                if not self.due(self.clock.now_ms()):
                    continue
            wrote = False
            try:
                wrote = await self.create() is not None
            except Exception as exc:  # a full disk must not stop the controller: try again later
                self._retry_at = self.clock.monotonic() + RETRY_S
                log.error("metadata snapshot failed (retrying in %.0f s): %s", RETRY_S, exc)

    # -- how ---------------------------------------------------------------------------
    def capture(self) -> tuple[OffsetAndEpoch, int, MetadataImage] | None:
        """On the owning thread: (snapshot id, last contained timestamp, a copy of the
        image) at the applied end, or None when nothing is past the last snapshot."""
        end = self._applied_end()
        if end <= self.last_end or end <= self.metadata.log.log_start_offset:
            return None
        header = parse_header(self.metadata.log.read(end - 1, 1).data, 0)
        sid = OffsetAndEpoch(end, max(header.partition_leader_epoch, 0))
        return sid, header.max_timestamp, copy_image(self.metadata.image)

    async def create(self) -> OffsetAndEpoch | None:
        """Capture, write off the loop, then ``on_created``. Returns the snapshot id
        (None if nothing was due). Raises OSError if the write failed."""
        t0 = self.clock.monotonic()
        captured = self.capture()
        if captured is None:
            return None
        sid, last_ms, image = captured
        voters = self._voters_at(sid.offset) if self._voters_at is not None else None
        t1 = self.clock.monotonic()
        store = self.metadata.snapshots
        data, count = await asyncio.to_thread(_encode_and_write, store, sid, image, last_ms, self.clock, voters)
        t2 = self.clock.monotonic()
        self.last_ms = self.clock.now_ms()
        self.created += 1
        if self.metadata.snapshot_id is not None and self.metadata.snapshot_id.offset >= sid.offset:
            log.info("metadata snapshot %s superseded by %s (installed meanwhile): deleted", sid,
                     self.metadata.snapshot_id)
            await asyncio.to_thread(self.metadata.snapshots.delete, sid)
            return None
        self.last_end = sid.offset
        self._on_created(sid, data)
        self._below = bytes_below(self.metadata.log, self.last_end)
        self.last_stats = {"records": count, "bytes": len(data), "capture_ms": (t1 - t0) * 1000,
                           "write_ms": (t2 - t1) * 1000}
        log.info("metadata snapshot %s: %d records, %d bytes (capture %.1f ms on the loop, encode+write %.1f ms); "
                 "log start offset %d", store.path(sid), count, len(data), (t1 - t0) * 1000,
                 (t2 - t1) * 1000, self.metadata.log.log_start_offset)
        return sid

    def trim(self, sid: OffsetAndEpoch) -> None:
        """Raft's ``TrimLog``: the log now starts at ``sid``'s end (see
        ``MetadataLog.trim_to_snapshot``)."""
        self.metadata.trim_to_snapshot(sid)
        self._below = bytes_below(self.metadata.log, self.last_end)


def _encode_and_write(store: SnapshotStore, sid: OffsetAndEpoch, image: MetadataImage,
                      last_ms: int, clock: Clock, voters: VoterSet | None = None) -> tuple[bytes, int]:
    records = image_records(image)
    data = encode_snapshot(records, sid, last_ms, clock.now_ms(), voters)
    store.write(sid, data)
    return data, len(records)


# -- installing (brokers; Raft followers) ----------------------------------------------
def _check_and_write(store: SnapshotStore, sid: OffsetAndEpoch, data: bytes) -> MetadataImage:
    image = image_from_snapshot(data, sid)  # raises SnapshotError before anything is written
    store.write(sid, data)
    return image


async def install_snapshot(metadata: MetadataLog, sid: OffsetAndEpoch, data: bytes) -> MetadataImage:
    """Raft's ``InstallSnapshot``: check and decode ``data``, write it as snapshot ``sid``
    (both off the loop), then restart the local log empty at ``sid.offset`` and replace
    the image. Returns the new image. Raises SnapshotError (bad bytes) or OSError (the
    write failed); the log and image are unchanged then."""
    image = await asyncio.to_thread(_check_and_write, metadata.snapshots, sid, data)
    metadata.install_snapshot(sid, image)
    return image


class SnapshotFetchFailed(Exception):
    """A FetchSnapshot answer that ends this download (the message says why); fetch the
    log again (the next answer names the snapshot to load)."""


def fetch_snapshot_request(sid: OffsetAndEpoch, position: int, *, replica_id: int, leader_epoch: int,
                           cluster_id: str | None, max_bytes: int = FETCH_SNAPSHOT_CHUNK) -> dict:
    """The FetchSnapshot (59) request body (any version) for the chunk of snapshot
    ``sid`` at byte ``position``."""
    partition = {"partition": 0, "current_leader_epoch": leader_epoch, "position": position,
                 "snapshot_id": {"end_offset": sid.offset, "epoch": sid.epoch}, "replica_directory_id": None}
    return {"cluster_id": cluster_id, "replica_id": replica_id, "max_bytes": max_bytes,
            "topics": [{"name": METADATA_TOPIC, "partitions": [partition]}]}


def take_chunk(resp: Any, sid: OffsetAndEpoch, position: int) -> tuple[bytes, int]:
    """(bytes, snapshot size) of a FetchSnapshot answer for the chunk at ``position``.
    Raises SnapshotFetchFailed on an error code or an answer for something else."""
    if resp.error_code != ErrorCode.none:
        raise SnapshotFetchFailed(f"FetchSnapshot answered {ErrorCode(resp.error_code).name.upper()}")
    parts = [p for t in resp.topics if t.name == METADATA_TOPIC for p in t.partitions if p.index == 0]
    if not parts:
        raise SnapshotFetchFailed("the FetchSnapshot answer has no __cluster_metadata-0")
    p = parts[0]
    if p.error_code != ErrorCode.none:
        raise SnapshotFetchFailed(f"FetchSnapshot answered {ErrorCode(p.error_code).name.upper()} for snapshot "
                                  f"({sid.offset}, {sid.epoch})")
    got = OffsetAndEpoch(int(p.snapshot_id.end_offset), int(p.snapshot_id.epoch))
    if got != sid or int(p.position) != position:
        raise SnapshotFetchFailed(f"FetchSnapshot answered snapshot {got} at {int(p.position)}, asked {sid} at "
                                  f"{position}")
    chunk = bytes(p.unaligned_records or b"")
    if not chunk and position < int(p.size):
        raise SnapshotFetchFailed(f"FetchSnapshot answered no bytes at position {position} of {int(p.size)}")
    return chunk, int(p.size)


class Channel(Protocol):
    """What :func:`fetch_snapshot` needs of the controller channel."""

    def request(self, api_key: int, version: Callable[[Any], int], body: Any, *,
                timeout_s: float | None = None) -> Awaitable[Any]: ...


async def fetch_snapshot(channel: Channel, sid: OffsetAndEpoch, *, replica_id: int, leader_epoch: int,
                         cluster_id: str | None, timeout_s: float = 10.0) -> bytes:
    """Download snapshot ``sid`` from the controller, chunk by chunk (FetchSnapshot v0/v1,
    the controller's highest). Raises SnapshotFetchFailed (an error answer, or the
    snapshot changed size) and whatever ``channel.request`` raises."""
    data = bytearray()
    size = -1
    while size < 0 or len(data) < size:
        position = len(data)
        body = fetch_snapshot_request(sid, position, replica_id=replica_id, leader_epoch=leader_epoch,
                                      cluster_id=cluster_id)
        resp = await channel.request(59, lambda conn: int(conn.pick_version(59, FETCH_SNAPSHOT_VERSION_MAX)), body,
                                     timeout_s=timeout_s)
        chunk, total = take_chunk(resp, sid, position)
        if size >= 0 and total != size:
            raise SnapshotFetchFailed(f"snapshot {sid} changed size from {size} to {total} during the download")
        size = total
        data += chunk[:size - position]
    return bytes(data)


def snapshotter_for(metadata: MetadataLog, settings: ClusterSettings, *,
                    committed: Callable[[], int] | None = None,
                    wait_commit: Callable[[float], Awaitable[Any]] | None = None,
                    clock: Clock = SYSTEM_CLOCK) -> Snapshotter:
    """The snapshotter of a process, with ``settings``' thresholds. On the single-voter
    runtime (a controller-only process, or the single node in combined mode) give
    ``committed()`` (the committed offset of the metadata log) and ``wait_commit`` (the
    wake-up at each commit): it snapshots the committed image. Without them (a broker-only
    node) it snapshots the local copy (every record of it is applied before the next
    Fetch, as Kafka's brokers snapshot theirs) and checks every ``BROKER_POLL_S``. A Raft
    voter has none (its shell drives snapshots through the core)."""
    if committed is None or wait_commit is None:  # a broker-only node: its copy of the controller's log
        return Snapshotter(metadata, max_bytes=settings.snapshot_max_bytes, interval_ms=settings.snapshot_interval_ms,
                           applied_end=lambda: metadata.log.log_end_offset,
                           wait_commit=lambda timeout_s: clock.sleep(min(timeout_s, BROKER_POLL_S)), clock=clock)
    return Snapshotter(metadata, max_bytes=settings.snapshot_max_bytes, interval_ms=settings.snapshot_interval_ms,
                       applied_end=committed, wait_commit=wait_commit, clock=clock)
