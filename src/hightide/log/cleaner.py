"""Log compaction (Kafka's log cleaner) for one partition, synchronous.

:func:`clean` keeps, in every non-active segment, only the latest record of each key:

* The **clean section** lies below the cleaner checkpoint (:mod:`.cleaner_files`), the
  **dirty section** from it up to the *first uncleanable offset*: the active segment's
  base, the last stable offset, and — with ``min.compaction.lag.ms`` — the base of the
  first dirty segment whose largest timestamp is newer than ``now - lag``. Only whole
  segments below that offset are cleaned; the active segment is never touched.
* An offset map (key → last offset) is built over the dirty section only, as Kafka does:
  a key whose newest version sits in the active segment (or past the lag limit) keeps its
  older versions until a later cleaning maps that newer version.
* Every cleanable segment (clean and dirty) is rewritten keeping a record iff it has a
  key, no newer offset for its key is in the map, and it is not an expired tombstone.
  Tombstones (null values) are kept on the cleaning that first sees them; a later
  cleaning removes them once ``delete.retention.ms`` has passed since their segment was
  first cleaned (``first-cleaned ms + delete.retention.ms < now``; Kafka ≥ 3.1 keeps
  this horizon in the batch, hightide in the checkpoint, per segment).
* Control batches and transactional batches are kept byte for byte and not mapped
  (transactions are not implemented yet; an aborted value must never shadow older
  ones). Records without a key are dropped (Kafka's cleaner does the same; produce
  rejects them on compacted topics, see :func:`validate_compacted_batch`).
* Batches whose records all survive are copied byte for byte. Others are re-encoded
  with the same base offset, LastOffsetDelta, BaseTimestamp, producer id/epoch/base
  sequence, leader epoch and attributes (so the same compression codec), and the
  surviving records' bytes unchanged — their offset and timestamp deltas stay valid;
  MaxTimestamp is recomputed (CreateTime). A batch left without records is dropped,
  unless it is the last data batch of its producer id in the log: then an empty batch
  header is kept so the producer's sequence state survives a restart.
* Consecutive cleaned segments are merged while the cleaned bytes so far plus the next
  segment's size before cleaning fit in ``segment.bytes`` (Kafka sums sizes before
  cleaning only, so it merges less per pass) and they share the same first-cleaned
  time (so merging never delays a tombstone's removal).
* Crash safety: a group is written to ``<base>.log.cleaned``, fsynced, renamed to a
  swap file (the commit point) and installed by :func:`.cleaner_files.complete_swap`,
  which ``PartitionLog.open`` also runs for a swap left by a crash.

Offsets, the log start offset, HW and LEO never change. Fetch slices (``FileSlice``)
of a rewritten segment become invalid, like after retention.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from crc32c import crc32c

from hightide.protocol.records import (
    CORRUPT_MESSAGE,
    HEADER_SIZE,
    TIMESTAMP_LOG_APPEND_TIME,
    BatchHeader,
    InvalidRecords,
    _read_bytes,
    _read_varint,
    compress,
    decompress,
    iter_headers,
)

from .cleaner_files import (
    CleanerCheckpoint,
    SegmentCleanInfo,
    cleaned_path,
    complete_swap,
    fsync_dir,
    read_cleaner_checkpoint,
    swap_path,
    write_cleaner_checkpoint,
)
from .partition_log import PartitionLog
from .segment import LogSegment

__all__ = ["DEFAULT_DELETE_RETENTION_MS", "CleanResult", "clean", "validate_compacted_batch"]

log = logging.getLogger("hightide.log")

DEFAULT_DELETE_RETENTION_MS = 86_400_000
_INT32_MAX = 2**31 - 1
_TAIL = struct.Struct(">hiqqqhii")
_HEAD = struct.Struct(">qiibI")
_COMPRESSION_MASK = 0x07


class CleanResult(NamedTuple):
    """Outcome of :func:`clean`.

    ``bytes_before``/``bytes_after``: size of the cleanable segments before and after
    (0/0 when nothing was cleaned). ``records_removed``: records dropped.
    ``dirty_ratio``: dirty bytes / (clean + dirty bytes) of the cleanable segments when
    called. ``cleaned_up_to``: the cleaner checkpoint afterwards (first offset not yet
    cleaned). ``cleaned``: whether a cleaning ran.
    """

    bytes_before: int
    bytes_after: int
    records_removed: int
    dirty_ratio: float
    cleaned_up_to: int
    cleaned: bool = True


class _Rec(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    tombstone: bool
    start: int  # slice of the (decompressed) records section holding the whole record
    end: int


def _crash_hook(stage: str) -> None:
    """Called at ``"cleaned"`` (``.cleaned`` file written) and ``"swap"`` (committed,
    not yet installed). Tests replace it to simulate a crash; a no-op otherwise."""


# ------------------------------------------------------------------ record level


def _parse_records(h: BatchHeader, raw: bytes) -> tuple[bytes, list[_Rec]]:
    """The records section of batch ``raw`` (decompressed) and where each record is.
    Raises InvalidRecords (CORRUPT_MESSAGE) on malformed data."""
    body = raw[HEADER_SIZE:]
    if h.compression:
        body = decompress(h.compression, body)
    log_append = h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME
    out: list[_Rec] = []
    pos = 0
    for _ in range(h.records_count):
        start = pos
        length, pos = _read_varint(body, pos)
        end = pos + length
        if length < 0 or end > len(body):
            raise InvalidRecords(CORRUPT_MESSAGE, "truncated record")
        pos += 1  # record attributes
        ts_delta, pos = _read_varint(body, pos)
        off_delta, pos = _read_varint(body, pos)
        key, pos = _read_bytes(body, pos)
        vlen, pos = _read_varint(body, pos)
        ts = h.max_timestamp if log_append else h.base_timestamp + ts_delta
        out.append(_Rec(h.base_offset + off_delta, ts, key, vlen < 0, start, end))
        pos = end
    return body, out


def _encode(h: BatchHeader, records: bytes, count: int, base_ts: int, max_ts: int, attributes: int) -> bytes:
    """A v2 batch with ``h``'s offsets, producer fields and leader epoch around ``records``
    (an uncompressed records section, compressed here with the codec in ``attributes``)."""
    codec = attributes & _COMPRESSION_MASK
    payload = compress(codec, records) if codec else records
    tail = _TAIL.pack(
        attributes, h.last_offset_delta, base_ts, max_ts, h.producer_id, h.producer_epoch, h.base_sequence, count
    ) + payload
    return _HEAD.pack(h.base_offset, len(tail) + 9, h.partition_leader_epoch, 2, crc32c(tail)) + tail


class _Filtered(NamedTuple):
    data: bytes | None  # what to write (None = drop the batch)
    removed: int
    changed: bool
    tombstones: bool  # the written batch holds tombstones


def _filter_batch(
    h: BatchHeader,
    raw: bytes,
    offset_map: Mapping[bytes, int],
    drop_tombstones: bool,
    producer_last: Mapping[int, int],
) -> _Filtered:
    """Apply the retention rules of the module docstring to one batch."""
    if h.is_control or h.is_transactional:
        return _Filtered(raw, 0, False, False)
    keep_empty = h.producer_id >= 0 and producer_last.get(h.producer_id) == h.last_offset
    if h.records_count == 0:  # an empty header kept by an earlier cleaning
        return _Filtered(raw, 0, False, False) if keep_empty else _Filtered(None, 0, True, False)
    body, recs = _parse_records(h, raw)
    kept = [
        r
        for r in recs
        if r.key is not None
        and r.offset >= offset_map.get(r.key, -1)
        and not (r.tombstone and drop_tombstones)
    ]
    tombstones = any(r.tombstone for r in kept)
    removed = len(recs) - len(kept)
    if removed == 0:
        return _Filtered(raw, 0, False, tombstones)
    if kept:
        if h.timestamp_type == TIMESTAMP_LOG_APPEND_TIME:
            max_ts = h.max_timestamp
        else:
            max_ts = max(r.timestamp for r in kept)
        section = b"".join(body[r.start : r.end] for r in kept)
        return _Filtered(_encode(h, section, len(kept), h.base_timestamp, max_ts, h.attributes), removed, True,
                         tombstones)
    if keep_empty:  # Kafka keeps an empty, uncompressed header with the batch's MaxTimestamp
        attrs = h.attributes & ~_COMPRESSION_MASK
        return _Filtered(_encode(h, b"", 0, h.max_timestamp, h.max_timestamp, attrs), removed, True, False)
    return _Filtered(None, removed, True, False)


def validate_compacted_batch(records: bytes | bytearray | memoryview) -> str | None:
    """Produce-path check for topics whose ``cleanup.policy`` contains ``compact``.

    ``records`` holds already validated batches (CRC checked). Returns None when every
    record of every non-control batch has a key, else the message to answer with
    INVALID_RECORD (87), as Kafka does. Decodes (decompresses) the records, so call it
    only for compacted topics. Raises InvalidRecords (CORRUPT_MESSAGE) when the records
    cannot be decoded.
    """
    buf = bytes(records)
    for h in iter_headers(buf):
        if h.is_control:
            continue
        _, recs = _parse_records(h, buf[h.position : h.position + h.size])
        if any(r.key is None for r in recs):
            return "Compacted topic cannot accept message without key."
    return None


# ------------------------------------------------------------------ segment level


def _read_batches(seg: LogSegment) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, batch bytes) for every batch of ``seg``."""
    for h in seg.iter_headers(0):
        yield h, seg.read_at(h.position, h.size)


