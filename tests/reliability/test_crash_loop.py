"""Crash loop: idempotent acks=all producers write to several partitions while the
broker is killed with SIGKILL at random moments and restarted (20 times here, 200 in
``bench/crash_loop.py``, same code: :mod:`.crashloop`). Every acknowledged record must
be present exactly once, in order, with its offset and timestamp; committed group
offsets and share-group start offsets are never ahead of what was acknowledged (the
log end) and never go backwards; the share group gets every record at least once."""

from __future__ import annotations

import pytest

from . import crashloop

pytestmark = pytest.mark.integration

KILLS = 20


@pytest.mark.timeout(300)
def test_kill9_loop_loses_nothing_acknowledged(fresh_server, topic_name):
    def start(data_dir, port):
        return fresh_server(data_dir=data_dir, port=port)

    result = crashloop.run(start, topic_name, kills=KILLS, partitions=3, producers=2, share=True)
    srv = result.pop("server")
    assert not result["violations"], result["violations"]
    assert result["records_acknowledged"] > 100
    assert result["group_commits_confirmed"] > 0
    assert result["share_group"]["records_delivered"] == result["records_acknowledged"]
    # the kills land while records are being acknowledged, not only at the end
    assert result["kill_to_next_ack_ms"]["kills_with_an_ack_before_the_next"] >= KILLS - 2
    assert "Traceback" not in srv.output()
    print(f"crash loop: {result}")
