"""The exporter's metadata-quorum series (monitoring/quorum.py) rendered from a
DescribeQuorum/DescribeCluster read."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from hightide.client.cluster import QuorumInfo, QuorumReplica
from hightide.monitoring.quorum import QuorumSnapshot, quorum_families


class _Collector:
    def __init__(self, snap: QuorumSnapshot | None) -> None:
        self.snap = snap

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from quorum_families(self.snap)


def _render(snap: QuorumSnapshot | None) -> dict[str, float]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Collector(snap))
    out = {}
    for line in generate_latest(reg).decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


QUORUM = QuorumInfo(3000, 2, 57, (QuorumReplica(3000, None, 58, 1_700_000_000_000, 1_700_000_000_000),),
                    (QuorumReplica(0, None, 58, 1_700_000_000_100, 1_700_000_000_100),
                     QuorumReplica(1, None, 50, 1_700_000_000_000, 1_699_999_999_000),
                     QuorumReplica(2, None, 20, 1_699_999_990_000, 1_699_999_990_000)), {})


def test_series_of_a_cluster_with_one_fenced_broker() -> None:
    m = _render(QuorumSnapshot(QUORUM, {0: False, 1: False, 2: True}))
    assert m["hightide_metadata_high_watermark"] == 57
    assert m["hightide_metadata_current_leader"] == 3000
    assert m["hightide_metadata_current_epoch"] == 2
    assert m['hightide_metadata_replica_log_end_offset{node_id="1",role="observer"}'] == 50
    assert m['hightide_metadata_replica_lag{node_id="2",role="observer"}'] == 38
    assert m['hightide_metadata_replica_lag{node_id="3000",role="voter"}'] == 0
    assert m['hightide_metadata_replica_last_fetch_timestamp_seconds{node_id="0",role="observer"}'] == 1_700_000_000.1
    assert m['hightide_metadata_broker_applied_offset{broker="1"}'] == 49
    assert m["hightide_metadata_lowest_acknowledged_offset"] == 49  # broker 2 is fenced: not counted
    assert m["hightide_metadata_fenced_brokers"] == 1
    assert m["hightide_metadata_active_brokers"] == 2
    assert m['hightide_broker_fenced{broker="2"}'] == 1 and m['hightide_broker_fenced{broker="0"}'] == 0


def test_unknown_fencing_leaves_out_the_broker_state_series() -> None:
    m = _render(QuorumSnapshot(QUORUM, None))
    assert "hightide_metadata_lowest_acknowledged_offset" not in m
    assert "hightide_metadata_fenced_brokers" not in m
    assert m["hightide_metadata_high_watermark"] == 57


def test_no_quorum_no_series() -> None:
    assert _render(None) == {}
