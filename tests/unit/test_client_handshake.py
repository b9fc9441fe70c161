"""The client's ApiVersions handshake against brokers that answer it oddly (issue 20).

librdkafka's mock cluster supports ApiVersions only up to v2 and answers a v3 request
with UNSUPPORTED_VERSION in a body that is not a valid v0 response; librdkafka then
retries with v0, and so must hightide's client. The fake broker here replays that
answer byte for byte (captured from confluent-kafka 2.16's mock cluster).
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from hightide.client import BrokerConnection, UnsupportedVersionError
from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_response, parse_header, response_schema

# The mock's answer to ApiVersions v3 after the correlation id: error 35, then bytes that
# do not decode as a v0 body (a compact array, an odd tail).
MOCK_V3_ANSWER = bytes.fromhex("00230100120000000200000000")


class OddBroker:
    """Answers ApiVersions v3 like librdkafka's mock, v0..v2 properly (advertising
    Metadata 0..12), and records the ApiVersions versions asked for."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> "OddBroker":
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                header, _ = parse_header(await reader.readexactly(size))
                assert header.api_key == 18
                self.asked.append(header.api_version)
                corr = struct.pack(">i", header.correlation_id)
                if header.api_version >= 3:
                    frame = corr + MOCK_V3_ANSWER
                else:
                    body = materialize(response_schema(18, header.api_version), {
                        "error_code": 0, "throttle_time": 0, "api_keys": [
                            {"api_key": 18, "min_version": 0, "max_version": 2},
                            {"api_key": 3, "min_version": 0, "max_version": 12}]})
                    frame = encode_response(18, header.api_version, header.correlation_id, body)[4:]
                writer.write(struct.pack(">i", len(frame)) + frame)
                await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_undecodable_unsupported_version_answer_retries_with_v0():
    async def main():
        async with OddBroker() as broker:
            async with BrokerConnection("127.0.0.1", broker.port, "test") as conn:
                assert broker.asked == [3, 0]
                assert conn.api_versions_version == 0
                assert conn.api_versions[3] == (0, 12)
    run(main())


def test_missing_api_is_named_in_the_error():
    async def main():
        async with OddBroker() as broker:
            async with BrokerConnection("127.0.0.1", broker.port, "test") as conn:
                with pytest.raises(UnsupportedVersionError) as exc:
                    conn.pick_version(33, 2, 0)
                text = str(exc.value)
                assert "AlterConfigs (api key 33)" in text and "does not support" in text
                assert "None" not in text
                with pytest.raises(UnsupportedVersionError) as exc:
                    conn.pick_version(3, 20, 13)  # broker offers 0..12
                assert "Metadata (api key 3)" in str(exc.value) and "0..12" in str(exc.value)
    run(main())
