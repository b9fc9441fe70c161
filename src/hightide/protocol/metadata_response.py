"""Metadata responses for every topic at scale (issue 33): the topics array written from
bytes kept per topic.

A Metadata request for all topics at 100,000 partitions built, materialized and encoded
one kio entity per partition: seconds per request. :class:`TopicEntryCache` keeps each
topic's encoded entry (per version) and writes it again while the topic's partitions are
the same objects, or equal ones (the image replaces a partition's object when it changes),
so a request costs a comparison per partition and a join. The entries are those of
``handlers.metadata.topic_entry`` on the single node (no availability to work out, no
authorized operations asked for); :func:`splice_topics` puts them into a response
encoded by kio with an empty topics array. Byte-identical to kio's encoder (a unit test
checks every version, 0-12).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .primitives import array_len, string

if TYPE_CHECKING:
    from ..cluster.image import PartitionImage, TopicImage

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART = struct.Struct(">hii")  # error code, partition index, leader id
OMITTED = -(2**31)


def _int32_array(values: Sequence[int], flexible: bool) -> bytes:
    return array_len(len(values), flexible) + b"".join(_I32.pack(v) for v in values)


def encode_topic_entry(t: TopicImage, parts: Sequence[PartitionImage], version: int) -> bytes:
    """One MetadataResponseTopic of ``version`` (error NONE, the partitions in ``parts``
    order, no offline replicas, authorized operations omitted)."""
    flexible = version >= 9
    out = bytearray(_I16.pack(0))
    out += string(t.name, flexible)
    if version >= 10:
        out += t.topic_id.bytes
    if version >= 1:
        out += b"\x01" if t.internal else b"\x00"
    out += array_len(len(parts), flexible)
    empty = array_len(0, flexible)
    for p in parts:
        out += _PART.pack(0, p.partition, p.leader)
        if version >= 7:
            out += _I32.pack(p.leader_epoch)
        out += _int32_array(p.replicas, flexible)
        out += _int32_array(p.isr, flexible)
        if version >= 5:
            out += empty
        if flexible:
            out += b"\x00"
    if version >= 8:
        out += _I32.pack(OMITTED)
    if flexible:
        out += b"\x00"
    return bytes(out)


class TopicEntryCache:
    """Encoded topic entries by (version, topic name), each with the partition objects it
    was written from (see the module doc)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[int, str], tuple[TopicImage, tuple[PartitionImage, ...], bytes]] = {}

    def entry(self, t: TopicImage, version: int) -> bytes:
        parts = tuple(t.partitions.values())
        key = (version, t.name)
        cached = self._entries.get(key)
        if cached is not None and cached[0] is t and cached[1] == parts:
            return cached[2]
        data = encode_topic_entry(t, sorted(parts, key=lambda p: p.partition), version)
        self._entries[key] = (t, parts, data)
        return data

    def prune(self, live_topics: int) -> None:
        """Forget every entry once they outnumber the live topics' by far (deleted topics,
        versions no longer asked for)."""
        if len(self._entries) > 2 * live_topics + 1000:
            self._entries.clear()


def splice_topics(frame: bytes, version: int, entries: Sequence[bytes]) -> list[bytes]:
    """The buffers of ``frame`` (a Metadata response encoded with an empty topics array,
    without the size prefix) with ``entries`` as its topics: the array is the last field
    before ``cluster_authorized_operations`` (v8-10) and the tagged fields (v9+)."""
    flexible = version >= 9
    tail = (4 if 8 <= version <= 10 else 0) + (1 if flexible else 0)
    empty = array_len(0, flexible)
    at = len(frame) - tail - len(empty)
    if frame[at:at + len(empty)] != empty:
        raise ValueError(f"no empty topics array where Metadata v{version} has it")
    return [frame[:at], array_len(len(entries), flexible), *entries, frame[at + len(empty):]]
