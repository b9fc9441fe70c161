"""The controller's broker-lifecycle core (BrokerRegistration, BrokerHeartbeat, session
expiry, controlled shutdown, the lowest acknowledged offset of seed 004), driven through
a test context with a fake clock: call the core, check it left the image alone, append
its records (encoded and decoded, as the metadata log stores them) and apply them."""

from __future__ import annotations

import copy
import uuid

import pytest
from kio.schema.errors import ErrorCode

from hightide.cluster import records as R
from hightide.cluster.broker_records import (
    FENCE,
    IN_CONTROLLED_SHUTDOWN,
    UNFENCE,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    NoOpRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from hightide.cluster.image import MetadataImage
from hightide.cluster.lifecycle import (
    BrokerLifecycle,
    Heartbeat,
    LifecycleConfig,
    Registration,
)

CLUSTER = "hightide-test-cluster"
TIMEOUT = 9000
LISTENERS = (("PLAINTEXT", "127.0.0.1", 9092, 0),)


def inc(n: int) -> uuid.UUID:
    return uuid.UUID(int=n)


class Ctx:
    """The metadata log as a list, the image, the core and a fake clock."""

    def __init__(self, **config) -> None:
        self.image = MetadataImage()
        self.log: list = []
        self.now = 1_000_000
        self.core = BrokerLifecycle(CLUSTER, LifecycleConfig(**config))

    @property
    def next_offset(self) -> int:
        return len(self.log)

    @property
    def committed(self) -> int:
        return len(self.log) - 1

    def append(self, records) -> list:
        for r in records:
            stored = R.decode(R.encode(r))
            assert stored == r
            self.image.apply(stored, len(self.log))
            self.log.append(stored)
        return list(records)

    def call(self, fn, *args, **kwargs):
        before = copy.deepcopy(self.image)
        reply, records = fn(self.image, *args, **kwargs)
        assert self.image == before, "the core must not mutate the image"
        self.append(records)
        return reply, records

    def register(self, broker_id: int, incarnation: int, **kw):
        req = Registration(broker_id, kw.pop("cluster_id", CLUSTER), inc(incarnation),
                           kw.pop("listeners", LISTENERS), **kw)
        return self.call(self.core.register, req, self.now, self.next_offset)

    def heartbeat(self, broker_id: int, epoch: int, offset: int | None = None, **kw):
        req = Heartbeat(broker_id, epoch, self.committed if offset is None else offset, **kw)
        return self.call(self.core.heartbeat, req, self.now, self.next_offset, self.committed)

    def tick(self):
        return self.append(self.core.fence_expired(self.image, self.now))

    def up(self, broker_id: int, incarnation: int | None = None) -> int:
        """Register and unfence a broker; returns its epoch."""
        reply, _ = self.register(broker_id, incarnation if incarnation is not None else broker_id)
        assert reply.error_code == ErrorCode.none
        hb, _ = self.heartbeat(broker_id, reply.broker_epoch)
        assert not hb.is_fenced
        return reply.broker_epoch

    def noop(self):
        self.append([NoOpRecord()])


# -- registration ----------------------------------------------------------------------
def test_epoch_is_the_offset_of_the_registration_record_and_the_broker_starts_fenced():
    c = Ctx()
    c.noop()
    c.noop()
    reply, records = c.register(1, 1, rack="r1", features=(("metadata.version", 1, 20),))
    assert reply.error_code == ErrorCode.none and reply.broker_epoch == 2
    assert records == [RegisterBrokerRecord(1, str(inc(1)), 2, LISTENERS, (("metadata.version", 1, 20),), "r1")]
    reg = c.image.brokers[1]
    assert (reg.epoch, reg.fenced, reg.in_controlled_shutdown, reg.rack) == (2, True, False, "r1")
    assert reg.endpoint("PLAINTEXT") == LISTENERS[0]


def test_reregistration_with_the_same_incarnation_keeps_epoch_and_state():
    c = Ctx()
    epoch = c.up(1)
    c.noop()
    reply, records = c.register(1, 1, rack="r2")
    assert reply.broker_epoch == epoch
    assert records[0].broker_epoch == epoch and records[0].fenced is False
    assert c.image.brokers[1].fenced is False and c.image.brokers[1].rack == "r2"


def test_new_incarnation_while_the_old_session_is_alive_is_a_duplicate():
    c = Ctx()
    c.up(1)
    c.now += TIMEOUT  # still valid: last contact + timeout >= now
    reply, records = c.register(1, 2)
    assert reply.error_code == ErrorCode.duplicate_broker_registration and records == []
    assert reply.message == "Another broker is registered with that broker id."


def test_new_incarnation_replaces_an_expired_or_fenced_registration():
    c = Ctx()
    old = c.up(1)
    c.now += TIMEOUT + 1
    reply, _ = c.register(1, 2)  # expired (not yet fenced by the timer): replaced
    assert reply.error_code == ErrorCode.none and reply.broker_epoch > old
    assert c.image.brokers[1].fenced and c.image.brokers[1].incarnation_id == inc(2)
    # fenced (never unfenced): a third incarnation replaces it at once
    reply3, _ = c.register(1, 3)
    assert reply3.error_code == ErrorCode.none and reply3.broker_epoch > reply.broker_epoch
    assert c.heartbeat(1, reply.broker_epoch)[0].error_code == ErrorCode.stale_broker_epoch


@pytest.mark.parametrize("kw,code", [
    ({"cluster_id": "other"}, ErrorCode.inconsistent_cluster_id),
    ({"listeners": LISTENERS * 2}, ErrorCode.invalid_registration),
])
def test_registration_errors(kw, code):
    c = Ctx()
    reply, records = c.register(1, 1, **kw)
    assert reply.error_code == code and records == [] and 1 not in c.image.brokers


def test_a_finalized_feature_the_broker_does_not_support_is_refused():
    c = Ctx()
    c.core.finalized_features = {"metadata.version": 21}
    reply, _ = c.register(1, 1, features=(("metadata.version", 1, 20),))
    assert reply.error_code == ErrorCode.unsupported_version
    assert "does not support finalized version 21 of metadata.version" in reply.message
    assert c.register(1, 1, features=(("metadata.version", 1, 21),))[0].error_code == ErrorCode.none


def test_unregister():
    c = Ctx()
    epoch = c.up(1)
    code, _, records = c.core.unregister(c.image, 1)
    assert code == ErrorCode.none and records == [UnregisterBrokerRecord(1, epoch)]
    c.append(records)
    assert 1 not in c.image.brokers
    assert c.core.unregister(c.image, 1)[0] == ErrorCode.broker_id_not_registered
    assert c.heartbeat(1, epoch)[0].error_code == ErrorCode.stale_broker_epoch


# -- heartbeats ---------------------------------------------------------------------------
def test_unknown_broker_and_stale_epoch_get_stale_broker_epoch():
    c = Ctx()
    reply, records = c.heartbeat(7, 0)
    assert (reply.error_code, records, reply.lowest_acknowledged_offset) == (ErrorCode.stale_broker_epoch, [], -1)
    epoch = c.up(1)
    reply, _ = c.heartbeat(1, epoch + 5)
    assert reply.error_code == ErrorCode.stale_broker_epoch
    assert reply.message == f"Expected broker epoch {epoch}, but got broker epoch {epoch + 5}"


def test_unfenced_once_caught_up_with_its_registration_record():
    c = Ctx()
    c.noop()
    epoch = c.register(1, 1)[0].broker_epoch
    reply, records = c.heartbeat(1, epoch, offset=epoch - 1)
    assert (reply.is_caught_up, reply.is_fenced, records) == (False, True, [])
    reply, records = c.heartbeat(1, epoch, offset=epoch, want_fence=True)  # caught up, wants to stay fenced
    assert (reply.is_caught_up, reply.is_fenced, records) == (True, True, [])
    reply, records = c.heartbeat(1, epoch, offset=epoch)
    assert (reply.is_caught_up, reply.is_fenced) == (True, False)
    assert records == [BrokerRegistrationChangeRecord(1, epoch, fenced=UNFENCE)]
    assert not c.image.brokers[1].fenced
    assert reply.lowest_acknowledged_offset == epoch


def test_want_fence_fences_an_unfenced_broker():
    c = Ctx()
    epoch = c.up(1)
    reply, records = c.heartbeat(1, epoch, want_fence=True)
    assert reply.is_fenced and not reply.should_shut_down
    assert records == [BrokerRegistrationChangeRecord(1, epoch, fenced=FENCE)]
    assert c.image.brokers[1].fenced


def test_shutdown_of_a_fenced_broker_or_one_that_leads_nothing_is_immediate():
    c = Ctx()
    epoch = c.register(1, 1)[0].broker_epoch
    reply, records = c.heartbeat(1, epoch, want_shut_down=True)
    assert reply.should_shut_down and reply.is_fenced and records == []
    epoch2 = c.up(2)
    reply, records = c.heartbeat(2, epoch2, want_shut_down=True)
    assert reply.should_shut_down and reply.is_fenced
    assert records == [BrokerRegistrationChangeRecord(2, epoch2, fenced=FENCE)]


def _lead_a_partition(c: Ctx, broker_id: int) -> str:
    tid = str(uuid.uuid4())
    c.append([R.TopicRecord(f"t{broker_id}", tid), R.PartitionRecord(tid, 0, broker_id, 0, (broker_id,))])
    return tid


def _leader(c: Ctx, tid: str) -> tuple[int, int]:
    p = c.image.topics_by_id[uuid.UUID(tid)].partitions[0]
    return p.leader, p.leader_epoch


def test_controlled_shutdown_of_a_leader_moves_leadership_and_waits_until_everyone_applied_it():
    c = Ctx()
    e1, e2 = c.up(1), c.up(2)
    tid = _lead_a_partition(c, 1)
    c.heartbeat(2, e2)
    reply, records = c.heartbeat(1, e1, want_shut_down=True)
    assert (reply.is_fenced, reply.should_shut_down) == (False, False)
    # RF=1: no other replica, so the partition goes leaderless (epoch + 1) in the same batch
    assert records == [BrokerRegistrationChangeRecord(1, e1, in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN),
                       R.PartitionChangeRecord(tid, 0, leader=-1)]
    assert _leader(c, tid) == (-1, 1)
    shutdown_offset = c.committed
    assert c.image.brokers[1].in_controlled_shutdown
    # broker 1 is no longer counted: the lowest acknowledged offset is broker 2's
    reply2, _ = c.heartbeat(2, e2, offset=shutdown_offset - 1)
    assert reply2.lowest_acknowledged_offset == shutdown_offset - 1
    # it leads nothing now, but broker 2 has not applied the shutdown batch yet
    reply, _ = c.heartbeat(1, e1, want_shut_down=True)
    assert reply.should_shut_down is False
    c.heartbeat(2, e2)  # broker 2 applied everything
    reply, records = c.heartbeat(1, e1, want_shut_down=True)
    assert (reply.should_shut_down, reply.is_fenced) == (True, True)
    assert records == [BrokerRegistrationChangeRecord(1, e1, fenced=FENCE)]


def test_a_lone_leader_in_controlled_shutdown_is_released_at_its_next_heartbeat():
    c = Ctx()
    e1 = c.up(1)
    tid = _lead_a_partition(c, 1)
    assert c.heartbeat(1, e1, want_shut_down=True)[0].should_shut_down is False
    assert _leader(c, tid) == (-1, 1)
    reply, _ = c.heartbeat(1, e1, want_shut_down=True)
    assert reply.should_shut_down and reply.is_fenced


def test_session_expiry_makes_the_partitions_leaderless_and_unfencing_gives_them_back():
    c = Ctx()
    e1, e2 = c.up(1), c.up(2)
    t1, t2 = _lead_a_partition(c, 1), _lead_a_partition(c, 2)
    c.now += TIMEOUT
    c.heartbeat(2, e2)
    c.now += 1
    assert c.tick() == [BrokerRegistrationChangeRecord(1, e1, fenced=FENCE), R.PartitionChangeRecord(t1, 0, leader=-1)]
    assert _leader(c, t1) == (-1, 1) and _leader(c, t2) == (2, 0)
    reply, records = c.heartbeat(1, e1)  # back, caught up: unfenced and leader again
    assert not reply.is_fenced
    assert records == [BrokerRegistrationChangeRecord(1, e1, fenced=UNFENCE), R.PartitionChangeRecord(t1, 0, leader=1)]
    assert _leader(c, t1) == (1, 2)


def test_want_fence_and_unregister_make_the_partitions_leaderless():
    c = Ctx()
    e1 = c.up(1)
    tid = _lead_a_partition(c, 1)
    _, records = c.heartbeat(1, e1, want_fence=True)
    assert records[1:] == [R.PartitionChangeRecord(tid, 0, leader=-1)]
    _, records = c.heartbeat(1, e1)  # unfenced again: leader again
    assert _leader(c, tid) == (1, 2)
    code, _, records = c.core.unregister(c.image, 1)
    c.append(records)
    assert records[0] == R.PartitionChangeRecord(tid, 0, leader=-1) and 1 not in c.image.brokers


def test_a_new_incarnation_replacing_an_expired_leader_moves_its_partitions_first():
    c = Ctx()
    e1 = c.up(1)
    tid = _lead_a_partition(c, 1)
    c.now += TIMEOUT + 1  # expired, not fenced yet (no tick ran)
    reply, records = c.register(1, 2)
    assert records[0] == R.PartitionChangeRecord(tid, 0, leader=-1)
    assert reply.broker_epoch == c.committed != e1  # the epoch is the RegisterBrokerRecord's offset
    assert isinstance(records[1], RegisterBrokerRecord) and _leader(c, tid) == (-1, 1)


# -- session expiry ------------------------------------------------------------------------
def test_fenced_exactly_after_the_session_timeout():
    c = Ctx()
    e1, e2 = c.up(1), c.up(2)
    c.now += TIMEOUT
    assert c.tick() == []
    assert c.core.next_deadline_ms(c.image, last_append_ms=c.now) == c.now + 1  # the expiry comes first
    c.heartbeat(2, e2)
    c.now += 1
    assert c.tick() == [BrokerRegistrationChangeRecord(1, e1, fenced=FENCE)]
    assert c.image.brokers[1].fenced and not c.image.brokers[2].fenced
    assert c.core.next_deadline_ms(c.image, last_append_ms=c.now + TIMEOUT) == c.now - 1 + TIMEOUT + 1  # broker 2's


def test_next_deadline_is_the_earliest_expiry_or_idle_deadline():
    c = Ctx(max_idle_interval_ms=0)
    assert c.core.next_deadline_ms(c.image, c.now) is None
    c.up(1)
    assert c.core.next_deadline_ms(c.image, c.now) == c.now + TIMEOUT + 1
    c2 = Ctx(max_idle_interval_ms=500)
    assert c2.core.next_deadline_ms(c2.image, 100) == 600


def test_idle_noop_records():
    core = BrokerLifecycle(CLUSTER, LifecycleConfig(max_idle_interval_ms=500))
    assert core.idle_records(1499, 1000) == []
    assert core.idle_records(1500, 1000) == [NoOpRecord()]
    assert BrokerLifecycle(CLUSTER, LifecycleConfig(max_idle_interval_ms=0)).idle_records(10**9, 0) == []


# -- the lowest acknowledged offset (seed 004) -------------------------------------------------
def test_lowest_acknowledged_is_the_minimum_over_unfenced_brokers():
    c = Ctx()
    assert c.core.lowest_acknowledged_offset(c.image, c.now) == -1
    e1, e2, e3 = c.up(1), c.up(2), c.up(3)
    for _ in range(5):
        c.noop()
    top = c.committed
    c.heartbeat(1, e1, offset=top)
    c.heartbeat(2, e2, offset=top - 2)
    reply, _ = c.heartbeat(3, e3, offset=top - 1)
    assert reply.lowest_acknowledged_offset == top - 2
    # a fenced broker is not counted
    reply, _ = c.heartbeat(2, e2, offset=top - 2, want_fence=True)
    assert reply.lowest_acknowledged_offset == top - 1
    assert c.heartbeat(1, e1, offset=top)[0].lowest_acknowledged_offset == top - 1


def test_a_broker_joins_only_once_it_reached_the_published_offset():
    c = Ctx()
    e1 = c.up(1)
    epoch2 = c.register(2, 2)[0].broker_epoch
    for _ in range(10):
        c.noop()
    published = c.heartbeat(1, e1)[0].lowest_acknowledged_offset
    assert published == c.committed
    # broker 2 has applied its registration record (Kafka would unfence it) but not what
    # everybody else has acknowledged: it stays fenced so the published offset holds
    reply, records = c.heartbeat(2, epoch2, offset=epoch2)
    assert (reply.is_caught_up, reply.is_fenced, records) == (False, True, [])
    assert reply.lowest_acknowledged_offset == published
    reply, _ = c.heartbeat(2, epoch2, offset=published)
    assert not reply.is_fenced and reply.lowest_acknowledged_offset == published


def test_acknowledged_offsets_never_go_backwards_and_are_capped_at_the_committed_offset():
    c = Ctx()
    e1 = c.up(1)
    for _ in range(5):
        c.noop()
    assert c.heartbeat(1, e1, offset=c.committed)[0].lowest_acknowledged_offset == c.committed
    late = c.heartbeat(1, e1, offset=0)[0]  # a delayed heartbeat with an older offset
    assert late.lowest_acknowledged_offset == c.committed
    assert c.heartbeat(1, e1, offset=c.committed + 100)[0].lowest_acknowledged_offset == c.committed


def test_observe_fetch_counts_the_fetch_offset_as_acknowledgement():
    c = Ctx()
    e1, e2 = c.up(1), c.up(2)
    for _ in range(4):
        c.noop()
    c.heartbeat(1, e1)
    assert c.core.lowest_acknowledged_offset(c.image, c.now) == e2  # broker 2 reported its epoch only
    c.core.observe_fetch(c.image, 2, c.committed + 1, c.now, c.committed, broker_epoch=e2 - 1)  # stale epoch
    assert c.core.lowest_acknowledged_offset(c.image, c.now) == e2
    c.core.observe_fetch(c.image, 2, c.committed + 1, c.now, c.committed, broker_epoch=e2)
    assert c.core.lowest_acknowledged_offset(c.image, c.now) == c.committed
    c.core.observe_fetch(c.image, 9, 100, c.now, c.committed)  # unknown broker: ignored
    # a Fetch does not refresh the session
    c.now += TIMEOUT + 1
    c.core.observe_fetch(c.image, 1, c.committed + 1, c.now, c.committed)
    assert {r.broker_id for r in c.tick()} == {1, 2}


def test_a_new_controller_knows_no_offsets_until_every_unfenced_broker_reported():
    c = Ctx()
    e1, e2 = c.up(1), c.up(2)
    c.core = BrokerLifecycle(CLUSTER)  # failover: sessions are soft state
    assert c.core.lowest_acknowledged_offset(c.image, c.now) == -1
    assert c.heartbeat(1, e1)[0].lowest_acknowledged_offset == -1
    assert c.heartbeat(2, e2)[0].lowest_acknowledged_offset == c.committed
    # brokers first seen by the new controller got a full session from then
    c.now += TIMEOUT
    assert c.tick() == []


# -- records and the image -----------------------------------------------------------------------
def test_records_round_trip_and_replay():
    recs = [RegisterBrokerRecord(3, str(inc(3)), 0, LISTENERS, (("metadata.version", 1, 20),), "r", log_dirs=("d",)),
            UnfenceBrokerRecord(3, 0), BrokerRegistrationChangeRecord(3, 0, in_controlled_shutdown=1),
            FenceBrokerRecord(3, 0), FenceBrokerRecord(3, 99), UnfenceBrokerRecord(3, 99),
            BrokerRegistrationChangeRecord(3, 99, fenced=UNFENCE), NoOpRecord()]
    image = MetadataImage()
    states = []
    for offset, r in enumerate(recs):
        assert R.decode(R.encode(r)) == r
        image.apply(R.decode(R.encode(r)), offset)
        states.append((image.brokers[3].fenced, image.brokers[3].in_controlled_shutdown))
    # records for another epoch (99) change nothing
    assert states == [(True, False), (False, False), (False, True), (True, True), (True, True), (True, True),
                      (True, True), (True, True)]
    assert image.offset == len(recs) - 1
    image.apply(UnregisterBrokerRecord(3, 99), 10)
    assert 3 in image.brokers
    image.apply(UnregisterBrokerRecord(3, 0), 11)
    assert image.brokers == {}


# -- failed appends (the shell answers with an error and writes nothing) --------------------------
def test_a_failed_append_of_a_new_incarnation_leaves_the_old_registration_as_it_was():
    c = Ctx()
    e1 = c.up(1)
    c.now += TIMEOUT + 1  # expired, not yet fenced
    reply, _ = c.core.register(c.image, Registration(1, CLUSTER, inc(2), LISTENERS), c.now, c.next_offset)
    assert reply.error_code == ErrorCode.none  # ... but its record is lost
    assert c.image.brokers[1].epoch == e1
    assert c.tick() == [BrokerRegistrationChangeRecord(1, e1, fenced=FENCE)]  # the old session still expires
    reply, _ = c.register(1, 2)
    assert reply.error_code == ErrorCode.none and c.image.brokers[1].incarnation_id == inc(2)


def test_a_failed_append_of_the_controlled_shutdown_record_is_written_again():
    c = Ctx()
    e1, e2 = c.up(1), c.up(2)
    tid = _lead_a_partition(c, 1)
    hb = Heartbeat(1, e1, c.committed, want_shut_down=True)
    reply, records = c.core.heartbeat(c.image, hb, c.now, c.next_offset, c.committed)  # records lost
    assert records and not c.image.brokers[1].in_controlled_shutdown
    # still counted (the image says it is not shutting down), and asked again it re-enters
    assert c.heartbeat(2, e2)[0].lowest_acknowledged_offset == c.committed
    reply, records = c.heartbeat(1, e1, want_shut_down=True)
    assert records == [BrokerRegistrationChangeRecord(1, e1, in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN),
                       R.PartitionChangeRecord(tid, 0, leader=-1)]
    assert c.image.brokers[1].in_controlled_shutdown


def test_the_reply_on_the_wire_carries_the_lowest_acknowledged_offset():
    from hightide.cluster.lifecycle import heartbeat_response
    from hightide.protocol.broker_heartbeat_response import (decode_broker_heartbeat_response,
                                                             encode_broker_heartbeat_response)
    c = Ctx()
    e1 = c.up(1)
    reply, _ = c.heartbeat(1, e1)
    frame = encode_broker_heartbeat_response(2, 5, heartbeat_response(reply))
    _, wire = decode_broker_heartbeat_response(2, frame[4:])
    assert (wire.is_fenced, wire.is_caught_up, wire.lowest_acknowledged_offset) == (False, True, c.committed)
    stale, _ = c.heartbeat(1, e1 + 1)
    _, wire = decode_broker_heartbeat_response(0, encode_broker_heartbeat_response(0, 5, heartbeat_response(stale))[4:])
    assert (wire.error_code, wire.lowest_acknowledged_offset) == (ErrorCode.stale_broker_epoch.value, -1)


def test_a_broker_fenced_during_controlled_shutdown_is_not_unfenced_again():
    """Found by the simulator (seed 601, one broker): a heartbeat sent before the broker
    asked to shut down, delayed past its fencing, must not unfence a registration that is
    logged in controlled shutdown (Kafka keeps that flag on fencing; its process restarts
    with a new incarnation)."""
    c = Ctx()
    e1 = c.up(1)
    _lead_a_partition(c, 1)
    c.heartbeat(1, e1, want_shut_down=True)
    c.now += TIMEOUT + 1
    c.tick()
    assert c.image.brokers[1].fenced and c.image.brokers[1].in_controlled_shutdown
    reply, records = c.heartbeat(1, e1)  # the late heartbeat, without WantShutDown
    assert reply.is_fenced and records == [] and reply.lowest_acknowledged_offset == -1
    assert c.register(1, 2)[0].error_code == ErrorCode.none  # the restarted process registers anew


def test_the_metadata_log_replays_broker_registrations(tmp_path):
    """The records as the metadata log stores them (one batch on disk), reopened."""
    from hightide.cluster.metadata_log import MetadataLog
    from hightide.protocol.records import build_batch, validate_batches
    c = Ctx()
    c.noop()
    e1, e2 = c.up(1), c.up(2)
    c.heartbeat(2, e2, want_fence=True)
    log = MetadataLog(str(tmp_path), c.now, clean_shutdown=True)
    batch = build_batch([(k, v, [], c.now) for k, v in MetadataLog.encode_records(c.log)])
    log.log.append(batch, validate_batches(batch, client_origin=False), c.now)
    log.close()
    reopened = MetadataLog(str(tmp_path), c.now, clean_shutdown=True)
    try:
        assert reopened.image.brokers == c.image.brokers
        assert (reopened.image.brokers[1].fenced, reopened.image.brokers[2].fenced) == (False, True)
        assert reopened.image.brokers[1].epoch == e1 and reopened.image.offset == c.committed
    finally:
        reopened.close()


def test_a_broker_told_to_shut_down_is_not_unfenced_by_an_older_heartbeat():
    """Found by the simulator (seed 931, five brokers): an older heartbeat without
    WantShutDown, delivered after the one that was granted the shutdown."""
    c = Ctx()
    e1 = c.up(1)
    reply, _ = c.heartbeat(1, e1, want_shut_down=True)
    assert reply.should_shut_down and c.image.brokers[1].fenced
    reply, records = c.heartbeat(1, e1, offset=c.committed - 1)  # the older one
    assert reply.is_fenced and records == []
