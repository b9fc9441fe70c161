"""The hand-written Produce encoder equals kio's for every version we serve."""

import pytest

from hightide.protocol.build import materialize
from hightide.protocol.codec import encode_response, response_schema
from hightide.protocol.produce_response import encode_produce_response

TOPICS = [("orders", [(0, 0, 42, -1, 0, None, []), (1, 87, -1, -1, -1, "bad batch", [(0, "bad batch")])]),
          ("x", [(3, 3, -1, 1_700_000_000_123, 5, None, [])])]


@pytest.mark.parametrize("version", range(3, 12))
def test_matches_kio(version):
    body = {"throttle_time": 0, "responses": [
        {"name": n, "partition_responses": [
            {"index": i, "error_code": e, "base_offset": b, "log_append_time": t, "log_start_offset": ls,
             "error_message": m, "record_errors": [{"batch_index": bi, "batch_index_error_message": bm}
                                                   for bi, bm in re]}
            for i, e, b, t, ls, m, re in parts]} for n, parts in TOPICS]}
    expected = encode_response(0, version, 11, materialize(response_schema(0, version), body))
    assert encode_produce_response(version, 11, TOPICS) == expected
