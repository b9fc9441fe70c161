"""FrameReader: a byte stream delivered in arbitrary pieces yields the same frames."""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.protocol.errors import PeerProtocolError
from hightide.protocol.framing import FrameReader, FrameTooLarge


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def feed(reader: FrameReader, data: bytes, chunks: list[int]) -> list[bytes]:
    """Deliver ``data`` the way asyncio does: into get_buffer(), at most ``chunk``
    bytes at a time, never more than the returned view holds. Frames are copied
    right away (they are only valid until the next get_buffer call)."""
    out: list[bytes] = []
    pos, i = 0, 0
    while pos < len(data):
        want = chunks[i % len(chunks)] if chunks else len(data)
        i += 1
        buf = reader.get_buffer(-1)
        assert len(buf) > 0, "get_buffer returned an empty view"
        n = min(want, len(buf), len(data) - pos)
        buf[:n] = data[pos:pos + n]
        pos += n
        out.extend(bytes(f) for f in reader.buffer_updated(n))
    return out


payloads = st.lists(st.binary(min_size=0, max_size=300), max_size=25)


@settings(max_examples=200, deadline=None)
@given(payloads=payloads, chunks=st.lists(st.integers(1, 700), min_size=1, max_size=10),
       chunk_bytes=st.sampled_from([8, 16, 64, 257, 4096]))
def test_random_frames_in_random_chunks(payloads: list[bytes], chunks: list[int], chunk_bytes: int) -> None:
    reader = FrameReader(max_frame_bytes=1 << 20, chunk_bytes=chunk_bytes)
    stream = b"".join(frame(p) for p in payloads)
    assert feed(reader, stream, chunks) == payloads
    assert reader.buffered_bytes == 0


@settings(max_examples=50, deadline=None)
@given(payloads=st.lists(st.binary(min_size=0, max_size=3000), max_size=8),
       chunks=st.lists(st.integers(1, 5000), min_size=1, max_size=6))
def test_frames_larger_than_the_chunk(payloads: list[bytes], chunks: list[int]) -> None:
    reader = FrameReader(max_frame_bytes=1 << 20, chunk_bytes=32)
    stream = b"".join(frame(p) for p in payloads)
    assert feed(reader, stream, chunks) == payloads


def test_big_frame_then_small_frames_in_one_delivery() -> None:
    big = bytes(range(256)) * 40
    payloads = [b"a", big, b"", b"bc", big[:100]]
    reader = FrameReader(max_frame_bytes=1 << 20, chunk_bytes=64)
    assert feed(reader, b"".join(map(frame, payloads)), [10_000]) == payloads


def test_byte_at_a_time() -> None:
    payloads = [b"hello", b"", b"x" * 100, b"world"]
    reader = FrameReader(max_frame_bytes=1000, chunk_bytes=16)
    assert feed(reader, b"".join(map(frame, payloads)), [1]) == payloads


def test_partial_frame_is_buffered() -> None:
    reader = FrameReader(max_frame_bytes=1000, chunk_bytes=64)
    data = frame(b"abcdef")
    assert feed(reader, data[:7], [7]) == []
    assert reader.buffered_bytes == 7
    assert feed(reader, data[7:], [100]) == [b"abcdef"]
    assert reader.buffered_bytes == 0


def test_frame_at_the_limit_is_accepted() -> None:
    reader = FrameReader(max_frame_bytes=10, chunk_bytes=8)
    assert feed(reader, frame(b"0123456789"), [3]) == [b"0123456789"]


def test_too_large_raises_without_allocating() -> None:
    reader = FrameReader(max_frame_bytes=1 << 20, chunk_bytes=64)
    buf = reader.get_buffer(-1)
    buf[:4] = (2**31 - 1).to_bytes(4, "big")
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLarge) as info:
            reader.buffer_updated(4)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # nowhere near the 2 GiB announced
    assert isinstance(info.value, PeerProtocolError)
    assert "socket.request.max.bytes" in str(info.value)


def test_too_large_detected_from_header_alone() -> None:
    reader = FrameReader(max_frame_bytes=100, chunk_bytes=64)
    with pytest.raises(FrameTooLarge):
        feed(reader, (101).to_bytes(4, "big"), [4])


def test_too_large_after_valid_frames() -> None:
    reader = FrameReader(max_frame_bytes=100, chunk_bytes=64)
    with pytest.raises(FrameTooLarge):
        feed(reader, frame(b"ok") + (1000).to_bytes(4, "big"), [100])


