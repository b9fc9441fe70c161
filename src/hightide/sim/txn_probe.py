"""A minimal transactional offset committer for the simulation (issue 26 item 6), and
the invariant it checks. (The full consume-transform-produce client is another module's;
this one only sends offsets to a transaction, as ``send_offsets_to_transaction`` does.)

:class:`TxnProbe` keeps a transactional producer per id of :data:`TXN_IDS` and, in a loop,
picks an id and a group of :data:`GROUPS` (so the transaction coordinator and the group
coordinator are on the same broker for some pairs and on different brokers for others):
AddOffsetsToTxn at the transaction coordinator, one TxnOffsetCommit at the group
coordinator — sent once, not retried, as kafkajs does — then EndTxn (commit if the
offsets were accepted, else abort).

**Invariant**: once the faults have healed and the cluster had :data:`QUIET_S` to settle
(``quiet()``), TxnOffsetCommit never answers COORDINATOR_NOT_AVAILABLE: both coordinators
are up, and Kafka's group coordinator holds the request until the transaction coordinator
on the other broker has verified it. (kafkajs does not retry that code: its exactly-once
applications fail.) Its progress (:data:`QUIET_COMMITS` transactions committed in the
quiet phase) counts for the run's liveness check.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..client.errors import KafkaError
from ..client.transactions import _coordinator_request, end_txn, init_transactional_producer
from .checker import Anomaly
from .clients import _Client

__all__ = ["TxnProbe"]

TXN_IDS = ("tx-a", "tx-b", "tx-c")
GROUPS = ("tg-a", "tg-b", "tg-c", "tg-d")
COORDINATOR_NOT_AVAILABLE = 15
#: Transactions the probe must commit in the quiet phase to count as progressing.
QUIET_COMMITS = 6


class TxnProbe(_Client):
    """See the module doc. ``quiet()``: True once the faults healed and the cluster settled."""

    def __init__(self, *args: Any, topic: str, quiet: Callable[[], bool], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.topic, self.quiet = topic, quiet
        self.producers: dict[str, tuple[int, int]] = {}
        self.offset = 0
        self.committed = 0
        self.quiet_commits = 0

    async def run(self) -> None:
        while True:
            try:
                admin = await self._connected()
                tid, group = self.rng.choice(TXN_IDS), self.rng.choice(GROUPS)
                if tid not in self.producers:
                    self.producers[tid] = await init_transactional_producer(admin, tid, timeout_ms=60_000)
                pid, epoch = self.producers[tid]
                await _coordinator_request(admin, tid, 25, 3, 0, {
                    "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "group_id": group},
                    "AddOffsetsToTxn")
                code = await self._txn_offset_commit(admin, tid, pid, epoch, group)
                await end_txn(admin, tid, pid, epoch, commit=code == 0)
                if code == 0:
                    self.committed += 1
                    self.trace(f"{self.name} committed {tid} with {group}={self.offset}")
                    if self.quiet():
                        self.quiet_commits += 1
                        if self.quiet_commits >= QUIET_COMMITS:
                            self.progress_at = self.now()
                await asyncio.sleep(self.rng.uniform(0.0, 0.1))
            except Anomaly:
                raise
            except (KafkaError, OSError, TimeoutError) as exc:
                self.producers.clear()  # fenced, timed out, ...: a new epoch (aborts what is open)
                await self._failed(exc)

    async def _txn_offset_commit(self, admin: Any, tid: str, pid: int, epoch: int, group: str) -> int:
        """One TxnOffsetCommit at the group's coordinator: its error code (raises
        :class:`Anomaly` for COORDINATOR_NOT_AVAILABLE in the quiet phase)."""
        coordinator = await admin.find_coordinator(group)
        conn = await admin._conn_for_node(coordinator.node_id)
        self.offset += 1
        v = conn.pick_version(28, 3, 0)
        resp = await conn.request(28, v, {
            "transactional_id": tid, "group_id": group, "producer_id": pid, "producer_epoch": epoch,
            "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": self.topic, "partitions": [{"partition_index": 0, "committed_offset": self.offset,
                                                             "committed_leader_epoch": -1,
                                                             "committed_metadata": ""}]}]})
        code = int(resp.topics[0].partitions[0].error_code)
        if code == COORDINATOR_NOT_AVAILABLE and self.quiet():
            raise Anomaly(f"{self.name}: TxnOffsetCommit of {tid} for group {group} at broker "
                          f"{coordinator.node_id} answered COORDINATOR_NOT_AVAILABLE with the cluster healed "
                          "(a client that does not retry it, as kafkajs, fails its transaction)")
        if code:
            admin._forget_coordinator(group, 0)
        return code
