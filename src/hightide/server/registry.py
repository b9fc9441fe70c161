"""Routes requests by API key. ApiVersions is computed from this table, so hightide
can never advertise a version it has no handler (or no schema) for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kio.index import api_key_map
from kio.schema.index import schema_name_map

HandlerFn = Callable[["Any", Any], Any]


@dataclass(frozen=True)
class Route:
    api_key: int
    min_version: int
    max_version: int
    fn: HandlerFn
    name: str


ROUTES: dict[int, Route] = {}


def handles(api_key: int, min_version: int, max_version: int) -> Callable[[HandlerFn], HandlerFn]:
    """Register ``fn(ctx, request)`` for ``api_key`` versions min..max (inclusive).

    The handler returns a kio response entity, a :class:`RawResponse`, ``None`` (no
    response, e.g. acks=0 Produce), or an awaitable of one of those.
    """
    versions = schema_name_map.get(api_key_map.get(api_key, ""), {})
    missing = [v for v in range(min_version, max_version + 1) if v not in versions]
    if missing:  # checked without importing the schema modules (start-up time)
        raise RuntimeError(f"kio has no schema for api {api_key} versions {missing}")

    def register(fn: HandlerFn) -> HandlerFn:
        ROUTES[api_key] = Route(api_key, min_version, max_version, fn, fn.__module__.rsplit(".", 1)[-1])
        return fn

    return register


def supported(api_key: int, version: int) -> bool:
    r = ROUTES.get(api_key)
    return r is not None and r.min_version <= version <= r.max_version


class CloseConnection(Exception):
    """Raised by a handler to close the connection (with ``reason`` logged) instead of
    answering, e.g. a failed acks=0 Produce."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class RawResponse:
    """A response already encoded as buffers (header and body, without the size prefix),
    written with ``transport.writelines`` so record bytes are never re-copied."""
    buffers: list[bytes | memoryview]

    @property
    def size(self) -> int:
        return sum(len(b) for b in self.buffers)

