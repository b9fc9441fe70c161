"""The route table: API key -> handler. ApiVersions is computed from it, so hightide can
never advertise a version it has no handler (or no schema) for.

``@handles`` only marks a handler (and checks kio has a schema for every version it
claims); nothing global is filled at import. :func:`build_routes` collects the marked
handlers of the given modules into an immutable table, which the broker passes to its
connections (``hightide.server.handlers.routes()`` builds the broker's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType, ModuleType
from typing import Any, Callable, cast

from kio.schema.index import api_key_map
from kio.schema.index import schema_name_map

from ..protocol.server_connection import RawResponse

__all__ = ["CloseConnection", "HandlerFn", "RawResponse", "Route", "Routes", "build_routes", "handles"]

HandlerFn = Callable[[Any, Any], Any]
_MARK = "__kafka_route__"


@dataclass(frozen=True, slots=True)
class Route:
    api_key: int
    min_version: int
    max_version: int
    fn: HandlerFn
    name: str


Routes = Mapping[int, Route]


def handles(api_key: int, min_version: int, max_version: int) -> Callable[[HandlerFn], HandlerFn]:
    """Mark ``fn(ctx, request)`` as the handler of ``api_key`` versions min..max
    (inclusive); :func:`build_routes` picks it up. Raises ``RuntimeError`` at once if kio
    has no schema for one of those versions.

    The handler returns a kio response entity, a :class:`RawResponse`, ``None`` (no
    response, e.g. acks=0 Produce), or an awaitable of one of those.
    """
    versions = schema_name_map.get(api_key_map.get(api_key, ""), {})
    missing = [v for v in range(min_version, max_version + 1) if v not in versions]
    if missing:  # checked without importing the schema modules (start-up time)
        raise RuntimeError(f"kio has no schema for api {api_key} versions {missing}")

    def mark(fn: HandlerFn) -> HandlerFn:
        setattr(fn, _MARK, (api_key, min_version, max_version))
        return fn

    return mark


ServiceHandler = Callable[..., Any]


def service_handler(api_key: int, min_version: int, max_version: int) -> Callable[[ServiceHandler], ServiceHandler]:
    """:func:`handles` for a handler ``fn(service, ctx, request)`` that takes a service
    object first (the controller's :class:`~hightide.node.controller_service.ControllerService`;
    ``handlers.controller_routes(service)`` binds it)."""
    return cast(Callable[[ServiceHandler], ServiceHandler], handles(api_key, min_version, max_version))


def build_routes(modules: Iterable[ModuleType]) -> Routes:
    """The route table of the handlers marked with :func:`handles` in ``modules`` (a
    handler re-exported by another module counts once, in its own module). Raises
    ``RuntimeError`` if two handlers claim the same API key."""
    table: dict[int, Route] = {}
    for module in modules:
        for fn in vars(module).values():
            mark = getattr(fn, _MARK, None)
            if mark is None or getattr(fn, "__module__", None) != module.__name__:
                continue
            api_key, lo, hi = mark
            if api_key in table:
                raise RuntimeError(f"api key {api_key} is handled by both {table[api_key].fn.__qualname__} "
                                   f"({table[api_key].name}) and {fn.__qualname__} ({module.__name__})")
            table[api_key] = Route(api_key, lo, hi, fn, module.__name__.rsplit(".", 1)[-1])
    return MappingProxyType(dict(sorted(table.items())))


class CloseConnection(Exception):
    """Raised by a handler to close the connection (with ``reason`` logged) instead of
    answering, e.g. a failed acks=0 Produce."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
