"""A restarted broker serves nothing it leads or coordinates until it has caught up with
the controller's metadata log (issue 26, item 1), with real processes.

Two cycles of :mod:`.restart_cycles` (``bench/restart_cycles.py`` runs 20): kill -9 the
group's coordinator, commit at the new one, SIGSTOP the controller, restart the old
coordinator — it must not name itself coordinator, answer the stale offset or
acknowledge a commit — then SIGCONT the controller: it catches up and serves, and the
committed offset is the newest acknowledged one. Before the fix the restarted broker
loaded the ``__consumer_offsets`` partition its stale copy said it led, named itself,
answered the old offset and acknowledged commits that were then lost.
"""

from __future__ import annotations

import asyncio

import pytest

from . import restart_cycles

pytestmark = pytest.mark.timeout(150)


def test_a_restarted_coordinator_serves_nothing_before_catching_up(cluster):
    c = cluster(3, broker_session_timeout_ms=5000, offsets_topic_num_partitions=3)
    stats = asyncio.run(restart_cycles.run(c, 2, probe_s=1.5))
    summary = stats.summary()
    assert stats.violations == [], summary
    assert (stats.cycles, stats.commits_lost, stats.stale_answers, stats.acknowledged_by_restarted) == (2, 0, 0, 0)
    assert stats.commits_acknowledged == 3  # the first commit and one per cycle at the new coordinator