def test_negative_size_raises() -> None:
    reader = FrameReader(max_frame_bytes=100, chunk_bytes=64)
    with pytest.raises(PeerProtocolError) as info:
        feed(reader, (-1).to_bytes(4, "big", signed=True), [4])
    assert not isinstance(info.value, FrameTooLarge)
    assert "negative" in str(info.value)


def _deliver(reader: FrameReader, data: bytes, piece: int) -> list[memoryview]:
    """Like :func:`feed`, but the frames are returned as the reader's views (not copied)."""
    out: list[memoryview] = []
    pos = 0
    while pos < len(data):
        buf = reader.get_buffer(-1)
        n = min(piece, len(buf), len(data) - pos)
        buf[:n] = data[pos:pos + n]
        pos += n
        out.extend(reader.buffer_updated(n))
    return out


def test_large_frames_handed_over_stay_intact() -> None:
    """hand_over_large: a large frame's buffer is not written again while the frame is
    held (later large and small frames land elsewhere); small frames are transient (the
    rolling buffer)."""
    reader = FrameReader(1 << 20, chunk_bytes=64, hand_over_large=True)
    big1, big2, small = bytes(range(256)) * 4, b"\xee" * 700, b"tiny"
    got = _deliver(reader, frame(big1), 50)
    assert [bytes(f) for f in got] == [big1] and not reader.is_transient(got[0])
    later = _deliver(reader, frame(big2) + frame(small) + frame(big1[::-1]), 37)
    assert [bytes(f) for f in later] == [big2, small, big1[::-1]]
    assert [reader.is_transient(f) for f in later] == [False, True, False]
    assert bytes(got[0]) == big1  # untouched by the two large frames received after it
    assert len({id(f.obj) for f in (got[0], later[0], later[2])}) == 3


def test_large_frame_buffers_are_reused_by_default() -> None:
    """The default (the server side): the spare large-frame buffer is reused, so every
    frame is transient."""
    reader = FrameReader(1 << 20, chunk_bytes=64)
    first = _deliver(reader, frame(b"\x01" * 500), 64)
    second = _deliver(reader, frame(b"\x02" * 400) + frame(b"s"), 64)
    assert reader.is_transient(first[0]) and all(reader.is_transient(f) for f in second)
    assert first[0].obj is second[0].obj  # the same spare buffer, overwritten


def test_a_handed_over_buffer_is_reused_once_no_view_of_it_is_left() -> None:
    reader = FrameReader(1 << 20, chunk_bytes=64, hand_over_large=True)
    first = _deliver(reader, frame(b"\x01" * 500), 40)[0]
    owner = first.obj
    records = first[10:20]  # a decoder's slice keeps the buffer viewed after the frame is dropped
    del first
    second = _deliver(reader, frame(b"\x02" * 450), 40)[0]
    assert second.obj is not owner and bytes(records) == b"\x01" * 10
    del records
    third = _deliver(reader, frame(b"\x03" * 480), 40)[0]
    assert third.obj is owner and bytes(third) == b"\x03" * 480  # nothing viewed it: reused
    fourth = _deliver(reader, frame(b"\x04" * 300), 40)[0]
    assert fourth.obj is not owner and bytes(third) == b"\x03" * 480  # third still held
    assert len(owner) >= 480 and bytes(owner[:480]) == b"\x03" * 480  # the probe left it as it was


@settings(max_examples=100, deadline=None)
@given(payloads=st.lists(st.binary(min_size=0, max_size=700), max_size=12),
       chunks=st.lists(st.integers(1, 200), min_size=1, max_size=8), keep=st.lists(st.booleans(), max_size=12))
def test_handed_over_frames_in_random_chunks(payloads: list[bytes], chunks: list[int], keep: list[bool]) -> None:
    """hand_over_large: any payloads in any pieces give the same frames; every frame a
    caller still holds keeps its bytes while later ones arrive."""
    reader = FrameReader(1 << 20, chunk_bytes=64, hand_over_large=True)
    data = b"".join(frame(p) for p in payloads)
    held: list[tuple[memoryview, bytes]] = []
    got: list[bytes] = []
    pos, i = 0, 0
    while pos < len(data):
        buf = reader.get_buffer(-1)
        n = min(chunks[i % len(chunks)], len(buf), len(data) - pos)
        i += 1
        buf[:n] = data[pos:pos + n]
        pos += n
        del buf
        for f in reader.buffer_updated(n):
            got.append(bytes(f))
            if not reader.is_transient(f) and keep[len(got) % len(keep)] if keep else False:
                held.append((f, bytes(f)))
            del f
        assert all(bytes(v) == b for v, b in held)
    assert got == payloads
