"""ServerConnection, the sans-IO server side of a connection, driven without sockets:
random splits of the byte stream, pipelining and answer order, zero-copy raw responses,
and every way a peer can break the protocol."""

from __future__ import annotations

import datetime
import random
import tracemalloc
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.find_coordinator.v0.request import FindCoordinatorRequest
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.serial import entity_reader

from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_request
from hightide.protocol.errors import ErrorCode, LocalProtocolError, PeerProtocolError
from hightide.protocol.framing import FrameTooLarge
from hightide.protocol.server_connection import (NEED_DATA, Answered, RawResponse, Request, ServerConnection,
                                                 api_version_ranges)


@dataclass(frozen=True)
class R:
    min_version: int
    max_version: int
    name: str = "test"


ROUTES = {0: R(3, 11, "produce"), 10: R(0, 6, "find_coordinator"), 16: R(0, 5, "list_groups"),
          18: R(0, 4, "api_versions")}
MAX = 1 << 20


def conn(chunk: int = 32 * 1024, max_frame: int = MAX) -> ServerConnection:
    return ServerConnection(ROUTES, max_frame, chunk)


def find_coordinator(corr: int, key: str = "g") -> bytes:
    return encode_request(10, 0, corr, "client", FindCoordinatorRequest(key=key))


def list_groups(corr: int, states: tuple[str, ...] = ()) -> bytes:
    return encode_request(16, 4, corr, None, ListGroupsRequest(states_filter=states))  # flexible: header v2


def produce_request(records: bytes) -> ProduceRequest:
    return ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=1), topic_data=(
        TopicProduceData(name="t", partition_data=(PartitionProduceData(index=0, records=records),)),))


def drain(c: ServerConnection) -> list:
    """The events buffered now. A Produce request's records are views of the receive
    buffer, valid until the next ``get_buffer``: its body is replaced by kio's entity
    holding copies, as a handler would have to copy anything it kept."""
    events = []
    while (e := c.next_request()) is not NEED_DATA:
        if isinstance(e, Request) and e.header.api_key == 0:
            e.body = owned(e.body)
        events.append(e)
    return events


def owned(body) -> ProduceRequest:
    return ProduceRequest(transactional_id=body.transactional_id, acks=body.acks, timeout=body.timeout, topic_data=tuple(
        TopicProduceData(name=t.name, partition_data=tuple(
            PartitionProduceData(index=p.index, records=None if p.records is None else bytes(p.records))
            for p in t.partition_data)) for t in body.topic_data))


def with_version(frame: bytes, version: int) -> bytes:
    return frame[:6] + version.to_bytes(2, "big") + frame[8:]


# -- bytes in, requests out -------------------------------------------------------------

requests = st.lists(st.one_of(
    st.tuples(st.just("fc"), st.text(max_size=40)),
    st.tuples(st.just("lg"), st.lists(st.text(max_size=10), max_size=4).map(tuple)),
    st.tuples(st.just("pr"), st.binary(max_size=3000)),
), min_size=1, max_size=12)


def bodies(reqs: list) -> list:
    make = {"fc": lambda key: (10, 0, FindCoordinatorRequest(key=key)),
            "lg": lambda states: (16, 4, ListGroupsRequest(states_filter=states)),  # flexible: header v2
            "pr": lambda records: (0, 9, produce_request(records))}
    return [make[kind](arg) for kind, arg in reqs]


def encoded(reqs: list) -> list[bytes]:
    return [encode_request(key, v, corr, "c" * (corr % 3) or None, body)
            for corr, (key, v, body) in enumerate(bodies(reqs))]


@settings(max_examples=150, deadline=None)
@given(reqs=requests, seed=st.integers(0, 2**32), chunk=st.sampled_from([64, 512, 32 * 1024]))
def test_random_splits_and_pulls_yield_the_same_requests(reqs, seed, chunk):
    """However the stream is cut, and whenever events are pulled (requests held across
    later receives live in reused buffers), the same requests come out, in order."""
    data = b"".join(encoded(reqs))
    rnd = random.Random(seed)
    c = conn(chunk)
    events: list = []
    pos = 0
    while pos < len(data):
        buf = c.get_buffer(-1)
        n = min(len(buf), len(data) - pos, rnd.randint(1, 700))
        buf[:n] = data[pos:pos + n]
        pos += n
        c.buffer_updated(n)
        if rnd.random() < 0.5:  # sometimes leave complete frames buffered across receives
            events.extend(drain(c))
    events.extend(drain(c))
    assert [e.header.correlation_id for e in events] == list(range(len(reqs)))
    assert [e.slot for e in events] == list(range(len(reqs)))
    for corr, (e, (key, version, body)) in enumerate(zip(events, bodies(reqs))):
        assert isinstance(e, Request) and e.body == body
        assert (e.header.api_key, e.header.api_version, e.header.client_id) == (key, version, "c" * (corr % 3) or None)
        assert e.route is ROUTES[key]
    assert c.in_flight == len(reqs) and c.buffered_requests == 0


