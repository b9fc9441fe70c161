"""Timed metadata writes through a broker while controllers are paused (issue 26, items 4
and 5), shared by ``test_quorum_failover.py`` and ``bench/controller_pause.py``:

* :func:`timed_create`: one CreateTopics straight to a broker, timed, no client retries;
* :func:`pause_leader_cycle`: SIGSTOP the active controller, CreateTopics through a broker
  until one succeeds (how long writes stall), SIGCONT;
* :func:`no_quorum_round`: pause a majority, several CreateTopics at once with a timeout
  (each must answer REQUEST_TIMED_OUT by it), resume.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from hightide.client.connection import BrokerConnection
from hightide.client.errors import ErrorCode, KafkaError

from .harness import ClusterHarness


async def timed_create(h: ClusterHarness, name: str, timeout_ms: int, broker: int = 0) -> tuple[float, int]:
    """One CreateTopics (1 partition, RF 1) of ``name`` with ``timeout_ms`` straight to
    ``broker`` (no client retries, a client timeout well past the request's):
    (seconds until answered, error code; -1: no answer)."""
    node = h.node(broker).spec
    conn = BrokerConnection(node.host, node.port, "timing-test", request_timeout_s=timeout_ms / 1000 + 20)
    started = time.monotonic()
    try:
        await conn.connect()
        started = time.monotonic()
        resp = await conn.request(19, 7, {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1,
                                                      "assignments": [], "configs": []}],
                                          "timeout": timeout_ms, "validate_only": False})
        return time.monotonic() - started, int(resp.topics[0].error_code)
    except KafkaError:
        return time.monotonic() - started, -1
    finally:
        await conn.close()


@dataclass
class PauseCycle:
    """One SIGSTOP of the leader: which, and the CreateTopics attempts through a broker
    as (sent after, answered after, error code), seconds from the SIGSTOP."""
    leader: int
    attempts: list[tuple[float, float, int]] = field(default_factory=list)

    @property
    def resumed_s(self) -> float | None:
        """Seconds from the SIGSTOP until a CreateTopics succeeded (None: none did)."""
        last = self.attempts[-1] if self.attempts else None
        return last[1] if last is not None and last[2] == 0 else None


def pause_leader_cycle(h: ClusterHarness, prefix: str, *, limit_s: float = 30.0,
                       timeout_ms: int = 3000) -> PauseCycle:
    """SIGSTOP the active controller, send CreateTopics through broker 0 one after another
    until one succeeds (or ``limit_s``), SIGCONT it; the attempts."""
    leader = h.quorum_leader()
    cycle = PauseCycle(leader)
    h.pause(leader)
    try:
        paused = time.monotonic()
        while time.monotonic() - paused < limit_s:
            sent = time.monotonic() - paused
            took, code = asyncio.run(timed_create(h, f"{prefix}-{len(cycle.attempts)}", timeout_ms))
            cycle.attempts.append((round(sent, 2), round(sent + took, 2), code))
            if code == 0:
                break
            time.sleep(0.05)
    finally:
        h.resume(leader)
    return cycle


def no_quorum_round(h: ClusterHarness, prefix: str, *, callers: int = 4, rounds: int = 3,
                    timeout_ms: int = 3000) -> list[tuple[float, int]]:
    """Pause the leader and one follower (a 3-voter quorum has no majority then: the
    paused voters accept connections and never answer), send ``callers`` CreateTopics at
    once with ``timeout_ms``, ``rounds`` times, resume both; every (seconds, error code)."""
    leader = h.quorum_leader()
    follower = next(n.spec.node_id for n in h.controllers if n.spec.node_id != leader)
    paused = [leader, follower]
    for node in paused:
        h.pause(node)
    answers: list[tuple[float, int]] = []
    try:
        async def round_of(r: int) -> list[tuple[float, int]]:
            return list(await asyncio.gather(*(timed_create(h, f"{prefix}-{r}-{i}", timeout_ms)
                                               for i in range(callers))))
        for r in range(rounds):  # at once, then while the broker's channel is reconnecting
            answers += asyncio.run(round_of(r))
    finally:
        for node in paused:
            h.resume(node)
    return answers


#: The answer every forwarded write gets without a quorum.
TIMED_OUT = int(ErrorCode.request_timed_out)
