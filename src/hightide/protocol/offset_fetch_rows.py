"""An OffsetFetch response (versions 1-9) decoded straight into lag rows: the client's
lag scrape reads 50,000 group-partitions from a few responses, and this walk makes
each committed partition's final row in one step, instead of a decoded tuple, then a
committed-offset row, then a lag row (see :mod:`hightide.protocol.offset_fetch_response`
for the wire format and hightide's extension tags 10000-10002).

Per group the answer is :class:`GroupRows`: ``rows`` in the order of the response, one
per partition with a commit (committed offset >= 0 and no error), each either

* a *lag row* (9 items, :data:`hightide.client.lag.LagRow`'s layout) when the response
  carries the partition's end offsets (tags 10000 and 10001, and 10002 when
  ``read_committed``) and ``use_extensions``: ``(key, committed, high watermark, log
  start, lag, last stable offset, metadata, source, none)``, lag = end - committed
  (the end: the LSO for ``read_committed``, else the high watermark); or
* a *committed row* (7 items) otherwise: ``(key, committed, metadata, leader epoch,
  high watermark, log start, last stable offset)`` (the tags that were sent, else None),
  for the caller to complete with ListOffsets.

Keys come from ``keys[topic][partition]``, made by ``make_key(topic, partition)`` once
per partition and shared between groups and calls. Walk: bounds-checked against the
frame (a length past the end raises), every tagged field it does not use is skipped by
its size, and leftover bytes are an error, as :func:`decode_offset_fetch_response`;
the tests hold the two decoders (and kio's schema walker) equal on any frame.

Pure: bytes in, tuples out.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from .offset_fetch_response import (
    _EXT_KEYS,
    _I16,
    _PART_EXT,
    _PART_V1,
    _PART_V5,
    _read_len,
    _read_str,
    read_extension_tags,
)
from .primitives import skip_tags

__all__ = ["GroupRows", "decode_offset_fetch_rows"]

UNKNOWN_TOPIC_OR_PARTITION = 3
_I32 = struct.Struct(">i")


class GroupRows(NamedTuple):
    """One group of a decoded response (see the module doc)."""

    group_id: str | None
    """None below v8 (one group per response)."""
    error_code: int
    rows: list[tuple[Any, ...]]
    """Lag rows and committed rows of the partitions with a commit, response order."""
    partition_error: tuple[str, int, int] | None
    """(topic, partition, error code) of the first partition whose error is neither 0
    nor UNKNOWN_TOPIC_OR_PARTITION (an UNKNOWN_TOPIC_OR_PARTITION partition has no commit
    and no row); None when there is none."""
    committed_rows: int
    """How many of ``rows`` are committed rows (0: all are lag rows)."""
    ordered: bool
    """Whether ``rows`` are sorted by (topic, partition)."""


def decode_offset_fetch_rows(version: int, frame: bytes | memoryview, keys: dict[str, dict[int, Any]],
                             make_key: Callable[[str, int], Any], *, read_committed: bool, use_extensions: bool,
                             source: str, none: Any) -> tuple[int, list[GroupRows]]:
    """Decode an OffsetFetch response frame *without* its size prefix (correlation id
    first) into ``(correlation id, groups)``. ``source`` and ``none`` are the lag rows'
    last two items (the source label and the "no error" code). Raises ValueError,
    IndexError or struct.error on a malformed frame, and when bytes are left over."""
    if not 1 <= version <= 9:
        raise ValueError(f"OffsetFetch v{version} is not supported")
    buf = frame
    flexible = version >= 6
    corr = _I32.unpack_from(buf, 0)[0]
    pos = 4
    if flexible:
        pos = skip_tags(buf, pos)
    if version >= 3:
        pos += 4  # throttle
        if pos > len(buf):
            raise ValueError("frame ends in the throttle time")
    walk = _Walk(buf, version, keys, make_key, read_committed, use_extensions and flexible, source, none)
    groups: list[GroupRows] = []
    if version >= 8:
        ngroups, pos = _read_len(buf, pos, True)
        for _ in range(max(ngroups, 0)):
            gid, pos = _read_str(buf, pos, True)
            pos = walk.topics(pos)
            code = _I16.unpack_from(buf, pos)[0]
            pos = skip_tags(buf, pos + 2)
            groups.append(walk.group(gid or "", code))
    else:
        pos = walk.topics(pos)
        code = 0
        if version >= 2:
            code = _I16.unpack_from(buf, pos)[0]
            pos += 2
        groups.append(walk.group(None, code))
    if flexible:
        pos = skip_tags(buf, pos)
    if pos != len(buf):
        raise ValueError(f"{len(buf) - pos} bytes left over after OffsetFetch v{version}")
    return corr, groups


class _Walk:
    """The per-group state of one decode: the rows so far and what :class:`GroupRows`
    says about them."""

    __slots__ = ("buf", "bad", "committed", "keys", "last", "make_key", "none", "ordered", "read_committed",
                 "rows", "source", "use_ext", "version")

    def __init__(self, buf: bytes | memoryview, version: int, keys: dict[str, dict[int, Any]],
                 make_key: Callable[[str, int], Any], read_committed: bool, use_ext: bool, source: str,
                 none: Any) -> None:
        self.buf, self.version, self.keys, self.make_key = buf, version, keys, make_key
        self.read_committed, self.use_ext, self.source, self.none = read_committed, use_ext, source, none
        self._reset()

    def _reset(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.bad: tuple[str, int, int] | None = None
        self.committed = 0
        self.ordered = True
        self.last: tuple[str, int] | None = None

    def group(self, gid: str | None, code: int) -> GroupRows:
        out = GroupRows(gid, code, self.rows, self.bad, self.committed, self.ordered)
        self._reset()
        return out

    def topics(self, pos: int) -> int:
        """Read a topics array at ``pos`` into this group's rows; the position after it."""
        buf, version = self.buf, self.version
        flexible = version >= 6
        ntopics, pos = _read_len(buf, pos, flexible)
        for _ in range(max(ntopics, 0)):
            name, pos = _read_str(buf, pos, flexible)
            pos = self._partitions(name or "", pos)
            if flexible:
                pos = skip_tags(buf, pos)
        return pos

    def _partitions(self, name: str, pos: int) -> int:
        buf, version = self.buf, self.version
        flexible = version >= 6
        nparts, pos = _read_len(buf, pos, flexible)
        cache = self.keys.get(name)
        if cache is None:
            cache = self.keys[name] = {}
        append = self.rows.append
        fixed = _PART_V5 if version >= 5 else _PART_V1
        fixed_unpack, fixed_size = fixed.unpack_from, fixed.size
        ext_unpack, ext_size = _PART_EXT.unpack_from, _PART_EXT.size
        k1, k2, k3 = _EXT_KEYS
        i16 = _I16.unpack_from
        end = len(buf)
        read_committed, use_ext, source, none = self.read_committed, self.use_ext, self.source, self.none
        prev = -1 if self.last is None or self.last[0] != name else self.last[1]
        if self.last is not None and self.last[0] > name:
            self.ordered = False
        committed_rows = 0
        partition = -1
        for _ in range(max(nparts, 0)):
            # the usual entry (empty metadata, the three extension tags) in one unpack; the
            # rest of this branch repeats the general path's below, inline for speed
            if flexible and pos + ext_size <= end:
                (partition, offset, epoch, mlen, error_code, ntags,
                 t1, hw, t2, lso, t3, lst) = ext_unpack(buf, pos)
                if mlen == 1 and ntags == 3 and t1 == k1 and t2 == k2 and t3 == k3:
                    pos += ext_size
                    if partition <= prev:
                        self.ordered = False
                    prev = partition
                    if error_code:
                        self._error(name, partition, error_code)
                        continue
                    if offset < 0:
                        continue
                    key = cache.get(partition)
                    if key is None:
                        key = cache[partition] = self.make_key(name, partition)
                    if use_ext:
                        append((key, offset, hw, lso, (lst if read_committed else hw) - offset, lst, "", source,
                                none))
                    else:
                        append((key, offset, "", epoch, hw, lso, lst))
                        committed_rows += 1
                    continue
            if version >= 5:
                partition, offset, epoch = fixed_unpack(buf, pos)
            else:
                partition, offset = fixed_unpack(buf, pos)
                epoch = -1
            pos += fixed_size
            if flexible and buf[pos] == 1:
                metadata: str | None = ""
                pos += 1
            else:
                metadata, pos = _read_str(buf, pos, flexible)
            error_code = i16(buf, pos)[0]
            pos += 2
            hw = lso = lst = None
            if flexible:
                if buf[pos] == 0:  # no tagged fields
                    pos += 1
                else:
                    hw, lso, lst, pos = read_extension_tags(buf, pos)
            if partition <= prev:
                self.ordered = False
            prev = partition
            if error_code:
                self._error(name, partition, error_code)
                continue
            if offset < 0:
                continue
            key = cache.get(partition)
            if key is None:
                key = cache[partition] = self.make_key(name, partition)
            if use_ext and hw is not None and lso is not None and (lst is not None or not read_committed):
                end_offset = lst if read_committed else hw
                assert end_offset is not None
                append((key, offset, hw, lso, end_offset - offset, lst, metadata, source, none))
            else:
                append((key, offset, metadata, epoch, hw, lso, lst))
                committed_rows += 1
        self.committed += committed_rows
        if nparts > 0:
            self.last = (name, partition)
        elif self.last is None or self.last[0] != name:
            self.last = (name, -1)
        return pos

    def _error(self, topic: str, partition: int, code: int) -> None:
        if code != UNKNOWN_TOPIC_OR_PARTITION and self.bad is None:
            self.bad = (topic, partition, code)
