"""Request codec: header parsing, decoding every kio request, tolerance of unknown tags."""

from __future__ import annotations

import dataclasses
import datetime
import io
import itertools
import uuid
from collections.abc import Iterator
from dataclasses import MISSING, fields, is_dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)

from hightide.protocol.codec import (
    API_VERSIONS_KEY,
    RequestHeader,
    decode_request,
    encode_request,
    encode_response,
    parse_header,
    request_schema,
    response_header_bytes,
)
from hightide.protocol.errors import ErrorCode, PeerProtocolError
from hightide.protocol.records import build_batch

# -- helpers --------------------------------------------------------------------------


def _all_request_schemas() -> Iterator[tuple[int, int, type]]:
    keys = {name: key for key, name in api_key_map.items()}
    for name, versions in sorted(schema_name_map.items()):
        if name not in keys:
            continue  # headers and other non-payload schemas
        for version in sorted(versions):
            cls = request_schema(keys[name], version)
            if cls is not None:
                yield keys[name], version, cls


ALL_REQUESTS = list(_all_request_schemas())
FLEXIBLE_REQUESTS = [r for r in ALL_REQUESTS if r[2].__flexible__]


def _ids(items: list[tuple[int, int, type]]) -> list[str]:
    return [f"{cls.__name__}-v{v}" for _, v, cls in items]


def minimal(cls: type, counter: Iterator[int] | None = None) -> Any:
    """An instance of ``cls`` with every required field set: one element in each
    entity array (so nested structs are present), distinct small values so nested
    encodings are recognisable, tagged and defaulted fields left at their default."""
    counter = counter if counter is not None else itertools.count(1)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if f.default is not MISSING or f.default_factory is not MISSING:
            continue
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField):
            kwargs[f.name] = (minimal(kind.type_, counter),)
        elif isinstance(kind, EntityField):
            kwargs[f.name] = minimal(kind.type_, counter)
        elif isinstance(kind, PrimitiveTupleField):
            kwargs[f.name] = ()
        else:
            kwargs[f.name] = _primitive(get_schema_field_type(f), kind.type_, next(counter))
    return cls(**kwargs)


def _primitive(kafka_type: str, type_: type, n: int) -> Any:
    if kafka_type == "bool":
        return n % 2 == 0
    if kafka_type == "bytes":
        return bytes([n % 256, 0xAB])
    if kafka_type == "records":
        return None
    if kafka_type == "string":
        return f"s{n}"
    if kafka_type == "uuid":
        return uuid.UUID(int=n)
    if kafka_type.startswith("timedelta"):
        return datetime.timedelta(milliseconds=n)
    if kafka_type == "float64":
        return type_(n + 0.5)
    return type_(n % 100)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def tag_section(tags: dict[int, bytes]) -> bytes:
    return uvarint(len(tags)) + b"".join(
        uvarint(t) + uvarint(len(d)) + d for t, d in sorted(tags.items()))


def encode_entity(entity: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


def body_frame(api_key: int, version: int, entity: Any, client_id: str | None = "test") -> bytes:
    """The frame without its 4-byte size prefix, as FrameReader hands it over."""
    frame = encode_request(api_key, version, 42, client_id, entity)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    return frame[4:]


def first_nested(entity: Any) -> tuple[str, bool] | None:
    """(field name, is_array) of the first untagged, non-empty struct field."""
    for f in fields(entity):
        if get_field_tag(f) is not None:
            continue
        value = getattr(entity, f.name)
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField) and value:
            return f.name, True
        if isinstance(kind, EntityField) and value is not None:
            return f.name, False
    return None


def nested_value(entity: Any, where: tuple[str, bool]) -> Any:
    value = getattr(entity, where[0])
    return value[0] if where[1] else value


