"""What the transaction handlers share."""

from __future__ import annotations

from ...protocol.errors import ErrorCode


def fenced_error(code: ErrorCode, version: int, first_version: int) -> ErrorCode:
    """KIP-588: a request version before ``first_version`` does not know PRODUCER_FENCED;
    Kafka answers INVALID_PRODUCER_EPOCH to it instead."""
    if code == ErrorCode.producer_fenced and version < first_version:
        return ErrorCode.invalid_producer_epoch
    return code
