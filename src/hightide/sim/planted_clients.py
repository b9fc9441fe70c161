"""Deliberately broken variants for the optional clients' invariants (:mod:`.client_set`),
in the manner of :mod:`.planted`: each patches one rule while a run goes. Each names the
clients that find it (``python -m hightide.sim --plant NAME --clients KINDS``).

- ``lso-is-hw``: a read_committed Fetch is served up to the high watermark, past open
  transactions (``TransactionalLog.last_stable_offset``): read_committed shows data of
  transactions not committed yet, or aborted later (``txn``).
- ``no-aborted-list``: a read_committed Fetch names no aborted transactions
  (``TransactionalLog.read_committed``): the consumer cannot skip aborted data
  (``txn``).
- ``share-ack-unpersisted``: a share acknowledgement is answered once applied in memory,
  without persisting it (``SharePartitionManager.acknowledge``; the next write of the
  partition's state, for a release or a lock expiry, carries it): a new leader of the
  partition reads the state back without it and hands acknowledged records out again
  (``share``).
- ``coordinator-not-unloaded``: a broker keeps serving the coordinator partitions whose
  leadership moved away (``CoordinatorService.follow_leadership`` never unloads): two
  brokers act as a group's coordinator in one epoch (``classic``, ``consumer``).
- ``coordinator-zombie``: a broker keeps acting as the coordinator of the partitions whose
  leadership moved away, and answers writes without waiting for their replication
  (``coordinator-not-unloaded`` and ``coordinator-unreplicated`` together): after it
  applied the metadata naming another leader it still answers heartbeats, joins and
  commits, in the new leader's epoch (``classic``, ``consumer``; found by the
  one-coordinator-per-epoch check).
- ``read-gate-open``: metadata reads and forwarded writes are answered at once, without
  waiting for the lowest acknowledged offset (``ReadGate``): a read on one broker right
  after a write through another misses it (``admin``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from .planted import _patch

__all__ = ["PLANTED_CLIENTS"]


def _lso_is_hw() -> contextlib.AbstractContextManager[None]:
    from ..log.txn_log import TransactionalLog
    return _patch(TransactionalLog, "last_stable_offset", property(lambda self: self._hw))


def _no_aborted_list() -> contextlib.AbstractContextManager[None]:
    from ..log.txn_log import TransactionalLog
    read = TransactionalLog.read_committed

    def read_committed(self: Any, offset: int, max_bytes: int) -> Any:
        return read(self, offset, max_bytes)[0], []
    return _patch(TransactionalLog, "read_committed", read_committed)


def _share_ack_unpersisted() -> contextlib.AbstractContextManager[None]:
    from ..coordinator.share_partitions import SharePartitionManager
    acknowledge = SharePartitionManager.acknowledge

    async def unpersisted(e: Any) -> tuple[int, str | None]:
        return 0, None

    async def answered_at_once(self: Any, *args: Any) -> tuple[int, str | None]:
        self._persist = unpersisted  # the bug: (0, None) instead of the persisted outcome
        try:
            result: tuple[int, str | None] = await acknowledge(self, *args)
            return result
        finally:
            self.__dict__.pop("_persist", None)
    return _patch(SharePartitionManager, "acknowledge", answered_at_once)


@contextlib.contextmanager
def _stale_coordinator() -> Iterator[None]:
    from ..coordinator.runtime import CoordinatorRuntime
    with _patch(CoordinatorRuntime, "unload", lambda self, partition, reason: None):
        yield


@contextlib.contextmanager
def _coordinator_zombie() -> Iterator[None]:
    from .planted import PLANTED
    with _stale_coordinator(), PLANTED["coordinator-unreplicated"]():
        yield


@contextlib.contextmanager
def _read_gate_open() -> Iterator[None]:
    from ..node.read_gate import ReadGate

    async def at_once(self: Any, *args: Any, **kw: Any) -> bool:
        return True
    with _patch(ReadGate, "wait_read", at_once), _patch(ReadGate, "wait_write", at_once):
        yield


#: name -> (the patch, the clients that find it)
PLANTED_CLIENTS: dict[str, tuple[Callable[[], contextlib.AbstractContextManager[None]], tuple[str, ...]]] = {
    "lso-is-hw": (_lso_is_hw, ("txn",)),
    "no-aborted-list": (_no_aborted_list, ("txn",)),
    "share-ack-unpersisted": (_share_ack_unpersisted, ("share",)),
    "coordinator-not-unloaded": (_stale_coordinator, ("classic", "consumer")),
    "coordinator-zombie": (_coordinator_zombie, ("classic", "consumer")),
    "read-gate-open": (_read_gate_open, ("admin",)),
}
