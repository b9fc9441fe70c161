"""Issue 11 defect 2, end to end over the wire: with ``log.flush.interval.messages=1`` an
OffsetCommit is answered only after the fsync of ``__consumer_offsets`` (and OffsetFetch
does not see the offset meanwhile); a failed fsync answers an error and the offset never
becomes visible. The same for the share coordinator: a WriteShareGroupState whose fsync
fails answers KAFKA_STORAGE_ERROR and a following ReadShareGroupState does not return the
lost state.

The broker runs embedded on its own event-loop thread; the fsync worker is held back (or
made to fail) by wrapping the flusher's ``run_flush`` once the test arms it.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid

import pytest

from hightide import Broker, BrokerConfig
from hightide.disk import flusher as flusher_mod
from tests.rawkafka import RawClient
from tests.waiting import wait_until

NONE, NOT_COORDINATOR, KAFKA_STORAGE_ERROR = 0, 16, 56


class FsyncGate:
    """Once armed, every fsync job waits for ``release`` and then fails if ``fail``."""

    def __init__(self) -> None:
        self.armed = False
        self.fail = False
        self.waiting = threading.Event()
        self.release = threading.Event()

    def wrap(self, run_flush):
        def gated(job):
            if self.armed:
                self.waiting.set()
                self.release.wait(30)
                if self.fail:
                    raise OSError(5, "Input/output error (injected)")
            return run_flush(job)
        return gated


@pytest.fixture
def broker(tmp_path, monkeypatch):
    gate = FsyncGate()
    monkeypatch.setattr(flusher_mod, "run_flush", gate.wrap(flusher_mod.run_flush))
    loop = asyncio.new_event_loop()
    b = Broker(BrokerConfig.load(overrides={"log.flush.interval.messages": 1,
                                            "offsets.topic.num.partitions": 1,
                                            "share.coordinator.state.topic.num.partitions": 1}),
               data_dir=str(tmp_path), listen=("127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(b.start(), loop).result(30)
    try:
        yield b, gate
    finally:
        gate.release.set()
        asyncio.run_coroutine_threadsafe(b.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _client(b: Broker) -> RawClient:
    return RawClient(f"127.0.0.1:{b.port}")


def _create_topic(c: RawClient, name: str) -> uuid.UUID:
    resp = c.request(19, 7, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                         "assignments": [], "configs": []}],
                             "timeout": 10_000, "validate_only": False})
    assert resp.topics[0].error_code == NONE
    return resp.topics[0].topic_id


def _offset_commit_body(offset: int) -> dict:
    return {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


def _fetched(c: RawClient) -> int:
    resp = c.request(9, 7, {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}],
                            "require_stable": False})
    assert resp.error_code == NONE
    return resp.topics[0].partitions[0].committed_offset


def _answered(c: RawClient, timeout: float) -> bool:
    c.sock.settimeout(timeout)
    try:
        return bool(c.sock.recv(1, socket.MSG_PEEK))
    except socket.timeout:
        return False
    finally:
        c.sock.settimeout(10)


@pytest.mark.parametrize("fsync_fails", [False, True], ids=["fsync-ok", "fsync-fails"])
def test_offset_commit_is_answered_after_the_fsync(broker, fsync_fails):
    b, gate = broker
    with _client(b) as admin, _client(b) as committer, _client(b) as reader:
        _create_topic(admin, "t")
        coordinator = reader.request(10, 3, {"key": "g", "key_type": 0})  # creates __consumer_offsets
        assert coordinator.error_code == NONE
        assert _fetched(reader) == -1
        gate.fail, gate.armed = fsync_fails, True
        committer.request(8, 8, _offset_commit_body(42), expect_response=False)
        assert gate.waiting.wait(10), "the commit never asked for an fsync"
        assert not _answered(committer, 0.3), "OffsetCommit answered before its fsync completed"
        assert _fetched(reader) == -1, "OffsetFetch returned an offset that is not durable yet"
        gate.release.set()
        resp = committer.decode_response(8, 8, committer.recv_frame())
        code = resp.topics[0].partitions[0].error_code
        if fsync_fails:
            assert code == NOT_COORDINATOR
            assert _fetched(reader) == -1  # never visible: it may be lost
        else:
            assert code == NONE
            assert _fetched(reader) == 42


def _write_state(c: RawClient, tid: uuid.UUID, start_offset: int) -> int:
    resp = c.request(85, 1, {"group_id": "sg", "topics": [{"topic_id": tid, "partitions": [{
        "partition": 0, "state_epoch": 1, "leader_epoch": 0, "start_offset": start_offset,
        "delivery_complete_count": 0, "state_batches": []}]}]})
    return resp.results[0].partitions[0].error_code


def _read_state(c: RawClient, tid: uuid.UUID):
    resp = c.request(84, 0, {"group_id": "sg", "topics": [{"topic_id": tid, "partitions": [
        {"partition": 0, "leader_epoch": 0}]}]})
    return resp.results[0].partitions[0]


def test_share_state_lost_by_a_failed_fsync_is_never_read(broker):
    b, gate = broker
    with _client(b) as c:
        tid = _create_topic(c, "t")
        resp = c.request(83, 0, {"group_id": "sg", "topics": [{"topic_id": tid, "partitions": [
            {"partition": 0, "state_epoch": 1, "start_offset": 5}]}]})
        assert resp.results[0].partitions[0].error_code == NONE
        assert _read_state(c, tid).start_offset == 5
        gate.fail, gate.armed = True, True
        gate.release.set()
        assert _write_state(c, tid, 100) == KAFKA_STORAGE_ERROR
        state = _read_state(c, tid)
        assert state.start_offset != 100, "ReadShareGroupState returned state whose fsync failed"
        wait_until(lambda: not b.flusher._requested, 5, what="the flusher to settle")
