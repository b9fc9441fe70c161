"""recompress_batch: the records section re-encoded with another codec, the header kept."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.log.config import LogConfig
from hightide.protocol.records import InvalidRecords, build_batch, decode_records, recompress_batch, validate_batches

records = st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=20)), st.one_of(st.none(), st.binary(max_size=200)),
                             st.just([("h", b"x")]), st.integers(0, 2**40)), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(records, st.integers(0, 4), st.integers(0, 4))
def test_round_trip_keeps_records_and_header(recs, source, target):
    batch = build_batch(recs, compression=source, producer_id=9, producer_epoch=2, base_sequence=40,
                        partition_leader_epoch=3)
    out = recompress_batch(batch, target)
    h_in, h_out = validate_batches(batch)[0], validate_batches(out)[0]  # CRC checked
    assert h_out.compression == target
    assert h_out._replace(attributes=0, length=0, crc=0) == h_in._replace(attributes=0, length=0, crc=0)
    assert h_out.attributes & ~7 == h_in.attributes & ~7
    assert decode_records(out) == decode_records(batch)


def test_levels_and_corrupt_input():
    batch = build_batch([(b"k", b"v" * 5000, [], 1)])
    fast, small = recompress_batch(batch, 4, 1), recompress_batch(batch, 4, 19)
    assert decode_records(fast) == decode_records(small) == decode_records(batch)
    gz = bytearray(build_batch([(b"k", b"v" * 100, [], 1)], compression=1))
    gz[70:80] = b"\x00" * 10
    with pytest.raises(InvalidRecords):
        recompress_batch(bytes(gz), 4)


def test_log_config_reads_compression_type():
    assert LogConfig().compression_codec is None
    cfg = LogConfig.from_kafka({"compression.type": "zstd", "compression.zstd.level": "7", "compression.gzip.level": "1"})
    assert (cfg.compression_codec, cfg.compression_level) == (4, 7)
    assert LogConfig.from_kafka({"compression.type": "producer"}).compression_codec is None
    assert LogConfig.from_kafka({"compression.type": "uncompressed"}).compression_codec == 0
