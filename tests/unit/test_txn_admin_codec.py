"""DescribeTransactions' start time is -1 when no transaction runs (Kafka's brokers send
it so for Empty/Complete* states and errors): hightide encodes it and its client
decodes it, where kio's native reader refuses negative timestamps."""

from __future__ import annotations

import datetime

from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_response, response_schema
from hightide.protocol.tolerant import read_tolerant

EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _round_trip(start_ms: int) -> int:
    cls = response_schema(65, 0)
    resp = materialize(cls, {"throttle_time": 0, "transaction_states": [{
        "error_code": 0, "transactional_id": "t", "transaction_state": "Empty", "transaction_timeout": 60000,
        "transaction_start_time": EPOCH + datetime.timedelta(milliseconds=start_ms), "producer_id": 7,
        "producer_epoch": 1, "topics": []}]})
    frame = encode_response(65, 0, 42, resp)
    # size (4) + correlation id (4) + header tag buffer (1, flexible)
    decoded, _ = read_tolerant(cls, memoryview(frame), 9, {})
    ts = decoded.transaction_states[0].transaction_start_time
    return round((ts - EPOCH).total_seconds() * 1000)


def test_negative_start_time_round_trips() -> None:
    assert _round_trip(-1) == -1


def test_start_time_round_trips() -> None:
    assert _round_trip(1_795_505_192_841) == 1_795_505_192_841
