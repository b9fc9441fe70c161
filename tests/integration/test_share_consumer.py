"""Share groups end to end with confluent-kafka's ``ShareConsumer`` (librdkafka's KIP-932
client): several consumers on one partition, acknowledgement types, delivery counts, lock
expiry, a broker restart; plus raw ShareFetch/ShareAcknowledge error codes."""

from __future__ import annotations

import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from ..rawkafka import RawClient
from ..waiting import wait_until
from .clients import confluent_create_topic

sc = pytest.importorskip("confluent_kafka")
ShareConsumer = sc.ShareConsumer
AcknowledgeType = sc.AcknowledgeType

GROUP_RESOURCE = 32
ARCHIVED, ACKNOWLEDGED, AVAILABLE = 4, 2, 0


def _group(c: RawClient, group: str, **configs: str) -> None:
    r = c.request(44, 1, {"resources": [{"resource_type": GROUP_RESOURCE, "resource_name": group, "configs": [
        {"name": k.replace("_", "."), "config_operation": 0, "value": v} for k, v in configs.items()]}],
        "validate_only": False}).responses[0]
    assert r.error_code == ErrorCode.none, r.error_message


def _topic_id(c: RawClient, topic: str):
    r = c.request(3, 12, {"topics": [{"name": topic, "topic_id": None}], "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    return r.topics[0].topic_id


def _state(c: RawClient, group: str, tid, partition: int = 0):
    r = c.request(84, 0, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
        {"partition": partition, "leader_epoch": 0}]}]})
    return r.results[0].partitions[0]


def _summary(c: RawClient, group: str, tid, partition: int = 0):
    r = c.request(87, 1, {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
        {"partition": partition, "leader_epoch": 0}]}]})
    return r.results[0].partitions[0]


def _states_by_offset(st) -> dict[int, tuple[int, int]]:
    out = {}
    for b in st.state_batches:
        for o in range(b.first_offset, b.last_offset + 1):
            out[o] = (b.delivery_state, b.delivery_count)
    return out


def _produce(bootstrap: str, topic: str, n: int, batch: int = 10_000) -> None:
    """n records in batches of at most ``batch`` (linger 50 ms)."""
    p = sc.Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "acks": "all", "batch.num.messages": batch})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), partition=0)
    assert p.flush(30) == 0


def _consumer(bootstrap: str, group: str, explicit: bool = False) -> ShareConsumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    return ShareConsumer(conf)


def _setup(bootstrap: str, topic: str, n: int, batch: int = 10_000, **group_configs: str) -> tuple[str, object]:
    group = f"sg-{uuid.uuid4().hex[:8]}"
    confluent_create_topic(bootstrap, topic, 1)
    with RawClient(bootstrap) as c:
        _group(c, group, share_auto_offset_reset="earliest", **group_configs)
        tid = _topic_id(c, topic)
    if n:
        _produce(bootstrap, topic, n, batch)
    return group, tid


def _poll_all(consumers, until, timeout: float = 30.0, on_message=None):
    """Round-robin poll until ``until()``; returns [(consumer index, message)]."""
    got = []
    deadline = time.monotonic() + timeout
    while not until() and time.monotonic() < deadline:
        for i, c in enumerate(consumers):
            for m in c.poll(0.2):
                assert m.error() is None, m.error()
                got.append((i, m))
                if on_message:
                    on_message(i, c, m)
    return got


def test_three_consumers_share_one_partition_every_record_once(server, topic_name):
    group, tid = _setup(server.bootstrap, topic_name, 3000, batch=20)
    consumers = [_consumer(server.bootstrap, group) for _ in range(3)]
    try:
        for c in consumers:
            c.subscribe([topic_name])
        seen: list[int] = []
        got = _poll_all(consumers, lambda: len(set(seen)) >= 3000,
                        on_message=lambda i, c, m: seen.append(m.offset()))
        assert sorted(seen) == list(range(3000))  # every record, once
        assert all(m.delivery_count() == 1 for _, m in got)
        per_consumer = [sum(1 for i, _ in got if i == k) for k in range(3)]
        assert all(n > 0 for n in per_consumer), per_consumer  # the partition is shared
        for c in consumers:
            c.commit_sync()  # implicit mode: the last poll's records are accepted
    finally:
        for c in consumers:
            c.close()
    with RawClient(server.bootstrap) as raw:
        s = wait_until(lambda: (s := _summary(raw, group, tid)).start_offset == 3000 and s, timeout=10, interval=0.1,
                       what="the share partition's start offset to reach 3000")
        assert (s.error_code, s.start_offset, s.delivery_complete_count) == (0, 3000, 0)  # lag 0


