"""The CLI's plain table renderer and the --samples progress line (no broker needed)."""

from __future__ import annotations

import io

from hightide.cli import groups as groups_cmd
from hightide.cli._common import Col, render_table

COLS = [Col("GROUP", "g"), Col("LAG", "lag"), Col("CONSUMER-ID", "c", drop=3), Col("HOST", "h", drop=4),
        Col("NOTE", "n", drop=1)]
ROWS = [{"g": "orders-readers", "lag": 12, "c": "rdkafka-" + "f" * 36, "h": "/10.0.0.1", "n": None}]


def test_everything_fits_or_no_limit():
    text, hidden = render_table(COLS, ROWS, None)
    assert hidden == []
    assert text.splitlines() == [
        "GROUP           LAG  CONSUMER-ID                                   HOST       NOTE",
        "orders-readers  12   rdkafka-ffffffffffffffffffffffffffffffffffff  /10.0.0.1  -",
    ]


def test_optional_columns_go_highest_drop_first_until_it_fits():
    text, hidden = render_table(COLS, ROWS, 75)
    assert hidden == ["HOST"]
    assert max(map(len, text.splitlines())) <= 75
    text, hidden = render_table(COLS, ROWS, 30)
    assert hidden == ["HOST", "CONSUMER-ID"]
    assert text.splitlines()[1] == "orders-readers  12   -"


def test_key_columns_overflow_rather_than_being_cut():
    text, hidden = render_table(COLS, ROWS, 10)
    assert hidden == ["HOST", "CONSUMER-ID", "NOTE"]
    assert text.splitlines()[1] == "orders-readers  12"


def test_progress_only_on_a_terminal(monkeypatch):
    err = io.StringIO()
    err.isatty = lambda: True  # type: ignore[method-assign]
    monkeypatch.setattr(groups_cmd.sys, "stderr", err)
    p = groups_cmd.Progress(3)
    p.show(1, 2.0)
    p.done()
    assert err.getvalue() == "\rsample 1/3 taken, 4s left ... \r\033[K"
    quiet = io.StringIO()
    monkeypatch.setattr(groups_cmd.sys, "stderr", quiet)
    p = groups_cmd.Progress(3)
    p.show(1, 2.0)
    p.done()
    assert quiet.getvalue() == ""


def test_wrap_fields_keeps_lines_within_the_width():
    from hightide.cli._common import wrap_fields
    line = ("\tTopic: orders\tPartition: 10\tLeader: 1\tReplicas: 1,2,0\tIsr: 1,2,0\tElr: N/A"
            "\tLastKnownElr: N/A\tSize: 48213")
    assert wrap_fields(line, None) == [line]  # a pipe: Kafka's one line
    wrapped = wrap_fields(line, 80)
    assert [w.expandtabs(8) for w in wrapped] == [
        "        Topic: orders   Partition: 10   Leader: 1       Replicas: 1,2,0",
        "                Isr: 1,2,0      Elr: N/A        LastKnownElr: N/A",
        "                Size: 48213"]
    assert "\t".join(p.strip("\t") for p in wrapped) == line.strip("\t")
    configs = "Topic: t\tPartitionCount: 1\tConfigs: " + ",".join(f"config.number.{i}=value" for i in range(8))
    wrapped = wrap_fields(configs, 80)
    assert max(len(w.expandtabs(8)) for w in wrapped) <= 80 and len(wrapped) > 2
    assert "".join(p.strip("\t") for p in wrapped[1:]).startswith("Configs: config.number.0=value,config")


def test_quorum_status_wraps_the_voters_at_80_columns():
    from hightide.cli.metadata_quorum import status_text
    doc = {"cluster_id": "k5oQb1cTQ7yL8rPZ2JXw3A", "leader_id": 3001, "leader_epoch": 1, "high_watermark": 13,
           "max_follower_lag": 0, "max_follower_lag_time_ms": 0, "lowest_acknowledged_offset": None,
           "current_voters": [{"id": 3000 + i, "directoryId": "AAAAAAAAAAAAAAAAAAAAAA",
                               "endpoints": [f"CONTROLLER://127.0.0.1:{9095 + i}"]} for i in range(3)],
           "current_observers": [{"id": i} for i in range(3)]}
    wide = status_text(doc)
    assert max(map(len, wide.splitlines())) > 200  # one line per label, as Kafka prints it
    text = status_text(doc, 80)
    assert max(map(len, text.splitlines())) <= 80
    assert text.splitlines()[6:9] == [
        'CurrentVoters:          [{"id": 3000, "directoryId": "AAAAAAAAAAAAAAAAAAAAAA",',
        '                         "endpoints": ["CONTROLLER://127.0.0.1:9095"]},',
        '                         {"id": 3001, "directoryId": "AAAAAAAAAAAAAAAAAAAAAA",']
    assert " ".join(" ".join(text.splitlines()[6:12]).split()) == " ".join(wide.splitlines()[6].split())
