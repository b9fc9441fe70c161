"""Deliberately broken variants of the production code, to show that the simulation
finds bugs of the kinds it exists for (``python -m hightide.sim --plant NAME``).

Each is a context manager that patches one rule while a run goes, and undoes it after:

- ``acks-before-hw``: an acks=all write is acknowledged as soon as the leader appended
  it, before the high watermark passed it (``LeaderState.acks_outcome``): a leader that
  dies before its followers fetched loses acknowledged records.
- ``coordinator-unreplicated``: the coordinator runtime acknowledges a write (an offset
  commit) once it is durable on the coordinator, without waiting for the followers of
  its ``__consumer_offsets`` partition (``CoordinatorRuntime._when_replicated``): a
  coordinator that dies takes acknowledged commits with it.
- ``no-truncation``: replicas never reconcile diverging logs (the world before Kafka's
  KIP-101): the leader does not tell a follower its log diverged
  (``ReplicaLog.diverging_epoch``) and a follower does not truncate where the leader's
  epochs say (``ReplicaFetcher._truncate``): a deposed leader keeps records its
  successor never had and appends the new leader's after them, at other offsets.
- ``ack-on-fetch``: the controller counts a broker's metadata Fetch as acknowledging
  everything committed (what the answer will carry), not what the broker applied before
  it sent the Fetch (``BrokerLifecycle.observe_fetch``): the lowest acknowledged offset
  runs ahead of a broker that has not applied it yet (seed 004's read-after-write gone).
- ``unclean-election``: when a partition's leader goes, the controller elects any live
  replica, one out of the ISR first (``partition_change.elect``): a replica missing
  acknowledged records becomes leader.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["PLANTED", "planted"]


@contextlib.contextmanager
def _patch(obj: Any, name: str, value: Any) -> Iterator[None]:
    saved = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, saved)


def _acks_before_hw() -> contextlib.AbstractContextManager[None]:
    from ..protocol.errors import ErrorCode
    from ..replication.leader_state import LeaderReplicaState
    return _patch(LeaderReplicaState, "acks_outcome", lambda self, required_offset: ErrorCode.none)


def _coordinator_unreplicated() -> contextlib.AbstractContextManager[None]:
    from ..coordinator.runtime import CoordinatorRuntime
    return _patch(CoordinatorRuntime, "_when_replicated", lambda self, p, part, w: None)


@contextlib.contextmanager
def _no_truncation() -> Iterator[None]:
    from ..log.replica_log import ReplicaLog
    from ..replica.fetcher import ReplicaFetcher

    def keep(self: Any, st: Any, plog: Any, epoch: int, end_offset: int, why: str) -> bool:
        st.truncating = False
        return False
    with _patch(ReplicaLog, "diverging_epoch", lambda self, last_fetched_epoch, fetch_offset: None), \
            _patch(ReplicaFetcher, "_truncate", keep):
        yield


def _unclean_election() -> contextlib.AbstractContextManager[None]:
    from ..cluster import partition_change as pc

    def elect(part: Any, replicas: Sequence[int], isr: Sequence[int], election: Any,
              acceptable: Callable[[int], bool]) -> tuple[int, bool]:
        if part.leader != pc.NO_LEADER and acceptable(part.leader):
            return part.leader, False
        live = [r for r in replicas if acceptable(r)]
        live.sort(key=lambda r: r in isr)  # the worst pick first: a replica out of the ISR
        return (live[0], False) if live else (pc.NO_LEADER, False)
    return _patch(pc, "elect", elect)


def _ack_on_fetch() -> contextlib.AbstractContextManager[None]:
    from ..cluster.lifecycle import BrokerLifecycle

    def observe_fetch(self: Any, image: Any, broker_id: int, fetch_offset: int, now_ms: int,
                      committed_offset: int, broker_epoch: int | None = None) -> None:
        reg = image.brokers.get(broker_id)
        if reg is None or (broker_epoch is not None and broker_epoch != reg.epoch):
            return
        self.heartbeats.session(reg, now_ms).acknowledge(committed_offset, committed_offset)
    return _patch(BrokerLifecycle, "observe_fetch", observe_fetch)


PLANTED: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "acks-before-hw": _acks_before_hw,
    "coordinator-unreplicated": _coordinator_unreplicated,
    "no-truncation": _no_truncation,
    "unclean-election": _unclean_election,
    "ack-on-fetch": _ack_on_fetch,
}


def variants() -> dict[str, Callable[[], contextlib.AbstractContextManager[None]]]:
    """Every broken variant ``--plant`` runs: the planted bugs, those of the optional
    clients' invariants (:mod:`.planted_clients`: run them with the clients they name)
    and the issue-26 defects put back (:mod:`.regressions`)."""
    from .planted_clients import PLANTED_CLIENTS
    from .regressions import REGRESSIONS
    return {**PLANTED, **{name: make for name, (make, _kinds) in PLANTED_CLIENTS.items()}, **REGRESSIONS}


def planted(name: str | None) -> contextlib.AbstractContextManager[None]:
    """The planted bug or regression ``name`` (None: none). Raises KeyError for an unknown name."""
    return contextlib.nullcontext() if name is None else variants()[name]()