def test_release_redelivers_reject_and_limit_archive(server, topic_name):
    group, tid = _setup(server.bootstrap, topic_name, 20, share_delivery_count_limit="2")
    a = _consumer(server.bootstrap, group, explicit=True)
    b = _consumer(server.bootstrap, group, explicit=True)
    deliveries: dict[int, list[int]] = {}

    def decide(i, c, m):
        off, n = m.offset(), m.delivery_count()
        deliveries.setdefault(off, []).append(n)
        if off < 5:
            c.acknowledge(m, AcknowledgeType.REJECT)
        elif off < 10:
            c.acknowledge(m, AcknowledgeType.RELEASE)  # redelivered once, then archived (limit 2)
        elif off < 15 and n == 1:
            c.acknowledge(m, AcknowledgeType.RELEASE)
        else:
            c.acknowledge(m, AcknowledgeType.ACCEPT)

    def done() -> bool:
        return all(len(deliveries.get(o, ())) == (2 if 5 <= o < 15 else 1) for o in range(20))

    try:
        a.subscribe([topic_name])
        b.subscribe([topic_name])
        _poll_all([a, b], done, on_message=decide)
        for c in (a, b):
            c.commit_sync()
        assert done(), deliveries
        assert all(deliveries[o] == [1, 2] for o in range(5, 15))
        time.sleep(0.5)  # fixed: an absence is checked over a time span (the poll below adds 1 s more)
        assert not _poll_all([a, b], lambda: False, timeout=1.0)  # archived records never come back
    finally:
        a.close()
        b.close()
    with RawClient(server.bootstrap) as raw:
        s = _summary(raw, group, tid)
        assert (s.start_offset, s.delivery_complete_count) == (20, 0)


def test_lock_expiry_redelivers_to_another_consumer(fresh_server, topic_name):
    srv = fresh_server("--set", "group.share.min.record.lock.duration.ms=1000",
                       "--set", "group.share.record.lock.duration.ms=1000")
    group, _ = _setup(srv.bootstrap, topic_name, 10)
    a = _consumer(srv.bootstrap, group, explicit=True)
    a.subscribe([topic_name])
    held_offsets: set[int] = set()
    held = _poll_all([a], lambda: bool(held_offsets), on_message=lambda i, c, m: held_offsets.add(m.offset()))
    assert held and all(m.delivery_count() == 1 for _, m in held)
    b = _consumer(srv.bootstrap, group)
    try:
        b.subscribe([topic_name])
        again: dict[int, int] = {}
        _poll_all([b], lambda: held_offsets <= set(again), timeout=20,
                  on_message=lambda i, c, m: again.__setitem__(m.offset(), m.delivery_count()))
        assert held_offsets <= set(again)
        assert all(again[o] == 2 for o in held_offsets)  # a's lock expired; b gets them, 2nd delivery
        b.commit_sync()
    finally:
        b.close()
        a.close()


def test_restart_keeps_state_and_lag(fresh_server, tmp_path, topic_name):
    srv = fresh_server()
    group, tid = _setup(srv.bootstrap, topic_name, 100)
    a = _consumer(srv.bootstrap, group, explicit=True)
    accepted: set[int] = set()

    def ack_some(i, c, m):
        o = m.offset()
        if o < 60 or o % 10 == 0:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
            accepted.add(o)
        else:
            c.acknowledge(m, AcknowledgeType.RELEASE)

    try:
        a.subscribe([topic_name])
        seen: set[int] = set()
        _poll_all([a], lambda: len(seen) >= 100, on_message=lambda i, c, m: (seen.add(m.offset()), ack_some(i, c, m)))
        a.commit_sync()
    finally:
        a.close()
    with RawClient(srv.bootstrap) as raw:
        before = _state(raw, group, tid)
        lag_before = 100 - before.start_offset - _summary(raw, group, tid).delivery_complete_count
    # oracle: undone = records never accepted (60..99 minus multiples of 10 released: state AVAILABLE)
    undone = {o for o in range(100) if o not in accepted}
    assert lag_before == len(undone) == 36
    assert before.start_offset == 61
    srv.stop()
    srv2 = fresh_server(data_dir=srv.data_dir, port=srv.port)
    with RawClient(srv2.bootstrap) as raw:
        after = _state(raw, group, tid)
        s = _summary(raw, group, tid)
        assert after.start_offset == before.start_offset
        assert _states_by_offset(after) == _states_by_offset(before)
        assert 100 - s.start_offset - s.delivery_complete_count == lag_before
        d = raw.request(90, 1, {"groups": [{"group_id": group, "topics": [
            {"topic_name": topic_name, "partitions": [0]}]}]}).groups[0].topics[0].partitions[0]
        assert (d.error_code, d.start_offset, d.lag) == (0, before.start_offset, len(undone))
    b = _consumer(srv2.bootstrap, group)
    try:
        b.subscribe([topic_name])
        got: dict[int, int] = {}
        _poll_all([b], lambda: set(got) >= undone, on_message=lambda i, c, m: got.__setitem__(m.offset(), m.delivery_count()))
        assert set(got) == undone  # only what was not accepted before the restart
        assert all(n == 2 for n in got.values())
        b.commit_sync()
    finally:
        b.close()


