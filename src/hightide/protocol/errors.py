"""Errors raised by the protocol layer.

Two kinds, as in h11: :class:`PeerProtocolError` means the client broke the protocol
(answer with ``error_code`` if a response is still possible, otherwise close the
connection and log ``reason``); :class:`LocalProtocolError` means we tried to do
something the protocol forbids (a bug on our side).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "PeerProtocolError", "LocalProtocolError", "KafkaError"]


class PeerProtocolError(Exception):
    """The peer sent something we cannot accept.

    ``error_code`` is the Kafka error to answer with when an answer is possible;
    ``close`` says whether the connection must be closed (the frame stream can no
    longer be trusted, or there is no way to address a response).
    """

    def __init__(self, reason: str, error_code: ErrorCode = ErrorCode.corrupt_message,
                 *, close: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.error_code = error_code
        self.close = close


class LocalProtocolError(Exception):
    """We attempted something the protocol forbids (a hightide bug)."""


class KafkaError(Exception):
    """A request-level failure carrying the Kafka error code to answer with."""

    def __init__(self, error_code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code
        self.message = message
