"""``hightide metadata-quorum describe``: Kafka's --status and --replication arithmetic
on DescribeQuorum answers, hightide's applied/lowest-acknowledged offsets, and the
errors; the cluster cases are in test_cluster_cli.py."""

from __future__ import annotations

import json
import uuid

import pytest
from click.testing import CliRunner

from hightide.cli import main
from hightide.cli.metadata_quorum import (
    QuorumView,
    kafka_uuid,
    lowest_acknowledged,
    replication_rows,
    status_doc,
    status_text,
)
from hightide.client.cluster import QuorumInfo, QuorumReplica

DIR = uuid.UUID("0b6f6c8e-6a6b-4b8e-9f4a-1c2d3e4f5a6b")


def _quorum(observers: tuple[QuorumReplica, ...] = ()) -> QuorumInfo:
    voters = (QuorumReplica(3000, DIR, 120, 1_000_500, 1_000_500),
              QuorumReplica(3001, None, 100, 1_000_400, 1_000_100))
    return QuorumInfo(3000, 4, 118, voters, observers, {3000: (("CONTROLLER", "127.0.0.1", 9095),)})


OBSERVERS = (QuorumReplica(0, None, 120, 1_000_450, 1_000_450), QuorumReplica(1, None, 111, 1_000_300, 1_000_200),
             QuorumReplica(2, None, 90, 1_000_000, 999_000))


def test_status_follows_kafka_metadata_quorum_arithmetic() -> None:
    doc = status_doc(QuorumView("clu", _quorum(OBSERVERS), {0: False, 1: False, 2: True}))
    assert doc["leader_id"] == 3000 and doc["leader_epoch"] == 4 and doc["high_watermark"] == 118
    assert doc["max_follower_lag"] == 20  # leader LEO - the lowest voter LEO
    assert doc["max_follower_lag_time_ms"] == 400  # leader caught-up time - the laggard's
    assert doc["current_voters"] == [
        {"id": 3000, "directoryId": kafka_uuid(DIR), "endpoints": ["CONTROLLER://127.0.0.1:9095"]}, {"id": 3001}]
    assert doc["current_observers"] == [{"id": 0}, {"id": 1}, {"id": 2}]
    # broker 2 is fenced: it does not hold the lowest acknowledged offset back
    assert doc["lowest_acknowledged_offset"] == 110
    assert doc["brokers"]["1"] == {"applied_offset": 110, "fenced": False}
    text = status_text(doc).splitlines()
    assert text[0] == "ClusterId:              clu"
    assert text[5] == "MaxFollowerLagTimeMs:   400"
    assert text[6] == ('CurrentVoters:          [{"id": 3000, "directoryId": "' + kafka_uuid(DIR)
                       + '", "endpoints": ["CONTROLLER://127.0.0.1:9095"]}, {"id": 3001}]')
    assert text[7] == 'CurrentObservers:       [{"id": 0}, {"id": 1}, {"id": 2}]'
    assert text[8] == "LowestAckedOffset:      110"


def test_a_lone_leader_has_no_lag_and_unknown_fencing_means_no_lowest_acknowledged() -> None:
    q = QuorumInfo(1, 1, 50, (QuorumReplica(1, None, 50, -1, -1),), OBSERVERS[:1], {})
    doc = status_doc(QuorumView("c", q, None))
    assert (doc["max_follower_lag"], doc["max_follower_lag_time_ms"]) == (0, 0)
    assert doc["lowest_acknowledged_offset"] is None
    assert status_text(doc).splitlines()[-1] == "LowestAckedOffset:      -"


def test_lowest_acknowledged_is_unknown_until_every_unfenced_broker_has_fetched() -> None:
    never = QuorumReplica(5, None, -1, -1, -1)
    assert lowest_acknowledged(QuorumView("c", _quorum((OBSERVERS[0], never)), {0: False, 5: False})) is None
    assert lowest_acknowledged(QuorumView("c", _quorum((OBSERVERS[0],)), {0: True})) is None


