"""Request/response codec: Kafka request headers, kio payloads, response frames.

* :func:`parse_header` reads the request header by hand (it is on every request).
* :func:`decode_request` decodes Produce and OffsetCommit by hand
  (:data:`FAST_DECODERS`), everything else with :mod:`.tolerant` (kio's schemas).
* :func:`encode_response` returns a complete frame (size prefix included).
  ApiVersions responses always use response header v0, as Kafka requires.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass, fields
from functools import cache
from typing import Any, Callable

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.serial import entity_writer
from kio.serial._introspect import get_field_tag

from .errors import ErrorCode, PeerProtocolError
from .offset_commit_request import decode_offset_commit_request
from .primitives import skip_tags, uvarint
from .produce_request import decode_produce_request
from .share_fetch_request import decode_share_acknowledge_request, decode_share_fetch_request
from .tolerant import Unknown, read_tolerant

API_VERSIONS_KEY = 18

_FastDecoder = Callable[[int, "memoryview | bytes", int, "Unknown | None"], Any]
FAST_DECODERS: dict[int, tuple[range, str, _FastDecoder]] = {
    # api key: (versions decoded by hand, entity name for errors, decoder(version, frame, offset, unknown))
    0: (range(3, 12), "ProduceRequest", decode_produce_request),  # records: views of the frame, never copied
    8: (range(8, 10), "OffsetCommitRequest", decode_offset_commit_request),
    78: (range(1, 3), "ShareFetchRequest", decode_share_fetch_request),
    79: (range(1, 3), "ShareAcknowledgeRequest", decode_share_acknowledge_request),
}
"""Requests decoded by hand (same field names and types as kio's entities, compared with
kio's schema walker by the unit tests); every other request goes through
:func:`~hightide.protocol.tolerant.read_tolerant`."""
_HDR = struct.Struct(">hhih")
_SIZE = struct.Struct(">i")
_CORR = struct.Struct(">ii")


@dataclass(frozen=True, slots=True)
class EncodedBody:
    """A request body encoded by hand (the bytes after the request header), for
    :func:`encode_request` in place of a kio entity; ``flexible``: the version uses
    request header v2 (a tag section after the client id)."""
    data: bytes
    flexible: bool


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@cache
def request_schema(api_key: int, version: int) -> Any:
    """The kio request class for (api_key, version), or None if kio has none (typed
    ``Any``: kio's entity classes carry their schema as class attributes).

    Only answers are cached: a schema module that cannot be imported *now* (out of file
    descriptors: the import of a module kio loads on first use fails with EMFILE) raises
    (ImportError, OSError) and is tried again on the next request; taking it for "kio
    has none" would refuse that request type for good."""
    try:
        return load_request_schema(api_key, version)
    except KioIndexError:
        return None


@cache
def response_schema(api_key: int, version: int) -> Any:
    """The kio response class for (api_key, version); raises if kio has none."""
    return load_response_schema(api_key, version)


def parse_header(frame: memoryview | bytes) -> tuple[RequestHeader, int]:
    """Parse the request header; return it and the offset of the request body.

    Header v1 (api key, version, correlation id, nullable int16 client id) is common to
    all requests; flexible versions (header v2) add a tagged-field section, which we
    skip. Raises :class:`PeerProtocolError` (close the connection) on a truncated header,
    or when the request's schema cannot be loaded now (see :func:`request_schema`): the
    header's length depends on it, so nothing after it is read.
    """
    if len(frame) < 10:
        raise PeerProtocolError(f"request header truncated ({len(frame)} bytes)")
    api_key, version, corr, client_len = _HDR.unpack_from(frame, 0)
    pos = 10
    client_id = None
    if client_len >= 0:
        if pos + client_len > len(frame):
            raise PeerProtocolError("request header client_id truncated")
        client_id = bytes(frame[pos:pos + client_len]).decode("utf-8", "replace")
        pos += client_len
    header = RequestHeader(api_key, version, corr, client_id)
    try:
        schema = request_schema(api_key, version)
    except Exception as exc:  # the module could not be imported now (EMFILE): never guess the header version
        raise PeerProtocolError(f"cannot load the request schema of api_key={api_key} v{version} "
                                f"(correlation id {corr}): {_cause(exc)}") from exc
    if schema is not None and schema.__flexible__:
        try:
            pos = skip_tags(frame, pos)
        except ValueError as exc:
            raise PeerProtocolError(f"request header tagged fields malformed: {exc}") from exc
    return header, pos


def _cause(exc: BaseException) -> str:
    """``exc`` and its cause in one line (an ImportError's OSError names the errno)."""
    cause = exc.__cause__ or exc.__context__
    return f"{exc!r}" if cause is None else f"{exc!r} ({cause})"


def decode_request(header: RequestHeader, frame: memoryview | bytes, offset: int,
                   unknown_tags: Unknown | None = None) -> Any:
    """Decode the request body. Raises :class:`PeerProtocolError` on malformed input.

    By hand for the requests in :data:`FAST_DECODERS` (Produce's ``records`` are then
    views of ``frame``, writable if it is: see :mod:`.produce_request`), otherwise through
    :func:`~hightide.protocol.tolerant.read_tolerant` (on a read-only view: the decoded
    entity never refers to ``frame``). Either way unknown tagged fields do not fail the
    decode (they are collected in ``unknown_tags``), and declared array lengths are
    bounded by the frame before anything is allocated (kio's native entity reader would
    abort the process on a hostile length).
    """
    fast = FAST_DECODERS.get(header.api_key)
    if fast is not None and header.api_version in fast[0]:
        try:
            return fast[2](header.api_version, frame, offset, unknown_tags)
        except Exception as exc:
            raise PeerProtocolError(f"malformed {fast[1]} v{header.api_version}: {exc!r}") from exc
    schema = request_schema(header.api_key, header.api_version)
    if schema is None:
        raise PeerProtocolError(
            f"no schema for api_key={header.api_key} v{header.api_version}",
            ErrorCode.unsupported_version)
    try:
        view = frame.toreadonly() if isinstance(frame, memoryview) else frame  # kio's readers want read-only
        entity, _ = read_tolerant(schema, view, offset, unknown_tags)
        return entity
    except Exception as exc:
        raise PeerProtocolError(f"malformed {schema.__name__} v{header.api_version}: {exc!r}") from exc


def response_header_bytes(api_key: int, version: int, correlation_id: int) -> bytes:
    """Response header: v1 (with an empty tag section) for flexible responses, except
    ApiVersions which always answers with header v0."""
    flexible = api_key != API_VERSIONS_KEY and response_schema(api_key, version).__flexible__
    return correlation_id.to_bytes(4, "big", signed=True) + (b"\x00" if flexible else b"")


def encode_response(api_key: int, version: int, correlation_id: int, response: Any) -> bytes:
    """Encode ``response`` as a complete frame: size, response header, body."""
    buf = io.BytesIO()
    buf.write(b"\x00\x00\x00\x00")
    buf.write(response_header_bytes(api_key, version, correlation_id))
    entity_writer(type(response))(buf, response)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    del out
    return buf.getvalue()


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None,
                   request: Any, tags: dict[int, bytes] | None = None) -> bytes:
    """Encode a request frame (used by hightide's own client and tests).

    ``tags``: top-level tagged fields kio does not know (hightide's request-side
    extensions, e.g. OffsetFetch's IncludeLogOffsets), written in tag order as the
    request's top-level tag section. Only for flexible versions of requests without a
    known top-level tagged field (ValueError otherwise). ``request`` may be an
    :class:`EncodedBody` (then ``tags`` must be None), written as it is."""
    encoded = type(request) is EncodedBody
    if encoded and tags:
        raise ValueError("extension tags on a request encoded by hand")
    flexible = request.flexible if encoded else type(request).__flexible__
    buf = io.BytesIO()
    buf.write(b"\x00\x00\x00\x00")
    cid = b"" if client_id is None else client_id.encode()
    buf.write(_HDR.pack(api_key, version, correlation_id, -1 if client_id is None else len(cid)))
    buf.write(cid)
    if flexible:
        buf.write(b"\x00")
    if encoded:
        buf.write(request.data)
    else:
        entity_writer(type(request))(buf, request)
    if tags:
        _replace_top_level_tags(buf, request, tags)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    del out
    return buf.getvalue()


def _replace_top_level_tags(buf: io.BytesIO, request: Any, tags: dict[int, bytes]) -> None:
    """Replace the empty top-level tag section kio wrote last in ``buf`` by ``tags``."""
    if not type(request).__flexible__ or any(get_field_tag(f) is not None for f in fields(request)):
        raise ValueError(f"{type(request).__name__}: no room for extension tags")
    buf.seek(-1, io.SEEK_END)
    if buf.read(1) != b"\x00":
        raise ValueError(f"{type(request).__name__}: the top-level tag section is not empty")
    buf.seek(-1, io.SEEK_END)
    buf.truncate()
    buf.write(uvarint(len(tags)))
    for tag in sorted(tags):
        buf.write(uvarint(tag) + uvarint(len(tags[tag])) + tags[tag])