@settings(max_examples=50, deadline=None)
@given(reqs=requests)
def test_receive_data_equals_the_buffer_protocol(reqs):
    data = b"".join(encoded(reqs))
    a, b = conn(64), conn(64)
    a.receive_data(data)
    for i in range(0, len(data), 7):
        b.receive_data(memoryview(data)[i:i + 7])
    ea, eb = drain(a), drain(b)
    assert [(e.header, e.body) for e in ea] == [(e.header, e.body) for e in eb]


def test_partial_frame_needs_data():
    c = conn()
    frame = find_coordinator(1)
    c.receive_data(frame[:-1])
    assert c.next_request() is NEED_DATA and c.in_flight == 0
    c.receive_data(frame[-1:])
    (e,) = drain(c)
    assert e.body == FindCoordinatorRequest(key="g") and e.header.client_id == "client"


# -- answers out, in request order ------------------------------------------------------


def answer(corr: int) -> RawResponse:
    return RawResponse([corr.to_bytes(4, "big"), b"answer-%d" % corr])


def unframe(data: bytes) -> list[bytes]:
    out = []
    while data:
        size = int.from_bytes(data[:4], "big")
        out.append(data[4:4 + size])
        data = data[4 + size:]
    return out


@settings(max_examples=100, deadline=None)
@given(order=st.permutations(range(8)))
def test_answers_leave_in_request_order(order):
    c = conn()
    c.receive_data(b"".join(find_coordinator(i) for i in range(8)))
    events = drain(c)
    written = b""
    answered: set[int] = set()
    for i in order:
        out = c.send(events[i].slot, answer(i))
        answered.add(i)
        first_unanswered = min(set(range(8)) - answered, default=8)
        written += b"".join(bytes(b) for b in out)
        assert len(unframe(written)) == first_unanswered  # exactly the answered prefix
        assert c.pending_responses == 8 - first_unanswered
    assert unframe(written) == [i.to_bytes(4, "big") + b"answer-%d" % i for i in range(8)]


def test_raw_response_buffers_pass_through_uncopied():
    c = conn()
    c.receive_data(find_coordinator(1) + find_coordinator(2))
    first, second = drain(c)
    records = memoryview(bytearray(b"r" * 100_000))
    raw = RawResponse([b"\x00\x00\x00\x02", records])
    assert c.send(second.slot, raw) == ()  # held behind request 1
    out = c.send(first.slot, answer(1))
    assert any(b is records for b in out)  # the same object: no copy of record bytes
    assert out[-3] == (100_004).to_bytes(4, "big")


def test_entity_answers_are_encoded_with_the_request_header():
    c = conn()
    c.receive_data(list_groups(77))
    (e,) = drain(c)
    cls = load_response_schema(16, 4)
    resp = materialize(cls, {"throttle_time": 0, "error_code": 0, "groups": []})
    (frame,) = unframe(b"".join(c.send(e.slot, resp)))
    assert frame[:5] == (77).to_bytes(4, "big") + b"\x00"  # flexible: response header v1
    assert entity_reader(cls)(memoryview(frame).toreadonly(), 5)[0] == resp


def test_none_answer_sends_nothing_but_keeps_order():
    c = conn()
    c.receive_data(find_coordinator(1) + find_coordinator(2) + find_coordinator(3))
    a, b, d = drain(c)
    assert c.send(b.slot, None) == ()
    assert c.send(d.slot, answer(3)) == ()
    out = c.send(a.slot, answer(1))
    assert [f[:4] for f in unframe(b"".join(bytes(x) for x in out))] == [(1).to_bytes(4, "big"),
                                                                         (3).to_bytes(4, "big")]
    assert c.pending_responses == 0


def test_answering_a_slot_twice_or_an_unknown_slot_is_our_bug():
    c = conn()
    c.receive_data(find_coordinator(1) + find_coordinator(2))
    a, b = drain(c)
    c.send(b.slot, answer(2))
    with pytest.raises(LocalProtocolError):
        c.send(b.slot, answer(2))
    c.send(a.slot, answer(1))
    for slot in (a.slot, 2, -1):
        with pytest.raises(LocalProtocolError):
            c.send(slot, answer(0))


def test_a_failed_encode_leaves_the_slot_pending():
    c = conn()
    c.receive_data(list_groups(1))
    (e,) = drain(c)
    with pytest.raises(Exception):
        c.send(e.slot, object())  # not an entity kio can write
    assert c.pending_responses == 1
    assert c.send(e.slot, answer(1))


# -- ApiVersions fallback ---------------------------------------------------------------