def _build_offset_map(segments: list[LogSegment], first_dirty: int) -> dict[bytes, int]:
    """key → last offset over the records at/after ``first_dirty`` in ``segments``
    (keyed records of non-control, non-transactional batches)."""
    offset_map: dict[bytes, int] = {}
    for seg in segments:
        for h, raw in _read_batches(seg):
            if h.last_offset < first_dirty or h.is_control or h.is_transactional or h.records_count == 0:
                continue
            for r in _parse_records(h, raw)[1]:
                if r.key is not None and r.offset >= first_dirty:
                    offset_map[r.key] = r.offset
    return offset_map


def _producer_last_batches(segments: tuple[LogSegment, ...]) -> dict[int, int]:
    """producer id → last offset of its last data (non-control) batch in the log."""
    out: dict[int, int] = {}
    for seg in segments:
        for h in seg.iter_headers(0):
            if h.producer_id >= 0 and not h.is_control:
                out[h.producer_id] = h.last_offset
    return out


class _GroupWriter:
    """Writes consecutive cleaned segments into one ``.cleaned`` file and installs it.

    A segment may join the open group when it has the same first-cleaned time and the
    bytes written so far plus its size *before* cleaning fit in ``segment.bytes`` (so
    the result fits whatever survives), with relative offsets within int32.
    """

    def __init__(self, plog: PartitionLog, offset_map: Mapping[bytes, int], producer_last: Mapping[int, int]) -> None:
        self.plog = plog
        self.offset_map = offset_map
        self.producer_last = producer_last
        self.segments: list[LogSegment] = []
        self.cleaned_ms = 0
        self.fd = -1
        self.tmp = ""
        self.size = 0
        self.changed = False
        self.tombstones = False
        self.removed = 0
        #: base offset -> (first-cleaned ms, tombstones) of every segment produced
        self.produced: dict[int, SegmentCleanInfo] = {}

    def fits(self, seg: LogSegment, end: int, cleaned_ms: int) -> bool:
        return (
            cleaned_ms == self.cleaned_ms
            and self.size + seg.size <= self.plog.config.segment_bytes
            and end - 1 - self.segments[0].base_offset <= _INT32_MAX
        )

    def add(self, seg: LogSegment, end: int, cleaned_ms: int, drop_tombstones: bool) -> None:
        """Clean ``seg`` (covering offsets up to ``end``) into the open group or a new one."""
        if self.segments and not self.fits(seg, end, cleaned_ms):
            self.finish(seg.base_offset)
        if not self.segments:
            self.tmp = cleaned_path(self.plog.path, seg.base_offset)
            self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            self.cleaned_ms, self.size, self.tombstones = cleaned_ms, 0, False
        else:
            self.changed = True  # merging
        self.segments.append(seg)
        pending: list[bytes] = []
        pending_size = 0
        for h, raw in _read_batches(seg):
            f = _filter_batch(h, raw, self.offset_map, drop_tombstones, self.producer_last)
            self.removed += f.removed
            self.changed = self.changed or f.changed
            self.tombstones = self.tombstones or f.tombstones
            if f.data is not None:
                pending.append(f.data)
                pending_size += len(f.data)
                if pending_size >= 1 << 20:
                    self._write(pending)
                    pending, pending_size = [], 0
        self._write(pending)

    def _write(self, pieces: list[bytes]) -> None:
        data = b"".join(pieces)
        while data:
            n = os.write(self.fd, data)
            self.size += n
            data = data[n:]

    def finish(self, end: int) -> None:
        """Install the open group as the segment for [its base, ``end``) (no-op if none).
        A single segment that lost nothing is left alone."""
        if not self.segments:
            return
        segs, base = self.segments, self.segments[0].base_offset
        self.segments = []
        try:
            if self.changed:
                os.fsync(self.fd)
        finally:
            os.close(self.fd)
        self.produced[base] = SegmentCleanInfo(self.cleaned_ms, self.tombstones)
        if not self.changed:
            os.unlink(self.tmp)
            return
        self.changed = False
        path = self.plog.path
        _crash_hook("cleaned")
        os.rename(self.tmp, swap_path(path, base, end))
        fsync_dir(path)
        _crash_hook("swap")
        last = os.fstat(segs[-1].fd)
        for seg in segs:
            seg.close()
        complete_swap(path, base, end)
        # Like Kafka, keep the last-modified time of the group's last segment: retention
        # by time falls back to it for segments without timestamps.
        os.utime(os.path.join(path, f"{base:020d}.log"), ns=(last.st_atime_ns, last.st_mtime_ns))
        new = LogSegment(path, base, self.plog.config.index_interval_bytes)
        new.recover()
        new.on_roll()
        new.flush()
        self.plog.replace_segments(segs, new)

    def abort(self) -> None:
        """After an error: drop the open group's ``.cleaned`` file."""
        if self.segments:
            self.segments = []
            os.close(self.fd)
            os.unlink(self.tmp)


