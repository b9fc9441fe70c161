"""Envelope (58) responses carrying hightide's extension (cluster mode, read-after-write):
a top-level tagged field

* 10000 MetadataOffset (int64): the offset of the last metadata record (other than a
  NoOp) the controller had applied when it answered the inner request, so it covers
  every record the inner write committed; -1 when the controller did not say (an error
  before the inner request ran).

EnvelopeResponse v0 is flexible, so a broker that does not know the tag skips it. A
hightide broker answers the forwarded request only once the lowest acknowledged offset
(BrokerHeartbeatResponse tag 10000) reaches MetadataOffset (docs/protocol-extensions.md).
Without the tag the bytes equal kio's encoder's (a unit test checks it).

The decoder is the broker's: it returns the standard fields and the tag (None when
absent), and skips any other tagged field.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .primitives import int64_tag_section, read_int64_tag, read_uvarint, skip_tags, uvarint

API_KEY = 58
VERSION = 0
TAG_METADATA_OFFSET = 10000

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class EnvelopeResponse:
    response_data: bytes | None = None  # the inner response: header + body, no size prefix
    error_code: int = 0
    metadata_offset: int | None = None  # None: not sent / not received


def encode_envelope_response(correlation_id: int, resp: EnvelopeResponse) -> bytes:
    """A complete response frame (size prefix, header v1, body). The tag is written when
    ``resp.metadata_offset`` is not None."""
    out = bytearray(b"\x00\x00\x00\x00")
    out += _I32.pack(correlation_id) + b"\x00"  # response header v1: empty tag section
    data = resp.response_data
    if data is None:
        out += b"\x00"
    else:
        out += uvarint(len(data) + 1)
        out += data
    out += _I16.pack(resp.error_code)
    out += int64_tag_section(TAG_METADATA_OFFSET, resp.metadata_offset)
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_envelope_response(frame: bytes | memoryview) -> tuple[int, EnvelopeResponse]:
    """Decode a response frame *without* its size prefix (correlation id first). Returns
    ``(correlation id, response)``. Raises ValueError or struct.error on a malformed
    frame (bytes left over, a field running past the end, a MetadataOffset tag that is
    not 8 bytes)."""
    corr = _I32.unpack_from(frame, 0)[0]
    pos = skip_tags(frame, 4)
    size, pos = read_uvarint(frame, pos)
    data: bytes | None = None
    if size:
        if pos + size - 1 > len(frame):
            raise ValueError("ResponseData runs past the end of the frame")
        data = bytes(frame[pos:pos + size - 1])
        pos += size - 1
    error = _I16.unpack_from(frame, pos)[0]
    pos += _I16.size
    offset, pos = read_int64_tag(frame, pos, TAG_METADATA_OFFSET, "MetadataOffset")
    if pos != len(frame):
        raise ValueError(f"{len(frame) - pos} bytes left over after EnvelopeResponse v0")
    return corr, EnvelopeResponse(data, error, offset)


__all__ = ["API_KEY", "TAG_METADATA_OFFSET", "EnvelopeResponse", "encode_envelope_response",
           "decode_envelope_response"]
