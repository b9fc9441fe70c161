"""The metadata record encoding (``hightide.cluster.records.encode``) reads plain records
field by field instead of through ``dataclasses.asdict``: the bytes must be exactly what
``asdict`` gives, for every record type, and decode back to an equal record."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from hightide.cluster import records as R


def _asdict_encode(record: R.MetadataRecord) -> bytes:
    body = dataclasses.asdict(record)
    body["type"] = record.type
    body["v"] = 0
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


_RECORDS = st.one_of(*(st.builds(cls) for cls in R._TYPES.values()))


@settings(max_examples=400, deadline=None)
@given(_RECORDS)
def test_every_record_type_encodes_as_asdict_does(record: R.MetadataRecord) -> None:
    assert R.encode(record) == _asdict_encode(record)


@settings(max_examples=200, deadline=None)
@given(_RECORDS)
def test_every_record_type_round_trips(record: R.MetadataRecord) -> None:
    assert R.encode(R.decode(R.encode(record))) == R.encode(record)
