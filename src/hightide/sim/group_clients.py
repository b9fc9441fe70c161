"""The simulation's consumer-group members (issue 28, item 2) and the coordinator
invariants they check (item 4), speaking the real protocol through the simulated network:

- :class:`ClassicMember`: the classic protocol as a Java consumer drives it. JoinGroup
  (MEMBER_ID_REQUIRED answered by joining again with the given id), SyncGroup (the
  leader assigns the topic's partitions round-robin, in the consumer protocol's v0
  encoding), Heartbeat about every second, and OffsetCommit with its generation and
  member id. A member fetches the committed offsets of partitions it is given
  (OffsetFetch) and commits growing offsets from there, as a consumer's position grows.
  REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID make it join again (the
  last with a new member id).
- :class:`ConsumerMember`: a KIP-848 member. ConsumerGroupHeartbeat (joining with epoch
  0 and its own member id, then its epoch and the partitions it owns), taking the
  assignment the coordinator answers, and OffsetCommit with its member epoch.
  FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID make it join again with epoch 0.

Invariants:

- **no acknowledged commit lost** (:meth:`~.checker.Checker.committed` /
  :meth:`~.checker.Checker.fetched`): an OffsetFetch never answers below an acknowledged
  commit of the group and partition;
- **one coordinator per coordinator epoch** (:class:`CoordinatorWitness`): every answer
  a coordinator gives without an error is recorded with the epoch it answered in — the
  leader epoch of the ``__consumer_offsets`` partition in the answering broker's own
  metadata image, looked up (white-box) when the answer arrives, if that broker still
  serves the partition then (its coordinator runtime has it loaded). The epoch's
  coordinator is the leader that image names: an answer from another broker in that
  epoch, or two different brokers answering for the same partition in the same epoch,
  is an anomaly. A broker unloads a partition in the same step as it applies the
  metadata that moves its leadership away (``CoordinatorService.follow_leadership``), so
  a broker that still serves it then acts as a second coordinator of an epoch it knows
  is another's; one whose image lags (it has not heard of the new leader yet) answers
  in its old epoch, as Kafka's may, and is not flagged.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from collections.abc import Callable
from typing import Any

from ..client.errors import COORDINATOR_ERRORS, ErrorCode, KafkaError, error_for
from ..client.types import TopicPartition
from .checker import Anomaly, Checker
from .clients import _Client

__all__ = ["ClassicMember", "ConsumerMember", "CoordinatorWitness"]

#: (node id, group id) -> (``__consumer_offsets`` partition, its leader epoch and leader
#: in that broker's own image) if that broker serves the group's partition now, else None.
EpochOf = Callable[[int, str], "tuple[int, int, int] | None"]

SESSION_TIMEOUT_MS = 10_000
REBALANCE_TIMEOUT_MS = 5_000
HEARTBEAT_S = 1.0


class CoordinatorWitness:
    """Who answered as a group's coordinator in which epoch (see the module doc)."""

    def __init__(self, epoch_of: EpochOf) -> None:
        self.epoch_of = epoch_of
        self.answered: dict[tuple[int, int], tuple[int, str]] = {}  # (partition, epoch) -> (node, what)
        self.count = 0

    def answer(self, node_id: int | None, group: str, what: str) -> None:
        """Node ``node_id`` answered ``what`` for ``group`` without an error."""
        if node_id is None:
            return
        served = self.epoch_of(node_id, group)
        if served is None:
            return
        part, epoch, leader = served
        where = (part, epoch)
        self.count += 1
        if leader != node_id:
            raise Anomaly(f"two coordinators in one epoch: broker {node_id} answered {what} (group {group}) as "
                          f"coordinator of __consumer_offsets-{part} in leader epoch {epoch}, whose leader in its "
                          f"own image is broker {leader}")
        before = self.answered.setdefault(where, (node_id, what))
        if before[0] != node_id:
            raise Anomaly(f"two coordinators in one epoch: broker {before[0]} answered {before[1]} and broker "
                          f"{node_id} answered {what} (group {group}) for __consumer_offsets-{where[0]} in leader "
                          f"epoch {where[1]}")


def subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: the topics, no user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0: one topic's partitions, no user data."""
    return (struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + struct.pack(">i", len(partitions))
            + b"".join(struct.pack(">i", p) for p in partitions) + struct.pack(">i", -1))


