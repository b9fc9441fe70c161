"""The coordinators' fast record encoding equals the general encoders byte for byte:
:func:`build_kv_batch` vs :func:`build_batch`, :func:`encode_offset_records` vs
``encode_key``/``encode_value`` (which the golden tests pin to Kafka's bytes)."""

from hypothesis import given
from hypothesis import strategies as st

from hightide.group.records import OffsetKey, OffsetValue, encode_key, encode_offset_records, encode_value
from hightide.group.shard import encode_records
from hightide.protocol.kv_batch import build_kv_batch
from hightide.protocol.records import build_batch, decode_records, validate_batches

_blob = st.one_of(st.none(), st.binary(max_size=200), st.sampled_from([b"x" * 8191, b"y" * 8192, b"z" * 20000]))


@given(st.lists(st.tuples(_blob, _blob), max_size=70), st.integers(-1, 2**62), st.booleans())
def test_kv_batch_equals_build_batch(pairs, timestamp, transactional):
    txn = dict(producer_id=7, producer_epoch=3, base_sequence=11, is_transactional=True) if transactional else {}
    mine = build_kv_batch(pairs, timestamp, **txn)
    assert mine == build_batch([(k, v, [], timestamp) for k, v in pairs], **txn)
    validate_batches(mine, client_origin=False)  # CRC and framing hold
    assert [(r.key, r.value) for r in decode_records(mine)] == pairs


def test_kv_batch_of_many_records_uses_multibyte_offset_deltas():
    pairs = [(b"k%d" % i, b"v") for i in range(9000)]
    batch = build_kv_batch(pairs, 5)
    assert batch == build_batch([(k, v, [], 5) for k, v in pairs])
    assert [r.offset for r in decode_records(batch)][-1] == 8999


_names = st.text(max_size=12)
_value = st.one_of(
    st.none(),
    st.builds(OffsetValue, st.integers(-1, 2**63 - 1), st.integers(-1, 2**31 - 1),
              st.sampled_from(["", "m" * 32, "é", "x" * 300]), st.sampled_from([-1, 0, 1_700_000_000_000]),
              st.sampled_from([-1, -1, 1_800_000_000_000])))


@given(st.lists(st.tuples(st.builds(OffsetKey, st.sampled_from(["g", "h", "ü"]), st.sampled_from(["t", "u"]),
                                    st.integers(0, 2**31 - 1)), _value), max_size=30))
def test_offset_records_equal_the_general_encoders(records):
    expected = [(encode_key(k), encode_value(v)) for k, v in records]
    assert encode_offset_records(records) == expected
    assert encode_records(records) == expected


@given(_names, _names, st.lists(st.integers(0, 100), max_size=5))
def test_a_commit_run_shares_group_and_topic(group, topic, partitions):
    records = [(OffsetKey(group, topic, p), OffsetValue(p * 10, -1, "meta", 99)) for p in partitions]
    assert encode_offset_records(records) == [(encode_key(k), encode_value(v)) for k, v in records]