def same_fields(decoded: Any, entity: Any) -> bool:
    """``decoded == entity``; for a request a hand-written decoder returns as its own
    types (OffsetCommit v8/v9: protocol/offset_commit_request.py, Produce v3-v11:
    protocol/produce_request.py), the same value in
    every field of kio's entity, recursively."""
    if type(decoded) is type(entity) or not (is_dataclass(entity) or isinstance(entity, tuple)):
        return bool(decoded == entity)
    if is_dataclass(entity):
        return all(same_fields(getattr(decoded, f.name), getattr(entity, f.name)) for f in fields(entity))
    return len(decoded) == len(entity) and all(same_fields(d, e) for d, e in zip(decoded, entity))


# -- header ---------------------------------------------------------------------------


def test_parse_header_fields_and_body_offset() -> None:
    from kio.schema.metadata.v12.request import MetadataRequest
    req = MetadataRequest(topics=None, allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    frame = body_frame(3, 12, req, client_id="clïent")
    header, off = parse_header(frame)
    assert header == RequestHeader(3, 12, 42, "clïent")
    # header v2: 10 fixed bytes, client id, one empty tag section
    assert off == 10 + len("clïent".encode()) + 1
    assert decode_request(header, frame, off) == req


def test_parse_header_null_client_id_non_flexible() -> None:
    from kio.schema.metadata.v0.request import MetadataRequest
    req = MetadataRequest(topics=())
    frame = body_frame(3, 0, req, client_id=None)
    header, off = parse_header(frame)
    assert header == RequestHeader(3, 0, 42, None)
    assert off == 10  # header v1 has no tag section


def test_parse_header_skips_header_tagged_fields() -> None:
    from kio.schema.metadata.v12.request import MetadataRequest
    req = MetadataRequest(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=True)
    frame = body_frame(3, 12, req, client_id="c")
    assert frame[11] == 0  # the empty header tag section
    frame = frame[:11] + tag_section({3: b"xyz", 10500: b"\x01" * 200}) + frame[12:]
    header, off = parse_header(frame)
    assert header.client_id == "c"
    assert decode_request(header, frame, off) == req


@pytest.mark.parametrize("cut", [0, 5, 9])
def test_parse_header_truncated(cut: int) -> None:
    frame = body_frame(18, 3, minimal(load_request_schema(18, 3)))
    with pytest.raises(PeerProtocolError):
        parse_header(frame[:cut])


def test_parse_header_client_id_truncated() -> None:
    frame = body_frame(18, 3, minimal(load_request_schema(18, 3)), client_id="abcdef")
    with pytest.raises(PeerProtocolError):
        parse_header(frame[:13])


def test_parse_header_tag_section_truncated() -> None:
    frame = body_frame(18, 3, minimal(load_request_schema(18, 3)), client_id="c")
    bad = frame[:11] + tag_section({1: b"0123456789"})[:-3]
    with pytest.raises(PeerProtocolError):
        parse_header(bad)
    with pytest.raises(PeerProtocolError):
        parse_header(frame[:11] + b"\x80")  # unterminated varint


def test_unknown_schema_is_unsupported_version() -> None:
    frame = body_frame(18, 3, minimal(load_request_schema(18, 3)))
    header, off = parse_header(frame)
    bogus = RequestHeader(18, 999, header.correlation_id, header.client_id)
    with pytest.raises(PeerProtocolError) as info:
        decode_request(bogus, frame, off)
    assert info.value.error_code == ErrorCode.unsupported_version


# -- every request kio knows ----------------------------------------------------------


def test_schema_list_is_complete() -> None:
    assert len(ALL_REQUESTS) > 250
    assert {(0, 9), (1, 12), (1, 17), (3, 12), (2, 9), (18, 3), (19, 7)} <= {(k, v) for k, v, _ in ALL_REQUESTS}


@pytest.mark.parametrize(("api_key", "version", "cls"), ALL_REQUESTS, ids=_ids(ALL_REQUESTS))
def test_round_trip_and_truncation(api_key: int, version: int, cls: type) -> None:
    entity = minimal(cls)
    frame = body_frame(api_key, version, entity)
    header, off = parse_header(memoryview(frame).toreadonly())
    assert (header.api_key, header.api_version, header.correlation_id) == (api_key, version, 42)
    assert same_fields(decode_request(header, memoryview(frame).toreadonly(), off), entity)
    for cut in range(off, len(frame)):
        with pytest.raises(PeerProtocolError):
            decode_request(header, frame[:cut], off)


@pytest.mark.parametrize(("api_key", "version", "cls"), FLEXIBLE_REQUESTS, ids=_ids(FLEXIBLE_REQUESTS))
def test_unknown_tags_are_skipped_and_collected(api_key: int, version: int, cls: type) -> None:
    entity = minimal(cls)
    frame = body_frame(api_key, version, entity)
    header, off = parse_header(frame)
    assert frame[-1] == 0, "minimal entity should end with an empty top-level tag section"
    body = frame[:-1] + tag_section({10001: b"top", 10002: b""})
    where = first_nested(entity)
    if where is not None:
        nested = encode_entity(nested_value(entity, where))
        assert nested[-1] == 0 and body.count(nested) == 1
        end = body.index(nested) + len(nested) - 1
        body = body[:end] + tag_section({20000: b"nested\x00"}) + body[end + 1:]

    unknown: dict = {}
    decoded = decode_request(header, memoryview(body).toreadonly(), off, unknown)
    assert same_fields(decoded, entity)
    expected = {id(decoded): {10001: b"top", 10002: b""}}
    if where is not None:
        expected[id(nested_value(decoded, where))] = {20000: b"nested\x00"}
    assert unknown == expected

    # a truncated unknown tag is still an error, not a silent skip
    for cut in (len(body) - 1, len(body) - 3):
        with pytest.raises(PeerProtocolError):
            decode_request(header, body[:cut], off, {})


@pytest.mark.parametrize("cut", [1, 2, 6])
def test_unknown_tag_value_truncated_at_end_of_frame(cut: int) -> None:
    # Regression: the tolerant reader used to slice a short value and accept it.
    entity = minimal(load_request_schema(3, 12))
    frame = body_frame(3, 12, entity)
    header, off = parse_header(frame)
    body = frame[:-1] + tag_section({10001: b"topdata"})
    with pytest.raises(PeerProtocolError):
        decode_request(header, body[:-cut], off, {})


def test_no_unknown_tags_leaves_dict_empty() -> None:
    cls = load_request_schema(3, 12)
    entity = minimal(cls)
    frame = body_frame(3, 12, entity)
    header, off = parse_header(frame)
    unknown: dict = {}
    assert decode_request(header, frame, off, unknown) == entity
    assert unknown == {}


# -- important APIs with generated values ---------------------------------------------


def _with_top_level_tags(entity: Any, body: bytes, tags: dict[int, bytes]) -> bytes:
    """Append ``tags`` (all above any known tag) to the top-level tag section of the
    encoded ``entity`` (the last bytes of ``body``), keeping known tags in place."""
    untagged = dataclasses.replace(entity, **{
        f.name: f.default for f in fields(entity) if get_field_tag(f) is not None})
    start = len(body) - len(encode_entity(entity)) + len(encode_entity(untagged)) - 1
    section = memoryview(body)[start:]
    count = section[0]
    assert count < 0x80  # a one-byte varint: kio entities have few known tags
    return bytes(body[:start]) + uvarint(count + len(tags)) + bytes(section[1:]) + b"".join(
        uvarint(t) + uvarint(len(d)) + d for t, d in sorted(tags.items()))


GENERATED = [(1, 12), (1, 17), (3, 12), (2, 9), (18, 3), (19, 7), (3, 9), (3, 0)]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
@pytest.mark.parametrize(("api_key", "version"), GENERATED)
def test_generated_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    cls = load_request_schema(api_key, version)
    entity = data.draw(st.from_type(cls))
    frame = body_frame(api_key, version, entity)
    header, off = parse_header(frame)
    assert decode_request(header, frame, off) == entity
    if cls.__flexible__:
        body = _with_top_level_tags(entity, frame, {10000: b"x", 12345: data.draw(st.binary(max_size=40))})
        unknown: dict = {}
        decoded = decode_request(header, body, off, unknown)
        assert decoded == entity
        assert set(unknown[id(decoded)]) == {10000, 12345}
        assert unknown[id(decoded)][10000] == b"x"


def produce_v9(records: bytes | None) -> Any:
    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    return ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
        topic_data=(TopicProduceData(name="orders", partition_data=(
            PartitionProduceData(index=0, records=records),
            PartitionProduceData(index=3, records=None))),))


