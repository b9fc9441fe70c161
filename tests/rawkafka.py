"""A tiny blocking Kafka protocol client for tests: exact requests, raw bytes."""

from __future__ import annotations

import socket
import struct

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_request
from hightide.protocol.tolerant import read_tolerant


class RawClient:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.corr = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv_exact(4))[0]
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            buf += chunk
        return bytes(buf)

    def is_closed(self, timeout: float = 5.0) -> bool:
        """True if the broker closed the connection (EOF) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def request(self, api_key: int, version: int, body: dict, *, expect_response: bool = True):
        req = materialize(load_request_schema(api_key, version), body)
        self.corr += 1
        self.send_bytes(encode_request(api_key, version, self.corr, "rawkafka", req))
        if not expect_response:
            return None
        frame = self.recv_frame()
        return self.decode_response(api_key, version, frame)

    def decode_response(self, api_key: int, version: int, frame: bytes):
        cls = load_response_schema(api_key, version)
        corr = struct.unpack_from(">i", frame, 0)[0]
        assert corr == self.corr, (corr, self.corr)
        offset = 4 + (1 if cls.__flexible__ and api_key != 18 else 0)
        try:
            entity, _ = entity_reader(cls)(frame, offset)
        except KeyError:  # hightide's extension tags (e.g. on OffsetFetch) are unknown to kio
            entity, _ = read_tolerant(cls, frame, offset)
        return entity
