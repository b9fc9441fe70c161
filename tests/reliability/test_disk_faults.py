"""Disk faults injected at the storage seam of a real broker: a broker runs in this
process on the fault-injecting engine (``hightide.log.storage_faulty``) over the real
file system, and real clients talk to it over loopback while the test turns faults on
and off: a full disk, a failing write, a failing fsync, running out of file
descriptors, failing reads, and a corrupt segment found at start-up. The broker answers
KAFKA_STORAGE_ERROR for the affected partitions only, never acknowledges what was not
written, keeps serving reads and other partitions, never crashes, and recovers (at once
when space returns; by a restart after an I/O error or a failed fsync)."""

from __future__ import annotations

import os
import resource
import socket
import struct

from pathlib import Path

import pytest

from hightide.log.storage import POSIX
from hightide.log.storage_faulty import Fault, FaultyStorage
from hightide.protocol.records import build_batch, decode_records, iter_headers

from ..integration.clients import confluent_create_topic
from ..rawkafka import RawClient
from ..waiting import wait_until
from .embedded import EmbeddedBroker

pytestmark = pytest.mark.integration

STORAGE_ERROR = 56


def _produce(c: RawClient, topic: str, partition: int, values: list[bytes]):
    batch = build_batch([(None, v, [], 1_700_000_000_000 + i) for i, v in enumerate(values)])
    r = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}]})
    p = r.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def _fetch(c: RawClient, topic: str, partition: int, offset: int = 0) -> tuple[int, list[bytes]]:
    r = c.request(1, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                          "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                              {"topic": topic, "partitions": [
                                  {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 20,
                                   "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}]}],
                          "forgotten_topics_data": [], "rack_id": ""})
    p = r.responses[0].partitions[0]
    data = p.records or b""
    return p.error_code, [rec.value for h in iter_headers(data)
                          for rec in decode_records(data[h.position:h.position + h.length + 12])]


def _log_size(data_dir, topic: str, partition: int) -> int:
    d = os.path.join(data_dir, f"{topic}-{partition}")
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".log"))


@pytest.fixture
def disk():
    """The fault-injecting engine over the real file system."""
    return FaultyStorage(POSIX)


@pytest.fixture
def faults(disk):
    """``faults(rule, ...)`` replaces the rules (dicts with Fault's fields); ``faults()``
    clears them."""

    def set_rules(*rules: dict) -> None:
        disk.set_rules(*(Fault(**r) for r in rules))

    return set_rules


@pytest.fixture
def embedded(tmp_path, disk):
    """``embedded(*settings, data_dir=None, port=0)`` starts a broker in this process on
    ``disk``; every broker started is stopped (or killed) at the end."""
    started: list[EmbeddedBroker] = []

    def make(*settings: str, data_dir=None, port: int = 0) -> EmbeddedBroker:
        b = EmbeddedBroker(data_dir or tmp_path / "data", disk, *settings, port=port)
        started.append(b)
        return b.start()

    yield make
    for b in started:
        try:
            b.stop()
        except Exception:
            b.kill()


def test_full_disk_fails_only_the_affected_partition_and_recovers(embedded, topic_name, faults):
    srv = embedded()
    confluent_create_topic(srv.bootstrap, topic_name, 2)
    with RawClient(srv.bootstrap) as c:
        assert _produce(c, topic_name, 0, [b"a0", b"a1"]) == (0, 0)
        assert _produce(c, topic_name, 1, [b"b0"]) == (0, 0)
        size = _log_size(srv.data_dir, topic_name, 0)
        # A write cut short by a full disk: half of the batch reaches the file.
        faults({"op": "write", "errno": "ENOSPC", "path": f"{topic_name}-0/", "partial": True})
        for _ in range(3):
            assert _produce(c, topic_name, 0, [b"lost" * 100] * 5) == (STORAGE_ERROR, -1)
        assert _log_size(srv.data_dir, topic_name, 0) == size, "the torn half-batch must be cut off"
        assert _produce(c, topic_name, 1, [b"b1"]) == (0, 1)  # other partitions keep working
        assert _fetch(c, topic_name, 0) == (0, [b"a0", b"a1"])  # reads keep working
        faults()  # space returns
        assert _produce(c, topic_name, 0, [b"a2"]) == (0, 2)
        assert _fetch(c, topic_name, 0) == (0, [b"a0", b"a1", b"a2"])
    out = srv.output()
    assert out.count("append failed, nothing written, log stays writable") == 1  # once per episode
    assert "appends work again" in out
    srv.stop()
    srv2 = embedded(data_dir=srv.data_dir, port=srv.port)  # nothing torn for recovery to find
    with RawClient(srv2.bootstrap) as c:
        assert _fetch(c, topic_name, 0) == (0, [b"a0", b"a1", b"a2"])
        assert _produce(c, topic_name, 0, [b"a3"]) == (0, 3)
    assert "truncated" not in srv2.output()
    assert "Traceback" not in srv.output() + srv2.output()


