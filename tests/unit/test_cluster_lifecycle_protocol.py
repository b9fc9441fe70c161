"""BrokerHeartbeat responses with hightide's LowestAcknowledgedOffset tag (10000): without
the tag the bytes equal kio's encoder's for every version; with it, kio's tolerant reader
skips the tag and reads the same fields, and hightide's decoder returns it."""

from __future__ import annotations

import struct
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from hightide.protocol.broker_heartbeat_response import (
    API_KEY,
    TAG_LOWEST_ACKNOWLEDGED_OFFSET,
    BrokerHeartbeatResponse,
    decode_broker_heartbeat_response,
    encode_broker_heartbeat_response,
)
from hightide.protocol.codec import encode_response, response_schema
from hightide.protocol.primitives import uvarint
from hightide.protocol.tolerant import read_tolerant

VERSIONS = [0, 1, 2]


def _kio(version: int, r: BrokerHeartbeatResponse):
    cls = response_schema(API_KEY, version)
    return cls(throttle_time=timedelta(milliseconds=r.throttle_ms), error_code=ErrorCode(r.error_code),
               is_caught_up=r.is_caught_up, is_fenced=r.is_fenced, should_shut_down=r.should_shut_down)


@pytest.mark.parametrize("version", VERSIONS)
def test_without_the_tag_the_bytes_are_kios(version):
    r = BrokerHeartbeatResponse(error_code=77, is_caught_up=True, is_fenced=False, should_shut_down=True,
                                throttle_ms=5)
    assert encode_broker_heartbeat_response(version, 42, r) == encode_response(API_KEY, version, 42, _kio(version, r))


@pytest.mark.parametrize("version", VERSIONS)
def test_kio_skips_the_tag_and_reads_the_same_fields(version):
    r = BrokerHeartbeatResponse(is_caught_up=True, is_fenced=False, lowest_acknowledged_offset=1234)
    frame = encode_broker_heartbeat_response(version, 9, r)
    unknown: dict = {}
    resp, _ = read_tolerant(response_schema(API_KEY, version), frame, 4 + 4 + 1, unknown)
    assert (resp.is_caught_up, resp.is_fenced, resp.should_shut_down, int(resp.error_code)) == (True, False, False, 0)
    assert struct.unpack(">q", unknown[id(resp)][TAG_LOWEST_ACKNOWLEDGED_OFFSET])[0] == 1234


@given(version=st.sampled_from(VERSIONS), corr=st.integers(-2**31, 2**31 - 1),
       error=st.integers(-1, 130), flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
       throttle=st.integers(0, 2**31 - 1), lowest=st.none() | st.integers(-1, 2**63 - 1))
def test_round_trip(version, corr, error, flags, throttle, lowest):
    r = BrokerHeartbeatResponse(error, *flags, throttle_ms=throttle, lowest_acknowledged_offset=lowest)
    frame = encode_broker_heartbeat_response(version, corr, r)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    assert decode_broker_heartbeat_response(version, frame[4:]) == (corr, r)


def test_the_decoder_skips_other_tags_and_rejects_malformed_frames():
    base = encode_broker_heartbeat_response(1, 3, BrokerHeartbeatResponse(lowest_acknowledged_offset=7))[4:]
    body = base[:-(1 + len(uvarint(TAG_LOWEST_ACKNOWLEDGED_OFFSET)) + 1 + 8)]
    other = b"\x02" + uvarint(0) + b"\x02ab" + uvarint(TAG_LOWEST_ACKNOWLEDGED_OFFSET) + b"\x08" + struct.pack(">q", 7)
    assert decode_broker_heartbeat_response(1, body + other)[1].lowest_acknowledged_offset == 7
    short = b"\x01" + uvarint(TAG_LOWEST_ACKNOWLEDGED_OFFSET) + b"\x04" + b"\x00" * 4
    with pytest.raises(ValueError, match="expected 8"):
        decode_broker_heartbeat_response(1, body + short)
    with pytest.raises(ValueError, match="left over"):
        decode_broker_heartbeat_response(1, base + b"\x00")
    with pytest.raises(ValueError, match="runs past"):
        decode_broker_heartbeat_response(1, body + b"\x01" + uvarint(TAG_LOWEST_ACKNOWLEDGED_OFFSET) + b"\x08\x00")
    with pytest.raises(ValueError, match="not supported"):
        encode_broker_heartbeat_response(3, 1, BrokerHeartbeatResponse())
