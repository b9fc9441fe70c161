"""One log segment: ``<base>.log`` plus its ``.index`` and ``.timeindex``.

The segment owns its file handles (from a :class:`~.storage.Storage` engine) and the
in-memory indexes. It never parses records: appends write opaque batch bytes (with the
16-byte prefix patched) with one ``pwritev``, reads use ``pread``, recovery walks batch
headers and checks CRCs.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable, Iterator, Sequence

from ..protocol.crc import crc32c

from hightide.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    HeaderFields,
    decode_records,
    scan_batches,
)

from .index import IndexCorrupt, OffsetIndex, TimeIndex
from .storage import Storage, StorageFile

log = logging.getLogger("hightide.log")

__all__ = ["LogSegment", "segment_name", "SegmentCorrupt", "iter_file_headers"]

_unpack_header: Callable[[bytes | memoryview, int], HeaderFields] = struct.Struct(">qiibIhiqqqhii").unpack_from
_PREFIX = struct.Struct(">qii")
_TAIL = struct.Struct(">hiqqqhii")
_HEAD21 = struct.Struct(">qiibI")
_CRC = struct.Struct(">I")
_LOG_APPEND_TIME_BIT = 0x08
_CRC_AT = 17  # BaseOffset 8, BatchLength 4, PartitionLeaderEpoch 4, Magic 1
_ATTRIBUTES_AT = 21


def _patch(buf: memoryview, h: BatchHeader, offset: int, leader_epoch: int, log_append_time_ms: int | None) -> int:
    """Patch the batch ``h`` of the writable ``buf`` in place for an append at ``offset``:
    BaseOffset and PartitionLeaderEpoch (outside the CRC); with ``log_append_time_ms``
    also the LogAppendTime bit and MaxTimestamp, and the CRC recomputed over them.
    Returns the batch's MaxTimestamp as written."""
    start = h.position
    _PREFIX.pack_into(buf, start, offset, h.length, leader_epoch)
    if log_append_time_ms is None:
        return h.max_timestamp
    _TAIL.pack_into(buf, start + _ATTRIBUTES_AT, h.attributes | _LOG_APPEND_TIME_BIT, h.last_offset_delta,
                    h.base_timestamp, log_append_time_ms, h.producer_id, h.producer_epoch, h.base_sequence,
                    h.records_count)
    _CRC.pack_into(buf, start + _CRC_AT, crc32c(buf[start + _ATTRIBUTES_AT : start + h.length + LOG_OVERHEAD]))
    return log_append_time_ms
READ_CHUNK = 4 * 1024 * 1024
HEADER_CHUNK = 64 * 1024  # header walks: the index puts the target within a few KiB


class SegmentCorrupt(Exception):
    """The segment's structure is broken; run :meth:`LogSegment.recover`."""


def segment_name(base_offset: int) -> str:
    """Kafka's 20-digit zero-padded file stem for a segment base offset."""
    return f"{base_offset:020d}"


