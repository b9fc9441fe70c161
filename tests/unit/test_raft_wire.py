"""The Raft core's messages through kio's KRaft messages and back, over real bytes
(kio's encoder and decoder), and log entries as record batches."""

from __future__ import annotations

import io
from typing import Any

import pytest
from kio.serial import entity_reader, entity_writer

from hightide.cluster.raft import messages as m
from hightide.cluster.raft.wire import (
    METADATA_TOPIC_ID, decode_entries, encode_entries, from_kio, to_kio,
)
from hightide.protocol.records import build_batch, iter_headers, validate_batches

FENCED = int(m.ErrorCode.fenced_leader_epoch)


def batch(n: int, *, control: bool = False) -> bytes:
    return build_batch([(None, b"v%d" % i, [], 1000 + i) for i in range(n)], is_control=control)


def over_the_wire(obj: Any) -> Any:
    buf = io.BytesIO()
    entity_writer(type(obj))(buf, obj)
    decoded, size = entity_reader(type(obj))(buf.getvalue(), 0)
    assert size == len(buf.getvalue())
    return decoded


MESSAGES: list[m.Message] = [
    m.VoteRequest(2, 7, 6, 120, pre_vote=True),
    m.VoteRequest(3, 8, 6, 121, pre_vote=False),
    m.VoteResponse(0, 1, 7, True),
    m.VoteResponse(FENCED, -1, 9, False),
    m.BeginQuorumEpochRequest(1, 7),
    m.BeginQuorumEpochResponse(0, 1, 7),
    m.EndQuorumEpochRequest(1, 7, (3, 2)),
    m.EndQuorumEpochResponse(0, -1, 7),
    m.FetchRequest(3, 7, 120, 6, 0, 500),
    m.FetchResponse(0, 1, 7, 118, 0, diverging_epoch=m.OffsetAndEpoch(100, 5)),
    m.FetchResponse(0, 1, 7, 118, 50, snapshot_id=m.OffsetAndEpoch(50, 4)),
    m.FetchResponse(int(m.ErrorCode.not_leader_or_follower), -1, 7, 0, 0),
    m.FetchSnapshotRequest(3, 7, m.OffsetAndEpoch(50, 4), 1024, 4096),
    m.FetchSnapshotResponse(0, 1, 7, m.OffsetAndEpoch(50, 4), 3000, 1024, b"snapshot bytes"),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda x: type(x).__name__)
def test_each_message_survives_kio_encoding(msg: m.Message) -> None:
    kio_msg = to_kio(msg, cluster_id="c1", dest=2)
    assert from_kio(over_the_wire(kio_msg)) == msg


def test_a_fetch_names_the_metadata_topic_by_its_fixed_id() -> None:
    req = to_kio(m.FetchRequest(3, 7, 120, 6, 0, 500))
    assert req.topics[0].topic_id == METADATA_TOPIC_ID
    assert req.replica_state.replica_id == 3 and req.topics[0].partitions[0].last_fetched_epoch == 6


def test_entries_travel_as_batches_with_their_offsets_and_epochs() -> None:
    entries = (m.Entry(3, batch(2), 2), m.Entry(4, batch(1, control=True), 1, control=True),
               m.Entry(4, batch(3), 3))
    resp = m.FetchResponse(0, 1, 4, 40, 0, records=entries)
    kio_resp = over_the_wire(to_kio(resp, records_offset=40))
    raw = kio_resp.responses[0].partitions[0].records
    headers = list(iter_headers(raw))
    assert [h.base_offset for h in headers] == [40, 42, 43]
    assert [h.partition_leader_epoch for h in headers] == [3, 4, 4]
    validate_batches(raw, client_origin=False)   # the CRCs still hold after the rewrite
    back = from_kio(kio_resp)
    assert isinstance(back, m.FetchResponse)
    assert [(e.epoch, e.count, e.control) for e in back.records] == [(3, 2, False), (4, 1, True), (4, 3, False)]
    assert decode_entries(encode_entries(40, back.records)) == back.records


def test_a_payload_that_is_not_one_batch_is_refused() -> None:
    with pytest.raises(ValueError, match="not one record batch"):
        encode_entries(0, (m.Entry(1, batch(2), 1),))            # count says 1, batch holds 2
    with pytest.raises(ValueError, match="not one record batch"):
        encode_entries(0, (m.Entry(1, batch(1) + batch(1), 1),))


def test_a_torn_tail_batch_is_dropped() -> None:
    raw = encode_entries(0, (m.Entry(1, batch(1)), m.Entry(1, batch(1))))
    assert len(decode_entries(raw[:-5])) == 1


def test_a_request_for_several_partitions_is_refused() -> None:
    req = to_kio(m.BeginQuorumEpochRequest(1, 7))
    two = type(req)(cluster_id=None, topics=req.topics * 2, leader_endpoints=())
    with pytest.raises(ValueError, match="exactly one partition"):
        from_kio(two)


def test_the_kio_free_leader_change_message_is_kios_bytes() -> None:
    """cluster/raft/batches.py writes LeaderChangeMessage v0 by hand (the lone voter never
    loads kio's Raft schemas): the same bytes as kio's writer."""
    import io

    from kio.schema.leader_change_message.v0.data import LeaderChangeMessage, Voter
    from kio.schema.types import BrokerId
    from kio.serial import entity_writer
    from kio.static.primitive import i16, i32

    from hightide.cluster.raft.batches import leader_change_message
    for leader, voters, granting in ((3, (1, 2, 3), (3,)), (1, (1,), (1,)), (7, tuple(range(200)), ())):
        buf = io.BytesIO()
        entity_writer(LeaderChangeMessage)(buf, LeaderChangeMessage(
            version=i16(0), leader_id=BrokerId(leader), voters=tuple(Voter(voter_id=i32(v)) for v in voters),
            granting_voters=tuple(Voter(voter_id=i32(v)) for v in granting)))
        assert leader_change_message(leader, voters, granting) == buf.getvalue()