def test_io_error_takes_the_partition_offline_until_restart(embedded, topic_name, faults):
    srv = embedded()
    confluent_create_topic(srv.bootstrap, topic_name, 2)
    with RawClient(srv.bootstrap) as c:
        assert _produce(c, topic_name, 0, [b"a0"]) == (0, 0)
        faults({"op": "write", "errno": "EIO", "path": f"{topic_name}-0/", "partial": True, "count": 1})
        assert _produce(c, topic_name, 0, [b"x" * 300]) == (STORAGE_ERROR, -1)
        # The disk "works" again, but a log that saw EIO is not trusted until recovered.
        assert _produce(c, topic_name, 0, [b"a1"]) == (STORAGE_ERROR, -1)
        assert _produce(c, topic_name, 1, [b"b0"]) == (0, 0)
        assert _fetch(c, topic_name, 0) == (0, [b"a0"])
    assert "log is offline for appends" in srv.output()
    srv.stop()
    faults()
    srv2 = embedded(data_dir=srv.data_dir, port=srv.port)
    with RawClient(srv2.bootstrap) as c:
        assert _produce(c, topic_name, 0, [b"a1"]) == (0, 1)
        assert _fetch(c, topic_name, 0) == (0, [b"a0", b"a1"])


def test_failed_fsync_is_never_acknowledged(embedded, topic_name, faults):
    """With flush.messages=1 the answer waits for the fsync; a failed fsync answers
    KAFKA_STORAGE_ERROR and takes the partition offline (no fsync retry: Linux may have
    dropped the pages and reports the error once). Other partitions are unaffected."""
    srv = embedded()
    confluent_create_topic(srv.bootstrap, topic_name, 2, {"flush.messages": "1"})
    with RawClient(srv.bootstrap) as c:
        assert _produce(c, topic_name, 0, [b"a0"]) == (0, 0)
        faults({"op": "fsync", "errno": "EIO", "path": f"{topic_name}-0/"})
        assert _produce(c, topic_name, 0, [b"a1"]) == (STORAGE_ERROR, -1)
        faults()
        assert _produce(c, topic_name, 0, [b"a2"]) == (STORAGE_ERROR, -1)  # offline, even for retries
        assert _produce(c, topic_name, 1, [b"b0"]) == (0, 0)
        err, values = _fetch(c, topic_name, 0)
        assert err == 0 and values[0] == b"a0"
    out = srv.output()
    assert "fsync failed" in out and "log is offline for appends" in out
    srv.kill()  # an offline log would also refuse the clean-shutdown marker
    srv2 = embedded(data_dir=srv.data_dir, port=srv.port)
    with RawClient(srv2.bootstrap) as c:
        err, base = _produce(c, topic_name, 0, [b"a3"])
        assert err == 0 and base in (1, 2)  # a1 was written to the page cache, never acknowledged
        assert _fetch(c, topic_name, 0)[1][0] == b"a0"


def test_out_of_file_descriptors_is_survived(embedded, fresh_server, topic_name, faults, monkeypatch):
    """EMFILE when opening a segment (new topic, or a roll) answers KAFKA_STORAGE_ERROR
    and the log is opened once descriptors are back; EMFILE on accept (the real limit,
    set low for a ``hightide serve`` process) is logged and accepting resumes once
    connections close."""
    srv = embedded("log.segment.bytes=2000")
    with RawClient(srv.bootstrap) as c:
        faults({"op": "open", "errno": "EMFILE", "path": f"{topic_name}-"})
        confluent_create_topic(srv.bootstrap, topic_name, 1)
        assert _produce(c, topic_name, 0, [b"a0"]) == (STORAGE_ERROR, -1)
        assert _fetch(c, topic_name, 0)[0] == STORAGE_ERROR
        faults()
        # the broker retries the open at most once a second
        wait_until(lambda: _produce(c, topic_name, 0, [b"a0"]) == (0, 0), 10, what="the log opens again")
        faults({"op": "open", "errno": "EMFILE", "path": f"{topic_name}-"})
        errors = {_produce(c, topic_name, 0, [b"y" * 900])[0] for _ in range(4)}  # forces a roll
        assert errors == {0, STORAGE_ERROR}
        faults()
        err, base = _produce(c, topic_name, 0, [b"z"])
        assert err == 0
        assert _fetch(c, topic_name, 0, base)[1] == [b"z"]
    assert "cannot open the log of" in srv.output()
    srv.stop()
    assert "Traceback" not in srv.output()

    def low_fd_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))

    import subprocess
    real_popen = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **kw: real_popen(*a, preexec_fn=low_fd_limit, **kw))
    srv2 = fresh_server(data_dir=Path(srv.data_dir), port=srv.port)
    monkeypatch.setattr(subprocess, "Popen", real_popen)
    socks = []
    for _ in range(100):  # more than the broker has descriptors for
        s = socket.create_connection(("127.0.0.1", srv2.port), timeout=5)
        socks.append(s)
    wait_until(lambda: "open file descriptors at the limit" in srv2.output() or srv2.proc.poll() is not None, 5,
               what="the descriptor warning")
    assert srv2.proc.poll() is None, "the broker must survive running out of descriptors"
    assert "open file descriptors at the limit" in srv2.output()
    for s in socks:
        s.close()

    def produces() -> bool:  # accepting again (asyncio retries accept after a second)
        try:
            with RawClient(srv2.bootstrap, timeout=2) as c:
                return _produce(c, topic_name, 0, [b"after"])[0] == 0
        except (ConnectionError, OSError):
            return False

    wait_until(produces, 5, interval=0.2, what="accepting connections again")
    assert srv2.proc.poll() is None
    assert "Traceback" not in srv2.output()


