"""White-box invariants of the simulated cluster, checked after every step of the loop
(:attr:`~.loop.SimLoop.step_hook`): they read the nodes' state and never change it, so
a run with them takes the same steps as one without.

Seed 004's read-after-write rests on the lowest acknowledged offset (docs/cluster.md,
"The lowest acknowledged offset"): a broker serves a metadata read or answers a
forwarded write at offset X only once the active controller says every unfenced broker
has applied X. So, for every controller that believes it is active, and every broker it
counts whose live incarnation is the one it counts (same broker epoch; a killed broker's
restart is another incarnation, fenced until it catches up):

- the acknowledged offset of that broker's session is at most what the broker has
  applied (it acknowledged only what it had applied);
- the largest lowest acknowledged offset the controller handed out is at most what each
  broker it counts as active (unfenced, not in controlled shutdown) has applied.

"Applied" is the broker image's offset (its last applied metadata record). A broker that
fetched past Raft's control batches (LeaderChange, voters) acknowledges them too
(BrokerLifecycle.observe_fetch) without its image moving, so an offset above the image's
is a violation only when the controller's log holds a metadata record between the two.

A controller is checked only between its writes (its metadata log holds nothing past
what it applied): a write decides the brokers' next states and the lowest acknowledged
offset it hands out (a heartbeat that puts its broker into controlled shutdown already
leaves that broker out) before its records reach the image.

A violation raises :class:`~.checker.Anomaly` out of the step (the run ends there, and
the trace names the broker, its applied offset and the controller's numbers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .checker import Anomaly

if TYPE_CHECKING:
    from .world import World

__all__ = ["MetadataWatch"]


class MetadataWatch:
    """See the module doc. ``checks`` counts the steps checked (for the run's counts)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.checks = 0

    def __call__(self) -> None:
        self.checks += 1
        applied: dict[int, tuple[int, int]] = {}  # broker id -> (broker epoch, applied offset)
        for n in self.world.brokers:
            node = n.broker.node if n.broker is not None else None
            follower = getattr(node, "follower", None)
            if node is not None and follower is not None:
                applied[n.node_id] = (node.lifecycle.broker_epoch, follower.applied_offset)
        if not applied:
            return
        for c in self.world.controllers:
            service = c.broker.controller_service if c.broker is not None else None
            if service is None or not service.is_active or _writing(c.broker):
                continue
            heartbeats = service.lifecycle.heartbeats
            for reg in service.image.brokers.values():
                live = applied.get(reg.broker_id)
                if live is None or live[0] != reg.epoch:
                    continue
                session = heartbeats.sessions.get(reg.broker_id)
                if (session is not None and session.epoch == reg.epoch and session.acked_offset > live[1]
                        and _records_between(c.broker, live[1], session.acked_offset)):
                    raise Anomaly(f"controller {c.node_id} counts broker {reg.broker_id} (epoch {reg.epoch}) as "
                                  f"having applied metadata offset {session.acked_offset}, but it applied {live[1]}")
                if (heartbeats.is_active(reg) and heartbeats.floor > live[1]
                        and _records_between(c.broker, live[1], heartbeats.floor)):
                    raise Anomaly(f"controller {c.node_id} handed out lowest acknowledged offset "
                                  f"{heartbeats.floor}, but unfenced broker {reg.broker_id} (epoch {reg.epoch}) "
                                  f"applied only {live[1]}")


def _records_between(controller: Any, after: int, upto: int) -> bool:
    """True if the controller's metadata log holds a metadata record (not a Raft control
    batch) at an offset in (``after``, ``upto``]; also when that part of the log is gone
    (snapshotted), since nothing then shows the offsets hold control batches only."""
    runtime = controller.metadata_runtime
    if runtime is None:
        return True
    log = runtime.shell.core.log
    if after + 1 < log.start_offset:
        return True
    return any(not e.control and base <= upto and base + e.count - 1 > after for base, e in log.entries())


def _writing(controller: Any) -> bool:
    """True while the controller's metadata log holds records it has not applied yet."""
    runtime = controller.metadata_runtime
    return runtime is not None and runtime.shell.core.log.end_offset > runtime.shell.applied_end
