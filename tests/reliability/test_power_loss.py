"""Simulated power loss: a broker runs on the in-memory storage engine, which keeps
apart what is only in the page cache and what an fsync (of the file, and of its
directory for new names) made durable. The broker is killed, then ``crash()`` drops
everything not durable, as a power cut would, and a new broker starts on what is left.
With log.flush.interval.messages=1 nothing acknowledged may be missing."""

from __future__ import annotations

import pytest

from hightide.log.storage_memory import MemoryStorage

from ..integration.clients import Rec, confluent_consume, confluent_create_topic, confluent_produce
from .embedded import EmbeddedBroker

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fsync_each", [True, False], ids=["flush-every-message", "interval-only"])
def test_power_loss(tmp_path, topic_name, fsync_each):
    """With an fsync before every ack nothing acknowledged is lost; the control case
    (interval flushing only, interval far away) shows the simulation really cuts
    acknowledged data, so the first case is not passing vacuously."""
    disk = MemoryStorage()
    args = ["log.flush.interval.ms=3600000"]
    if fsync_each:
        args += ["log.flush.interval.messages=1"]
    srv = EmbeddedBroker(tmp_path / "data", disk, *args).start()
    try:
        confluent_create_topic(srv.bootstrap, topic_name, 3)
        recs = [Rec(i % 3, None, f"v{i}".encode() * 10, (), 1_700_000_000_000 + i) for i in range(900)]
        positions = confluent_produce(srv.bootstrap, topic_name, recs, extra={"linger.ms": 1, "batch.size": 2000})
    finally:
        srv.kill()
    cut = disk.crash()
    srv2 = EmbeddedBroker(tmp_path / "data", disk, *args, port=srv.port).start()
    try:
        got = confluent_consume(srv2.bootstrap, topic_name, 3, len(recs), timeout=30 if fsync_each else 3)
    finally:
        srv2.stop()
    seen = {(g.partition, g.offset): g.value for g in got}
    missing = [pos for r, pos in zip(recs, positions) if seen.get(pos) != r.value]
    if fsync_each:
        assert not missing, f"{len(missing)} acknowledged records lost after the simulated power cut"
    else:
        assert cut > 0 and missing, "the control case must lose the unsynced tail"
    print(f"power loss ({'fsync each' if fsync_each else 'interval only'}): {len(missing)} of {len(recs)} "
          f"acknowledged records lost; {cut} unsynced bytes cut")
