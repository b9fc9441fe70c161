"""The zero-copy Fetch (issue 21): record reads of 32 KiB or more go from the segment
file to the socket with ``sendfile``. Seen from the wire, nothing may change: answers
are byte-identical to the ones read into bytes (a TLS listener reads them, the
plaintext one sends them from the file), a slow reader with pipelined fetches gets every
answer intact and in order (partial sends finish through the transport), an answer
held behind a parked fetch still carries the bytes of a segment deleted meanwhile, no
descriptor leaks (also when clients vanish with answers held), and real clients
consume large records correctly."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import ssl
import struct
import time
from collections.abc import Callable

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_request
from hightide.protocol.records import decode_records

from ..conftest import free_port
from ..waiting import wait_until
from .clients import Rec, confluent_consume, confluent_create_topic, confluent_produce, kafka_python_consume
from .tls_certs import make_certs

pytestmark = pytest.mark.integration

VALUE = 10_000
VERSIONS = (4, 7, 11, 12, 13, 16, 17)


def values(n: int, seed: int) -> list[bytes]:
    rnd = random.Random(seed)
    return [rnd.randbytes(VALUE) for _ in range(n)]


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> dict[int, list[bytes]]:
    """``per_partition`` 10 KB records in each partition, in several batches."""
    sent = {p: values(per_partition, p) for p in range(partitions)}
    recs = [Rec(p, None, v, (), 1_700_000_000_000 + i) for p in range(partitions) for i, v in enumerate(sent[p])]
    confluent_produce(bootstrap, topic, recs, extra={"linger.ms": 5, "batch.size": 100_000})
    return sent


def _sampled(read: Callable[[], int], seconds: float) -> list[int]:
    """``read()`` every 50 ms for ``seconds``."""
    out, deadline = [], time.monotonic() + seconds
    while True:
        out.append(read())
        if time.monotonic() >= deadline:
            return out
        time.sleep(0.05)


def fetch_frame(version: int, corr: int, topic: str, topic_id, parts: list[tuple[int, int]], *,
                pmax: int = 1 << 20, max_wait: int = 0, isolation: int = 0) -> bytes:
    body = {"replica_id": -1, "max_wait": max_wait, "min_bytes": 1, "max_bytes": 50 << 20, "isolation_level": isolation,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "topic_id": topic_id, "partitions": [
                {"partition": p, "fetch_offset": off, "partition_max_bytes": pmax, "current_leader_epoch": -1,
                 "log_start_offset": -1, "last_fetched_epoch": -1} for p, off in parts]}]}
    return encode_request(1, version, corr, "sendfile-test", materialize(load_request_schema(1, version), body))


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("closed by the broker")
        buf.extend(chunk)
    return bytes(buf)


def recv_frame(sock: socket.socket) -> bytes:
    return recv_exact(sock, struct.unpack(">i", recv_exact(sock, 4))[0])


def decode_fetch(version: int, frame: bytes):
    cls = load_response_schema(1, version)
    return entity_reader(cls)(frame, 5 if version >= 12 else 4)[0]


def batch_records(data: bytes) -> list:
    """The records of the whole batches in ``data`` (a trailing partial batch ignored)."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        end = pos + 12 + struct.unpack_from(">i", data, pos + 8)[0]
        if end > len(data):
            break
        out.extend(decode_records(data[pos:end]))
        pos = end
    return out


