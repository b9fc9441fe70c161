"""The request schema cache (issue 33): a schema module kio cannot import *now* (out of
file descriptors, EMFILE) is never cached as "unsupported", and a request whose schema
cannot be loaded is never decoded (its flexible header's tag byte taken for the body);
the connection is closed with the reason instead, and the next request works."""

from __future__ import annotations

import datetime
import errno
from collections.abc import Iterator

import pytest
from kio.schema.list_groups.v4.request import ListGroupsRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from hightide.protocol import codec
from hightide.protocol.codec import encode_request, parse_header, request_schema
from hightide.protocol.errors import PeerProtocolError
from hightide.protocol.server_connection import Request, ServerConnection


class _R:
    def __init__(self, lo: int, hi: int) -> None:
        self.min_version, self.max_version, self.name = lo, hi, "r"


ROUTES = {0: _R(3, 11), 16: _R(0, 5)}


@pytest.fixture
def emfile_once(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int]]]:
    """kio's loader fails like an import at EMFILE on its first call, then works; the
    schema caches are emptied before and after (other tests must not see either)."""
    real = codec.load_request_schema
    calls: list[tuple[int, int]] = []

    def flaky(api_key: int, version: int):  # type: ignore[no-untyped-def]
        calls.append((api_key, version))
        if len(calls) == 1:
            exc = ImportError(f"cannot import the schema of {api_key} v{version}")
            exc.__cause__ = OSError(errno.EMFILE, "Too many open files")
            raise exc
        return real(api_key, version)

    request_schema.cache_clear()
    monkeypatch.setattr(codec, "load_request_schema", flaky)
    yield calls
    request_schema.cache_clear()


def test_a_failed_import_is_not_cached_as_unsupported(emfile_once: list[tuple[int, int]]) -> None:
    with pytest.raises(ImportError):
        request_schema(16, 4)
    assert request_schema(16, 4) is ListGroupsRequest  # loaded on the next request
    assert len(emfile_once) == 2


def test_a_schema_kio_does_not_have_is_none() -> None:
    assert request_schema(16, 999) is None
    assert request_schema(9999, 0) is None


def test_a_request_whose_schema_cannot_be_loaded_closes_the_connection(emfile_once: list[tuple[int, int]]) -> None:
    """Produce v9 is flexible (header v2) and decoded by hand: on the old code the failed
    load was cached as None, the header's tag byte was left in the body and the body
    decoded from it (or refused as unsupported until a restart)."""
    frame = encode_request(0, 9, 7, "c", ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=1),
        topic_data=(TopicProduceData(name="t", partition_data=(PartitionProduceData(index=0, records=b""),)),)))
    with pytest.raises(PeerProtocolError, match="cannot load the request schema"):
        parse_header(memoryview(frame)[4:])
    c = ServerConnection(ROUTES, 1 << 20, 32 * 1024)
    c.receive_data(frame)
    event = c.next_request()
    assert isinstance(event, Request)
    assert event.header.correlation_id == 7 and event.body.topic_data[0].name == "t"


def test_the_connection_that_hit_the_failure_is_closed_with_the_reason(emfile_once: list[tuple[int, int]]) -> None:
    c = ServerConnection(ROUTES, 1 << 20, 32 * 1024)
    c.receive_data(encode_request(16, 4, 1, None, ListGroupsRequest(states_filter=())))
    with pytest.raises(PeerProtocolError, match="Too many open files"):
        c.next_request()
    c2 = ServerConnection(ROUTES, 1 << 20, 32 * 1024)
    c2.receive_data(encode_request(16, 4, 2, None, ListGroupsRequest(states_filter=())))
    event = c2.next_request()
    assert isinstance(event, Request) and event.header.correlation_id == 2
