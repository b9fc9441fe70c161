"""BrokerHeartbeat (63) responses carrying hightide's extension (seed 004): a top-level
tagged field

* 10000 LowestAcknowledgedOffset (int64): the lowest metadata offset applied by every
  unfenced broker that is not in controlled shutdown, as the controller knows it; -1
  when unknown (no such broker, or one has not reported yet).

Every BrokerHeartbeat version (0-2) is flexible, so the tag rides on all of them and a
broker that does not know it skips it (the seed's proposal of a new v1 field collides
with Kafka's real v1, hence a tag; see docs/protocol-extensions.md). Without the tag the
bytes equal kio's encoder's (a unit test checks every version).

The decoder is the broker's: it returns the standard fields and the tag (None when
absent), and skips any other tagged field.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .primitives import int64_tag_section, read_int64_tag, skip_tags

API_KEY = 63
VERSIONS = range(0, 3)
TAG_LOWEST_ACKNOWLEDGED_OFFSET = 10000

_BODY = struct.Struct(">ih???")  # throttle ms, error code, IsCaughtUp, IsFenced, ShouldShutDown
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponse:
    error_code: int = 0
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False
    throttle_ms: int = 0
    lowest_acknowledged_offset: int | None = None  # None: not sent / not received


def _check_version(version: int) -> None:
    if version not in VERSIONS:
        raise ValueError(f"BrokerHeartbeat v{version} is not supported (0-2)")


def encode_broker_heartbeat_response(version: int, correlation_id: int, resp: BrokerHeartbeatResponse) -> bytes:
    """A complete response frame (size prefix, header v1, body). The tag is written when
    ``resp.lowest_acknowledged_offset`` is not None."""
    _check_version(version)
    out = bytearray(b"\x00\x00\x00\x00")
    out += _I32.pack(correlation_id) + b"\x00"  # response header v1: empty tag section
    out += _BODY.pack(resp.throttle_ms, resp.error_code, resp.is_caught_up, resp.is_fenced, resp.should_shut_down)
    out += int64_tag_section(TAG_LOWEST_ACKNOWLEDGED_OFFSET, resp.lowest_acknowledged_offset)
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_broker_heartbeat_response(version: int, frame: bytes | memoryview) -> tuple[int, BrokerHeartbeatResponse]:
    """Decode a response frame *without* its size prefix (correlation id first). Returns
    ``(correlation id, response)``. Raises ValueError or struct.error on a malformed
    frame (including bytes left over, or a LowestAcknowledgedOffset tag that is not 8
    bytes)."""
    _check_version(version)
    corr = _I32.unpack_from(frame, 0)[0]
    pos = skip_tags(frame, 4)
    throttle, error, caught_up, fenced, shut_down = _BODY.unpack_from(frame, pos)
    pos += _BODY.size
    lowest, pos = read_int64_tag(frame, pos, TAG_LOWEST_ACKNOWLEDGED_OFFSET, "LowestAcknowledgedOffset")
    if pos != len(frame):
        raise ValueError(f"{len(frame) - pos} bytes left over after BrokerHeartbeat v{version}")
    return corr, BrokerHeartbeatResponse(error, caught_up, fenced, shut_down, throttle, lowest)