# -- raw ShareFetch / ShareAcknowledge --------------------------------------------------------
def _hb(c: RawClient, group: str, member: str, topic: str):
    r = c.request(76, 1, {"group_id": group, "member_id": member, "member_epoch": 0, "rack_id": None,
                          "subscribed_topic_names": [topic]})
    assert r.error_code == ErrorCode.none, r.error_message
    return r


def _fetch(c: RawClient, group, member, epoch, tid, acks=(), forget=(), max_wait=0, max_records=500, version=1,
           partitions=(0,), min_bytes=1):
    topics = [] if tid is None else [{"topic_id": tid, "partitions": [
        {"partition_index": p, "acknowledgement_batches": [
            {"first_offset": f, "last_offset": last, "acknowledge_types": list(t)} for f, last, t in acks]}
        for p in partitions]}]
    return c.request(78, version, {"group_id": group, "member_id": member, "share_session_epoch": epoch,
                                   "max_wait": max_wait, "min_bytes": min_bytes, "max_bytes": 1 << 20,
                                   "max_records": max_records, "batch_size": 100, "topics": topics,
                                   "forgotten_topics_data": forget})


def _ack(c: RawClient, group, member, epoch, tid, acks):
    return c.request(79, 1, {"group_id": group, "member_id": member, "share_session_epoch": epoch, "topics": [
        {"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": f, "last_offset": last, "acknowledge_types": list(t)} for f, last, t in acks]}]}]})


def test_raw_sessions_and_error_codes(server, topic_name):
    group, tid = _setup(server.bootstrap, topic_name, 10)
    m1, m2 = str(uuid.uuid4()), str(uuid.uuid4())
    with RawClient(server.bootstrap) as c:
        _hb(c, group, m1, topic_name)
        _hb(c, group, m2, topic_name)
        assert _fetch(c, group, "stranger", 0, tid).error_code == ErrorCode.unknown_member_id
        assert _fetch(c, group, m1, 1, tid).error_code == ErrorCode.share_session_not_found
        assert _fetch(c, group, m1, 0, tid, acks=[(0, 0, (1,))]).error_code == ErrorCode.invalid_request
        r = _fetch(c, group, m1, 0, tid, max_records=4)
        assert r.error_code == ErrorCode.none
        p = r.responses[0].partitions[0]
        assert r.acquisition_lock_timeout.total_seconds() == 30
        # whole batches: the producer wrote one batch of 10, max_records 4 still gets the batch
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records] == [(0, 9, 1)]
        assert p.records is not None and len(p.records) > 61
        assert _fetch(c, group, m1, 5, tid).error_code == ErrorCode.invalid_share_session_epoch
        # m2 may not acknowledge m1's records; m2 has no session yet
        assert _ack(c, group, m2, 1, tid, [(0, 0, (1,))]).error_code == ErrorCode.share_session_not_found
        assert _fetch(c, group, m2, 0, tid).responses[0].partitions[0].acquired_records == ()
        a = _ack(c, group, m2, 1, tid, [(0, 0, (1,))])
        assert a.error_code == 0 and a.responses[0].partitions[0].error_code == ErrorCode.invalid_record_state
        # malformed batch -> INVALID_REQUEST for the partition
        a = _ack(c, group, m1, 1, tid, [(3, 1, (1,))])
        assert a.responses[0].partitions[0].error_code == ErrorCode.invalid_request
        # release 0-4 and accept 5-9 piggy-backed on the next fetch: 0-4 come back, delivery count 2
        r = _fetch(c, group, m1, 2, tid, acks=[(0, 9, (2, 2, 2, 2, 2, 1, 1, 1, 1, 1))])
        p = r.responses[0].partitions[0]
        assert p.acknowledge_error_code == 0
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records] == [(0, 4, 2)]
        # incremental fetch with nothing new answers no partitions; forgetting the topic empties the session
        r = _fetch(c, group, m1, 3, None)
        assert r.error_code == 0 and r.responses == ()
        r = _fetch(c, group, m1, 4, None, forget=[{"topic_id": tid, "partitions": [0]}])
        assert r.responses == ()
        # closing the session (final epoch) releases what m1 holds: m2 gets 0-4 with delivery count 3
        assert _ack(c, group, m1, -1, tid, []).error_code == 0
        r = _fetch(c, group, m2, 2, None, max_wait=2000)  # its ShareAcknowledge used epoch 1
        assert r.error_code == 0
        p = r.responses[0].partitions[0]
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records] == [(0, 4, 3)]