@settings(max_examples=25, deadline=None)
@given(values=st.lists(st.tuples(st.none() | st.binary(max_size=20), st.binary(max_size=50)), min_size=1, max_size=5))
def test_produce_v9_with_real_batch(values: list[tuple[bytes | None, bytes]]) -> None:
    batch = build_batch([(k, v, [], 1_700_000_000_000 + i) for i, (k, v) in enumerate(values)])
    req = produce_v9(batch)
    frame = body_frame(0, 9, req)
    header, off = parse_header(frame)
    decoded = decode_request(header, frame, off)
    assert same_fields(decoded, req)  # hand-decoded (protocol/produce_request.py): records are views
    assert bytes(decoded.topic_data[0].partition_data[0].records) == batch

    body = frame[:-1] + tag_section({10007: b"ext"})
    unknown: dict = {}
    decoded = decode_request(header, body, off, unknown)
    assert same_fields(decoded, req) and unknown == {id(decoded): {10007: b"ext"}}


def test_produce_v9_truncated_records() -> None:
    batch = build_batch([(b"k", b"v" * 100, [], 1)])
    frame = body_frame(0, 9, produce_v9(batch))
    header, off = parse_header(frame)
    with pytest.raises(PeerProtocolError):
        decode_request(header, frame[:len(frame) - 60], off)