# ------------------------------------------------------------------ entry point


def clean(
    plog: PartitionLog,
    now_ms: int,
    *,
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS,
    min_compaction_lag_ms: int = 0,
    min_cleanable_ratio: float = 0.5,
    force: bool = False,
) -> CleanResult:
    """Compact ``plog`` (whose topic has ``compact`` in ``cleanup.policy``) if worth it.

    Cleans when ``force``, when the dirty ratio is >= ``min_cleanable_ratio`` with some
    dirty bytes, or when a clean segment holds tombstones whose delete retention has
    passed. ``now_ms`` is the cleaner's clock (tombstone horizons and the compaction
    lag are measured on it; the lag is compared with segments' largest timestamps).
    Synchronous and blocking (reads, rewrites and fsyncs whole segments); call it from
    the thread that owns the log, never concurrently with appends. On an exception the
    log stays consistent (groups already installed stay cleaned, the checkpoint is not
    advanced).
    """
    segs = list(plog.segments)
    active = segs[-1]
    ckpt = read_cleaner_checkpoint(plog.path)
    first_dirty = ckpt.dirty_offset
    if not plog.log_start_offset <= first_dirty <= plog.log_end_offset:
        first_dirty = plog.log_start_offset
    limit = min(active.base_offset, plog.last_stable_offset)
    n = 0  # segments[:n] are cleanable: each wholly below ``limit``
    while n + 1 < len(segs) and segs[n + 1].base_offset <= limit:
        if (
            min_compaction_lag_ms > 0
            and segs[n + 1].base_offset > first_dirty  # Kafka applies the lag to dirty segments
            and segs[n].largest_timestamp() > now_ms - min_compaction_lag_ms
        ):
            break
        n += 1
    cleanable = segs[:n]
    ends = [s.base_offset for s in segs[1 : n + 1]]
    dirty = [end > first_dirty for end in ends]
    dirty_bytes = sum(s.size for s, d in zip(cleanable, dirty) if d)
    total = sum(s.size for s in cleanable)
    ratio = dirty_bytes / total if total else 0.0
    up_to = max(first_dirty, ends[-1]) if cleanable else first_dirty
    times: list[int] = []  # first-cleaned time of each segment after this cleaning
    drops: list[bool] = []  # its tombstones' delete retention has passed
    due = False  # some clean segment holds tombstones that can go
    for s, d in zip(cleanable, dirty):
        info = None if d else ckpt.segments.get(s.base_offset)
        times.append(now_ms if info is None else info.cleaned_ms)
        expired = info is not None and info.cleaned_ms + delete_retention_ms < now_ms
        drops.append(expired)
        due = due or (expired and info is not None and info.tombstones)
    if not cleanable or not (force or (dirty_bytes and ratio >= min_cleanable_ratio) or due):
        return CleanResult(0, 0, 0, ratio, first_dirty, False)

    offset_map = _build_offset_map([s for s, d in zip(cleanable, dirty) if d], first_dirty)
    producer_last = _producer_last_batches(plog.segments)
    writer = _GroupWriter(plog, offset_map, producer_last)
    try:
        for k, seg in enumerate(cleanable):
            writer.add(seg, ends[k], times[k], drops[k])
        writer.finish(ends[-1])
    except BaseException:
        writer.abort()
        raise
    removed = writer.removed
    new_ckpt = CleanerCheckpoint(up_to, writer.produced)
    write_cleaner_checkpoint(plog.path, new_ckpt)
    after = sum(s.size for s in plog.segments if s.base_offset < up_to)
    log.info(
        "%s: cleaned offsets below %d: %d -> %d bytes, %d records removed (dirty ratio %.2f)",
        plog.path, up_to, total, after, removed, ratio,
    )
    return CleanResult(total, after, removed, ratio, up_to, True)
