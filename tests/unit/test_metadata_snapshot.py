"""KRaft metadata snapshots (hightide.cluster.snapshot) and loading the metadata log from
one (hightide.cluster.metadata_log): every record type survives a snapshot, the image from
a snapshot plus the log tail equals a full replay, trimming, unusable snapshots, names."""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import uuid
from typing import Any

import pytest
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.serial import entity_reader

from hightide.cluster import records as rec
from hightide.cluster.broker_records import (
    FENCE,
    UNFENCE,
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    NoOpRecord,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from hightide.cluster.image import MetadataImage
from hightide.cluster.metadata_log import MetadataLog, MetadataLogGap
from hightide.cluster.raft.messages import OffsetAndEpoch
from hightide.cluster.quota_records import ClientQuotaRecord
from hightide.cluster.security_records import (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from hightide.cluster.snapshot import (
    SnapshotError,
    copy_image,
    decode_snapshot,
    encode_snapshot,
    image_from_snapshot,
    image_records,
    parse_snapshot_name,
    snapshot_name,
)
from hightide.protocol.records import build_batch, decode_records, validate_batches

T1, T2, T3 = (str(uuid.UUID(int=i)) for i in (11, 12, 13))
INC = str(uuid.UUID(int=99))


def every_type_records() -> list[Any]:
    """A history that uses every metadata record type and leaves something of each kind
    in the image."""
    return [
        rec.FeatureLevelRecord("metadata.version", 21), rec.FeatureLevelRecord("kraft.version", 1),
        rec.FeatureLevelRecord("kraft.version", 0),
        RegisterBrokerRecord(0, INC, 7, (("PLAINTEXT", "127.0.0.1", 9092, 0),), (("metadata.version", 7, 25),),
                             "rack-a", True, False, ("/d0",)),
        RegisterBrokerRecord(1, str(uuid.UUID(int=98)), 8, (("PLAINTEXT", "127.0.0.1", 9093, 0),)),
        RegisterBrokerRecord(2, str(uuid.UUID(int=97)), 9),
        BrokerRegistrationChangeRecord(0, 7, UNFENCE), UnfenceBrokerRecord(1, 8), FenceBrokerRecord(1, 8),
        BrokerRegistrationChangeRecord(1, 8, UNFENCE, 1), UnregisterBrokerRecord(2, 9),
        BrokerRegistrationChangeRecord(0, 7, FENCE), BrokerRegistrationChangeRecord(0, 7, UNFENCE),
        rec.TopicRecord("orders", T1), rec.PartitionRecord(T1, 0, 0, 3, (0, 1), (0,), 2),
        rec.PartitionRecord(T1, 1, 1, 0, (1, 0)),
        rec.PartitionChangeRecord(T1, 1, leader=0, isr=(0,), adding_replicas=(2,)),
        rec.ConfigRecord(rec.TOPIC_RESOURCE, "orders", "retention.ms", "1000"),
        rec.ConfigRecord(rec.TOPIC_RESOURCE, "orders", "cleanup.policy", "compact"),
        rec.ConfigRecord(rec.TOPIC_RESOURCE, "orders", "cleanup.policy", None),
        rec.TopicRecord("gone", T2), rec.PartitionRecord(T2, 0, 0), rec.RemoveTopicRecord(T2),
        rec.TopicRecord("__consumer_offsets", T3), rec.PartitionRecord(T3, 0, -1, 1, (1,)),
        rec.ConfigRecord(rec.BROKER_RESOURCE, "", "log.retention.ms", "5"),
        rec.ConfigRecord(rec.BROKER_RESOURCE, "1", "message.max.bytes", "9"),
        rec.ConfigRecord(rec.GROUP_RESOURCE, "g1", "share.record.lock.duration.ms", "15000"),
        rec.ConfigRecord(rec.GROUP_RESOURCE, "g2", "share.auto.offset.reset", "earliest"),
        rec.ConfigRecord(rec.GROUP_RESOURCE, "g2", "share.auto.offset.reset", None),
        rec.ProducerIdsRecord(1000), rec.ProducerIdsRecord(2000),
        AccessControlEntryRecord("acl-1", 2, "orders", 3, "User:alice", "*", 3, 3),
        AccessControlEntryRecord("acl-2", 4, "kafka-cluster", 3, "User:bob", "*", 7, 2),
        RemoveAccessControlEntryRecord("acl-2"),
        UserScramCredentialRecord.of("alice", 1, b"salt", b"stored", b"server", 4096),
        UserScramCredentialRecord.of("bob", 2, b"s2", b"k2", b"v2", 8192),
        RemoveUserScramCredentialRecord("bob", 2),
        ClientQuotaRecord((("user", "alice"),), "producer_byte_rate", 1024.0),
        ClientQuotaRecord((("user", "alice"), ("client-id", None)), "request_percentage", 12.5),
        ClientQuotaRecord((("client-id", "app"),), "consumer_byte_rate", 2048.0),
        ClientQuotaRecord((("client-id", "app"),), "consumer_byte_rate", remove=True),
        NoOpRecord(),
    ]


def state(image: MetadataImage) -> dict[str, Any]:
    """What a reader of the image can see. Left out, as a snapshot records them as its
    last contained offset (Kafka's rule): each broker's registration_offset and the
    content_offset; and the legacy merged broker_configs view."""
    return {
        "topics": {n: (t.topic_id, {p: dataclasses.asdict(x) for p, x in t.partitions.items()}, t.configs)
                   for n, t in image.topics.items()},
        "by_id": {i: t.name for i, t in image.topics_by_id.items()},
        "broker_dynamic": image.broker_dynamic, "group_configs": image.group_configs,
        "next_producer_id": image.next_producer_id, "features": image.features, "offset": image.offset,
        "brokers": {b: dataclasses.replace(r, registration_offset=0) for b, r in image.brokers.items()},
        "acls": image.security.acls.by_id, "scram": image.security.scram, "quotas": image.quotas,
    }


def replayed(records: list[Any]) -> MetadataImage:
    image = MetadataImage()
    for i, r in enumerate(records):
        image.apply(r, i)
    return image


# -- the codec -----------------------------------------------------------------------
def test_every_record_type_round_trips_through_a_snapshot() -> None:
    history = every_type_records()
    assert {type(r) for r in history} == set(rec._TYPES.values()), "add the new record type to this history"
    image = replayed(history)
    sid = OffsetAndEpoch(len(history), 3)
    data = encode_snapshot(image_records(image), sid, 1_700_000_000_000, 1_700_000_000_500)
    loaded = image_from_snapshot(data, sid)
    assert state(loaded) == state(image)
    assert loaded.brokers[0].registration_offset == len(history) - 1 == loaded.content_offset
    assert image_records(loaded) == image_records(image)  # and a snapshot of the snapshot is the same
    assert loaded.topics["orders"].partitions[1].partition_epoch == 1  # the PartitionChangeRecord's effect
    assert "gone" not in loaded.topics and 2 not in loaded.brokers


def test_a_copy_is_unchanged_by_later_writes() -> None:
    image = replayed(every_type_records())
    copy = copy_image(image)
    before = image_records(image)
    assert image_records(copy) == before and state(copy) == state(image)
    at = image.offset + 1
    for r in [rec.ConfigRecord(rec.TOPIC_RESOURCE, "orders", "retention.ms", "7"),
              rec.PartitionChangeRecord(T1, 0, leader=1, isr=(1,)), rec.PartitionRecord(T1, 2, 0),
              rec.RemoveTopicRecord(T3), rec.TopicRecord("new", T2),
              BrokerRegistrationChangeRecord(0, 7, FENCE), RemoveAccessControlEntryRecord("acl-1"),
              RemoveUserScramCredentialRecord("alice", 1), rec.FeatureLevelRecord("metadata.version", 22),
              rec.ConfigRecord(rec.BROKER_RESOURCE, "", "log.retention.ms", None),
              rec.ConfigRecord(rec.GROUP_RESOURCE, "g1", "share.record.lock.duration.ms", None),
              ClientQuotaRecord((("user", "alice"),), "producer_byte_rate", 1.0),
              ClientQuotaRecord((("client-id", None), ("user", "alice")), "request_percentage", remove=True)]:
        image.apply(r, at)
        at += 1
    assert image_records(copy) == before  # what a snapshot captured at the copy still says


def test_kafka_layout_header_records_footer() -> None:
    image = replayed(every_type_records())
    sid = OffsetAndEpoch(1234, 5)
    data = encode_snapshot(image_records(image), sid, 42, 77)
    headers = validate_batches(data, client_origin=False)  # every CRC checks
    assert headers[0].is_control and headers[-1].is_control and not any(h.is_control for h in headers[1:-1])
    assert {h.partition_leader_epoch for h in headers} == {5}
    assert headers[0].base_offset == 0
    assert [h.base_offset for h in headers[1:]] == [h.last_offset + 1 for h in headers[:-1]]  # offsets from 0
    first = decode_records(memoryview(data)[:headers[0].size])[0]
    assert first.key == b"\x00\x00\x00\x03"  # ControlRecordType key v0, SNAPSHOT_HEADER
    header, _ = entity_reader(SnapshotHeaderRecord)(memoryview(first.value or b""), 0)
    assert header.version == 0 and header.last_contained_log_timestamp == 42
    last = decode_records(memoryview(data)[headers[-1].position:])[0]
    assert last.key == b"\x00\x00\x00\x04" and last.value == b"\x00\x00\x00"  # SnapshotFooterRecord v0
    assert decode_snapshot(data).records == image_records(image)


def test_large_images_are_split_into_batches() -> None:
    image = MetadataImage()
    for i in range(25_000):
        image.apply(rec.TopicRecord(f"t{i}", str(uuid.UUID(int=i + 1))), i)
    data = encode_snapshot(image_records(image), OffsetAndEpoch(25_000, 0), 0, 0)
    headers = validate_batches(data, client_origin=False)
    assert len(headers) >= 5 and max(h.records_count for h in headers) <= 10_000
    assert set(image_from_snapshot(data, OffsetAndEpoch(25_000, 0)).topics) == set(image.topics)


@pytest.mark.parametrize("damage", ["truncated", "crc", "no footer", "empty", "not a snapshot"])
def test_damaged_snapshot_bytes_raise(damage: str) -> None:
    data = encode_snapshot(image_records(replayed(every_type_records())), OffsetAndEpoch(40, 0), 0, 0)
    headers = validate_batches(data, client_origin=False)
    bad = {"truncated": data[:-7], "crc": data[:100] + bytes([data[100] ^ 1]) + data[101:],
           "no footer": data[:headers[-1].position], "empty": b"",
           "not a snapshot": build_batch([(None, rec.encode(NoOpRecord()), [], 0)])}[damage]
    with pytest.raises(SnapshotError):
        decode_snapshot(bad)


def test_file_names() -> None:
    sid = OffsetAndEpoch(1234, 5)
    assert snapshot_name(sid) == "00000000000000001234-0000000005.checkpoint"
    assert parse_snapshot_name(snapshot_name(sid)) == sid
    for other in ("00000000000000001234-0000000005.checkpoint.part",
                  "00000000000000001234-0000000005.checkpoint.deleted", "00000000000000001234.log",
                  "00000000000000001234.snapshot", "1234-5.checkpoint", "0000000000000000123x-0000000005.checkpoint"):
        assert parse_snapshot_name(other) is None


# -- the log with snapshots ----------------------------------------------------------
def append(ml: MetadataLog, records: list[Any], per_batch: int = 5) -> None:
    """Append ``records`` as the metadata runtime does (batch, then apply)."""
    for i in range(0, len(records), per_batch):
        chunk = records[i:i + per_batch]
        batch = build_batch([(None, rec.encode(r), [], 1000) for r in chunk])
        res = ml.log.append(batch, validate_batches(batch, client_origin=False), 1000)
        ml.apply(chunk, list(range(res.base_offset, res.base_offset + len(chunk))))


def snapshot(ml: MetadataLog) -> OffsetAndEpoch:
    """What the snapshotter does: the image at the log end, written, then trimmed to."""
    sid = OffsetAndEpoch(ml.log.log_end_offset, 0)
    ml.snapshots.write(sid, encode_snapshot(image_records(ml.image), sid, 1000, 2000))
    ml.trim_to_snapshot(sid)
    return sid


def topics(n: int, start: int = 0) -> list[Any]:
    out: list[Any] = []
    for i in range(start, start + n):
        tid = str(uuid.UUID(int=1000 + i))
        out += [rec.TopicRecord(f"topic-{i}", tid), rec.PartitionRecord(tid, 0, 0, 0, (0,))]
    return out


def open_log(d: str, **kw: Any) -> MetadataLog:
    return MetadataLog(str(d), 0, True, **kw)


def test_snapshot_plus_tail_equals_full_replay(tmp_path: Any) -> None:
    history = every_type_records() + topics(40) + [rec.RemoveTopicRecord(str(uuid.UUID(int=1003)))] + topics(10, 40)
    full = open_log(tmp_path / "full")
    append(full, history)
    ml = open_log(tmp_path / "snap", segment_bytes=2048)
    append(ml, history[:70])
    sid = snapshot(ml)
    append(ml, history[70:])
    assert state(ml.image) == state(full.image)
    ml.close()
    again = open_log(tmp_path / "snap", segment_bytes=2048)  # loads the snapshot + the tail
    assert again.snapshot_id == sid and again.log.log_start_offset == sid.offset
    assert state(again.image) == state(full.image)
    assert again.image.offset == full.image.offset == len(history) - 1
    full.close()
    again.close()


def test_trim_deletes_whole_segments_below_and_older_snapshots(tmp_path: Any) -> None:
    ml = open_log(tmp_path, segment_bytes=2048)
    append(ml, topics(30))
    first = snapshot(ml)
    append(ml, topics(30, 30))
    segments_before = [s.base_offset for s in ml.log.segments]
    second = snapshot(ml)
    assert ml.log.log_start_offset == second.offset
    assert all(s.base_offset <= second.offset for s in ml.log.segments[:1])
    assert len(ml.log.segments) < len(segments_before)  # whole segments below the snapshot are gone
    assert ml.snapshots.ids() == [second] and first != second  # only the latest is kept
    files = os.listdir(ml.log.path)
    assert snapshot_name(second) in files and snapshot_name(first) not in files
    ml.close()


def test_a_corrupt_latest_snapshot_falls_back_to_an_older_one(tmp_path: Any, caplog: Any) -> None:
    ml = open_log(tmp_path)
    append(ml, topics(10))
    older = OffsetAndEpoch(ml.log.log_end_offset, 0)
    ml.snapshots.write(older, encode_snapshot(image_records(ml.image), older, 0, 0))  # not trimmed to
    append(ml, topics(10, 10))
    newer = OffsetAndEpoch(ml.log.log_end_offset, 0)
    data = encode_snapshot(image_records(ml.image), newer, 0, 0)
    ml.snapshots.write(newer, data[:-20])  # a torn copy (disk damage: our writes rename whole files)
    expected = state(ml.image)
    ml.close()
    with caplog.at_level(logging.WARNING, logger="hightide.metadata"):
        again = open_log(tmp_path)
    assert again.snapshot_id == older and state(again.image) == expected
    assert snapshot_name(newer) in caplog.text and "unusable" in caplog.text
    again.close()


def test_a_corrupt_only_snapshot_falls_back_to_the_log(tmp_path: Any, caplog: Any) -> None:
    ml = open_log(tmp_path)
    append(ml, topics(10))
    sid = OffsetAndEpoch(ml.log.log_end_offset, 0)
    ml.snapshots.write(sid, b"\x00" * 100)
    expected = state(ml.image)
    ml.close()
    with caplog.at_level(logging.WARNING, logger="hightide.metadata"):
        again = open_log(tmp_path)
    assert again.snapshot_id is None and state(again.image) == expected
    assert "unusable" in caplog.text
    again.close()


def test_a_trimmed_log_without_its_snapshot(tmp_path: Any, caplog: Any) -> None:
    ml = open_log(tmp_path, segment_bytes=2048)
    append(ml, topics(30))
    sid = snapshot(ml)
    ml.close()
    path = os.path.join(str(tmp_path), "__cluster_metadata-0", snapshot_name(sid))
    with open(path, "r+b") as f:
        f.seek(80)
        f.write(b"garbage")
    with pytest.raises(MetadataLogGap, match="no usable snapshot"):
        open_log(tmp_path, segment_bytes=2048)  # a controller: nothing to rebuild from
    with caplog.at_level(logging.WARNING, logger="hightide.metadata"):
        copy = open_log(tmp_path, segment_bytes=2048, refetchable=True)  # a broker fetches it again
    assert copy.log.log_start_offset == copy.log.log_end_offset == 0 and not copy.image.topics
    assert copy.snapshots.ids() == [] and "fetch it again" in caplog.text
    copy.close()


def test_partial_files_are_removed_and_never_loaded(tmp_path: Any) -> None:
    ml = open_log(tmp_path)
    append(ml, topics(5))
    part = os.path.join(ml.log.path, "00000000000000000010-0000000000.checkpoint.part")
    with open(part, "wb") as f:
        f.write(b"half a snapshot")
    ml.close()
    again = open_log(tmp_path)
    assert again.snapshot_id is None and not os.path.exists(part) and len(again.image.topics) == 5
    again.close()


def test_a_log_ending_before_the_snapshot_restarts_at_it(tmp_path: Any) -> None:
    source = open_log(tmp_path / "src")
    append(source, topics(20))
    sid = OffsetAndEpoch(source.log.log_end_offset, 0)
    data = encode_snapshot(image_records(source.image), sid, 0, 0)
    copy = open_log(tmp_path / "copy")
    append(copy, topics(3))
    copy.snapshots.write(sid, data)  # a broker stopped after writing a fetched snapshot
    copy.close()
    again = open_log(tmp_path / "copy")
    assert again.log.log_start_offset == again.log.log_end_offset == sid.offset
    assert state(again.image) == state(source.image)
    again.close()
    source.close()


def test_install_snapshot_then_follow_and_truncate(tmp_path: Any) -> None:
    source = open_log(tmp_path / "src")
    append(source, every_type_records() + topics(20))
    sid = OffsetAndEpoch(source.log.log_end_offset, 0)
    data = encode_snapshot(image_records(source.image), sid, 0, 0)
    copy = open_log(tmp_path / "copy", refetchable=True)
    append(copy, topics(3))
    copy.snapshots.write(sid, data)
    copy.install_snapshot(sid, image_from_snapshot(data, sid))
    assert copy.log.log_start_offset == copy.log.log_end_offset == sid.offset
    append(source, topics(5, 20))
    append(copy, topics(5, 20))  # fetching on from the snapshot's end
    assert state(copy.image) == state(source.image)
    copy.truncate_to(0)  # a divergence: everything is fetched again
    assert copy.snapshots.ids() == [] and copy.log.log_end_offset == 0 and not copy.image.topics
    copy.close()
    source.close()


def test_header_timestamp_is_kept(tmp_path: Any) -> None:
    data = encode_snapshot([], OffsetAndEpoch(1, 0), 123456, 0)
    assert decode_snapshot(io.BytesIO(data).getvalue()).last_contained_ms == 123456