def topic_id(bootstrap: str, topic: str):
    from ..rawkafka import RawClient
    with RawClient(bootstrap) as c:
        md = c.request(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
        return md.topics[0].topic_id


def requests_for(topic: str, tid) -> list[tuple[int, bytes]]:
    """(version, request frame) of fetches across versions: whole partitions, mid-log
    offsets, several partitions in one answer, a small partition limit (bytes path), and
    read_committed."""
    out = []
    corr = 0
    for v in VERSIONS:
        for parts, pmax, isolation in (([(0, 0), (1, 7), (2, 33)], 1 << 20, 0), ([(1, 0)], 300_000, 0),
                                       ([(2, 3)], 30_000, 0), ([(0, 5), (2, 0)], 1 << 20, 1)):
            corr += 1
            out.append((v, fetch_frame(v, corr, topic, tid, parts, pmax=pmax, isolation=isolation)))
    return out


def ask_all(sock: socket.socket, reqs: list[tuple[int, bytes]]) -> list[bytes]:
    frames = []
    for _, req in reqs:
        sock.sendall(req)
        frames.append(recv_frame(sock))
    return frames


@contextlib.contextmanager
def broker_log_on_failure(srv):
    """Print the broker's log (pytest shows it) when the block fails."""
    try:
        yield
    except BaseException:
        print(srv.output()[-6000:])
        raise


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def fds_on(pid: int, directory) -> int:
    """The broker's descriptors open on files in ``directory`` (deleted ones too)."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith(str(directory) + "/")
        except OSError:
            pass
    return n


def test_sendfile_answers_are_byte_identical_to_read_ones_and_tls_still_serves(fresh_server, tmp_path, topic_name):
    certs = make_certs(tmp_path / "certs")
    plain_port, ssl_port = free_port(), free_port()
    srv = fresh_server("--set", f"listeners=PLAINTEXT://127.0.0.1:{plain_port},SSL://127.0.0.1:{ssl_port}",
                       "--set", f"ssl.keystore.location={certs.server}",
                       "--set", f"ssl.truststore.location={certs.ca}", port=plain_port)
    confluent_create_topic(srv.bootstrap, topic_name, 3)
    sent = produce(srv.bootstrap, topic_name, 3, 60)
    reqs = requests_for(topic_name, topic_id(srv.bootstrap, topic_name))
    with socket.create_connection(("127.0.0.1", plain_port), timeout=15) as s:
        plain = ask_all(s, reqs)
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", ssl_port), timeout=15),
                         server_hostname="127.0.0.1") as s:
        tls = ask_all(s, reqs)  # TLS reads the regions into bytes: the pread path
    assert [len(f) for f in plain] == [len(f) for f in tls]
    assert plain == tls
    big = 0
    for (v, _), frame in zip(reqs, plain):
        resp = decode_fetch(v, frame)
        for p in resp.responses[0].partitions:
            assert p.error_code == 0 and p.records
            big += len(p.records) >= 64 * 1024
            records = batch_records(p.records)
            assert records and all(r.value == sent[p.partition_index][r.offset] for r in records)
    assert big >= 5 * len(VERSIONS)  # most answers took the sendfile path


def test_slow_reader_with_pipelined_fetches_gets_every_answer_intact_and_in_order(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, 3)
    produce(server.bootstrap, topic_name, 3, 100)
    # small answers (bytes, through the transport) fill the socket first, so large ones find
    # bytes queued in the transport (read, then written behind them); then large ones sent
    # directly wait for the socket with small ones queued behind them
    shape = [30_000] * 20 + [1 << 20] * 5 + [30_000] * 5 + [1 << 20] * 4
    reqs = [(12, fetch_frame(12, i + 1, topic_name, None, [(i % 3, (i * 7) % 90)], pmax=pmax))
            for i, pmax in enumerate(shape)]
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as s:
        expected = ask_all(s, reqs)  # one at a time, read at once
    assert sum(len(f) > 100_000 for f in expected) == 9
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.settimeout(15)
    try:
        slow.connect(("127.0.0.1", server.port))
        slow.sendall(b"".join(req for _, req in reqs))  # pipelined
        start = bytearray()
        t_end = time.monotonic() + 0.5
        while time.monotonic() < t_end:  # the broker's socket fills: partial sends, then the transport
            start.extend(slow.recv(2048))
            time.sleep(0.005)
        rest = recv_exact(slow, sum(len(f) + 4 for f in expected) - len(start))
        got = bytes(start) + rest
    finally:
        slow.close()
    want = b"".join(struct.pack(">i", len(f)) + f for f in expected)
    assert got == want


def test_half_closed_slow_client_gets_its_whole_answer_then_eof(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, 3)
    produce(server.bootstrap, topic_name, 3, 100)
    req = fetch_frame(12, 1, topic_name, None, [(0, 0), (1, 0), (2, 0)])
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as s:
        expected = ask_all(s, [(12, req)])[0]
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.settimeout(15)
    try:
        slow.connect(("127.0.0.1", server.port))
        slow.sendall(req)
        slow.shutdown(socket.SHUT_WR)  # the broker sees EOF while most of the answer is unsent
        time.sleep(0.3)
        assert recv_frame(slow) == expected
        assert slow.recv(1) == b""  # then the broker closes
    finally:
        slow.close()


def test_answer_held_behind_a_parked_fetch_keeps_the_bytes_of_a_deleted_segment(fresh_server, topic_name):
    srv = fresh_server()
    with broker_log_on_failure(srv):
        confluent_create_topic(srv.bootstrap, topic_name, 2, {"segment.bytes": "200000"})
        produce(srv.bootstrap, topic_name, 1, 60)
        seg0 = srv.data_dir / f"{topic_name}-0" / "00000000000000000000.log"
        assert seg0.exists() and len(list((srv.data_dir / f"{topic_name}-0").glob("*.log"))) > 2
        with socket.create_connection(("127.0.0.1", srv.port), timeout=15) as s:
            s.sendall(fetch_frame(12, 1, topic_name, None, [(0, 0)]))
            before = decode_fetch(12, recv_frame(s)).responses[0].partitions[0].records
        assert len(before) >= 64 * 1024
        pid = srv.proc.pid
        pdir = srv.data_dir / f"{topic_name}-0"
        with socket.create_connection(("127.0.0.1", srv.port), timeout=15) as s:
            # the steady count: the flusher holds a descriptor of a dirty file for a moment
            # (every log.flush.interval.ms), which a single sample may catch
            idle = min(_sampled(lambda: fds_on(pid, pdir), 1.2))
            # slot 1 parks (nothing past offset 0 of partition 1); slot 2 is answered at once and held behind it
            s.sendall(fetch_frame(12, 1, topic_name, None, [(1, 0)], max_wait=2500)
                      + fetch_frame(12, 2, topic_name, None, [(0, 0)]))
            wait_until(lambda: fds_on(pid, pdir) > idle, 10, what="the held answer's region (a dup'd descriptor)")
            from ..rawkafka import RawClient
            with RawClient(srv.bootstrap) as admin:
                r = admin.request(21, 2, {"topics": [{"name": topic_name, "partitions": [
                    {"partition_index": 0, "offset": 40}]}], "timeout": 5000})
                assert r.topics[0].partitions[0].error_code == 0
            wait_until(lambda: not seg0.exists(), 10, what="segment 0 deleted")
            assert decode_fetch(12, recv_frame(s)).responses[0].partitions[0].records in (None, b"")
            held = decode_fetch(12, recv_frame(s)).responses[0].partitions[0]
        assert held.records == before  # read before the deletion, sent after it from the same file
        assert held.log_start_offset == 0


def test_no_descriptor_leaks_after_many_fetches_and_abrupt_disconnects(fresh_server, topic_name):
    srv = fresh_server()
    with broker_log_on_failure(srv):
        confluent_create_topic(srv.bootstrap, topic_name, 2)
        produce(srv.bootstrap, topic_name, 1, 60)
        pid = srv.proc.pid
        with socket.create_connection(("127.0.0.1", srv.port), timeout=15) as s:  # warm up (lazy opens)
            ask_all(s, [(12, fetch_frame(12, 1, topic_name, None, [(0, 0)]))])
        pdir = srv.data_dir / f"{topic_name}-0"
        on_files = fds_on(pid, pdir)
        baseline = fd_count(pid)
        with socket.create_connection(("127.0.0.1", srv.port), timeout=15) as s:
            reqs = [(12, fetch_frame(12, i + 1, topic_name, None, [(0, i % 50)])) for i in range(100)]
            assert all(len(f) > 64 * 1024 for f in ask_all(s, reqs))
        for i in range(20):  # vanish with an answer held behind a parked fetch, or mid-answer
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=15)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset on close
            parked = fetch_frame(12, 1, topic_name, None, [(1, 0)], max_wait=1000) if i % 2 else b""
            s.sendall(parked + b"".join(fetch_frame(12, 2 + k, topic_name, None, [(0, k)]) for k in range(3)))
            if i % 2:
                time.sleep(0.05)
            s.close()
        wait_until(lambda: fds_on(pid, pdir) <= on_files, 15, what=f"descriptors on the segment files back to {on_files}")
        wait_until(lambda: fd_count(pid) <= baseline, 15, what=f"descriptors back to {baseline}")
        assert srv.proc.poll() is None


def test_real_clients_consume_large_records(server, topic_name):
    confluent_create_topic(server.bootstrap, topic_name, 2)
    sent = produce(server.bootstrap, topic_name, 2, 80)
    for consume in (confluent_consume, kafka_python_consume):
        got = consume(server.bootstrap, topic_name, 2, 160)
        by_partition = {p: [g.value for g in sorted(got, key=lambda g: g.offset) if g.partition == p]
                        for p in range(2)}
        assert by_partition == sent, consume.__name__
