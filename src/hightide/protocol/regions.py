"""Response buffers that are not bytes: file regions (the zero-copy Fetch).

A pre-encoded response (:class:`~.server_connection.RawResponse`) is a list of buffers:
bytes or memoryviews, and -- for a Fetch answered from segment files -- *regions*: byte
ranges of a file that the IO shell sends with ``sendfile`` (or reads, when it cannot),
so record bytes never pass through Python. This package never touches their file: it
only needs a region's length and, for an answer it drops, its ``close()``. Whoever holds
a buffer list that may contain a region owns it until handing it on, and closes every
region in a list it drops (:func:`close_regions`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, Union

__all__ = ["Region", "ResponseBuffer", "close_regions", "has_region", "joined"]


class Region(Protocol):
    """What the protocol layer needs of a file region (e.g. ``hightide.log.storage.FileRegion``)."""

    def __len__(self) -> int:
        """Bytes in the region."""

    def read(self, start: int = 0) -> bytes:
        """The region's bytes from ``start`` (raises OSError if they cannot all be read)."""

    def close(self) -> None:
        """Release the region's file (idempotent)."""


ResponseBuffer = Union[bytes, memoryview, Region]
"""One buffer of an encoded response."""


def has_region(buffers: Iterable[ResponseBuffer]) -> bool:
    """Whether any buffer is a region (not bytes, bytearray or memoryview)."""
    for b in buffers:
        if not isinstance(b, (bytes, memoryview, bytearray)):
            return True
    return False


def close_regions(buffers: Iterable[ResponseBuffer]) -> None:
    """Close every region among ``buffers`` (the rest are left alone)."""
    for b in buffers:
        if not isinstance(b, (bytes, memoryview, bytearray)):
            b.close()


def joined(buffers: Iterable[ResponseBuffer]) -> bytes:
    """All of ``buffers`` as one ``bytes``, regions read (not closed: the caller still
    owns them). Raises OSError if a region cannot be read whole."""
    return b"".join(b if isinstance(b, (bytes, memoryview, bytearray)) else b.read() for b in buffers)
