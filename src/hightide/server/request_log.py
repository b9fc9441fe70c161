"""The request log: one DEBUG line per request on the ``hightide.request`` logger.

Kafka's ``kafka.request.logger`` counterpart, so an operator can see what a client did::

    hightide.request: Metadata v12 client_id=rdkafka correlation_id=4 peer=127.0.0.1:50312
        errors=UNKNOWN_TOPIC_OR_PARTITION x3 latency_ms=0.41

Enable it with ``hightide serve --log-level debug`` or for this logger alone with
``--log-level hightide.request=debug``.

Cost contract: when the logger is not enabled for DEBUG, the connection pays one
``Logger.isEnabledFor`` call per request (a cached dict lookup) and nothing else -- no
clock read, no formatting, no walk of the response. Everything in this module runs only
for requests whose line will be written.

Error codes: every ``*error_code`` field of a kio response entity, walked depth-first
(top level, per topic, per partition, per resource, per group...), bounded by
:data:`MAX_ENTITIES` visited entities. A :class:`RawResponse` (the pre-encoded Fetch,
Produce, OffsetFetch and ShareFetch answers) is decoded back with the bounded reader
first, which copies the response once; only done for logged requests.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from kio.schema.index import api_key_map

from ..protocol.codec import API_VERSIONS_KEY, RequestHeader, response_schema
from ..protocol.errors import ErrorCode
from ..protocol.regions import joined
from ..protocol.server_connection import RawResponse
from ..protocol.tolerant import read_tolerant

__all__ = ["REQUEST_LOGGER", "MAX_ENTITIES", "api_name", "error_codes", "error_summary", "log_answered",
           "log_completed"]

REQUEST_LOGGER = logging.getLogger("hightide.request")
MAX_ENTITIES = 100_000  # entities visited per response at most (a Metadata of every topic fits)
MAX_RAW_DECODE = 64 * 1024 * 1024  # a pre-encoded response larger than this is not decoded


def api_name(api_key: int) -> str:
    """Kafka's name of an API (``Metadata``, ``OffsetCommit``...), or ``api<key>``."""
    name = api_key_map.get(api_key)
    if name is None:
        return f"api{api_key}"
    return "".join(part.capitalize() for part in name.split("_"))


def error_codes(header: RequestHeader, response: Any) -> Counter[int] | None:
    """The non-zero error codes in ``response`` (the answer to ``header``'s request),
    counted; None when they cannot be told (a pre-encoded response too large or not
    decodable). ``response`` is what a handler returned: a kio entity, a
    :class:`RawResponse`, a complete frame (``bytes``) or None (no response: empty)."""
    if response is None:
        return Counter()
    if isinstance(response, (RawResponse, bytes)):
        response = _decode(header, response)
        if response is None:
            return None
    codes: Counter[int] = Counter()
    _walk(response, codes, [MAX_ENTITIES])
    return codes


def error_summary(codes: Counter[int] | None) -> str:
    """``NONE``, ``?`` (unknown), or the codes by count, most frequent first:
    ``UNKNOWN_TOPIC_OR_PARTITION x3,NOT_COORDINATOR x1``."""
    if codes is None:
        return "?"
    if not codes:
        return "NONE"
    return ",".join(f"{_code_name(code)} x{n}" for code, n in codes.most_common())


def log_completed(header: RequestHeader, peer: str, response: Any, latency_ms: float) -> None:
    """Write the request's line; ``latency_ms`` from its receipt to its response (the
    connection's clock). Never raises (a response it cannot read is logged with
    ``errors=?``)."""
    try:
        summary = error_summary(error_codes(header, response))
    except Exception:  # the log must never break a connection
        summary = "?"
    if response is None:
        summary += " (no response)"
    _line(header, peer, summary, latency_ms)


def log_answered(header: RequestHeader, peer: str) -> None:
    """The line of a request the connection answered itself (an ApiVersions request of
    a version we do not serve: UNSUPPORTED_VERSION)."""
    _line(header, peer, f"{_code_name(ErrorCode.unsupported_version)} x1", 0.0)


def _line(header: RequestHeader, peer: str, summary: str, latency_ms: float) -> None:
    REQUEST_LOGGER.debug("%s v%d client_id=%s correlation_id=%d peer=%s errors=%s latency_ms=%.2f",
                         api_name(header.api_key), header.api_version, header.client_id, header.correlation_id,
                         peer, summary, latency_ms)


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"ERROR_{code}"


def _walk(entity: Any, codes: Counter[int], budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        return
    for name in getattr(type(entity), "__slots__", ()):
        value = getattr(entity, name, None)
        if name.endswith("error_code"):
            if value:
                codes[int(value)] += 1
        elif type(value) is tuple:
            if value and hasattr(value[0], "__dataclass_fields__"):
                for item in value:
                    _walk(item, codes, budget)
        elif hasattr(value, "__dataclass_fields__"):
            _walk(value, codes, budget)


def _decode(header: RequestHeader, response: RawResponse | bytes) -> Any:
    """Decode a pre-encoded response back into its kio entity (None if too large or
    malformed). ``bytes`` is a complete frame (size prefix included); a RawResponse's
    buffers start at the response header."""
    if isinstance(response, bytes):
        frame = memoryview(response)[4:]
    else:
        if response.size > MAX_RAW_DECODE:
            return None
        frame = memoryview(joined(response.buffers))
    if len(frame) > MAX_RAW_DECODE:
        return None
    try:
        cls = response_schema(header.api_key, header.api_version)
        offset = 5 if cls.__flexible__ and header.api_key != API_VERSIONS_KEY else 4
        return read_tolerant(cls, frame.toreadonly(), offset, {})[0]
    except Exception:
        return None