class LogSegment:
    """A segment of a partition log.

    Attributes maintained for the log: ``size`` (bytes in ``.log``), ``next_offset``
    (offset after the last batch, ``base_offset`` when empty), ``max_timestamp`` /
    ``max_timestamp_offset`` (largest batch MaxTimestamp, strict ``>`` so the first batch
    reaching it wins, and that batch's last offset; -1/-1 when none), ``first_append_ms``
    (wall-clock time of the first append, for ``segment.ms``).
    """

    def __init__(self, storage: Storage, directory: str, base_offset: int, index_interval_bytes: int, *,
                 new: bool = False) -> None:
        self.storage = storage
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        stem = os.path.join(directory, segment_name(base_offset))
        self.log_path = stem + ".log"
        self.file: StorageFile | None = storage.open(self.log_path)
        try:  # out of file descriptors (EMFILE) half-way: do not leak the first ones
            self.index_files_missing = new or not (storage.exists(stem + ".index") and storage.exists(stem + ".timeindex"))
            self.offset_index = OffsetIndex(storage, stem + ".index", base_offset)
            try:
                self.time_index = TimeIndex(storage, stem + ".timeindex", base_offset)
            except OSError:
                self.offset_index.close()
                raise
        except OSError:
            self.file.close()
            self.file = None
            raise
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.max_timestamp_offset = -1
        self.first_append_ms: int | None = None
        self.bytes_since_last_index_entry = 0
        self.dirty = False
        self.tail_broken = False  # a failed append left bytes past ``size`` that could not be cut

    # ------------------------------------------------------------------ loading

    def load(self) -> None:
        """Load a segment that is trusted to be intact (flushed before a clean shutdown).

        Reads the index files and walks the batch headers after the last offset-index
        entry to find ``next_offset`` and the max timestamp. Raises IndexCorrupt when the
        index files are inconsistent, SegmentCorrupt when the tail walk does not end
        exactly at the end of the file; the caller then rebuilds via :meth:`recover`.
        """
        self.size = self._f.size()
        if self.index_files_missing and self.size:
            raise IndexCorrupt(f"{self.log_path}: index files missing")
        self.offset_index.load(self.size)
        self.time_index.load()
        last = self.time_index.last_entry()
        max_ts, max_off = last if last is not None else (-1, -1)
        start = self.offset_index.last_position()
        next_offset = self.offset_index.offsets[-1] + 1 if len(self.offset_index) else self.base_offset
        pos = start
        for h in self.iter_headers(start):
            if h.magic != 2 or h.base_offset < self.base_offset or h.last_offset_delta < 0:
                raise SegmentCorrupt(f"{self.log_path}: bad batch header at {h.position}")
            if h.max_timestamp > max_ts:
                max_ts, max_off = h.max_timestamp, h.base_offset + h.last_offset_delta
            next_offset = h.base_offset + h.last_offset_delta + 1
            pos = h.position + h.length + LOG_OVERHEAD
        if pos != self.size:
            raise SegmentCorrupt(f"{self.log_path}: batches end at {pos}, file has {self.size} bytes")
        if last is not None and last[1] >= next_offset:
            raise IndexCorrupt(f"{self.time_index.path}: entry beyond the end of the segment")
        self.next_offset = next_offset
        self.max_timestamp, self.max_timestamp_offset = max_ts, max_off
        self.bytes_since_last_index_entry = self.size - start if len(self.offset_index) else self.size

    def recover(self) -> tuple[int, str | None]:
        """Scan every batch checking CRCs, truncate an invalid tail, rebuild both indexes.

        Returns (bytes truncated, reason or None). Index entries are placed exactly as
        :meth:`append` would have placed them.
        """
        f = self._f
        file_size = f.size()
        interval = self.index_interval_bytes
        off_entries: list[tuple[int, int]] = []
        time_entries: list[tuple[int, int]] = []
        max_ts, max_off = -1, -1
        since = 0
        next_offset = self.base_offset
        pos = 0
        reason: str | None = None
        while pos < file_size:
            chunk = f.pread(min(READ_CHUNK, file_size - pos), pos)
            if len(chunk) >= LOG_OVERHEAD:
                # make sure the first batch fits in the chunk
                length = struct.unpack_from(">i", chunk, 8)[0]
                need = length + LOG_OVERHEAD
                if length >= MIN_BATCH_LENGTH and len(chunk) < need <= file_size - pos:
                    chunk = f.pread(need, pos)
            res = scan_batches(chunk, base_offset_at_least=next_offset, position_base=pos)
            for h in res.headers:
                last = h.base_offset + h.last_offset_delta
                if h.max_timestamp > max_ts:
                    max_ts, max_off = h.max_timestamp, last
                if since > interval:
                    off_entries.append((last, h.position))
                    if not time_entries or max_ts > time_entries[-1][0]:
                        time_entries.append((max_ts, max_off))
                    since = 0
                since += h.length + LOG_OVERHEAD
                next_offset = last + 1
            pos += res.valid_bytes
            if res.error is not None:
                end_of_chunk = pos - res.valid_bytes + len(chunk)
                if end_of_chunk < file_size and res.valid_bytes > 0:
                    continue  # the failing batch was cut by the chunk boundary; re-read
                reason = res.error
                break
        truncated = file_size - pos
        if truncated:
            f.truncate(pos)
        if pos or truncated:  # the bytes kept may be in the page cache only (a killed process)
            self.dirty = True  # so the flush that advances the recovery point past them fsyncs them
        self.size = pos
        self.next_offset = next_offset
        self.max_timestamp, self.max_timestamp_offset = max_ts, max_off
        self.bytes_since_last_index_entry = since
        self.offset_index.reset(off_entries)
        self.time_index.reset(time_entries)
        return truncated, reason

    # ------------------------------------------------------------------ append

    def append(
        self,
        buf: memoryview,
        headers: Sequence[BatchHeader],
        first_offset: int | None,
        leader_epoch: int,
        log_append_time_ms: int | None,
    ) -> int:
        """Write ``headers``' batches from ``buf`` with consecutive offsets from ``first_offset``.

        Only the 16-byte prefix (BaseOffset, BatchLength, PartitionLeaderEpoch) is
        replaced, unless ``log_append_time_ms`` is given: then the header is rebuilt
        with the LogAppendTime bit, MaxTimestamp = that time and a recomputed CRC.
        ``first_offset`` None writes the batches exactly as they are (a follower keeps
        the leader's offsets and epochs; ``leader_epoch`` and ``log_append_time_ms`` are
        then ignored). Record bytes are passed to ``pwritev`` as memoryviews, never copied.
        A writable ``buf`` (a Produce request's receive buffer) is patched in place (the
        prefix; with LogAppendTime the attributes, MaxTimestamp and CRC too), so adjacent
        batches go out as one view; a read-only one gets new header bytes written before
        its untouched rest. Returns the offset following the last batch.

        All or nothing: if the write fails (OSError re-raised) whatever part of it reached
        the file is cut off again and the indexes are untouched; if even that cut fails,
        ``tail_broken`` is set and the segment must not be appended to again.
        """
        pieces: list[bytes | memoryview] = []
        index_entries: list[tuple[int, int, int, int]] = []
        pos = self.size
        verbatim = first_offset is None
        offset = headers[0].base_offset if first_offset is None else first_offset
        interval = self.index_interval_bytes
        since = self.bytes_since_last_index_entry
        max_ts, max_off = self.max_timestamp, self.max_timestamp_offset
        pack_prefix = _PREFIX.pack
        in_place = not verbatim and not buf.readonly
        run_start = run_end = -1  # the run of adjacent batches patched in place, written as one view
        for h in headers:
            start = h.position
            size = h.length + LOG_OVERHEAD
            if verbatim:
                offset = h.base_offset
                pieces.append(buf[start : start + size])
                batch_max = h.max_timestamp
            elif in_place:
                batch_max = _patch(buf, h, offset, leader_epoch, log_append_time_ms)
                if start != run_end:
                    if run_end >= 0:
                        pieces.append(buf[run_start:run_end])
                    run_start = start
                run_end = start + size
            elif log_append_time_ms is None:
                pieces.append(pack_prefix(offset, h.length, leader_epoch))
                pieces.append(buf[start + 16 : start + size])
                batch_max = h.max_timestamp
            else:
                batch_max = log_append_time_ms
                tail = _TAIL.pack(
                    h.attributes | _LOG_APPEND_TIME_BIT,
                    h.last_offset_delta,
                    h.base_timestamp,
                    batch_max,
                    h.producer_id,
                    h.producer_epoch,
                    h.base_sequence,
                    h.records_count,
                )
                body = buf[start + HEADER_SIZE : start + size]
                crc = crc32c(body, crc32c(tail))
                pieces.append(_HEAD21.pack(offset, h.length, leader_epoch, 2, crc) + tail)
                pieces.append(body)
            last = offset + h.last_offset_delta
            if batch_max > max_ts:
                max_ts, max_off = batch_max, last
            if since > interval:
                index_entries.append((last, pos, max_ts, max_off))
                since = 0
            since += size
            pos += size
            offset = last + 1
        if run_end >= 0:
            pieces.append(buf[run_start:run_end])
        try:
            self._f.pwritev(pieces, self.size)
        except OSError:
            self._cut_failed_write()
            raise
        for last, at, ts, ts_off in index_entries:
            self.offset_index.append(last, at)
            self.time_index.maybe_append(ts, ts_off)
        self.size = pos
        self.next_offset = offset
        self.max_timestamp, self.max_timestamp_offset = max_ts, max_off
        self.bytes_since_last_index_entry = since
        self.dirty = True
        return offset

    def _cut_failed_write(self) -> None:
        """After a failed append: drop whatever part of it reached the file, so no torn
        batch stays behind the last acknowledged one (it would be visible to recovery)."""
        try:
            self._f.truncate(self.size)
        except OSError as exc:
            self.tail_broken = True
            log.error("could not cut a failed write off %s at %d: %s", self.log_path, self.size, exc)

    # ------------------------------------------------------------------ reading

    @property
    def _f(self) -> StorageFile:
        f = self.file
        if f is None:
            raise ValueError(f"segment {self.log_path} is closed")
        return f

    def read_at(self, position: int, size: int) -> bytes:
        """``pread`` of ``size`` bytes at ``position``."""
        return self._f.pread(size, position)

    def iter_headers(self, start: int = 0, end: int | None = None) -> Iterator[BatchHeader]:
        """Yield batch headers (file positions) from ``start`` (a batch start) to ``end``
        (default: the segment's size). Reads in chunks; no CRC check. Stops at a
        structurally impossible header."""
        return iter_file_headers(self._f, start, self.size if end is None else end)

    def find_batch(self, offset: int) -> BatchHeader | None:
        """Header of the first batch whose last offset is >= ``offset`` (None if none)."""
        for h in self.iter_headers(self.offset_index.lookup(offset)):
            if h.base_offset + h.last_offset_delta >= offset:
                return h
        return None

    def find_offset_by_timestamp(self, ts: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``ts`` and offset >=
        ``start_offset`` in this segment, or None.

        The time index gives the last offset whose records are all < ``ts``; batch headers
        are walked from there to the first batch with MaxTimestamp >= ``ts``, which is
        decoded (the only per-record work).
        """
        before = self.time_index.lookup_before(ts)
        pos = self.offset_index.lookup(max(before if before is not None else -1, start_offset))
        for h in self.iter_headers(pos):
            if h.max_timestamp < ts or h.base_offset + h.last_offset_delta < start_offset:
                continue
            for r in decode_records(self.read_at(h.position, h.length + LOG_OVERHEAD)):
                if r.timestamp >= ts and r.offset >= start_offset:
                    return r.offset, r.timestamp
        return None

    def max_timestamp_record(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying the segment's max timestamp:
        the first batch whose MaxTimestamp equals it, then the first record in it with
        that timestamp (decompressing). Falls back to the batch's last offset if no record
        matches the header (a producer that lied). None if the segment has no timestamps.
        """
        ts = self.max_timestamp
        if ts < 0:
            return None
        h = self.find_batch(self.max_timestamp_offset)
        if h is None or h.max_timestamp != ts:
            h = next((b for b in self.iter_headers(0) if b.max_timestamp == ts), None)
            if h is None:
                return None
        for r in decode_records(self.read_at(h.position, h.length + LOG_OVERHEAD)):
            if r.timestamp == ts:
                return r.offset, ts
        return h.base_offset + h.last_offset_delta, ts

    def largest_timestamp(self) -> int:
        """Max timestamp, or the file's mtime when no batch has a timestamp (Kafka's rule)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self._f.mtime_ns() // 1_000_000

    # ------------------------------------------------------------------ lifecycle

    def on_roll(self) -> None:
        """Becoming inactive: record the final max timestamp in the time index."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.max_timestamp_offset)
        self.offset_index.write_pending()
        self.time_index.write_pending()
        self.offset_index.create()
        self.time_index.create()

    def take_dirty_files(self) -> list[StorageFile]:
        """Dups of the handles (log, indexes) that need an fsync; marks them clean. The
        caller must fsync and close them; see :meth:`PartitionLog.begin_flush`."""
        fds: list[StorageFile] = []
        try:
            if self.dirty:
                fds.append(self._f.dup())
                self.dirty = False
            for idx in (self.offset_index, self.time_index):
                try:
                    idx.write_pending()
                except OSError as exc:
                    # Index files are disposable (rebuilt or completed by walking the
                    # log at start-up), so a failed index write never fails the flush;
                    # the entries stay pending and are written next time.
                    log.warning("could not write index entries to %s: %s", idx.path, exc)
                    continue
                fd = idx.take_dirty_file()
                if fd is not None:
                    fds.append(fd)
        except OSError:  # dup out of file descriptors: give back what was taken
            for fd in fds:
                fd.close()
            self.mark_dirty()
            raise
        return fds

    def mark_dirty(self) -> None:
        """An fsync failed: everything must be fsynced again."""
        self.dirty = True
        self.offset_index.mark_dirty()
        self.time_index.mark_dirty()

    def flush(self) -> None:
        """fsync the log and both indexes if anything was written since the last flush."""
        self.offset_index.write_pending()
        self.time_index.write_pending()
        if self.dirty:
            self._f.fsync()
            self.dirty = False
        self.offset_index.fsync()
        self.time_index.fsync()

    def truncate_to_position(self, position: int) -> None:
        """Drop bytes from ``position`` (a batch boundary) on and rebuild the indexes."""
        self._f.truncate(position)
        self.dirty = True
        self.recover()

    def close(self) -> None:
        """Write pending index entries and close the files (no fsync)."""
        if self.file is not None:
            self.offset_index.close()
            self.time_index.close()
            self.file.close()
            self.file = None

    def delete(self) -> None:
        """Close and unlink the segment's files (its ``.txnindex`` too, if any)."""
        self.close()
        # The .txnindex goes after the .log: a crash in between leaves an orphan index
        # (dropped at start-up), never a segment without its aborted transactions.
        txn_index = self.log_path[: -len(".log")] + ".txnindex"
        for p in (self.offset_index.path, self.time_index.path, self.log_path, txn_index):
            try:
                self.storage.unlink(p)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"


def iter_file_headers(f: StorageFile, start: int, end: int) -> Iterator[BatchHeader]:
    """Batch headers (file positions) of ``f`` from ``start`` (a batch start) to ``end``,
    read in chunks; no CRC check. Stops at a structurally impossible header or at a
    batch reaching past ``end`` (or past the file's actual end)."""
    pos = start
    while end - pos >= HEADER_SIZE:
        chunk = f.pread(min(HEADER_CHUNK, end - pos), pos)
        clen = len(chunk)
        cpos = 0
        while clen - cpos >= HEADER_SIZE:
            fields = _unpack_header(chunk, cpos)
            length = fields[1]
            if length < MIN_BATCH_LENGTH or pos + cpos + length + LOG_OVERHEAD > end:
                return
            yield BatchHeader(*fields, pos + cpos)
            cpos += length + LOG_OVERHEAD
        if cpos == 0:
            return
        pos += cpos
