"""An in-process fake Kafka broker for testing clients: scripted kio responses.

:class:`FakeBroker` listens on a loopback port and answers each request with the
handler registered for its API key. A handler gets ``(header, request)`` (the decoded
kio request) and returns a plain dict (materialized into the response class of the
request's version), a kio response entity, raw ``bytes`` (a full frame from a
hand-written encoder, size prefix included), :data:`NO_RESPONSE` (never answer) or
:data:`CLOSE` (drop the connection); it may be ``async`` (e.g. to sleep, which lets a
later request be answered first). ApiVersions is built in: it advertises ``versions``
and answers a too-new ApiVersions version with UNSUPPORTED_VERSION in a v0 body, as
Kafka does. Every request is recorded in :attr:`FakeBroker.requests`.
"""

from __future__ import annotations

import asyncio
import inspect
import struct
from typing import Any, Callable

from ..protocol.build import materialize
from ..protocol.codec import RequestHeader, decode_request, encode_response, parse_header, response_schema
from ..protocol.errors import ErrorCode

__all__ = ["FakeBroker", "NO_RESPONSE", "CLOSE", "metadata_body"]

NO_RESPONSE = object()
CLOSE = object()
Handler = Callable[[RequestHeader, Any], Any]


class FakeBroker:
    """A scripted broker. ``versions``: api key → (min, max) advertised by ApiVersions."""

    def __init__(self, versions: dict[int, tuple[int, int]] | None = None, node_id: int = 1,
                 api_versions_range: tuple[int, int] = (0, 3)) -> None:
        self.versions = dict(versions or {})
        self.versions.setdefault(18, api_versions_range)
        self.node_id = node_id
        self.handlers: dict[int, Handler] = {}
        self.requests: list[tuple[RequestHeader, Any]] = []
        self.connections = 0
        self.errors: list[BaseException] = []
        """Exceptions raised by handlers (the connection is dropped); tests assert it is empty."""
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def on(self, api_key: int, handler: Handler) -> None:
        """Answer ``api_key`` with ``handler`` (replacing any previous one)."""
        self.handlers[api_key] = handler

    def requests_for(self, api_key: int) -> list[tuple[RequestHeader, Any]]:
        return [r for r in self.requests if r[0].api_key == api_key]

    async def __aenter__(self) -> "FakeBroker":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._server is not None:
            self._server.close()
        for w in list(self._writers):
            w.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                header, offset = parse_header(frame)
                request = decode_request(header, frame, offset)
                self.requests.append((header, request))
                task = asyncio.get_running_loop().create_task(self._answer(header, request, writer))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(self, header: RequestHeader, request: Any, writer: asyncio.StreamWriter) -> None:
        try:
            await self._answer_or_raise(header, request, writer)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.errors.append(exc)
            writer.close()

    async def _answer_or_raise(self, header: RequestHeader, request: Any,
                               writer: asyncio.StreamWriter) -> None:
        if header.api_key == 18:
            frame = self._api_versions(header)
        else:
            handler = self.handlers.get(header.api_key)
            if handler is None:
                raise AssertionError(f"FakeBroker: no handler for api {header.api_key}")
            result = handler(header, request)
            if inspect.isawaitable(result):
                result = await result
            if result is NO_RESPONSE:
                return
            if result is CLOSE:
                writer.close()
                return
            frame = self._encode(header, result)
        if not writer.is_closing():
            writer.write(frame)
            await writer.drain()

    def _encode(self, header: RequestHeader, result: Any) -> bytes:
        if isinstance(result, (bytes, bytearray)):
            return bytes(result)
        if isinstance(result, dict):
            result = materialize(response_schema(header.api_key, header.api_version), result)
        return encode_response(header.api_key, header.api_version, header.correlation_id, result)

    def _api_versions(self, header: RequestHeader) -> bytes:
        keys = [{"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(self.versions.items())]
        lo, hi = self.versions[18]
        if not lo <= header.api_version <= hi:
            body = materialize(response_schema(18, 0), {"error_code": ErrorCode.unsupported_version,
                                                        "api_keys": keys})
            return encode_response(18, 0, header.correlation_id, body)
        body = materialize(response_schema(18, header.api_version),
                           {"error_code": 0, "api_keys": keys, "throttle_time": 0})
        return encode_response(18, header.api_version, header.correlation_id, body)


def metadata_body(brokers: list[tuple[int, str, int]], topics: dict[str, dict[int, int]],
                  controller_id: int = 1, cluster_id: str = "fake-cluster",
                  unknown: tuple[str, ...] = ()) -> dict[str, Any]:
    """A Metadata response dict: ``topics`` maps name → {partition: leader id};
    names in ``unknown`` are answered with UNKNOWN_TOPIC_OR_PARTITION."""
    return {
        "throttle_time": 0, "cluster_id": cluster_id, "controller_id": controller_id,
        "brokers": [{"node_id": n, "host": h, "port": p, "rack": None} for n, h, p in brokers],
        "topics": [{"error_code": 0, "name": name, "topic_id": None, "is_internal": False,
                    "partitions": [{"error_code": 0, "partition_index": i, "leader_id": leader,
                                    "leader_epoch": 0, "replica_nodes": [leader],
                                    "isr_nodes": [leader], "offline_replicas": []}
                                   for i, leader in parts.items()],
                    "topic_authorized_operations": -2147483648}
                   for name, parts in topics.items()]
        + [{"error_code": ErrorCode.unknown_topic_or_partition, "name": n, "topic_id": None,
            "is_internal": False, "partitions": [], "topic_authorized_operations": -2147483648}
           for n in unknown],
    }
