"""File regions and writing them to a socket with ``sendfile`` (issue 21, zero-copy
Fetch): partial sends resume exactly where the kernel stopped, a region keeps its file
after the segment is closed and unlinked, a file cut short is an error, and the
protocol layer passes regions through and closes the ones it drops."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from hightide.log.storage import POSIX, FileRegion, RegionTruncated
from hightide.protocol.fetch_response import PartitionData, TopicData, encode_fetch_response
from hightide.protocol.regions import close_regions, has_region
from hightide.protocol.server_connection import RawResponse, ServerConnection
from hightide.server.zero_copy import remainder, send_now


@pytest.fixture
def segment(tmp_path):
    data = os.urandom(3 << 20)
    f = POSIX.open(str(tmp_path / "00000000000000000000.log"))
    f.pwrite(data, 0)
    yield f, data
    f.close()


def _reader(sock: socket.socket, out: bytearray, total: int) -> threading.Thread:
    def run() -> None:
        while len(out) < total:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return
            out.extend(chunk)
    return threading.Thread(target=run, daemon=True)


def test_send_now_stops_when_the_socket_is_full_and_the_remainder_completes_it(segment):
    f, data = segment
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
    a.setblocking(False)
    regions = [f.region(1 << 20, 1000), f.region(700_000, 2 << 20)]
    buffers = [b"head", regions[0], b"mid1", b"mid2", regions[1], b"tail"]
    expected = b"head" + data[1000:1000 + (1 << 20)] + b"mid1mid2" + data[2 << 20:(2 << 20) + 700_000] + b"tail"
    try:
        i, done = send_now(a.fileno(), buffers)  # nobody reads yet: the kernel takes only a part
        assert i < len(buffers)
        got = bytearray()
        t = _reader(b, got, len(expected))
        t.start()
        rest = remainder(buffers, i, done)
        assert all(isinstance(x, (bytes, memoryview)) for x in rest)
        a.settimeout(10)
        for x in rest:
            a.sendall(x)
        t.join(10)
        assert bytes(got) == expected
    finally:
        close_regions(buffers)
        a.close()
        b.close()


def test_send_now_resumes_inside_the_first_buffer(segment):
    f, data = segment
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    a.setblocking(False)
    region = f.region(100_000, 5)
    try:
        assert send_now(a.fileno(), [region, b"y"], 99_000) == (2, 0)
        assert send_now(a.fileno(), [b"abcdef", region], 4) == (2, 0)
        got = bytearray()
        t = _reader(b, got, 1000 + 1 + 2 + 100_000)
        t.start()
        t.join(10)
        assert bytes(got) == data[99_005:100_005] + b"y" + b"ef" + data[5:100_005]
    finally:
        region.close()
        a.close()
        b.close()


def test_send_now_sends_everything_when_the_socket_has_room(segment):
    f, data = segment
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    a.setblocking(False)
    region = f.region(100_000, 5)
    try:
        assert send_now(a.fileno(), [b"x", region, b"y"]) == (3, 0)
        got = bytearray()
        t = _reader(b, got, 100_002)
        t.start()
        t.join(10)
        assert bytes(got) == b"x" + data[5:100_005] + b"y"
    finally:
        region.close()
        a.close()
        b.close()


def test_a_region_keeps_its_file_after_the_segment_is_closed_and_unlinked(segment, tmp_path):
    f, data = segment
    region = f.region(200_000, 4096)
    f.close()
    os.unlink(f.path)
    other = os.open(str(tmp_path / "other"), os.O_RDWR | os.O_CREAT)  # may reuse the closed fd number
    try:
        assert region.read() == data[4096:4096 + 200_000]
        assert region.read(199_990) == data[4096 + 199_990:4096 + 200_000]
    finally:
        os.close(other)
        region.close()


def test_a_region_cut_short_under_it_raises_instead_of_sending_less(segment):
    f, _ = segment
    region = f.region(1 << 20, (2 << 20) + 100)
    f.truncate(2 << 20)  # a follower truncation after the read
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    a.setblocking(False)
    t = _reader(b, bytearray(), 1 << 30)
    t.start()
    try:
        with pytest.raises(RegionTruncated):
            region.read()
        with pytest.raises(RegionTruncated):
            send_now(a.fileno(), [region])
    finally:
        region.close()
        a.close()  # the reader sees EOF and ends
        t.join(10)
        b.close()


def test_close_is_idempotent_and_frees_the_descriptor(segment):
    f, _ = segment
    region = f.region(10, 0)
    fd = region.fd
    region.close()
    region.close()
    with pytest.raises(OSError):
        os.fstat(fd)


@pytest.mark.parametrize("version", range(4, 18))
def test_the_fetch_encoder_carries_a_region_as_it_carries_bytes(segment, version):
    f, data = segment
    region = f.region(300_000, 777)

    def encode(records):
        topics = [TopicData("t", None, [PartitionData(0, high_watermark=9, records=b"small"),
                                        PartitionData(1, high_watermark=5, records=records,
                                                      current_leader=(1, 2))])]
        return encode_fetch_response(version, 42, topics)

    try:
        with_region, size = encode(region)
        with_bytes, size_b = encode(data[777:777 + 300_000])
        assert size == size_b
        assert any(x is region for x in with_region)
        flat = b"".join(x.read() if isinstance(x, FileRegion) else bytes(x) for x in with_region)
        assert flat == b"".join(bytes(x) for x in with_bytes)
    finally:
        region.close()


class _Region:
    def __init__(self, size: int) -> None:
        self.size = size
        self.closed = 0

    def __len__(self) -> int:
        return self.size

    def read(self, start: int = 0) -> bytes:
        return b"r" * (self.size - start)

    def close(self) -> None:
        self.closed += 1


class _Route:
    min_version, max_version = 0, 20


def _conn_with_two_requests() -> ServerConnection:
    from hightide.protocol.codec import encode_request
    from hightide.protocol.build import materialize
    from kio.index import load_request_schema
    c: ServerConnection = ServerConnection({18: _Route()}, 1 << 20)
    req = materialize(load_request_schema(18, 3), {"client_software_name": "t", "client_software_version": "1"})
    c.receive_data(encode_request(18, 3, 1, "t", req) + encode_request(18, 3, 2, "t", req))
    assert c.next_request().slot == 0 and c.next_request().slot == 1
    return c


def test_the_connection_passes_regions_through_and_closes_those_of_answers_it_drops():
    c = _conn_with_two_requests()
    held = _Region(100)
    assert c.send(1, RawResponse([b"h", held])) == ()  # held behind slot 0
    out = c.send(0, RawResponse([b"a"]))
    assert held in out and held.closed == 0  # handed on uncopied; the shell closes it
    assert has_region(out)

    c = _conn_with_two_requests()
    held = _Region(100)
    c.send(1, RawResponse([b"h", held]))
    c.close()  # the connection is gone with the answer still held
    assert held.closed == 1
    late = _Region(5)
    assert c.send(0, RawResponse([late])) == ()  # an answer after the close is dropped
    assert late.closed == 1
