"""A simulated client of forwarded metadata writes, and the two invariants it checks
(issue 26 items 4 and 5).

:class:`ForwardProbe` runs ``lanes`` callers at once; each sends CreateTopics (a new
one-partition topic, ``timeout_ms`` :data:`TIMEOUT_MS`) to a broker drawn from the seed,
over a connection of its own with a long request timeout and no retries, so each answer
and its time are the broker's. A broker-only node forwards the write to the active
controller (``hightide.server.forwarding``).

- **Deadline** (Kafka answers a forwarded write by its timeout): an answer that comes
  more than :data:`SLACK_S` after ``timeout_ms`` is an anomaly — unless a fault slowed or
  silenced that broker meanwhile (:meth:`~.faults.FaultSchedule.disturbed`: a paused
  broker answers late through no fault of its code).
- **Availability after a controller failover**: a write that fails (REQUEST_TIMED_OUT,
  NOT_CONTROLLER) when one controller had been the active controller, undisturbed, for
  :data:`SETTLE_S` already, with a majority of the voters undisturbed (it can commit)
  and the broker undisturbed during the call, is an anomaly: the brokers learn a new
  leader through their metadata fetch as soon as they ask a voter that knows it, and
  every channel must follow it then.
  (A SIGSTOPped old leader keeps its sockets open: a channel that stays on it stalls.)

The active controller is read white-box from each controller's Raft core every
:data:`WATCH_S` (simulated).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from ..client.connection import BrokerConnection
from ..client.errors import KafkaError, KafkaTimeoutError
from .checker import Anomaly
from .faults import FaultSchedule
from .world import World

__all__ = ["ForwardProbe"]

TIMEOUT_MS = 3000
#: How late past its timeout a forwarded write may be answered (network delays, the
#: client's own queueing).
SLACK_S = 1.0
#: How long a controller must have led, undisturbed, before a write that fails counts.
SETTLE_S = 1.0
WATCH_S = 0.05
#: Errors of a CreateTopics that mean the controller was not reached in time.
_UNAVAILABLE = {7: "REQUEST_TIMED_OUT", 41: "NOT_CONTROLLER"}


class ForwardProbe:
    """See the module doc."""

    def __init__(self, name: str, world: World, faults: FaultSchedule, rng: random.Random,
                 trace: Callable[[str], None], now: Callable[[], float], *, lanes: int = 3) -> None:
        self.name, self.world, self.faults, self.rng, self.trace, self.now = name, world, faults, rng, trace, now
        self.lanes = lanes
        self.progress_at = 0.0
        self.created = 0
        self._serial = 0
        #: (controller id, epoch, since): the active controller seen by the watch, None when none.
        self._leader: tuple[int, int, float] | None = None
        self._conns: set[BrokerConnection] = set()

    async def run(self) -> None:
        await asyncio.gather(self._watch(), *(self._lane(i) for i in range(self.lanes)))

    async def close(self) -> None:
        conns, self._conns = list(self._conns), set()
        for conn in conns:
            await conn.close()

    # --- the active controller ------------------------------------------------------------

    def _active(self) -> tuple[int, int] | None:
        node = self.world.active_controller()
        if node is None or node.broker is None or node.broker.metadata_runtime is None:
            return None
        return node.node_id, node.broker.metadata_runtime.shell.core.epoch

    async def _watch(self) -> None:
        while True:
            active = self._active()
            if active is None:
                self._leader = None
            elif self._leader is None or self._leader[:2] != active:
                self._leader = (*active, self.now())
                self.trace(f"{self.name}: controller {active[0]} is the active controller (epoch {active[1]})")
            await asyncio.sleep(WATCH_S)

    def _settled_leader(self, start: float, end: float) -> int | None:
        """The controller that had led, undisturbed, for SETTLE_S when a write sent at
        ``start`` failed at ``end``, with a majority of the voters undisturbed meanwhile
        (it could commit), if any."""
        if self._leader is None:
            return None
        leader, _epoch, since = self._leader
        if since > end - SETTLE_S or self.faults.disturbed(leader, since, end):
            return None
        voters = [n.node_id for n in self.world.controllers]
        quorum = [v for v in voters if not self.faults.disturbed(v, min(since, start), end)]
        return leader if len(quorum) > len(voters) // 2 else None

    # --- the writes -------------------------------------------------------------------------

    async def _lane(self, lane: int) -> None:
        while True:
            await asyncio.sleep(self.rng.uniform(0.2, 1.0))
            broker = self.rng.choice(self.world.brokers)
            if not broker.up:
                continue
            self._serial += 1
            topic = f"fwd-{self.name}-{self._serial}"
            conn = BrokerConnection(broker.host, broker.port, f"{self.name}-{lane}", transport=self.world.net,
                                    request_timeout_s=TIMEOUT_MS / 1000 + 60)
            self._conns.add(conn)
            try:
                await conn.connect()
                v = conn.pick_version(19, 7, 2)
                start = self.now()
                code: int | None = None
                try:
                    resp = await conn.request(19, v, {
                        "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [],
                                    "configs": []}], "timeout": TIMEOUT_MS, "validate_only": False})
                    code = int(resp.topics[0].error_code)
                except KafkaTimeoutError:
                    code = -1  # no answer long past the deadline
                except (KafkaError, OSError):
                    code = None  # no answer: the connection broke (a reset, a crash)
                end = self.now()
                self._check(broker.node_id, topic, start, end, code)
            except (KafkaError, OSError, TimeoutError):
                pass  # connect failed: nothing was sent
            finally:
                self._conns.discard(conn)
                await conn.close()

    def _check(self, broker: int, topic: str, start: float, end: float, code: int | None) -> None:
        took = end - start
        undisturbed = not self.faults.disturbed(broker, start, end)
        what = f"{self.name}: CreateTopics {topic} (timeout_ms {TIMEOUT_MS}) sent to broker {broker} at " \
               f"{start - 1000:.3f}"
        if code is not None and took > TIMEOUT_MS / 1000 + SLACK_S and undisturbed:
            raise Anomaly(f"deadline: {what} answered after {took:.2f} s")
        if code == 0:
            self.created += 1
            self.progress_at = end
            self.trace(f"{self.name} created {topic} via broker {broker} in {took:.2f}s")
            return
        leader = self._settled_leader(start, end)
        if code in _UNAVAILABLE and undisturbed and leader is not None and self._leader is not None:
            raise Anomaly(f"controller failover: {what} failed ({_UNAVAILABLE[code]}, after {took:.2f} s) although "
                          f"controller {leader} had been the active controller since {self._leader[2] - 1000:.3f}")
        self.trace(f"{self.name} CreateTopics {topic} via broker {broker}: error {code} after {took:.2f}s")