def test_raw_long_poll_wakes_on_produce(server, topic_name):
    group, tid = _setup(server.bootstrap, topic_name, 0)
    m = str(uuid.uuid4())
    with RawClient(server.bootstrap) as c:
        _hb(c, group, m, topic_name)
        r = _fetch(c, group, m, 0, tid)
        assert r.responses[0].partitions[0].acquired_records == ()
        t0 = time.monotonic()
        r = _fetch(c, group, m, 1, None, max_wait=500)
        assert r.responses == () and time.monotonic() - t0 >= 0.45
        import threading
        threading.Timer(0.3, lambda: _produce(server.bootstrap, topic_name, 1)).start()
        t0 = time.monotonic()
        r = _fetch(c, group, m, 2, None, max_wait=10_000)
        assert time.monotonic() - t0 < 8
        p = r.responses[0].partitions[0]
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records] == [(0, 0, 1)]
        # MinBytes not reached: the records stay acquired and come back when MaxWaitMs runs out
        _produce(server.bootstrap, topic_name, 1)
        t0 = time.monotonic()
        r = _fetch(c, group, m, 3, None, max_wait=600, min_bytes=1 << 20)
        assert time.monotonic() - t0 >= 0.55
        p = r.responses[0].partitions[0]
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records] == [(1, 1, 1)]


