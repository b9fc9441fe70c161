"""Where the next record a consumer would be delivered lies: the "stuck at 1" pitfall.

A transaction ends with a control batch (a COMMIT or ABORT marker) that takes an offset
but is never delivered to an application. A consumer that read everything may have
committed the offset *after its last delivered record*, which is the marker's offset, not
the end of the log: the Java consumer advances its position past control batches it
fetched and commits the end, but librdkafka, kafka-python and others commit "last
delivered + 1", so ``end - committed`` stays 1 (or 2 after a transaction spanning two
markers, or more after an aborted transaction that a read_committed consumer skips) for
ever, although nothing is left to read.

:func:`next_visible_offset` walks the batch headers of a Fetch answer from the committed
offset and returns the offset of the first record the consumer would be delivered (data,
not a control batch; for read_committed, not part of an aborted transaction), or the end
offset when there is none before it. Lag math (:func:`hightide.lag.offset_lag`) then
counts a consumer whose next visible record is at or past the end as caught up.

Pure: bytes and integers in, an integer out; no IO.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..protocol.aborted import AbortedFilter
from ..protocol.records import HEADER_SIZE, parse_header

__all__ = ["next_visible_offset"]


def next_visible_offset(records: bytes | memoryview, start: int, end: int, *, read_committed: bool = False,
                        aborted: Iterable[tuple[int, int]] = ()) -> tuple[int | None, int]:
    """The first offset in ``[start, end)`` holding a record a consumer would be delivered.

    ``records``: record batches as a Fetch answers them from ``start`` (the batch holding
    ``start`` may begin before it); ``end``: the consumer's end (HW, or LSO for
    read_committed); ``aborted``: the Fetch answer's ``(producer id, first offset)``
    aborted transactions (read_committed only), applied as Kafka's consumer does (a
    transactional batch of a producer whose aborted transaction began at or before the
    batch's last offset is skipped until that producer's next control batch).

    Returns ``(offset, scanned_to)``: ``offset`` is the first visible offset, ``end`` when
    every offset of ``[start, end)`` was scanned and none is visible, or None when the
    batches ran out first; ``scanned_to`` is the offset after the last batch examined
    (when ``offset`` is None: fetch again from there). Never raises for a truncated last batch (Fetch answers may end with
    a partial one); raises ValueError only for a header that is not a v2 batch.
    """
    skip = AbortedFilter(aborted if read_committed else ())
    pos, size_all = 0, len(records)
    scanned = start
    while pos + HEADER_SIZE <= size_all:
        h = parse_header(records, pos)
        if h.magic != 2:
            raise ValueError(f"record batch magic {h.magic} at byte {pos}")
        size = h.length + 12
        if pos + size > size_all:
            break
        pos += size
        invisible = skip.aborted(h) or h.is_control or h.records_count == 0  # every batch feeds the filter
        if h.next_offset <= start:
            continue  # entirely before the committed offset
        if h.base_offset >= end:
            return end, end
        scanned = h.next_offset
        if invisible:
            continue
        return max(h.base_offset, start), scanned
    if scanned >= end:
        return end, end
    return None, scanned
