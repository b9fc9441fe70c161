"""The route table of a broker-only node: the broker's routes wrapped by the cluster
node's parts (:mod:`hightide.node`), which know nothing of routes themselves.

* the forwarded APIs (:data:`~hightide.node.forwarding.FORWARDED`, the one table) are
  answered by :meth:`Forwarder.forward <hightide.node.forwarding.Forwarder.forward>`;
* the metadata reads (:data:`~hightide.node.read_gate.GATED_READS`) wait at the
  :class:`~hightide.node.read_gate.ReadGate` before their handler runs;
* ApiVersions waits until a finalized-features change is covered
  (:meth:`BrokerNode.features_settled <hightide.node.broker_node.BrokerNode.features_settled>`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..node.broker_node import BrokerNode
from ..node.forwarding import FORWARDED, Forwarder
from ..node.read_gate import GATED_READS, ReadGate
from .registry import Route, Routes

if TYPE_CHECKING:
    from ..protocol.views.api_versions import ApiVersionsRequest


def broker_node_routes(routes: Routes, node: BrokerNode) -> dict[int, Route]:
    """The route table of a broker-only node: forwarded writes, gated metadata reads,
    ApiVersions held while a finalized-features change is not yet covered."""
    out = gated_routes(forwarding_routes(routes, node.forwarder), node.gate)
    api_versions = out.get(18)
    if api_versions is not None:
        handler = api_versions.fn

        async def settled_api_versions(ctx: Any, req: ApiVersionsRequest) -> Any:
            await node.features_settled()
            return handler(ctx, req)
        out[18] = Route(18, api_versions.min_version, api_versions.max_version, settled_api_versions,
                        api_versions.name)
    return out


def forwarding_routes(routes: Routes, forwarder: Forwarder) -> dict[int, Route]:
    """``routes`` with the forwarded APIs answered by ``forwarder``."""
    out = dict(routes)
    for key, route in routes.items():
        if key in FORWARDED:
            out[key] = Route(key, route.min_version, route.max_version, forwarder.forward, f"forwarded {route.name}")
    return out


def gated_routes(routes: Routes, gate: ReadGate, keys: Iterable[int] = GATED_READS) -> dict[int, Route]:
    """``routes`` with the handlers of ``keys`` (metadata reads) wrapped so that each waits
    at the gate before it runs."""
    out = dict(routes)
    for key in keys:
        route = out.get(key)
        if route is not None:
            out[key] = Route(route.api_key, route.min_version, route.max_version, _gated(route, gate), route.name)
    return out


def _gated(route: Route, gate: ReadGate) -> Callable[[Any, Any], Any]:
    name = GATED_READS.get(route.api_key, route.name)

    async def handle(ctx: Any, req: object) -> Any:
        await gate.wait_read(name)
        result = route.fn(ctx, req)
        if hasattr(result, "__await__"):
            result = await result
        return result

    handle.__qualname__ = f"gated({route.fn.__qualname__})"
    return handle