def test_raw_v2_record_limit_mode_and_renew(server, topic_name):
    group, tid = _setup(server.bootstrap, topic_name, 10)
    m = str(uuid.uuid4())
    with RawClient(server.bootstrap) as c:
        _hb(c, group, m, topic_name)
        r = c.request(78, 2, {"group_id": group, "member_id": m, "share_session_epoch": 0, "max_wait": 0,
                              "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 4, "batch_size": 4,
                              "share_acquire_mode": 1, "is_renew_ack": False, "forgotten_topics_data": [],
                              "topics": [{"topic_id": tid, "partitions": [
                                  {"partition_index": 0, "acknowledgement_batches": []}]}]})
        p = r.responses[0].partitions[0]
        assert [(a.first_offset, a.last_offset) for a in p.acquired_records] == [(0, 3)]  # cut inside the batch

        def ack(version, epoch, types, renew):
            body = {"group_id": group, "member_id": m, "share_session_epoch": epoch, "topics": [
                {"topic_id": tid, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": 0, "last_offset": 3, "acknowledge_types": types}]}]}]}
            if version >= 2:
                body["is_renew_ack"] = renew
            return c.request(79, version, body).responses[0].partitions[0].error_code

        assert ack(1, 1, [4], False) == ErrorCode.invalid_request  # RENEW needs v2 + IsRenewAck
        assert ack(2, 2, [4], True) == 0  # lock renewed, records still held
        assert ack(2, 3, [1], False) == 0


def test_raw_full_window_long_poll_wakes_when_acks_make_room(server, topic_name):
    group, tid = _setup(server.bootstrap, topic_name, 200, batch=50, share_partition_max_record_locks="100")
    m1, m2 = str(uuid.uuid4()), str(uuid.uuid4())
    with RawClient(server.bootstrap) as c1, RawClient(server.bootstrap) as c2:
        _hb(c1, group, m1, topic_name)
        _hb(c2, group, m2, topic_name)
        p = _fetch(c1, group, m1, 0, tid, max_records=1000).responses[0].partitions[0]
        assert [(a.first_offset, a.last_offset) for a in p.acquired_records] == [(0, 99)]  # the window is full
        import threading
        out = {}

        def m2_fetch():
            t0 = time.monotonic()
            out["r"] = _fetch(c2, group, m2, 0, tid, max_wait=10_000)
            out["s"] = time.monotonic() - t0

        th = threading.Thread(target=m2_fetch)
        th.start()
        time.sleep(0.5)  # fixed: that the fetch stays parked is an absence, checked over a time span
        assert "r" not in out  # parked: nothing can be acquired
        assert _ack(c1, group, m1, 1, tid, [(0, 99, (1,))]).responses[0].partitions[0].error_code == 0
        th.join(10)
        p = out["r"].responses[0].partitions[0]
        assert [(a.first_offset, a.last_offset) for a in p.acquired_records] == [(100, 199)]
        assert out["s"] < 5


def test_compacted_offsets_are_archived_and_lag_reaches_zero(fresh_server, topic_name):
    """Offsets compacted away are never delivered; those inside a kept batch come back from the
    client as GAP acknowledgements, the rest are archived by the broker, and the share
    partition ends with nothing left (lag 0)."""
    srv = fresh_server("--set", "log.cleaner.backoff.ms=200")
    group = f"sg-{uuid.uuid4().hex[:8]}"
    confluent_create_topic(srv.bootstrap, topic_name, 1, {
        "cleanup.policy": "compact", "segment.bytes": "1500", "min.cleanable.dirty.ratio": "0.01"})
    p = sc.Producer({"bootstrap.servers": srv.bootstrap, "linger.ms": 0, "batch.size": 200})
    for i in range(200):
        p.produce(topic_name, key=f"k{i % 10}".encode(), value=f"v{i}".encode())
        p.poll(0)
    assert p.flush(10) == 0
    wait_until(lambda: "cleaned" in srv.output(), what="the cleaner's first pass")
    with RawClient(srv.bootstrap) as raw:
        _group(raw, group, share_auto_offset_reset="earliest")
        tid = _topic_id(raw, topic_name)
    c = _consumer(srv.bootstrap, group)
    try:
        c.subscribe([topic_name])
        seen: list[int] = []
        _poll_all([c], lambda: bool(seen) and seen[-1] == 199, timeout=20,
                  on_message=lambda i, cc, m: seen.append(m.offset()))
        c.commit_sync()
    finally:
        c.close()
    assert len(seen) == len(set(seen)) < 200  # compacted records are not delivered
    with RawClient(srv.bootstrap) as raw:
        s = wait_until(lambda: (s := _summary(raw, group, tid)).start_offset == 200 and s, timeout=10, interval=0.1,
                       what="the share partition's start offset to reach 200")
        assert (s.start_offset, s.delivery_complete_count) == (200, 0)


def test_deleted_and_recreated_group_starts_over(server, topic_name):
    group, _ = _setup(server.bootstrap, topic_name, 10)

    def consume_all(expect: int) -> list[int]:
        c = _consumer(server.bootstrap, group)
        seen: list[int] = []
        try:
            c.subscribe([topic_name])
            _poll_all([c], lambda: len(seen) >= expect, timeout=20, on_message=lambda i, cc, m: seen.append(m.offset()))
            c.commit_sync()
        finally:
            c.close()
        return seen

    assert sorted(consume_all(10)) == list(range(10))
    with RawClient(server.bootstrap) as raw:
        # the member's leave is processed asynchronously
        wait_until(lambda: raw.request(42, 2, {"groups_names": [group]}).results[0].error_code == 0, timeout=10,
                   interval=0.2, what="DeleteGroups to succeed once the member has left")
        _group(raw, group, share_auto_offset_reset="earliest")
    _produce(server.bootstrap, topic_name, 5)
    assert sorted(consume_all(15)) == list(range(15))  # no progress survives the deletion


def test_acknowledged_records_survive_kill9(fresh_server, topic_name):
    srv = fresh_server()
    group, _ = _setup(srv.bootstrap, topic_name, 100, batch=10)
    a = _consumer(srv.bootstrap, group, explicit=True)
    seen: set[int] = set()

    def accept_first_half(i, c, m):
        seen.add(m.offset())
        c.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() < 50 else AcknowledgeType.RELEASE)

    a.subscribe([topic_name])
    _poll_all([a], lambda: len(seen) >= 100, on_message=accept_first_half)
    res = a.commit_sync()  # answered = persisted in __share_group_state
    assert all(v is None for v in res.values()), res
    a.close()
    srv.kill9()
    srv2 = fresh_server(data_dir=srv.data_dir, port=srv.port)
    b = _consumer(srv2.bootstrap, group)
    try:
        b.subscribe([topic_name])
        got: set[int] = set()
        _poll_all([b], lambda: got >= set(range(50, 100)), timeout=30,
                  on_message=lambda i, c, m: got.add(m.offset()))
        assert got == set(range(50, 100))  # nothing acknowledged comes back, nothing else is lost
        b.commit_sync()
    finally:
        b.close()
