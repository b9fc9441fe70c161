"""Client-side errors: every failure the admin client raises is a :class:`KafkaError`.

A :class:`KafkaError` carries the Kafka error code (kio's :class:`ErrorCode`) the broker
answered with, or the code that best describes a local failure (a timeout is
``REQUEST_TIMED_OUT``, a lost connection ``NETWORK_EXCEPTION``). ``retriable`` follows
Kafka's classification (kio carries it on each code). :func:`error_for` returns the most
specific subclass for a code, so callers can ``except NotCoordinatorError`` or test
``err.code``/``err.retriable`` on the base class.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ..protocol.errors import KafkaError as _ProtocolKafkaError

__all__ = [
    "CoordinatorError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "ErrorCode",
    "GroupIdNotFoundError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "NonEmptyGroupError",
    "NotControllerError",
    "NotCoordinatorError",
    "NotLeaderOrFollowerError",
    "OffsetOutOfRangeError",
    "TopicAlreadyExistsError",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
    "error_for",
    "raise_for_code",
    "unreachable",
]


class KafkaError(_ProtocolKafkaError):
    """A Kafka error code with an optional message. ``code`` is a kio ``ErrorCode``."""

    def __init__(self, code: ErrorCode | int, message: str | None = None) -> None:
        code = ErrorCode(int(code)) if int(code) in _KNOWN else code
        super().__init__(code if isinstance(code, ErrorCode) else ErrorCode.unknown_server_error,
                         message)
        self.raw_code = int(code)

    @property
    def code(self) -> ErrorCode:
        return self.error_code

    @property
    def retriable(self) -> bool:
        """True when the same request may succeed if retried (Kafka's classification)."""
        return bool(self.error_code.retriable)

    def __str__(self) -> str:
        name = self.error_code.name.upper() if self.raw_code in _KNOWN else f"ERROR_{self.raw_code}"
        return f"[{name}] {self.message}" if self.message else f"[{name}]"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.raw_code}, {self.message!r})"


_KNOWN = frozenset(int(c) for c in ErrorCode)


class KafkaConnectionError(KafkaError):
    """The connection failed or closed before a response arrived (retriable)."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(ErrorCode.network_exception, message)


def unreachable(failures: list[tuple[str, KafkaError]]) -> KafkaError:
    """The one error for "none of these servers answered": each ``(HOST:PORT, error)``
    named once, servers that failed the same way together, e.g. ``cannot reach
    127.0.0.1:1, 127.0.0.1:2 (connection refused)`` (the connection's own "cannot connect
    to HOST:PORT:" prefix and error code are not repeated). A server that did answer,
    refusing (SASL_AUTHENTICATION_FAILED, an unsupported version, ...), is not a network
    error: its error is raised as it is, with its code."""
    for where, exc in failures:
        if not isinstance(exc, (KafkaConnectionError, KafkaTimeoutError)):
            return exc
    reasons: dict[str, list[str]] = {}
    for where, exc in failures:
        reason = (exc.message or str(exc)).removeprefix(f"cannot connect to {where}: ")
        reasons.setdefault(reason, []).append(where)
    return KafkaConnectionError("cannot reach " + "; ".join(f"{', '.join(ws)} ({r})" for r, ws in reasons.items()))


class KafkaTimeoutError(KafkaError):
    """No response within the request timeout (retriable)."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(ErrorCode.request_timed_out, message)


class UnsupportedVersionError(KafkaError):
    """No version of an API is supported by both the broker and this client."""


class CoordinatorError(KafkaError):
    """Base of the three errors that mean: find the coordinator again and retry."""


class NotCoordinatorError(CoordinatorError):
    pass


class CoordinatorNotAvailableError(CoordinatorError):
    pass


class CoordinatorLoadInProgressError(CoordinatorError):
    pass


class UnknownTopicOrPartitionError(KafkaError):
    pass


class TopicAlreadyExistsError(KafkaError):
    pass


class NotLeaderOrFollowerError(KafkaError):
    pass


class OffsetOutOfRangeError(KafkaError):
    """The fetch offset is below the log start offset (records deleted) or past the end."""


class NotControllerError(KafkaError):
    pass


class GroupIdNotFoundError(KafkaError):
    pass


class NonEmptyGroupError(KafkaError):
    pass


_BY_CODE: dict[ErrorCode, type[KafkaError]] = {
    ErrorCode.network_exception: KafkaError,
    ErrorCode.unsupported_version: UnsupportedVersionError,
    ErrorCode.not_coordinator: NotCoordinatorError,
    ErrorCode.coordinator_not_available: CoordinatorNotAvailableError,
    ErrorCode.coordinator_load_in_progress: CoordinatorLoadInProgressError,
    ErrorCode.unknown_topic_or_partition: UnknownTopicOrPartitionError,
    ErrorCode.topic_already_exists: TopicAlreadyExistsError,
    ErrorCode.not_leader_or_follower: NotLeaderOrFollowerError,
    ErrorCode.offset_out_of_range: OffsetOutOfRangeError,
    ErrorCode.not_controller: NotControllerError,
    ErrorCode.group_id_not_found: GroupIdNotFoundError,
    ErrorCode.non_empty_group: NonEmptyGroupError,
}

COORDINATOR_ERRORS = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                                ErrorCode.coordinator_load_in_progress})


class _Retry(KafkaError):
    """Internal signal: some items of a batch must be retried (their errors are kept)."""


def error_for(code: ErrorCode | int, message: str | None = None) -> KafkaError:
    """The most specific :class:`KafkaError` subclass instance for ``code``."""
    c = int(code)
    cls = _BY_CODE.get(ErrorCode(c), KafkaError) if c in _KNOWN else KafkaError
    return cls(code, message)


def raise_for_code(code: ErrorCode | int, message: str | None = None) -> None:
    """Raise :func:`error_for` ``(code, message)`` unless ``code`` is 0 (NONE)."""
    if int(code) != 0:
        raise error_for(code, message)