def test_corrupt_segment_in_the_middle_is_truncated_with_a_warning(fresh_server, topic_name):
    """After an unclean shutdown every segment past the recovery point is scanned; a bad
    CRC in an older segment truncates it to its last valid batch, deletes the later
    segments, and says so in WARNING lines naming the file and offset."""
    srv = fresh_server("--set", "log.segment.bytes=4000", "--set", "log.flush.interval.ms=3600000")
    confluent_create_topic(srv.bootstrap, topic_name, 1)
    with RawClient(srv.bootstrap) as c:
        for i in range(30):
            assert _produce(c, topic_name, 0, [b"%03d" % i + b"v" * 400]) == (0, i)
    srv.kill9()
    d = os.path.join(srv.data_dir, f"{topic_name}-0")
    logs = sorted(f for f in os.listdir(d) if f.endswith(".log"))
    assert len(logs) >= 3
    first = os.path.join(d, logs[0])
    with open(first, "rb") as f:
        data = f.read()
    pos = 0
    batches = []
    while pos < len(data):
        batches.append(pos)
        pos += struct.unpack_from(">i", data, pos + 8)[0] + 12
    bad = batches[2]  # the third batch of the first segment
    with open(first, "r+b") as f:
        f.seek(bad + 70)
        f.write(b"\xff\xfe")
    srv2 = fresh_server(data_dir=srv.data_dir, port=srv.port)
    out = srv2.output()
    assert f"at offset 2 of {first}" in out and "WARNING" in out
    assert "deleting segment" in out
    with RawClient(srv2.bootstrap) as c:
        assert [v[:3] for v in _fetch(c, topic_name, 0)[1]] == [b"000", b"001"]
        assert _produce(c, topic_name, 0, [b"next"]) == (0, 2)


def test_append_is_all_or_nothing_in_process(tmp_path, disk, faults):
    """The log layer itself (no broker): a torn multi-batch write leaves the file, the
    indexes, the offsets and the producer state exactly as before; a full disk keeps
    the log writable, an I/O error takes it offline."""
    from hightide.log.config import LogConfig
    from hightide.log.partition_log import LogOffline, PartitionLog
    from hightide.protocol.records import validate_batches

    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig.from_kafka({"index.interval.bytes": "100"}), 0,
                             clean_shutdown=False, storage=disk)

    def append(n: int, seq: int):
        buf = b"".join(build_batch([(None, b"v" * 200, [], 1000 + seq + i)], producer_id=7, producer_epoch=0,
                                   base_sequence=seq + i) for i in range(n))
        return plog.append(buf, validate_batches(buf, client_origin=False), 0)

    assert append(3, 0).last_offset == 2
    seg = plog.segments[-1]
    before = (os.path.getsize(seg.log_path), len(seg.offset_index), seg.max_timestamp, plog.log_end_offset)
    faults({"op": "write", "errno": "ENOSPC", "partial": True})
    with pytest.raises(OSError):
        append(4, 3)
    assert (os.path.getsize(seg.log_path), len(seg.offset_index), seg.max_timestamp, plog.log_end_offset) == before
    faults()
    assert append(4, 3).base_offset == 3  # the same sequence numbers are accepted: state untouched
    faults({"op": "write", "errno": "EIO"})
    with pytest.raises(OSError):
        append(1, 7)
    faults()
    with pytest.raises(LogOffline):
        append(1, 7)
    assert plog.read(0, 1 << 20).data  # reads still work


def test_failing_read_answers_storage_error_for_that_partition_only(embedded, topic_name, faults):
    srv = embedded()
    confluent_create_topic(srv.bootstrap, topic_name, 2)
    with RawClient(srv.bootstrap) as c:
        assert _produce(c, topic_name, 0, [b"a0"]) == (0, 0)
        assert _produce(c, topic_name, 1, [b"b0"]) == (0, 0)
        faults({"op": "read", "errno": "EIO", "path": f"{topic_name}-0/"})
        assert _fetch(c, topic_name, 0) == (STORAGE_ERROR, [])
        assert _fetch(c, topic_name, 1) == (0, [b"b0"])
        assert _produce(c, topic_name, 0, [b"a1"]) == (0, 1)  # writes are not reads
        faults()
        assert _fetch(c, topic_name, 0) == (0, [b"a0", b"a1"])
    assert "Traceback" not in srv.output()