def test_replication_rows_order_lag_and_applied_offsets() -> None:
    rows = replication_rows(QuorumView("c", _quorum(OBSERVERS), {0: False, 1: False, 2: True}), False, 1_000_600)
    assert [(r["node_id"], r["status"], r["lag"], r["applied_offset"]) for r in rows] == [
        (3000, "Leader", 0, None), (3001, "Follower", 20, None), (0, "Observer", 0, 119),
        (1, "Observer", 9, 110), (2, "Observer", 30, 89)]
    assert rows[1]["directory_id"] == "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka prints the zero Uuid so
    assert rows[0]["last_fetch_timestamp"] == 1_000_500
    human = replication_rows(QuorumView("c", _quorum(), None), True, 1_000_600)
    assert human[0]["last_fetch_timestamp"] == "100 ms ago"
    assert human[1]["last_caught_up_timestamp"] == "500 ms ago"


def test_kafka_uuid_is_url_safe_base64_without_padding() -> None:
    assert kafka_uuid(uuid.UUID(bytes=bytes(range(16)))) == "AAECAwQFBgcICQoLDA0ODw"


@pytest.mark.parametrize("args, message", [
    ([], "give exactly one of --status or --replication"),
    (["--status", "--replication"], "give exactly one of --status or --replication"),
    (["--status", "-b", "127.0.0.1:1", "--bootstrap-controller", "127.0.0.1:1"],
     "give only one of --bootstrap-server or --bootstrap-controller"),
    (["--status", "-b", "127.0.0.1:1", "|", "--bootstrap-controller", "127.0.0.1:1"],
     "give only one of --bootstrap-server or --bootstrap-controller"),
])
def test_usage_errors(args: list[str], message: str) -> None:
    before = args[args.index("|") + 1:] if "|" in args else []  # given before "describe"
    args = args[:args.index("|")] if "|" in args else args
    r = CliRunner().invoke(main, ["metadata-quorum", *before, "describe", *args])
    assert r.exit_code == 2 and message in r.output


def test_unreachable_server_is_one_line() -> None:
    r = CliRunner().invoke(main, ["metadata-quorum", "describe", "--status", "--bootstrap-controller", "127.0.0.1:1"])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert "[NETWORK_EXCEPTION] cannot reach 127.0.0.1:1 (connection refused)" in r.output


def test_single_node_is_the_one_voter_and_leader(server, topic_name) -> None:
    assert CliRunner().invoke(main, ["topics", "create", topic_name, "-b", server.bootstrap]).exit_code == 0
    r = CliRunner().invoke(main, ["metadata-quorum", "describe", "--status", "-b", server.bootstrap],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    fields = {k: v.strip() for k, v in (line.split(":", 1) for line in r.output.splitlines())}
    assert fields["LeaderId"] == "1" and fields["MaxFollowerLag"] == "0" and fields["MaxFollowerLagTimeMs"] == "0"
    assert int(fields["HighWatermark"]) > 0
    assert fields["CurrentVoters"] == f'[{{"id": 1, "endpoints": ["PLAINTEXT://{server.bootstrap}"]}}]'
    assert fields["CurrentObservers"] == "[]" and fields["LowestAckedOffset"] == "-"
    r = CliRunner().invoke(main, ["metadata-quorum", "describe", "--replication", "--json", "-b", server.bootstrap],
                           catch_exceptions=False)
    rows = json.loads(r.output)
    assert [(x["node_id"], x["status"], x["lag"]) for x in rows] == [(1, "Leader", 0)]
    assert rows[0]["log_end_offset"] >= int(fields["HighWatermark"])
    # kafka-metadata-quorum.sh's order: the connection options before the subcommand
    r = CliRunner().invoke(main, ["metadata-quorum", "--bootstrap-server", server.bootstrap, "describe", "--status"],
                           catch_exceptions=False)
    assert r.exit_code == 0 and "LeaderId:" in r.output, r.output
