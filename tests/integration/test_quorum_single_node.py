"""DescribeQuorum (55) and UpdateFeatures (57) on the single node (`hightide serve`, the
combined mode): it is the one voter of ``__cluster_metadata`` with no observers, and
finalized ``metadata.version`` levels are metadata records shown by ApiVersions."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.rawkafka import RawClient


def describe_quorum(c: RawClient, version: int = 2) -> object:
    return c.request(55, version, {"topics": [{"topic_name": "__cluster_metadata", "partitions": [
        {"partition_index": 0}]}, {"topic_name": "other", "partitions": [{"partition_index": 0}]}]})


def test_single_node_describes_itself_as_the_one_voter(fresh_server, topic_name):
    srv = fresh_server("--node-id", "4")
    with RawClient(srv.bootstrap) as c:
        before = describe_quorum(c).topics[0].partitions[0]
        created = c.request(19, 7, {"topics": [{"name": topic_name, "num_partitions": 2, "replication_factor": -1,
                                                "assignments": [], "configs": []}],
                                    "timeout": 30000, "validate_only": False})
        assert created.topics[0].error_code == ErrorCode.none
        q = describe_quorum(c)
        p = q.topics[0].partitions[0]
        assert q.error_code == ErrorCode.none and p.error_code == ErrorCode.none
        assert (p.leader_id, p.leader_epoch) == (4, 0)
        # a topic with two partitions is three records: the high watermark moved by three
        assert p.high_watermark == before.high_watermark + 3
        assert [(v.replica_id, v.log_end_offset) for v in p.current_voters] == [(4, p.high_watermark)]
        assert p.current_voters[0].last_caught_up_timestamp > 0 and list(p.observers) == []
        assert [(n.node_id, n.listeners[0].port) for n in q.nodes] == [(4, srv.port)]
        assert q.topics[1].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
        v0 = describe_quorum(c, 0).topics[0].partitions[0]
        assert v0.high_watermark == p.high_watermark


def test_single_node_update_features_finalizes_metadata_version(fresh_server):
    srv = fresh_server()
    with RawClient(srv.bootstrap) as c:
        api = c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert list(api.finalized_features) == []
        ok = c.request(57, 1, {"timeout": 30000, "validate_only": False, "feature_updates": [
            {"feature": "metadata.version", "max_version_level": 21, "upgrade_type": 1}]})
        assert ok.error_code == ErrorCode.none and ok.results[0].error_code == ErrorCode.none
        api = c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert [(f.name, f.max_version_level) for f in api.finalized_features] == [("metadata.version", 21)]
        unknown = c.request(57, 1, {"timeout": 30000, "validate_only": False, "feature_updates": [
            {"feature": "no.such.feature", "max_version_level": 1, "upgrade_type": 1}]})
        assert unknown.error_code == ErrorCode.invalid_update_version
        assert unknown.results[0].error_code == ErrorCode.invalid_update_version
    srv.stop()
    srv.start()  # the level is a metadata record: it survives a restart
    with RawClient(srv.bootstrap) as c:
        api = c.request(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert [(f.name, f.max_version_level) for f in api.finalized_features] == [("metadata.version", 21)]


def test_kafka_python_describes_the_quorum_and_updates_features(fresh_server):
    from kafka import KafkaAdminClient
    srv = fresh_server("--node-id", "2")
    admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=10000)
    try:
        q = admin.describe_metadata_quorum()
        p = q["topics"][0]["partitions"][0]
        assert (p["leader_id"], p["error"]) == (2, None)
        assert [v["replica_id"] for v in p["current_voters"]] == [2] and p["observers"] == []
        admin.update_features({"metadata.version": 18})
        features = admin.describe_features()
        assert features["metadata.version"]["finalized"] == (18, 18)
        assert features["metadata.version"]["supported"] == (7, 25)
    finally:
        admin.close()
