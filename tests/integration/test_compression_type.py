"""Topic ``compression.type`` other than ``producer`` (issue 20): Kafka accepts gzip,
snappy, lz4, zstd and uncompressed and recompresses every batch whose codec differs (at
``compression.<codec>.level``); the default ``producer`` stores batches as sent."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from ..rawkafka import RawClient
from .clients import Rec, aiokafka_consume, confluent_consume, confluent_produce

pytestmark = pytest.mark.integration

CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _stored_codecs(bootstrap: str, topic: str) -> list[int]:
    """The codec (attributes & 7) of every batch stored in partition 0, read raw."""
    from hightide.protocol.records import iter_headers
    with RawClient(bootstrap) as c:
        f = c.request(1, 12, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 22,
                              "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [
                                  {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                                   "partition_max_bytes": 1 << 22}]}],
                              "forgotten_topics_data": [], "rack_id": ""})
    records = f.responses[0].partitions[0].records
    return [h.compression for h in iter_headers(records)]


def _records(n: int, tag: str) -> list[Rec]:
    return [Rec(0, f"k{i}".encode(), (f"{tag}-{i}-" * 20).encode(), (("h", b"v"),), 1_700_000_000_000 + i)
            for i in range(n)]


@pytest.mark.parametrize("target", ["gzip", "snappy", "lz4", "zstd", "uncompressed"])
def test_batches_are_recompressed_to_the_topic_codec(server, topic_name, target):
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1, config={"compression.type": target})])[topic_name].result(10)
    sent = _records(30, "a")
    produced_as = "none" if target != "uncompressed" else "zstd"  # always a codec that differs
    offsets = confluent_produce(server.bootstrap, topic_name, sent, compression=produced_as)
    assert [o for _, o in offsets] == list(range(30))
    assert set(_stored_codecs(server.bootstrap, topic_name)) == {CODECS[target]}
    for consume in (confluent_consume, aiokafka_consume):
        got = consume(server.bootstrap, topic_name, 1, 30)
        assert [(g.offset, g.key, g.value, g.headers, g.timestamp) for g in got] == [
            (i, r.key, r.value, r.headers, r.timestamp) for i, r in enumerate(sent)]


def test_alter_compression_type_and_level(server, topic_name):
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    confluent_produce(server.bootstrap, topic_name, _records(5, "a"), compression="lz4")
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("compression.type", "zstd", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("compression.zstd.level", "10", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(10)
    confluent_produce(server.bootstrap, topic_name, _records(5, "b"), compression="lz4")
    confluent_produce(server.bootstrap, topic_name, _records(5, "c"), compression="zstd")
    # producer kept lz4 as sent; afterwards lz4 is recompressed, zstd stays as sent
    # (the client may split a produce call into several batches)
    codecs = _stored_codecs(server.bootstrap, topic_name)
    first_zstd = codecs.index(4)
    assert set(codecs[:first_zstd]) == {3} and set(codecs[first_zstd:]) == {4} and len(codecs) - first_zstd >= 2
    got = confluent_consume(server.bootstrap, topic_name, 1, 15)
    assert [g.value for g in got] == [r.value for r in _records(5, "a") + _records(5, "b") + _records(5, "c")]
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("compression.type", "brotli", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception) as exc:
        admin.incremental_alter_configs([bad])[bad].result(10)
    assert exc.value.args[0].code() == 40  # INVALID_CONFIG
    level = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("compression.gzip.level", "12", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception) as exc:
        admin.incremental_alter_configs([level])[level].result(10)
    assert exc.value.args[0].code() == 40
