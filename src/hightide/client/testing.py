"""An in-process fake Kafka broker for testing clients: scripted kio responses.

:class:`FakeBroker` listens on a loopback port and answers each request with the
handler registered for its API key. A handler gets ``(header, request)`` (the decoded
kio request) and returns a plain dict (materialized into the response class of the
request's version), a kio response entity, raw ``bytes`` (a full frame from a
hand-written encoder, size prefix included), :data:`NO_RESPONSE` (never answer) or
:data:`CLOSE` (drop the connection); it may be ``async`` (e.g. to sleep, which lets a
later request be answered first). ApiVersions is built in: it advertises ``versions``
and answers a too-new ApiVersions version with UNSUPPORTED_VERSION in a v0 body, as
Kafka does. Every request is recorded in :attr:`FakeBroker.requests`. It listens
through ``transport`` (TCP by default; :mod:`hightide.aio.memory_transport` for a test
without sockets).
"""

from __future__ import annotations

import asyncio
import inspect
import struct
from collections.abc import Callable
from typing import Any, ClassVar, Self

from ..aio.transport import LOOP_TRANSPORT, Listening, Transport
from ..protocol.build import materialize
from ..protocol.codec import (
    RequestHeader,
    decode_request,
    encode_response,
    parse_header,
    response_schema,
)
from ..protocol.errors import ErrorCode

__all__ = ["CLOSE", "NO_RESPONSE", "FakeBroker", "FakeCluster", "list_offsets_answer", "metadata_body"]

NO_RESPONSE = object()
CLOSE = object()
Handler = Callable[[RequestHeader, Any], Any]


class FakeBroker:
    """A scripted broker. ``versions``: api key → (min, max) advertised by ApiVersions."""

    def __init__(self, versions: dict[int, tuple[int, int]] | None = None, node_id: int = 1,
                 api_versions_range: tuple[int, int] = (0, 3), transport: Transport = LOOP_TRANSPORT) -> None:
        self.versions = dict(versions or {})
        self.transport = transport
        self.versions.setdefault(18, api_versions_range)
        self.node_id = node_id
        self.handlers: dict[int, Handler] = {}
        self.requests: list[tuple[RequestHeader, Any]] = []
        self.connections = 0
        self.errors: list[BaseException] = []
        """Exceptions raised by handlers (the connection is dropped); tests assert it is empty."""
        self._server: Listening | None = None
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

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()

        def stream_protocol() -> asyncio.StreamReaderProtocol:  # what asyncio.start_server builds
            return asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), self._serve, loop=loop)
        self._server = await self.transport.listen(stream_protocol, "127.0.0.1", self.port)
        self.port = self._server.address[1]

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
        except Exception as exc:  # noqa: BLE001 - reported through self.errors
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


class FakeCluster:
    """Fake brokers 1..n sharing one Metadata answer: ``topics`` maps name →
    {partition: leader}; ``controller`` is the controller id. ``log`` records
    (node id, api key) of every request answered through :meth:`on`, in arrival order.
    Leaving the ``async with`` asserts no handler raised."""

    DEFAULT_VERSIONS: ClassVar[dict[int, tuple[int, int]]] = {3: (1, 12), 2: (1, 9), 19: (2, 7), 20: (1, 6), 37: (0, 3), 10: (0, 6),
                        9: (1, 9), 8: (2, 9), 47: (0, 0), 16: (0, 5), 15: (0, 6), 42: (0, 2)}

    def __init__(self, n: int = 2, versions: dict | None = None,
                 topics: dict[str, dict[int, int]] | None = None) -> None:
        self.brokers = [FakeBroker(dict(versions or self.DEFAULT_VERSIONS), node_id=i + 1) for i in range(n)]
        self.topics = topics or {}
        self.controller = 1
        self.log: list[tuple[int, int]] = []  # (node id, api key) in arrival order

    async def __aenter__(self) -> Self:
        for b in self.brokers:
            await b.start()
            b.on(3, self._metadata)
        return self

    async def __aexit__(self, *exc) -> None:
        for b in self.brokers:
            await b.close()
            assert not b.errors, b.errors

    def _metadata(self, header, req):
        names = None if req.topics is None else [t.name for t in req.topics]
        topics = {k: v for k, v in self.topics.items() if names is None or k in names}
        unknown = tuple(n for n in names or () if n not in self.topics)
        return metadata_body([(b.node_id, "127.0.0.1", b.port) for b in self.brokers], topics,
                             controller_id=self.controller, unknown=unknown)

    def on(self, api_key: int, handler: Callable[[int, RequestHeader, Any], Any]) -> None:
        """Install ``handler(node_id, header, req)`` on every broker."""
        for b in self.brokers:
            def wrapped(header, req, _b=b):
                self.log.append((_b.node_id, api_key))
                return handler(_b.node_id, header, req)
            b.on(api_key, wrapped)

    @property
    def bootstrap(self) -> str:
        return self.brokers[0].bootstrap

    def broker(self, node_id: int) -> FakeBroker:
        return self.brokers[node_id - 1]


def list_offsets_answer(values: Callable[[int, str, int, int], tuple[int, int] | int]
                        ) -> Callable[[int, RequestHeader, Any], dict[str, Any]]:
    """A ListOffsets handler for :meth:`FakeCluster.on`: ``values(node, topic, partition,
    timestamp)`` returns ``(offset, timestamp)`` or an error code for that partition."""
    def handler(node, header, req):
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                v = values(node, t.name, p.partition_index, p.timestamp)
                if isinstance(v, int):
                    parts.append({"partition_index": p.partition_index, "error_code": v,
                                  "timestamp": -1, "offset": -1, "leader_epoch": -1})
                else:
                    parts.append({"partition_index": p.partition_index, "error_code": 0,
                                  "timestamp": v[1], "offset": v[0], "leader_epoch": 0})
            topics.append({"name": t.name, "partitions": parts})
        return {"throttle_time": 0, "topics": topics}
    return handler
