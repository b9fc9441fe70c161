"""The client's error hierarchy: codes, subclasses, retriability, and lag anomalies."""

from __future__ import annotations

import pytest

from hightide.client import (
    CoordinatorError,
    CoordinatorLoadInProgressError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NotCoordinatorError,
    OffsetAndMetadata,
    PartitionLag,
    UnknownTopicOrPartitionError,
    error_for,
)
from hightide.client.errors import ErrorCode, raise_for_code
from hightide.client.lag import partition_lag
from hightide.client.types import ListOffsetsResult, spec_timestamp
from hightide.protocol.errors import KafkaError as ProtocolKafkaError


def test_error_for_picks_the_specific_class():
    e = error_for(16, "g")
    assert isinstance(e, NotCoordinatorError) and isinstance(e, CoordinatorError)
    assert e.code == ErrorCode.not_coordinator and e.retriable and str(e) == "[NOT_COORDINATOR] g"
    assert isinstance(error_for(ErrorCode.coordinator_load_in_progress), CoordinatorLoadInProgressError)
    assert isinstance(error_for(3), UnknownTopicOrPartitionError)
    plain = error_for(ErrorCode.invalid_partitions)
    assert type(plain) is KafkaError and not plain.retriable
    assert isinstance(plain, ProtocolKafkaError)  # one "error with a Kafka code" concept


def test_unknown_codes_and_local_errors():
    e = KafkaError(9999, "future error")
    assert e.raw_code == 9999 and e.code == ErrorCode.unknown_server_error and "ERROR_9999" in str(e)
    assert KafkaConnectionError("x").code == ErrorCode.network_exception
    assert KafkaTimeoutError().code == ErrorCode.request_timed_out and KafkaTimeoutError().retriable
    raise_for_code(0)
    with pytest.raises(NotCoordinatorError):
        raise_for_code(16)


def test_spec_timestamp():
    assert [spec_timestamp(s) for s in ("earliest", "latest", "max_timestamp", 0, 1234)] == [-2, -1, -3, 0, 1234]
    for bad in ("first", -1, True, 1.5):
        with pytest.raises(ValueError):
            spec_timestamp(bad)


def test_partition_lag_anomalies_and_paths():
    ext = OffsetAndMetadata(7, high_watermark=10, log_start_offset=8, last_stable_offset=9)
    lag = partition_lag(ext, False)
    assert (lag.lag, lag.source, lag.anomalies) == (3, "extension", ("committed_before_log_start",))
    assert partition_lag(ext, True).lag == 2
    none = partition_lag(OffsetAndMetadata(-1), False, ListOffsetsResult(5, -1), ListOffsetsResult(0, -1))
    assert none.committed is None and none.lag is None and none.anomalies == ("no_commit",)
    ahead = partition_lag(OffsetAndMetadata(12), False, ListOffsetsResult(10, -1), ListOffsetsResult(0, -1))
    assert ahead.lag == -2 and ahead.anomalies == ("committed_past_end",)
    lost = partition_lag(OffsetAndMetadata(3), False, error_for(3), error_for(3))
    assert lost.lag is None and lost.error == ErrorCode.unknown_topic_or_partition
    assert isinstance(lost, PartitionLag) and lost.anomalies == ("end_unknown",)
