"""More partitions than the broker has file descriptors (issue 33): a ``hightide serve``
limited to 256 descriptors (soft = hard, so it cannot raise them) holds 1,000 partitions
(more files than descriptors) behind its descriptor cache: every create, produce, fetch and
Metadata request is answered, a kill -9 and restart on that data directory serves every
record again, and the process never has more descriptors open than its limit allows."""

from __future__ import annotations

import os
import resource
import subprocess

import pytest

from hightide.protocol.records import build_batch, decode_records, iter_headers

from ..conftest import ServerProcess
from ..rawkafka import RawClient

pytestmark = pytest.mark.integration

LIMIT = 256
TOPICS, PARTITIONS = 10, 100


def _limited(monkeypatch: pytest.MonkeyPatch) -> None:
    def low_fd_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))

    real_popen = subprocess.Popen
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **kw: real_popen(*a, preexec_fn=low_fd_limit, **kw))


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _produce_all(c: RawClient, topic: str) -> list[int]:
    parts = [{"index": p, "records": build_batch([(None, f"{topic}/{p}".encode(), [], 1_700_000_000_000)])}
             for p in range(PARTITIONS)]
    r = c.request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 30_000,
                         "topic_data": [{"name": topic, "partition_data": parts}]})
    return [p.error_code for p in r.responses[0].partition_responses]


def _fetch_all(c: RawClient, topic: str) -> dict[int, list[bytes]]:
    r = c.request(1, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 64 << 20,
                          "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                              {"topic": topic, "partitions": [
                                  {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 16,
                                   "current_leader_epoch": -1, "log_start_offset": -1, "last_fetched_epoch": -1}
                                  for p in range(PARTITIONS)]}],
                          "forgotten_topics_data": [], "rack_id": ""})
    out = {}
    for p in r.responses[0].partitions:
        assert p.error_code == 0, (topic, p.partition_index, p.error_code)
        data = p.records or b""
        out[p.partition_index] = [rec.value for h in iter_headers(data)
                                  for rec in decode_records(data[h.position:h.position + h.length + 12])]
    return out


def _metadata_partitions(c: RawClient) -> int:
    r = c.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    assert all(t.error_code == 0 for t in r.topics)
    return sum(len(t.partitions) for t in r.topics)


def _check_everything(srv) -> None:
    with RawClient(srv.bootstrap, timeout=60) as c:
        assert _metadata_partitions(c) == TOPICS * PARTITIONS
        for t in range(TOPICS):
            got = _fetch_all(c, f"t{t}")
            assert got == {p: [f"t{t}/{p}".encode()] for p in range(PARTITIONS)}
        assert _fds(srv.proc.pid) < LIMIT


@pytest.fixture
def started():
    servers: list[ServerProcess] = []
    yield servers
    for s in servers:
        if s.proc and s.proc.poll() is None:
            s.stop()


def test_partitions_beyond_the_descriptor_limit(tmp_path, monkeypatch, started):
    _limited(monkeypatch)
    srv = ServerProcess(tmp_path / "data").start(timeout=60)
    started.append(srv)
    with RawClient(srv.bootstrap, timeout=120) as c:
        for t in range(TOPICS):
            r = c.request(19, 5, {"topics": [{"name": f"t{t}", "num_partitions": PARTITIONS, "replication_factor": 1,
                                             "assignments": [], "configs": []}],
                                  "timeout": 60_000, "validate_only": False})
            assert r.topics[0].error_code == 0, r.topics[0]
        for t in range(TOPICS):
            assert _produce_all(c, f"t{t}") == [0] * PARTITIONS
        assert _fds(srv.proc.pid) < LIMIT
    assert sum(len(files) for _, _, files in os.walk(srv.data_dir)) > 3 * LIMIT  # (index files are created lazily)
    _check_everything(srv)
    srv.kill9()

    srv2 = ServerProcess(srv.data_dir, srv.port).start(timeout=120)  # opens every log before listening
    started.append(srv2)
    _check_everything(srv2)
    out = srv2.output()
    assert "up to 16 partition files kept open" in out, out[-2000:]
    assert "Too many open files" not in out and "Traceback" not in out
