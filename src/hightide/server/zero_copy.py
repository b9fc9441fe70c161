"""Writing response buffers that hold file regions straight to a socket.

A Fetch answer is a list of buffers: encoded headers (bytes) and record bytes as file
regions (:class:`~hightide.log.storage.FileRegion`, see :mod:`hightide.protocol.regions`).
When nothing is queued in the transport, :func:`send_now` writes them in order on the
connection's non-blocking socket -- bytes with ``writev``, regions with
``os.sendfile`` from the segment file, so record bytes never enter Python -- until the
kernel takes no more. The caller keeps what is left and sends it on when the socket
is writable again (``sendfile`` again: a large region is never read into memory), or
hands :func:`remainder` -- the rest as bytes, a region's unsent part ``pread`` -- to
the transport. The caller keeps the order (it writes directly only when the
transport's buffer is empty, and nothing else while a remainder is pending) and closes
the regions once sent.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..log.storage import FileRegion, RegionTruncated
from ..protocol.regions import ResponseBuffer

__all__ = ["RegionTruncated", "remainder", "send_now"]

_IOV_MAX = 1024


def send_now(sock_fd: int, buffers: Sequence[ResponseBuffer], start: int = 0) -> tuple[int, int]:
    """Write ``buffers`` in order on the non-blocking socket ``sock_fd``, the first one
    from byte ``start`` on, until all are sent or the kernel takes no more. Returns
    ``(i, done)``: ``buffers[:i]`` are sent and ``done`` bytes of ``buffers[i]``
    (counted from its beginning); ``(len(buffers), 0)`` when all are.
    Raises :class:`RegionTruncated` when a region's file ends before the region (some of
    the answer may be on the wire: the connection must be closed), OSError when the
    socket fails (reset, broken pipe)."""
    i, n = 0, len(buffers)
    if start and n:
        b = buffers[0]
        if isinstance(b, FileRegion):
            sent = _send_region(sock_fd, b, start)
            if sent < b.size:
                return 0, sent
        else:
            sent = start + _write_some(sock_fd, memoryview(b)[start:])  # type: ignore[arg-type]
            if sent < len(b):
                return 0, sent
        i = 1
    while i < n:
        b = buffers[i]
        if isinstance(b, FileRegion):
            sent = _send_region(sock_fd, b)
            if sent < b.size:
                return i, sent
            i += 1
            continue
        j = i + 1
        while j < n and j - i < _IOV_MAX and not isinstance(buffers[j], FileRegion):
            j += 1
        try:
            k = os.writev(sock_fd, buffers[i:j])  # type: ignore[arg-type]  # bytes/memoryviews only
        except BlockingIOError:
            return i, 0
        while i < j and k >= len(buffers[i]):
            k -= len(buffers[i])
            i += 1
        if i < j:
            return i, k
    return n, 0


def _write_some(sock_fd: int, data: memoryview) -> int:
    """``write`` what the socket takes of ``data``; returns the count (0 when full)."""
    try:
        return os.write(sock_fd, data)
    except BlockingIOError:
        return 0


def _send_region(sock_fd: int, region: FileRegion, sent: int = 0) -> int:
    """``sendfile`` the region from byte ``sent`` until done or the socket is full;
    returns the bytes of the region sent (``sent`` included)."""
    size = region.size
    while sent < size:
        try:
            k = os.sendfile(sock_fd, region.fd, region.offset + sent, size - sent)
        except BlockingIOError:
            return sent
        if k == 0:
            raise RegionTruncated(0, f"the segment file ended {size - sent} bytes before the region "
                                     f"({region.offset}+{size}) it promised")
        sent += k
    return sent


def remainder(buffers: Sequence[ResponseBuffer], i: int, done: int) -> list[bytes | memoryview]:
    """The buffers from ``(i, done)`` on (see :func:`send_now`) as bytes: regions are
    read (raises :class:`RegionTruncated` / OSError like ``FileRegion.read``)."""
    out: list[bytes | memoryview] = []
    for j in range(i, len(buffers)):
        b = buffers[j]
        skip = done if j == i else 0
        if isinstance(b, (bytes, memoryview, bytearray)):
            out.append(memoryview(b)[skip:] if skip else b)
        else:
            out.append(b.read(skip))
    return out