def test_unsupported_api_versions_is_answered_with_the_supported_ranges():
    c = conn()
    req = encode_request(18, 3, 5, "c", ApiVersionsRequest(client_software_name="x", client_software_version="1"))
    c.receive_data(find_coordinator(4) + with_version(req, 9) + find_coordinator(6))
    first, answered, last = drain(c)
    assert isinstance(answered, Answered) and answered.buffers == ()  # waits for request 4's answer
    assert answered.header.correlation_id == 5 and c.pending_responses == 3
    out = b"".join(bytes(b) for b in c.send(first.slot, answer(4)))
    fallback = unframe(out)[1]
    assert fallback[:4] == (5).to_bytes(4, "big")  # response header v0: no tag buffer
    decoded, _ = entity_reader(load_response_schema(18, 0))(memoryview(fallback).toreadonly(), 4)
    assert decoded.error_code == ErrorCode.unsupported_version
    assert [(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys] == [
        (r["api_key"], r["min_version"], r["max_version"]) for r in api_version_ranges(ROUTES)]
    assert last.header.correlation_id == 6 and c.pending_responses == 1


def test_unsupported_api_versions_alone_is_written_at_once():
    c = conn()
    c.receive_data(with_version(encode_request(18, 0, 1, None, materialize(
        __import__("kio.schema.api_versions.v0.request", fromlist=["x"]).ApiVersionsRequest, {})), 7))
    (answered,) = drain(c)
    assert isinstance(answered, Answered) and len(answered.buffers) == 1
    assert c.pending_responses == 0


# -- the peer breaks the protocol -------------------------------------------------------


def broken(c: ServerConnection, data: bytes) -> PeerProtocolError:
    with pytest.raises(PeerProtocolError) as info:
        c.receive_data(data)
        drain(c)
    err = info.value
    assert err.close and err.reason
    with pytest.raises(PeerProtocolError) as again:  # broken for good
        c.next_request()
    assert again.value is err
    return err


def test_unknown_api_key():
    frame = bytearray(find_coordinator(1))
    frame[4:6] = (9999).to_bytes(2, "big")
    c = conn()
    err = broken(c, bytes(frame) + find_coordinator(2))
    assert err.error_code == ErrorCode.invalid_request and "9999" in err.reason
    assert c.in_flight == 0  # nothing after it is handed out


def test_unsupported_version():
    err = broken(conn(), with_version(find_coordinator(1), 7))
    assert err.error_code == ErrorCode.unsupported_version
    assert "supported 0-6" in err.reason and "find_coordinator" in err.reason


@pytest.mark.parametrize("payload", [b"", b"\x00\x0a\x00", b"\x00\x0a\x00\x00\x00\x00\x00\x01\x00\x09ab"],
                         ids=["empty", "short", "client-id-past-end"])
def test_truncated_header(payload):
    err = broken(conn(), len(payload).to_bytes(4, "big") + payload)
    assert "truncated" in err.reason


def test_malformed_body():
    frame = bytearray(find_coordinator(1))
    frame[-3:-1] = b"\x7f\xff"  # the key's length runs past the end of the frame
    err = broken(conn(), bytes(frame))
    assert "FindCoordinatorRequest" in err.reason


def test_oversize_frame_is_refused_before_allocating():
    c = conn(max_frame=1000)
    tracemalloc.start()
    try:
        err = broken(c, (0x7FFFFFFF).to_bytes(4, "big") + b"\x00" * 100)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert isinstance(err, FrameTooLarge) and "socket.request.max.bytes=1000" in err.reason
    assert peak < 1 << 20
    with pytest.raises(PeerProtocolError):
        c.receive_data(find_coordinator(2))  # no more bytes are accepted


def test_negative_frame_size():
    err = broken(conn(), (-5).to_bytes(4, "big", signed=True))
    assert "negative" in err.reason


def test_hostile_array_length_in_the_body_is_refused_without_allocating():
    # FindCoordinator v4 batches keys: declare 2^31-1 of them in a 30-byte frame.
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as V4
    frame = bytearray(encode_request(10, 4, 1, None, V4(key_type=0, coordinator_keys=("a",))))
    # header: size 4 + 10 + header tags 1; body: key_type int8, compact array length varint
    at = 4 + 10 + 1 + 1
    assert frame[at] == 2  # compact length 1 + 1
    hostile = bytes(frame[:at]) + b"\xff\xff\xff\xff\x07" + bytes(frame[at + 1:])
    hostile = (len(hostile) - 4).to_bytes(4, "big") + hostile[4:]
    tracemalloc.start()
    try:
        err = broken(conn(), hostile)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "elements declared" in err.reason
    assert peak < 1 << 20


def test_requests_before_the_error_are_still_handed_out():
    c = conn()
    bad = bytearray(find_coordinator(2))
    bad[4:6] = (9999).to_bytes(2, "big")
    c.receive_data(find_coordinator(1) + bytes(bad))
    assert c.next_request().header.correlation_id == 1
    with pytest.raises(PeerProtocolError):
        c.next_request()
