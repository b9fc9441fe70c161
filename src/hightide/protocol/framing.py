"""Sans-IO framing of the Kafka wire protocol (4-byte big-endian size + payload).

Theory of operation: the IO shell asks :meth:`FrameReader.get_buffer` for a writable
memoryview, receives straight into it, and reports the byte count to
:meth:`FrameReader.buffer_updated`, which returns the complete frames found. Small
frames are parsed out of one rolling buffer; a frame larger than that buffer gets a
dedicated ``bytearray`` of at least its size, allocated only after the size has been
checked against ``max_frame_bytes`` — a frame announcing a huge size never allocates —
and kept for the next large frame (up to ``_SPARE_MAX``), so a producer sending 1 MiB
requests does not allocate (and page-fault) 1 MiB per request. The bound can change
between frames (:meth:`FrameReader.set_limit`: a SASL listener holds connections that
have not authenticated to ``sasl.server.max.receive.size``); it applies to every size
field read after the change.
Frames are returned as ``memoryview`` objects valid until the next
:meth:`FrameReader.get_buffer` call: decode (or copy) them before receiving more --
unless :meth:`FrameReader.is_transient` says otherwise: a reader built with
``hand_over_large=True`` hands each large frame's dedicated buffer over to the caller
and writes into it again only once no view of it is left (CPython refuses to resize a
``bytearray`` while views of it exist: :func:`_unviewed` probes that in place). The
client side does this, so a 1 MiB Fetch answer is neither copied once more to outlive
the next receive nor received into freshly allocated (page-faulting) memory: a follower
has dropped the views of its last answer by the time the next one arrives.
"""

from __future__ import annotations

from .errors import PeerProtocolError

_DEFAULT_CHUNK = 256 * 1024
_SPARE_MAX = 16 * 1024 * 1024
_POOL = 2  # large-frame buffers a hand_over_large reader keeps for reuse
_ROUND = 64 * 1024  # their sizes are rounded up to this, so a slightly larger frame fits too


def _unviewed(buf: bytearray) -> bool:
    """True if no view (memoryview, exported buffer) of ``buf`` is alive. CPython refuses
    to resize a bytearray with exports (BufferError); a pop() and append() of its last
    byte is such a resize, done in place in O(1) (a minor shrink and regrowth within the
    allocation). ``buf`` must not be empty."""
    try:
        last = buf.pop()
    except BufferError:
        return False
    buf.append(last)
    return True


class FrameTooLarge(PeerProtocolError):
    """A frame announced a size above the reader's bound (``socket.request.max.bytes``,
    or the limit set with :meth:`FrameReader.set_limit`, named by ``limit_name``)."""

    def __init__(self, reason: str, limit_name: str = "socket.request.max.bytes") -> None:
        super().__init__(reason)
        self.limit_name = limit_name