def assigned_partitions(data: bytes | None) -> list[int]:
    """The partitions of a one-topic :func:`assignment` (empty for no bytes)."""
    if not data:
        return []
    (tlen,) = struct.unpack_from(">h", data, 6)
    pos = 8 + tlen
    (n,) = struct.unpack_from(">i", data, pos)
    return list(struct.unpack_from(f">{n}i", data, pos + 4))


class _Member(_Client):
    """What both kinds of member share: the coordinator call that records who answered,
    and committing from fetched positions."""

    def __init__(self, *args: Any, group: str, topic: str, partitions: int, witness: CoordinatorWitness,
                 **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.group, self.topic, self.partitions, self.witness = group, topic, partitions, witness
        self.owned: list[int] = []
        self.positions: dict[int, int] = {}
        self.commits = 0

    async def _call(self, what: str, api: int, wanted: int, low: int, body: dict[str, Any]) -> Any:
        """Send ``body`` to the group's coordinator; coordinator errors (top-level
        ``error_code``) are retried; the response is returned with any other code."""
        admin = await self._connected()

        async def send(conn: Any) -> Any:
            resp = await conn.request(api, conn.pick_version(api, wanted, low), body)
            code = getattr(resp, "error_code", 0)
            if code in COORDINATOR_ERRORS:
                raise error_for(code, f"{what} of {self.group}")
            if code == ErrorCode.none:
                self.witness.answer(conn.node_id, self.group, f"{what} from {self.name}")
            return resp
        return await admin._coordinator_call(self.group, send)

    async def _take(self, owned: list[int]) -> None:
        """Partitions now owned: fetch the committed offsets of the new ones."""
        new = [p for p in owned if p not in self.owned]
        self.owned = sorted(owned)
        for p in list(self.positions):
            if p not in owned:
                del self.positions[p]
        if not new:
            return
        admin = await self._connected()
        floors = {p: self.checker.commit_floor(self.group, (self.topic, p)) for p in new}
        got = await admin.list_consumer_group_offsets(self.group, [TopicPartition(self.topic, p) for p in new])
        for p in new:
            off = got[TopicPartition(self.topic, p)].offset
            self.checker.fetched(self.group, (self.topic, p), off, since=floors[p])
            self.positions[p] = max(off, 0)

    async def _commit(self, generation: int, member_id: str, low: int) -> bool:
        """Commit grown positions of the owned partitions; False if the coordinator
        refused the generation or member (rejoin)."""
        if not self.positions:
            return True
        grown = {p: off + self.rng.randint(1, 10) for p, off in self.positions.items()}
        resp = await self._call("OffsetCommit", 8, 9, low, {
            "group_id": self.group, "generation_id_or_member_epoch": generation, "member_id": member_id,
            "group_instance_id": None, "retention_time": -1, "topics": [{"name": self.topic, "partitions": [
                {"partition_index": p, "committed_offset": off, "committed_leader_epoch": -1,
                 "committed_metadata": ""} for p, off in sorted(grown.items())]}]})
        ok = True
        for t in resp.topics:
            for p in t.partitions:
                part = int(p.partition_index)
                if p.error_code == ErrorCode.none:
                    self.checker.committed(self.group, (self.topic, part), grown[part])
                    self.positions[part] = grown[part]
                    self.commits += 1
                elif p.error_code in _REJOIN:
                    ok = False
                else:
                    raise error_for(p.error_code, f"OffsetCommit {self.group} {self.topic}-{part}")
        if ok:
            self.trace(f"{self.name} committed {self.group} " + " ".join(
                f"{self.topic}-{p}={o}" for p, o in sorted(grown.items())))
            self.progress_at = self.now()
        return ok


#: Commit / heartbeat errors a member answers by joining again.
_REJOIN = frozenset({ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation, ErrorCode.unknown_member_id,
                     ErrorCode.fenced_member_epoch, ErrorCode.stale_member_epoch})


class ClassicMember(_Member):
    """See the module doc."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.member_id = ""
        self.generation = -1

    async def run(self) -> None:
        while True:
            try:
                await self._join()
                while True:
                    await asyncio.sleep(HEARTBEAT_S * self.rng.uniform(0.5, 1.0))
                    hb = await self._call("Heartbeat", 12, 4, 0, {
                        "group_id": self.group, "generation_id": self.generation, "member_id": self.member_id,
                        "group_instance_id": None})
                    if hb.error_code != ErrorCode.none:
                        self._refused(hb.error_code)
                        break
                    if not await self._commit(self.generation, self.member_id, 2):
                        break
            except Anomaly:
                raise
            except (KafkaError, OSError, TimeoutError) as exc:
                await self._failed(exc)

    def _refused(self, code: int) -> None:
        if code not in _REJOIN:
            raise error_for(code, f"{self.name} in {self.group}")
        if code in (ErrorCode.unknown_member_id, ErrorCode.fenced_member_epoch):
            self.member_id = ""
        self.trace(f"{self.name} rejoins {self.group}: {ErrorCode(code).name}")

    async def _join(self) -> None:
        while True:
            resp = await self._call("JoinGroup", 11, 7, 4, {
                "group_id": self.group, "session_timeout": SESSION_TIMEOUT_MS,
                "rebalance_timeout": REBALANCE_TIMEOUT_MS, "member_id": self.member_id, "group_instance_id": None,
                "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": subscription([self.topic])}]})
            if resp.error_code == ErrorCode.member_id_required:
                self.member_id = resp.member_id
                continue
            if resp.error_code != ErrorCode.none:
                self._refused(resp.error_code)
                continue
            self.member_id, self.generation = resp.member_id, int(resp.generation_id)
            plan = []
            if resp.leader == self.member_id:
                members = sorted(m.member_id for m in resp.members)
                plan = [{"member_id": m, "assignment": assignment(
                    self.topic, [p for p in range(self.partitions) if p % len(members) == i])}
                        for i, m in enumerate(members)]
            sync = await self._call("SyncGroup", 14, 5, 3, {
                "group_id": self.group, "generation_id": self.generation, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                "assignments": plan})
            if sync.error_code != ErrorCode.none:
                self._refused(sync.error_code)
                continue
            await self._take(assigned_partitions(sync.assignment))
            self.trace(f"{self.name} in {self.group} generation {self.generation}: {self.topic} {self.owned}")
            return


class ConsumerMember(_Member):
    """See the module doc."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.member_id = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        self.epoch = 0
        self.topic_id: uuid.UUID | None = None
        self.interval_s = HEARTBEAT_S

    async def run(self) -> None:
        while True:
            try:
                if self.topic_id is None:
                    admin = await self._connected()
                    md = await admin.metadata([self.topic])
                    self.topic_id = md.topics[self.topic].topic_id
                await self._heartbeat()
                if self.epoch > 0 and not await self._commit(self.epoch, self.member_id, 9):
                    self._rejoin("commit refused")
                await asyncio.sleep(self.interval_s * self.rng.uniform(0.5, 1.0))
            except Anomaly:
                raise
            except (KafkaError, OSError, TimeoutError) as exc:
                await self._failed(exc)

    def _rejoin(self, why: str) -> None:
        self.trace(f"{self.name} rejoins {self.group}: {why}")
        self.epoch = 0
        self.owned, self.positions = [], {}

    async def _heartbeat(self) -> None:
        owned = [{"topic_id": self.topic_id, "partitions": self.owned}] if self.owned else []
        resp = await self._call("ConsumerGroupHeartbeat", 68, 1, 0, {
            "group_id": self.group, "member_id": self.member_id, "member_epoch": self.epoch, "instance_id": None,
            "rack_id": None, "rebalance_timeout": REBALANCE_TIMEOUT_MS, "subscribed_topic_names": [self.topic],
            "server_assignor": None, "topic_partitions": owned})
        if resp.error_code in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
            self._rejoin(ErrorCode(resp.error_code).name)
            return
        if resp.error_code != ErrorCode.none:
            raise error_for(resp.error_code, f"ConsumerGroupHeartbeat of {self.name}: {resp.error_message}")
        if resp.member_id:
            self.member_id = resp.member_id
        interval = resp.heartbeat_interval
        self.interval_s = max(0.2, interval.total_seconds() if hasattr(interval, "total_seconds")
                              else int(interval) / 1000)
        epoch = int(resp.member_epoch)
        if resp.assignment is not None:
            mine = sorted(int(p) for t in resp.assignment.topic_partitions if t.topic_id == self.topic_id
                          for p in t.partitions)
            if mine != self.owned:
                await self._take(mine)
                self.trace(f"{self.name} in {self.group} epoch {epoch}: {self.topic} {self.owned}")
        self.epoch = epoch
