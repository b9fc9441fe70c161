"""Decode the consumer protocol's member assignment (DescribeGroups ``member_assignment``)
into the partitions a member owns, to fill CONSUMER-ID/HOST/CLIENT-ID columns."""

from __future__ import annotations

import struct

__all__ = ["decode_assignment"]

_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


def decode_assignment(data: bytes) -> list[tuple[str, int]]:
    """``[(topic, partition), ...]`` from a ConsumerProtocolAssignment (any version: the
    leading fields are the same). Returns [] for empty or undecodable bytes (another
    protocol type, e.g. connect), never raises."""
    try:
        if len(data) < 6:
            return []
        pos = 2  # version
        (n_topics,), pos = _I32.unpack_from(data, pos), pos + 4
        out: list[tuple[str, int]] = []
        for _ in range(max(0, n_topics)):
            (n,), pos = _I16.unpack_from(data, pos), pos + 2
            topic = bytes(data[pos:pos + n]).decode("utf-8")
            pos += n
            (count,), pos = _I32.unpack_from(data, pos), pos + 4
            for _ in range(max(0, count)):
                (p,), pos = _I32.unpack_from(data, pos), pos + 4
                out.append((topic, p))
        return out
    except (struct.error, UnicodeDecodeError):
        return []