class FrameReader:
    """Splits a byte stream into frames. No IO, no clock.

    ``max_frame_bytes`` bounds a single frame (Kafka's ``socket.request.max.bytes``).
    Raises :class:`FrameTooLarge` from :meth:`buffer_updated` when a frame announces
    more, and :class:`PeerProtocolError` for a negative size.
    """

    def __init__(self, max_frame_bytes: int, chunk_bytes: int = _DEFAULT_CHUNK, *,
                 hand_over_large: bool = False) -> None:
        self.max_frame_bytes = max_frame_bytes
        #: True: a large frame's buffer is the caller's while it holds a view of it
        self._hand_over = hand_over_large
        self._pool: list[bytearray] = []  # hand_over_large: buffers reused once unviewed
        self.limit_name = "socket.request.max.bytes"  # the config the bound comes from, for the error
        self._chunk = chunk_bytes
        self._buf = bytearray(chunk_bytes)
        self._start = 0  # first unconsumed byte in _buf
        self._end = 0  # end of received data in _buf
        self._big: bytearray | None = None  # dedicated buffer for a large frame
        self._big_size = 0  # size of the large frame being received into _big
        self._big_filled = 0
        self._spare: bytearray | None = None  # the last large-frame buffer, reused

    def set_limit(self, max_frame_bytes: int, name: str) -> None:
        """Bound every frame whose size field is read from now on by ``max_frame_bytes``
        (``name``: the config it comes from, for :class:`FrameTooLarge`). A frame whose
        size was accepted already is received whole."""
        self.max_frame_bytes, self.limit_name = max_frame_bytes, name

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Return the memoryview the next received bytes must be written into."""
        if self._big is not None:
            return memoryview(self._big)[self._big_filled:self._big_size]
        if self._end == len(self._buf):
            self._compact()
        return memoryview(self._buf)[self._end:]

    def buffer_updated(self, nbytes: int) -> list[memoryview]:
        """Account for ``nbytes`` written into the last buffer; return complete frames."""
        if self._big is not None:
            self._big_filled += nbytes
            if self._big_filled < self._big_size:
                return []
            frame = memoryview(self._big)[:self._big_size]
            self._spare = self._big if not self._hand_over and self._big_size <= _SPARE_MAX else None
            self._big = None
            return [frame]
        self._end += nbytes
        return self._split()

    def _split(self) -> list[memoryview]:
        frames: list[memoryview] = []
        buf, start, end = self._buf, self._start, self._end
        while end - start >= 4:
            size = int.from_bytes(buf[start:start + 4], "big", signed=True)
            if size < 0:
                raise PeerProtocolError(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise FrameTooLarge(
                    f"frame of {size} bytes exceeds {self.limit_name}={self.max_frame_bytes}", self.limit_name)
            if end - start - 4 >= size:
                frames.append(memoryview(buf)[start + 4:start + 4 + size])
                start += 4 + size
                continue
            if size + 4 > len(buf):
                # Too big for the rolling buffer: move what we have to a dedicated one.
                have = end - start - 4
                big = self._large_buffer(size)
                big[:have] = memoryview(buf)[start + 4:end]
                self._big, self._big_size, self._big_filled = big, size, have
                start = end
            break
        if start == end:
            start = end = 0  # frames returned stay intact: new data lands at 0 later
        self._start, self._end = start, end
        return frames

    def is_transient(self, frame: memoryview) -> bool:
        """True if ``frame`` (returned by :meth:`buffer_updated`) lives in a buffer this
        reader may write into again while the frame is held (the rolling buffer; without
        ``hand_over_large`` also a large frame's): copy it before the next
        :meth:`get_buffer` if it must outlive that. False: a large frame of a
        ``hand_over_large`` reader, the caller's for as long as it holds a view of it."""
        return not self._hand_over or frame.obj is self._buf

    def _large_buffer(self, size: int) -> bytearray:
        """A buffer of at least ``size`` bytes for a large frame: the spare (without
        ``hand_over_large``), or a pooled one nobody views any more, else a new one."""
        if not self._hand_over:
            big = self._spare if self._spare is not None and len(self._spare) >= size else bytearray(size)
            self._spare = None
            return big
        for b in self._pool:
            if len(b) >= size and _unviewed(b):
                return b
        big = bytearray(-(-size // _ROUND) * _ROUND)
        if size <= _SPARE_MAX:
            if len(self._pool) < _POOL:
                self._pool.append(big)
            else:  # in place of one too small for this frame, unless all are still viewed
                for i, b in enumerate(self._pool):
                    if _unviewed(b):
                        self._pool[i] = big
                        break
        return big

    def _compact(self) -> None:
        if self._start:
            rest = self._buf[self._start:self._end]
            self._buf[:len(rest)] = rest
            self._start, self._end = 0, len(rest)
        else:  # full buffer holding one partial frame header+body smaller than chunk
            self._buf.extend(bytes(self._chunk))

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as frames."""
        return (self._end - self._start) + (self._big_filled if self._big is not None else 0)
