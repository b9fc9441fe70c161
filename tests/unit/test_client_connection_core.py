"""The sans-IO client connection core (hightide.protocol.client_connection): framing,
correlation, decoding and the ApiVersions fallback, bytes in and events out — no
sockets, no event loop."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.protocol.build import materialize
from hightide.protocol.client_connection import (
    Broken,
    ClientConnection,
    Failed,
    HandshakeDone,
    HandshakeFailed,
    Response,
)
from hightide.protocol.codec import encode_response, parse_header, request_schema, response_schema
from hightide.protocol.errors import ErrorCode, KafkaError, LocalProtocolError

FIND_COORDINATOR = 10


def find_coordinator(key: str) -> object:
    return materialize(request_schema(FIND_COORDINATOR, 3), {"key": key, "key_type": 0})


def answer(corr: int, host: str, api_key: int = FIND_COORDINATOR, version: int = 3) -> bytes:
    """A FindCoordinator v3 answer to ``corr`` naming ``host`` (size prefix included)."""
    body = materialize(response_schema(api_key, version), {
        "throttle_time": 0, "error_code": 0, "error_message": None, "node_id": 7, "host": host, "port": 9092})
    return encode_response(api_key, version, corr, body)


def api_versions_answer(corr: int, version: int, error: int = 0, ranges: dict[int, tuple[int, int]] | None = None
                        ) -> bytes:
    body = materialize(response_schema(18, version), {"error_code": error, "throttle_time": 0, "api_keys": [
        {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in (ranges or {}).items()]})
    return encode_response(18, version, corr, body)


def sent_requests(data: bytes) -> list[tuple[int, int, int]]:
    """(api key, version, correlation id) of each request frame in ``data``."""
    out, pos = [], 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos)[0]
        header, _ = parse_header(data[pos + 4:pos + 4 + size])
        out.append((header.api_key, header.api_version, header.correlation_id))
        pos += 4 + size
    return out


def test_requests_get_distinct_correlation_ids_and_are_queued_in_order():
    core = ClientConnection("cid")
    a = core.send_request(FIND_COORDINATOR, 3, find_coordinator("a"))
    b = core.send_request(FIND_COORDINATOR, 3, find_coordinator("b"))
    assert a != b and core.pending == 2
    assert sent_requests(core.data_to_send()) == [(10, 3, a), (10, 3, b)]
    assert core.data_to_send() == b""
    assert core.requests_sent[FIND_COORDINATOR] == 2


def test_answers_out_of_order_are_matched_by_correlation_id():
    core = ClientConnection("cid")
    corrs = {k: core.send_request(FIND_COORDINATOR, 3, find_coordinator(k)) for k in ("a", "b", "c")}
    events = core.receive_data(answer(corrs["c"], "c") + answer(corrs["a"], "a") + answer(corrs["b"], "b"))
    assert [(type(e), e.correlation_id, e.body.host) for e in events] == [  # type: ignore[union-attr]
        (Response, corrs["c"], "c"), (Response, corrs["a"], "a"), (Response, corrs["b"], "b")]
    assert core.pending == 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=12))
def test_partial_frames_of_any_split_give_the_same_events(cuts):
    core = ClientConnection("cid", receive_chunk=64)  # small: frames cross the rolling buffer
    corrs = [core.send_request(FIND_COORDINATOR, 3, find_coordinator(f"k{i}")) for i in range(3)]
    stream = b"".join(answer(c, f"host-{c}" * 5) for c in corrs)
    events, pos = [], 0
    for cut in cuts:
        events += core.receive_data(stream[pos:pos + cut])
        pos += cut
    events += core.receive_data(stream[pos:])
    assert [(e.correlation_id, e.body.host) for e in events] == [  # type: ignore[union-attr]
        (c, f"host-{c}" * 5) for c in corrs]


def test_get_buffer_and_buffer_updated_like_a_buffered_protocol():
    core = ClientConnection("cid")
    corr = core.send_request(FIND_COORDINATOR, 3, find_coordinator("x"))
    data = answer(corr, "x")
    buf = core.get_buffer(len(data))
    buf[:5] = data[:5]
    assert core.buffer_updated(5) == []
    buf = core.get_buffer(len(data) - 5)
    buf[:len(data) - 5] = data[5:]
    [event] = core.buffer_updated(len(data) - 5)
    assert isinstance(event, Response) and event.body.host == "x"


def test_an_answer_to_a_forgotten_or_unknown_request_is_dropped():
    core = ClientConnection("cid")
    gone = core.send_request(FIND_COORDINATOR, 3, find_coordinator("gone"))
    kept = core.send_request(FIND_COORDINATOR, 3, find_coordinator("kept"))
    core.forget(gone)
    events = core.receive_data(answer(gone, "gone") + answer(12345, "stranger") + answer(kept, "kept"))
    assert [(e.correlation_id, e.body.host) for e in events] == [(kept, "kept")]  # type: ignore[union-attr]


@pytest.mark.parametrize("size", [-1, 0, 3, 101 * 1024 * 1024])
def test_an_impossible_frame_size_breaks_the_connection(size):
    core = ClientConnection("cid")
    corr = core.send_request(FIND_COORDINATOR, 3, find_coordinator("x"))
    events = core.receive_data(struct.pack(">i", size) + b"\0" * max(0, min(size, 8)) + answer(corr, "x"))
    assert len(events) == 1 and isinstance(events[0], Broken) and "frame size" in events[0].reason
    assert core.broken is not None and core.pending == 0
    assert core.receive_data(answer(corr, "x")) == []  # nothing is decoded any more
    with pytest.raises(LocalProtocolError):
        core.send_request(FIND_COORDINATOR, 3, find_coordinator("y"))


def test_a_malformed_answer_fails_its_request_only():
    core = ClientConnection("cid")
    bad = core.send_request(FIND_COORDINATOR, 3, find_coordinator("bad"))
    good = core.send_request(FIND_COORDINATOR, 3, find_coordinator("good"))
    truncated = struct.pack(">i", bad) + b"\x00\x01"
    events = core.receive_data(struct.pack(">i", len(truncated)) + truncated + answer(good, "good"))
    assert isinstance(events[0], Failed) and events[0].correlation_id == bad
    assert events[0].error_code == ErrorCode.corrupt_message and events[0].error is None
    assert isinstance(events[1], Response) and events[1].body.host == "good"
    assert core.broken is None


def test_a_custom_decoder_gets_the_frame_and_its_errors_become_failures():
    core = ClientConnection("cid")
    ok = core.send_request(FIND_COORDINATOR, 3, find_coordinator("a"), decoder=lambda frame: frame[:4])
    refused = core.send_request(FIND_COORDINATOR, 3, find_coordinator("b"),
                                decoder=lambda frame: int("not a number"))
    own = KafkaError(ErrorCode.offset_out_of_range, "the decoder's own")

    def raise_own(frame: bytes) -> None:
        raise own
    mine = core.send_request(FIND_COORDINATOR, 3, find_coordinator("c"), decoder=raise_own)
    events = core.receive_data(answer(ok, "a") + answer(refused, "b") + answer(mine, "c"))
    assert events[0] == Response(ok, struct.pack(">i", ok))
    assert isinstance(events[1], Failed) and events[1].error_code == ErrorCode.corrupt_message
    assert "ValueError" in events[1].message
    assert isinstance(events[2], Failed) and events[2].error is own


def test_handshake_v3_records_the_ranges():
    core = ClientConnection("cid", software=("hightide", "9.9"))
    core.start_handshake()
    [(key, version, corr)] = sent_requests(core.data_to_send())
    assert (key, version) == (18, 3)
    [event] = core.receive_data(api_versions_answer(corr, 3, ranges={18: (0, 3), 10: (0, 4)}))
    assert event == HandshakeDone(3, {18: (0, 3), 10: (0, 4)})
    assert core.api_versions == {18: (0, 3), 10: (0, 4)} and core.api_versions_version == 3


def test_handshake_falls_back_to_the_advertised_version_then_v0():
    core = ClientConnection("cid")
    core.start_handshake()
    [(_, _, corr)] = sent_requests(core.data_to_send())
    # UNSUPPORTED_VERSION in a v0 body advertising ApiVersions 0..2: retry with v2
    assert core.receive_data(api_versions_answer(corr, 0, error=35, ranges={18: (0, 2)})) == []
    [(key, version, corr2)] = sent_requests(core.data_to_send())
    assert (key, version) == (18, 2) and corr2 != corr
    # refused again, advertising nothing: v0
    assert core.receive_data(api_versions_answer(corr2, 0, error=35)) == []
    [(_, version, corr3)] = sent_requests(core.data_to_send())
    assert version == 0
    [event] = core.receive_data(api_versions_answer(corr3, 0, ranges={3: (0, 12)}))
    assert event == HandshakeDone(0, {3: (0, 12)})
    assert core.requests_sent[18] == 3


def test_handshake_gives_up_after_three_refusals_and_reports_other_errors():
    core = ClientConnection("cid")
    core.start_handshake()
    for _ in range(2):
        [(_, _, corr)] = sent_requests(core.data_to_send())
        assert core.receive_data(api_versions_answer(corr, 0, error=35)) == []
    [(_, _, corr)] = sent_requests(core.data_to_send())
    [event] = core.receive_data(api_versions_answer(corr, 0, error=35))
    assert isinstance(event, HandshakeFailed) and event.error_code == ErrorCode.unsupported_version

    other = ClientConnection("cid")
    other.start_handshake()
    [(_, _, corr)] = sent_requests(other.data_to_send())
    [event] = other.receive_data(api_versions_answer(corr, 3, error=int(ErrorCode.cluster_authorization_failed)))
    assert event == HandshakeFailed(int(ErrorCode.cluster_authorization_failed), "ApiVersions v3 failed")


def test_connection_lost_empties_the_pending_table():
    core = ClientConnection("cid")
    corr = core.send_request(FIND_COORDINATOR, 3, find_coordinator("x"))
    assert core.connection_lost("closed by broker") == Broken("closed by broker")
    assert core.pending == 0 and core.receive_data(answer(corr, "x")) == []


def test_a_large_answer_is_handed_to_its_decoder_without_a_copy_and_stays_valid():
    """An answer larger than the receive chunk gets a buffer of its own that the
    connection never writes again: the decoder gets it read-only (no copy) and may keep
    it; a small answer is copied out of the receive buffer (bytes)."""
    core = ClientConnection("cid", receive_chunk=64)
    kept: list[bytes | memoryview] = []
    big, small, big2 = (core.send_request(FIND_COORDINATOR, 3, find_coordinator(k), decoder=kept.append)
                        for k in ("a", "b", "c"))
    frames = [answer(big, "h" * 300), answer(small, "x"), answer(big2, "g" * 200)]
    events = []
    for f in frames:
        for i in range(0, len(f), 29):
            buf = core.get_buffer(29)
            n = min(29, len(buf), len(f) - i)
            buf[:n] = f[i:i + n]
            events += core.buffer_updated(n)
    assert [e.correlation_id for e in events] == [big, small, big2]
    assert isinstance(kept[0], memoryview) and kept[0].readonly and isinstance(kept[1], bytes)
    assert [bytes(k) for k in kept] == [f[4:] for f in frames]  # the first still intact after the others
