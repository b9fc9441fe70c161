"""Simulated power loss with log.flush.interval.messages=1: every segment file is cut
back to the length the last fsync covered (recorded by the HIGHTIDE_FSYNC_JOURNAL test
hook), as a power cut would leave it, and nothing acknowledged may be missing."""

from __future__ import annotations

import os

import pytest

from ..integration.clients import Rec, confluent_consume, confluent_create_topic, confluent_produce

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fsync_each", [True, False], ids=["flush-every-message", "interval-only"])
def test_power_loss(fresh_server, topic_name, tmp_path, monkeypatch, fsync_each):
    """With an fsync before every ack nothing acknowledged is lost; the control case
    (interval flushing only, interval far away) shows the simulation really cuts
    acknowledged data, so the first case is not passing vacuously."""
    journal = tmp_path / "fsync-journal"
    monkeypatch.setenv("HIGHTIDE_FSYNC_JOURNAL", str(journal))
    args = ["--set", "log.flush.interval.ms=3600000"]
    if fsync_each:
        args += ["--set", "log.flush.interval.messages=1"]
    srv = fresh_server(*args)
    confluent_create_topic(srv.bootstrap, topic_name, 3)
    recs = [Rec(i % 3, None, f"v{i}".encode() * 10, (), 1_700_000_000_000 + i) for i in range(900)]
    positions = confluent_produce(srv.bootstrap, topic_name, recs, extra={"linger.ms": 1, "batch.size": 2000})
    srv.kill9()

    durable: dict[str, int] = {}
    for line in journal.read_text().splitlines():
        path, size = line.rsplit(" ", 1)
        durable[path] = max(durable.get(path, 0), int(size))
    cut = 0
    for root, _, files in os.walk(srv.data_dir):
        for name in files:
            if name.endswith(".log"):
                path = os.path.join(root, name)
                keep = durable.get(path, 0)  # never fsynced: a power cut keeps nothing
                size = os.path.getsize(path)
                if size > keep:
                    cut += size - keep
                    os.truncate(path, keep)
    srv2 = fresh_server(data_dir=srv.data_dir, port=srv.port)
    got = confluent_consume(srv2.bootstrap, topic_name, 3, len(recs), timeout=30 if fsync_each else 3)
    seen = {(g.partition, g.offset): g.value for g in got}
    missing = [pos for r, pos in zip(recs, positions) if seen.get(pos) != r.value]
    if fsync_each:
        assert not missing, f"{len(missing)} acknowledged records lost after the simulated power cut"
    else:
        assert cut > 0 and missing, "the control case must lose the unsynced tail"
    print(f"power loss ({'fsync each' if fsync_each else 'interval only'}): {len(missing)} of {len(recs)} "
          f"acknowledged records lost; {cut} unsynced bytes cut")
