"""InterBrokerClients: concurrent first calls to one broker share one connection (one
used to close the other's connection while it was still connecting)."""

from __future__ import annotations

import asyncio
from typing import Any

from hightide.cluster.image import MetadataImage
from hightide.node.inter_broker import InterBroker


def test_concurrent_first_requests_to_one_broker_all_succeed(server: Any) -> None:
    host, port = server.bootstrap.rsplit(":", 1)

    async def go() -> list[int]:
        network = InterBroker(image=MetadataImage, listener=lambda: ("PLAINTEXT", None))
        clients = network.clients("test-inter-broker")  # addresses given: the image is never read
        try:
            answers = await asyncio.gather(*(clients.request(1, host, int(port), 18, 3, _api_versions())
                                             for _ in range(8)))
            assert len(clients._conns) == 1
            return [int(a.error_code) for a in answers]
        finally:
            await clients.close()
    assert asyncio.run(go()) == [0] * 8


def _api_versions() -> Any:
    from hightide.protocol.build import materialize
    from hightide.protocol.codec import request_schema
    return materialize(request_schema(18, 3), {"client_software_name": "t", "client_software_version": "1"})
