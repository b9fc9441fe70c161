"""ServerConnection's gate (authentication): asked with each request's header and frame
size before the body is decoded; a refused request is a Refused event with an open slot,
its body never decoded, and answers keep request order."""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.list_groups.v4.request import ListGroupsRequest

from hightide.protocol.build import materialize
from hightide.protocol.codec import RequestHeader, encode_request, response_schema
from hightide.protocol.server_connection import NEED_DATA, Refused, Request, ServerConnection


@dataclass(frozen=True)
class R:
    min_version: int
    max_version: int


ROUTES = {16: R(0, 5), 18: R(0, 4)}


def test_gate_sees_header_and_size_before_decoding_and_refuses():
    conn: ServerConnection[R] = ServerConnection(ROUTES, 1 << 20)
    seen: list[tuple[int, int]] = []

    def gate(header: RequestHeader, size: int) -> bool:
        seen.append((header.api_key, size))
        return header.api_key == 18

    conn.gate = gate
    versions = encode_request(18, 3, 1, "c", ApiVersionsRequest(client_software_name="t",
                                                                client_software_version="1"))
    # a body that does not decode: refused requests are never decoded, so no protocol error
    refused = encode_request(16, 4, 2, "c", ListGroupsRequest(states_filter=()))[:-2] + b"\xff\xff"
    refused = (len(refused) - 4).to_bytes(4, "big") + refused[4:]
    conn.receive_data(versions + refused)
    first, second = conn.next_request(), conn.next_request()
    assert isinstance(first, Request) and isinstance(second, Refused)
    assert [k for k, _ in seen] == [18, 16] and seen[1][1] == len(refused) - 4
    assert conn.next_request() is NEED_DATA and conn.pending_responses == 2
    # the refused slot's answer waits for the earlier request's, in order
    error = materialize(response_schema(16, 4), {"error_code": 58, "groups": [], "throttle_time": 0})
    assert conn.send(second.slot, error) == ()
    answer = materialize(response_schema(18, 3), {"error_code": 0, "api_keys": [], "throttle_time": 0})
    out = conn.send(first.slot, answer)
    assert len(out) == 2 and conn.pending_responses == 0