# -- responses ------------------------------------------------------------------------


def test_response_header_versions() -> None:
    assert response_header_bytes(3, 12, 7) == b"\x00\x00\x00\x07\x00"  # flexible: header v1
    assert response_header_bytes(3, 0, 7) == b"\x00\x00\x00\x07"
    assert response_header_bytes(API_VERSIONS_KEY, 3, 7) == b"\x00\x00\x00\x07"  # always v0


def test_encode_response_frame() -> None:
    from kio.schema.api_versions.v3.response import ApiVersionsResponse
    resp = ApiVersionsResponse(error_code=ErrorCode.none, api_keys=(), throttle_time=datetime.timedelta(0))
    frame = encode_response(API_VERSIONS_KEY, 3, -5, resp)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert frame[4:8] == (-5).to_bytes(4, "big", signed=True)
    assert frame[8:] == encode_entity(resp)


def test_encode_request_writes_extension_tags_at_the_top_level() -> None:
    """``encode_request(tags=)`` (OffsetFetch's IncludeLogOffsets, issue 29): the tags
    become the request's top-level tag section, read back as unknown tags; refused for
    non-flexible versions and requests with a known top-level tag."""
    from hightide.protocol.build import materialize
    from hightide.protocol.offset_fetch_response import INCLUDE_LOG_OFFSETS, asks_log_offsets
    req = materialize(request_schema(9, 9), {"groups": [{"group_id": "g", "member_id": None, "member_epoch": -1,
                                                          "topics": None}], "require_stable": False})
    frame = encode_request(9, 9, 7, "c", req, INCLUDE_LOG_OFFSETS)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    header, off = parse_header(frame[4:])
    unknown: dict = {}
    decoded = decode_request(header, frame[4:], off, unknown)
    assert decoded == req and unknown == {id(decoded): {10000: b"\x01"}}
    assert asks_log_offsets(unknown[id(decoded)]) and not asks_log_offsets({10000: b"\x00"})
    assert not asks_log_offsets(None) and not asks_log_offsets({10001: b"\x01"})
    old = materialize(request_schema(9, 5), {"group_id": "g", "topics": None, "require_stable": False})
    with pytest.raises(ValueError):
        encode_request(9, 5, 7, "c", old, INCLUDE_LOG_OFFSETS)
