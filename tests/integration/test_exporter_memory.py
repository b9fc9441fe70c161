"""The exporter keeps its lag monitor across a failed scrape (issue 15, item 3): a scrape
that fails (say, during a leader failover) answers ``hightide_exporter_up 0`` and
reconnects on the next scrape, but the monitor's memory — the last known end offsets a
failover falls back to (docs/lag.md, "During a failover") and the status windows — is
not thrown away with the connection."""

from __future__ import annotations

import asyncio
from typing import Any

from hightide.client import AdminClient, KafkaError, NewTopic, TopicPartition
from hightide.client.errors import ErrorCode
from hightide.monitoring.exporter import Exporter


def test_a_failed_scrape_keeps_the_monitor_and_its_memory(server: Any, topic_name: str) -> None:
    async def go() -> None:
        async with AdminClient(server.bootstrap) as a:
            await a.create_topics([NewTopic(topic_name, 1)])
            await a.alter_consumer_group_offsets("mem-g", {TopicPartition(topic_name, 0): 0})
        ex = Exporter(server.bootstrap, groups=["mem-g"], min_interval_s=0.0, scrape_timeout_s=8.0)
        try:
            assert "hightide_exporter_up 1.0" in (await ex.render()).decode()
            mon = ex._monitor
            # the memory holds every partition the exporter reads (the shared broker has
            # other tests' topics too), the group's among them
            assert mon is not None and len(mon.tracker._groups) == 1
            remembered = len(mon.ends)
            assert remembered >= 1

            real = mon.snapshot

            async def failing(*args: Any, **kw: Any) -> Any:
                mon.snapshot = real  # type: ignore[method-assign]  # once
                raise KafkaError(ErrorCode.request_timed_out, "the cluster is failing over")
            mon.snapshot = failing  # type: ignore[method-assign]
            assert "hightide_exporter_up 0.0" in (await ex.render()).decode()
            assert ex._admin is None and ex._monitor is mon  # the connection is dropped, the memory is not

            assert "hightide_exporter_up 1.0" in (await ex.render()).decode()
            assert ex._monitor is mon and mon.admin is ex._admin  # the new connection, the same memory
            assert len(mon.ends) == remembered
        finally:
            await ex.stop()
    asyncio.run(go())
