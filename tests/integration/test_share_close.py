"""Closing a share consumer (issue 12 item 12): the client sends its leave heartbeat first
and its final-epoch ShareAcknowledge/ShareFetch after. As in Kafka, leaving the group does
not end the share session (only the final epoch or the connection does), so the final
request must find the session, however long after the leave the broker's departed-member
check ran; what the departed member held is still released at once."""

from __future__ import annotations

import logging
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from hightide.coordinator.share_partitions import _MEMBER_CHECK_TICKS, LOCK_TIMER_INTERVAL_S

from ..rawkafka import RawClient
from .test_share_consumer import _ack, _fetch, _hb, _setup

sc = pytest.importorskip("confluent_kafka")

# The broker looks for departed members once per this period (share_manager.run_timers).
DEPARTED_CHECK_PERIOD_S = LOCK_TIMER_INTERVAL_S * _MEMBER_CHECK_TICKS


def _leave(c: RawClient, group: str, member: str) -> None:
    r = c.request(76, 1, {"group_id": group, "member_id": member, "member_epoch": -1, "rack_id": None,
                          "subscribed_topic_names": None})
    assert r.error_code == ErrorCode.none, r.error_message
    assert r.member_epoch == -1


def _after_departed_check() -> None:
    """Let the broker's departed-member check run at least once (a timer with no
    observable event of its own when nothing is held: the wait is its period, twice)."""
    time.sleep(2 * DEPARTED_CHECK_PERIOD_S)


def test_final_share_acknowledge_after_leave_finds_the_session(server, topic_name):
    group, tid = _setup(server.bootstrap, topic_name, 10)
    m1, m2 = str(uuid.uuid4()), str(uuid.uuid4())
    with RawClient(server.bootstrap) as c:
        _hb(c, group, m1, topic_name)
        _hb(c, group, m2, topic_name)
        r = _fetch(c, group, m1, 0, tid)
        assert r.error_code == ErrorCode.none
        assert [(a.first_offset, a.last_offset) for a in r.responses[0].partitions[0].acquired_records] == [(0, 9)]
        assert _fetch(c, group, m2, 0, tid).error_code == ErrorCode.none
        _leave(c, group, m1)
        # what the departed member held is released promptly: m2 gets it (delivery count 2)
        got = _fetch(c, group, m2, 1, None, max_wait=5000).responses  # long poll: woken by the release
        assert [(a.first_offset, a.last_offset, a.delivery_count)
                for a in got[0].partitions[0].acquired_records] == [(0, 9, 2)]
        _after_departed_check()
        # the client's last request, after its leave: the session is still there
        a = _ack(c, group, m1, -1, tid, [])
        assert a.error_code == ErrorCode.none, a.error_message
        # and it is gone now: another final request finds nothing
        assert _ack(c, group, m1, -1, tid, []).error_code == ErrorCode.share_session_not_found


def test_final_share_fetch_after_leave_finds_the_session(server, topic_name):
    group, tid = _setup(server.bootstrap, topic_name, 0)
    m = str(uuid.uuid4())
    with RawClient(server.bootstrap) as c:
        _hb(c, group, m, topic_name)
        assert _fetch(c, group, m, 0, tid).error_code == ErrorCode.none
        _leave(c, group, m)
        _after_departed_check()
        r = _fetch(c, group, m, -1, None)
        assert r.error_code == ErrorCode.none, r.error_message
        # a departed member cannot go on fetching with its session
        assert _fetch(c, group, m, 2, None).error_code == ErrorCode.unknown_member_id


def test_share_consumer_that_received_nothing_closes_quietly(server, topic_name):
    """librdkafka's ShareConsumer: subscribe, poll nothing, close; nothing it logs may say
    the broker lost its share session."""
    group, _ = _setup(server.bootstrap, topic_name, 0)
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger(f"rdkafka-{group}")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Collect())
    c = sc.ShareConsumer({"bootstrap.servers": server.bootstrap, "group.id": group, "logger": logger,
                          "debug": "cgrp,fetch,protocol"})
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 3 * DEPARTED_CHECK_PERIOD_S
        while time.monotonic() < deadline:  # joined, share session open, nothing to receive
            assert list(c.poll(0.2)) == []
    finally:
        c.close()
    text = "\n".join(r.getMessage() for r in records)
    assert "ShareFetch" in text or "ShareAcknowledge" in text, text[-3000:]  # the log was captured
    lost = [r.getMessage() for r in records if "SHARE_SESSION_NOT_FOUND" in r.getMessage().upper()
            or "share session was not found" in r.getMessage().lower()]
    assert not lost, lost
