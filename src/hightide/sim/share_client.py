"""The simulation's share-group consumer (issue 28, item 2) and its invariant (item 4).

:class:`ShareMember` (group ``gs``, subscribed to the producers' topic) speaks KIP-932 as
a ``KafkaShareConsumer`` does: ShareGroupHeartbeat to the group coordinator (joining with
epoch 0 and its own member id; the coordinator's answers are witnessed like the other
members', :class:`~.group_clients.CoordinatorWitness`), then ShareFetch to the leader of
each assigned partition in a share session per leader (epoch 0 opens it, each next
request carries the next epoch). It acknowledges what it acquired — ACCEPT mostly,
sometimes RELEASE or REJECT, and sometimes nothing at all (the acquisition lock then
expires: ``share.record.lock.duration.ms`` is 5 s here) — piggy-backed on its next
ShareFetch or in a ShareAcknowledge of the same session. A session error
(SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, a lost connection, a leader
change) opens a new session; acknowledgements not yet sent are dropped (never
acknowledged: the records come back after their lock expires, which is allowed).

Invariant (:class:`ShareLedger`) — **no acknowledged share acknowledgement lost**: once an
acknowledgement of ACCEPT or REJECT of an offset was answered without an error for its
partition (docs/share-groups.md: it is persisted before it is answered; the record is
then ACKNOWLEDGED or ARCHIVED, states a record never leaves), no ShareFetch *sent after
that answer arrived* may acquire the offset again, whatever member or broker serves it.
A redelivery whose ShareFetch was sent before the answer arrived is not counted: Kafka
delivers a record again once its lock expired, and such an expiry (and the member's
acknowledgement then applied to the new acquisition, by offset) may come before the
acknowledgement is applied. RELEASE'd records may come back.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from typing import Any

from ..client.errors import ErrorCode, KafkaError, error_for
from ..client.types import TopicPartition
from .checker import TP, Anomaly
from .group_clients import _Member

__all__ = ["ShareLedger", "ShareMember"]

ACCEPT, RELEASE, REJECT = 1, 2, 3
#: Share-session errors after which the member opens a new session on that broker.
_NEW_SESSION = frozenset({ErrorCode.share_session_not_found, ErrorCode.invalid_share_session_epoch,
                          ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
                          ErrorCode.fenced_leader_epoch, ErrorCode.unknown_member_id})


class ShareLedger:
    """See the module doc: events are numbered in the order the clients see them."""

    def __init__(self) -> None:
        self.clock = 0
        self.final: dict[TP, dict[int, tuple[int, str]]] = defaultdict(dict)  # offset -> (event, who)
        self.counts: dict[str, int] = {"share records acquired": 0, "share records acknowledged": 0}

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def acknowledged(self, tp: TP, ranges: list[tuple[int, int, int]], who: str) -> None:
        """An acknowledgement of ``ranges`` ((first, last, type)) was answered without error."""
        now = self.tick()
        final = self.final[tp]
        for first, last, kind in ranges:
            if kind in (ACCEPT, REJECT):
                for off in range(first, last + 1):
                    final.setdefault(off, (now, who))
                self.counts["share records acknowledged"] += last - first + 1

    def acquired(self, tp: TP, first: int, last: int, sent: int, who: str) -> None:
        """A ShareFetch sent at event ``sent`` acquired ``first..last``."""
        final = self.final.get(tp, {})
        for off in range(first, last + 1):
            done = final.get(off)
            if done is not None and done[0] < sent:
                raise Anomaly(f"{tp[0]}-{tp[1]} offset {off}: acknowledged (by {done[1]}) before {who}'s ShareFetch "
                              f"was sent, acquired again by it")
        self.counts["share records acquired"] += last - first + 1


class ShareMember(_Member):
    """See the module doc."""

    def __init__(self, *args: Any, ledger: ShareLedger, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.ledger = ledger
        self.member_id = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        self.epoch = 0
        self.topic_id: uuid.UUID | None = None
        self.interval_s = 1.0
        self.next_heartbeat = 0.0
        self.sessions: dict[int, int] = {}  # leader -> next share-session epoch
        self.pending: dict[int, list[tuple[int, int, int]]] = defaultdict(list)  # partition -> acks to send
        self.sent_at = 0  # the ledger's event number of the last request sent

    async def run(self) -> None:
        while True:
            try:
                admin = await self._connected()
                if self.topic_id is None:
                    md = await admin.metadata([self.topic])
                    self.topic_id = md.topics[self.topic].topic_id
                if self.now() >= self.next_heartbeat:
                    await self._heartbeat()
                if self.owned:
                    await self._round(admin)
                await asyncio.sleep(self.rng.uniform(0.0, 0.1) if self.owned else 0.2)
            except Anomaly:
                raise
            except (KafkaError, OSError, TimeoutError) as exc:
                self.sessions.clear()
                self.pending.clear()
                await self._failed(exc)

    async def _heartbeat(self) -> None:
        resp = await self._call("ShareGroupHeartbeat", 76, 1, 1, {
            "group_id": self.group, "member_id": self.member_id, "member_epoch": self.epoch, "rack_id": None,
            "subscribed_topic_names": [self.topic]})
        if resp.error_code in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id):
            self.trace(f"{self.name} rejoins {self.group}: {ErrorCode(resp.error_code).name}")
            self.epoch, self.owned = 0, []
            self.sessions.clear()
            self.pending.clear()
            return
        if resp.error_code != ErrorCode.none:
            raise error_for(resp.error_code, f"ShareGroupHeartbeat of {self.name}: {resp.error_message}")
        self.epoch = int(resp.member_epoch)
        self.interval_s = max(0.2, resp.heartbeat_interval.total_seconds())
        self.next_heartbeat = self.now() + self.interval_s
        if resp.assignment is not None:
            mine = sorted(int(p) for t in resp.assignment.topic_partitions if t.topic_id == self.topic_id
                          for p in t.partitions)
            if mine != self.owned:
                self.owned = mine
                self.sessions.clear()  # new sessions with the new partitions
                self.pending.clear()
                self.trace(f"{self.name} in {self.group} epoch {self.epoch}: {self.topic} {self.owned}")

    async def _round(self, admin: Any) -> None:
        leaders, errors = await admin.partition_leaders([TopicPartition(self.topic, p) for p in self.owned])
        for node, tps in sorted(leaders.items()):
            parts = sorted(tp.partition for tp in tps)
            if self.sessions.get(node, 0) > 0 and any(self.pending.get(p) for p in parts) and self.rng.random() < 0.3:
                await self._acknowledge(admin, node, parts)
            await self._fetch(admin, node, parts)

    def _ack_batches(self, part: int) -> list[dict[str, Any]]:
        return [{"first_offset": f, "last_offset": last, "acknowledge_types": [kind]}
                for f, last, kind in self.pending.get(part, [])]

    async def _fetch(self, admin: Any, node: int, parts: list[int]) -> None:
        epoch = self.sessions.get(node, 0)
        if epoch == 0:
            for p in parts:
                self.pending.pop(p, None)  # a new session carries no acknowledgements
        sent_acks = {p: list(self.pending.get(p, [])) for p in parts}
        resp = await self._session_call(admin, node, epoch, parts, 78, "ShareFetch", {
            "max_wait": 100, "min_bytes": 1, "max_bytes": 1 << 16, "max_records": 20, "batch_size": 20,
            "forgotten_topics_data": []})
        if resp is None:
            return
        sent = self.sent_at
        for t in resp.responses:
            for pd in t.partitions:
                part = int(pd.partition_index)
                tp = (self.topic, part)
                if pd.acknowledge_error_code == 0 and sent_acks.get(part):
                    self.ledger.acknowledged(tp, sent_acks[part], self.name)
                if pd.error_code != ErrorCode.none:
                    self.sessions.pop(node, None)
                    continue
                for a in pd.acquired_records:
                    first, last = int(a.first_offset), int(a.last_offset)
                    self.ledger.acquired(tp, first, last, sent, self.name)
                    kind = self.rng.choices((ACCEPT, RELEASE, REJECT, None), (85, 5, 5, 5))[0]
                    if kind is not None:
                        self.pending[part].append((first, last, kind))
                    self.progress_at = self.now()

    async def _session_call(self, admin: Any, node: int, epoch: int, parts: list[int], api: int, what: str,
                            extra: dict[str, Any]) -> Any:
        """ShareFetch or ShareAcknowledge in the share session on broker ``node`` (epoch
        ``epoch``), carrying the pending acknowledgements of ``parts`` (dropped now: sent).
        Returns the response, or None when the session must be opened again; a lost
        session or connection ends the session (raised). :attr:`sent_at` is the ledger's
        event number when it was sent."""
        conn = await admin._conn_for_node(node)
        body = {"group_id": self.group, "member_id": self.member_id, "share_session_epoch": epoch,
                "topics": [{"topic_id": self.topic_id, "partitions": [
                    {"partition_index": p, "acknowledgement_batches": self._ack_batches(p)} for p in parts]}],
                **extra}
        self.sent_at = self.ledger.tick()
        try:
            resp = await conn.request(api, conn.pick_version(api, 1, 1), body)
        except (KafkaError, OSError, TimeoutError):
            self.sessions.pop(node, None)
            raise
        for p in parts:
            self.pending.pop(p, None)
        if resp.error_code != ErrorCode.none:
            self.sessions.pop(node, None)
            if resp.error_code in _NEW_SESSION:
                return None
            raise error_for(resp.error_code, f"{what} of {self.name} on broker {node}")
        self.sessions[node] = epoch + 1
        return resp

    async def _acknowledge(self, admin: Any, node: int, parts: list[int]) -> None:
        epoch = self.sessions[node]
        acks = {p: list(self.pending.get(p, [])) for p in parts if self.pending.get(p)}
        resp = await self._session_call(admin, node, epoch, list(acks), 79, "ShareAcknowledge", {})
        if resp is None:
            return
        for t in resp.responses:
            for pd in t.partitions:
                part = int(pd.partition_index)
                if pd.error_code == ErrorCode.none and part in acks:
                    self.ledger.acknowledged((self.topic, part), acks[part], self.name)
