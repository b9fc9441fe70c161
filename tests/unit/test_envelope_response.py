"""EnvelopeResponse with hightide's MetadataOffset tag (10000): without the tag the bytes
equal kio's encoder's; with it, kio's tolerant reader skips it and reads the same fields,
and hightide's decoder (the broker's) returns it."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from hightide.protocol.codec import encode_response, response_schema
from hightide.protocol.envelope_response import (
    API_KEY,
    TAG_METADATA_OFFSET,
    EnvelopeResponse,
    decode_envelope_response,
    encode_envelope_response,
)
from hightide.protocol.primitives import uvarint
from hightide.protocol.tolerant import read_tolerant


@pytest.mark.parametrize("data", [None, b"", b"\x00\x00\x00\x07inner-response"])
def test_without_the_tag_the_bytes_are_kios(data):
    kio = response_schema(API_KEY, 0)(response_data=data, error_code=ErrorCode.invalid_request)
    ours = encode_envelope_response(42, EnvelopeResponse(data, int(ErrorCode.invalid_request)))
    assert ours == encode_response(API_KEY, 0, 42, kio)


def test_kio_skips_the_tag_and_reads_the_same_fields():
    frame = encode_envelope_response(9, EnvelopeResponse(b"abc", 0, 1234))
    unknown: dict = {}
    resp, _ = read_tolerant(response_schema(API_KEY, 0), frame, 4 + 4 + 1, unknown)
    assert (resp.response_data, int(resp.error_code)) == (b"abc", 0)
    assert struct.unpack(">q", unknown[id(resp)][TAG_METADATA_OFFSET])[0] == 1234


@given(corr=st.integers(-2**31, 2**31 - 1), data=st.none() | st.binary(max_size=300),
       error=st.integers(-1, 130), offset=st.none() | st.integers(-1, 2**63 - 1))
def test_round_trip(corr, data, error, offset):
    r = EnvelopeResponse(data, error, offset)
    frame = encode_envelope_response(corr, r)
    assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
    assert decode_envelope_response(frame[4:]) == (corr, r)


def test_the_decoder_skips_other_tags_and_rejects_malformed_frames():
    base = encode_envelope_response(3, EnvelopeResponse(b"x", 0, 7))[4:]
    body = base[:-(1 + len(uvarint(TAG_METADATA_OFFSET)) + 1 + 8)]
    other = b"\x02" + uvarint(0) + b"\x02ab" + uvarint(TAG_METADATA_OFFSET) + b"\x08" + struct.pack(">q", 7)
    assert decode_envelope_response(body + other)[1].metadata_offset == 7
    with pytest.raises(ValueError, match="expected 8"):
        decode_envelope_response(body + b"\x01" + uvarint(TAG_METADATA_OFFSET) + b"\x04" + b"\x00" * 4)
    with pytest.raises(ValueError, match="left over"):
        decode_envelope_response(base + b"\x00")
    with pytest.raises(ValueError, match="runs past"):
        decode_envelope_response(body + b"\x01" + uvarint(TAG_METADATA_OFFSET) + b"\x08\x00")
