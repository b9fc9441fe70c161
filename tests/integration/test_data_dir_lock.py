"""Defect 1 of issue 11: a second broker on a data directory in use must refuse to start.

Before the fix the second ``hightide serve --data-dir D`` started, recovered the same
partition files and appended over records the first broker had acknowledged.
"""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from ..conftest import free_port
from ..waiting import wait_until
from .clients import Rec, confluent_consume, confluent_create_topic, confluent_produce

pytestmark = pytest.mark.integration


def _records(n: int, start: int = 0) -> list[Rec]:
    return [Rec(0, f"k{i}".encode(), f"value-{i}".encode() * 4, (), 1_700_000_000_000 + i)
            for i in range(start, start + n)]


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def _second_broker(data_dir) -> tuple[int | None, str, bool]:
    """Run a second ``hightide serve`` on ``data_dir``; return (exit code, stderr, started).

    ``started`` is True if it came up and listened (the defect); it is then stopped.
    """
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hightide", "serve", "--data-dir", str(data_dir),
                             "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: proc.poll() is not None or _listening(port), 30,
                   what="the second broker to exit or listen")
        started = proc.poll() is None
    finally:
        if proc.poll() is None:
            proc.terminate()
        _, err = proc.communicate(timeout=30)
    return proc.returncode, err, started


def test_second_broker_on_a_locked_data_dir_refuses_and_loses_nothing(fresh_server, topic_name):
    srv = fresh_server()
    confluent_create_topic(srv.bootstrap, topic_name, 1)
    before = _records(200)
    pos_before = confluent_produce(srv.bootstrap, topic_name, before)

    code, err, started = _second_broker(srv.data_dir)
    assert not started, "a second broker started on a data directory in use"
    assert code != 0
    assert err.splitlines() == [f"hightide: data directory {srv.data_dir} is in use by another hightide "
                                f"process (pid {srv.proc.pid})"], err

    after = _records(200, start=200)
    pos_after = confluent_produce(srv.bootstrap, topic_name, after)
    assert pos_before + pos_after == [(0, i) for i in range(400)]
    recs = before + after
    got = confluent_consume(srv.bootstrap, topic_name, 1, len(recs))
    assert [(g.offset, g.value) for g in got] == [(i, r.value) for i, r in enumerate(recs)]

    assert srv.stop() == 0  # the lock is released on a clean stop: the same directory starts again
    srv2 = fresh_server(data_dir=srv.data_dir, port=srv.port)
    got = confluent_consume(srv2.bootstrap, topic_name, 1, len(recs))
    assert [(g.offset, g.value) for g in got] == [(i, r.value) for i, r in enumerate(recs)]
    assert "Traceback" not in srv.output() + srv2.output()
