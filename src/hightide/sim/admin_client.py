"""The simulation's admin (issue 28, item 2) and the read-after-write invariant (item 4,
seed 004): :class:`AdminWorker` creates topics (``adm-<n>``, one partition), deletes some
of them and raises their ``retention.ms`` (IncrementalAlterConfigs), each request sent to
a broker of its seeded choice (which forwards it to the controller), and reads Metadata
and DescribeConfigs from brokers of its choice, about one operation every 0.6 s (two to
four of its topics exist at a time: each topic is more work for every broker).

Invariant (:class:`MetadataLedger`) — **metadata reads never go backwards across brokers**
(docs/cluster.md, "Brokers and read-after-write", ``metadata.read.consistency=
acknowledged``, the default): once a broker answered a create, delete or config change,
every broker shows it to a read sent afterwards; and once a read on any broker showed a
change, a read sent afterwards on any broker shows it too. A topic's life is
not created (0) → exists (1) → deleted (2) (names are never reused); its
``retention.ms`` only grows. The floor of each (the highest stage / value an answered
write or read established) may never be undercut by a later read.

Kafka's promise has one stated exception, which the ledger honours exactly: a broker
answers anyway after ``metadata.read.max.wait.ms`` when an unfenced broker holds the
lowest acknowledged offset back (a paused or cut-off broker, until it is fenced), and
says so (its :class:`~hightide.node.read_gate.ReadGate` counts the ``timeouts``). An answer
is *guarded* when the answering broker's gate counted no timeout and the broker was not
restarted while the request was out (white-box, looked up when it is sent and when the
answer arrives); only guarded answers raise floors, and only guarded reads are checked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ..client.admin import _parse_metadata
from ..client.errors import ErrorCode, KafkaError, error_for
from .checker import Anomaly
from .clients import _Client

__all__ = ["AdminWorker", "MetadataLedger"]

#: node id -> (incarnation, read-gate timeouts) of the broker running now, None if down.
GateOf = Callable[[int], "tuple[int, int] | None"]

PREFIX = "adm-"
RETENTION = "retention.ms"
#: Above the default (7 days), so the first change raises it too.
BASE_RETENTION_MS = 864_000_000
STAGES = ("not created", "exists", "deleted")


class MetadataLedger:
    """See the module doc. Sans-IO."""

    def __init__(self) -> None:
        self.stage: dict[str, int] = {}  # floor of each topic's stage
        self.retention: dict[str, int] = {}  # floor of each topic's retention.ms
        self.delete_sent: set[str] = set()
        self.counts: dict[str, int] = {"metadata reads checked": 0, "metadata reads unguarded": 0,
                                       "admin writes acked": 0}

    def wrote(self, topic: str, *, stage: int | None = None, retention: int | None = None) -> None:
        """A guarded answer acknowledged a write."""
        self.counts["admin writes acked"] += 1
        if stage is not None:
            self.stage[topic] = max(stage, self.stage.get(topic, 0))
        if retention is not None:
            self.retention[topic] = max(retention, self.retention.get(topic, 0))

    def snapshot(self) -> tuple[dict[str, int], dict[str, int]]:
        return dict(self.stage), dict(self.retention)

    def read_topics(self, node: int | str, shown: set[str], before: tuple[dict[str, int], dict[str, int]],
                    guarded: bool) -> None:
        """A Metadata read on broker ``node``, sent when the floors were ``before``,
        showed the ``adm-`` topics ``shown``."""
        if not guarded:
            self.counts["metadata reads unguarded"] += 1
            return
        self.counts["metadata reads checked"] += 1
        floors = before[0]
        for topic in sorted(set(floors) | shown):
            floor = floors.get(topic, 0)
            if topic in shown:
                seen = 1
            else:
                seen = 2 if (floor >= 1 and topic in self.delete_sent) else 0
            if seen < floor or (seen == 1 and floor == 2):
                raise Anomaly(f"Metadata from broker {node} shows topic {topic} as {STAGES[seen]} after it was "
                              f"{STAGES[floor]} in an answer before the read was sent (read-after-write)")
            self.stage[topic] = max(seen, self.stage.get(topic, 0))

    def read_retention(self, node: int | str, topic: str, value: int, before: tuple[dict[str, int], dict[str, int]],
                       guarded: bool) -> None:
        if not guarded:
            return
        floor = before[1].get(topic, 0)
        if value < floor:
            raise Anomaly(f"DescribeConfigs from broker {node} shows {topic} {RETENTION}={value} after {floor} "
                          f"was shown or acknowledged before the read was sent (read-after-write)")
        self.retention[topic] = max(value, self.retention.get(topic, 0))


class AdminWorker(_Client):
    """See the module doc. ``brokers``: the broker ids to send to; ``replicas``: the new
    topics' replication factor."""

    def __init__(self, *args: Any, ledger: MetadataLedger, gate_of: GateOf, brokers: list[int], replicas: int,
                 **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.ledger, self.gate_of, self.brokers, self.replicas = ledger, gate_of, brokers, replicas
        self.created = 0
        self.creating: str | None = None  # a create whose answer never came: tried again
        self.answered_by = ""
        self.live: list[str] = []  # created (acknowledged or found existing), not deleted
        self.retention: dict[str, int] = {}

    async def _send(self, node: int, api: int, wanted: int, low: int, body: dict[str, Any]) -> tuple[Any, bool]:
        """The answer of broker ``node`` and whether it is guarded (see the module doc);
        :attr:`answered_by` names the broker and its incarnation."""
        admin = await self._connected()
        conn = await admin._conn_for_node(node)
        before = self.gate_of(node)
        resp = await conn.request(api, conn.pick_version(api, wanted, low), body)
        after = self.gate_of(node)
        self.answered_by = f"{node}#{after[0]}" if after is not None else f"{node}"
        return resp, before is not None and before == after

    async def run(self) -> None:
        while True:
            try:
                await self._step(self.rng.choice(self.brokers))
                await asyncio.sleep(self.rng.uniform(0.2, 1.0))
            except Anomaly:
                raise
            except (KafkaError, OSError, TimeoutError) as exc:
                await self._failed(exc)

    async def _step(self, node: int) -> None:
        """One seeded operation; a write is read back through a broker of its choice at
        once half the time (as a client reading its own write elsewhere)."""
        roll = self.rng.random()
        if len(self.live) < 2 or (roll < 0.2 and len(self.live) < 4):
            await self._create(node)
        elif roll < 0.4 and len(self.live) > 2:
            await self._delete(node, self.live[0])
        elif roll < 0.55:
            topic = self.rng.choice(self.live)
            await self._alter(node, topic)
            if self.rng.random() < 0.5:
                await self._read_retention(self.rng.choice(self.brokers), topic)
            return
        elif roll < 0.8:
            await self._read_topics(node)
            return
        else:
            await self._read_retention(node, self.rng.choice(self.live))
            return
        if self.rng.random() < 0.5:
            await self._read_topics(self.rng.choice(self.brokers))

    async def _create(self, node: int) -> None:
        if self.creating is None:
            self.created += 1
            self.creating = f"{PREFIX}{self.created}"
        topic = self.creating
        resp, guarded = await self._send(node, 19, 7, 2, {
            "topics": [{"name": topic, "num_partitions": 1, "replication_factor": self.replicas, "assignments": [],
                        "configs": []}], "timeout": 10_000, "validate_only": False})
        code = resp.topics[0].error_code
        if code == ErrorCode.topic_already_exists:  # an earlier attempt's answer was lost
            code = ErrorCode.none
            guarded = False
        if code != ErrorCode.none:
            raise error_for(code, f"CreateTopics {topic} on broker {node}")
        self.creating = None
        self.live.append(topic)
        if guarded:
            self.ledger.wrote(topic, stage=1)
        self.trace(f"{self.name} created {topic} through broker {self.answered_by}{'' if guarded else ' (unguarded)'}")
        self.progress_at = self.now()

    async def _delete(self, node: int, topic: str) -> None:
        self.ledger.delete_sent.add(topic)
        resp, guarded = await self._send(node, 20, 6, 1, {
            "topic_names": [topic], "topics": [{"name": topic, "topic_id": None}], "timeout": 10_000})
        code = resp.responses[0].error_code
        if code == ErrorCode.unknown_topic_or_partition:  # an earlier attempt's answer was lost
            code, guarded = ErrorCode.none, False
        if code != ErrorCode.none:
            raise error_for(code, f"DeleteTopics {topic} on broker {node}")
        self.live.remove(topic)
        if guarded:
            self.ledger.wrote(topic, stage=2)
        self.trace(f"{self.name} deleted {topic} through broker {self.answered_by}{'' if guarded else ' (unguarded)'}")
        self.progress_at = self.now()

    async def _alter(self, node: int, topic: str) -> None:
        """Each value is above every value sent before, answered or not: a change whose
        answer was lost (in doubt) may have been applied, and the next must still raise
        the topic's ``retention.ms`` for the ledger's "only grows" to hold."""
        value = self.retention.get(topic, BASE_RETENTION_MS) + self.rng.randint(1, 1000)
        self.retention[topic] = value
        resp, guarded = await self._send(node, 44, 1, 0, {"resources": [{
            "resource_type": 2, "resource_name": topic,
            "configs": [{"name": RETENTION, "config_operation": 0, "value": str(value)}]}], "validate_only": False})
        code = resp.responses[0].error_code
        if code != ErrorCode.none:
            raise error_for(code, f"IncrementalAlterConfigs {topic} on broker {node}")
        if guarded:
            self.ledger.wrote(topic, retention=value)
        self.trace(f"{self.name} set {topic} {RETENTION}={value} through broker {self.answered_by}"
                   f"{'' if guarded else ' (unguarded)'}")
        self.progress_at = self.now()

    async def _read_topics(self, node: int) -> None:
        before = self.ledger.snapshot()
        resp, guarded = await self._send(node, 3, 12, 1, {
            "topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False,
            "include_cluster_authorized_operations": False})
        md = _parse_metadata(resp)
        shown = {t for t, m in md.topics.items() if t.startswith(PREFIX) and m.error == ErrorCode.none}
        self.ledger.read_topics(self.answered_by, shown, before, guarded)

    async def _read_retention(self, node: int, topic: str) -> None:
        before = self.ledger.snapshot()
        resp, guarded = await self._send(node, 32, 4, 1, {
            "resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": [RETENTION]}],
            "include_synonyms": False, "include_documentation": False})
        res = resp.results[0]
        if res.error_code == ErrorCode.unknown_topic_or_partition:
            self.ledger.read_topics(self.answered_by, set(), ({topic: before[0].get(topic, 0)}, {}), guarded)
            return
        if res.error_code != ErrorCode.none:
            raise error_for(res.error_code, f"DescribeConfigs {topic} on broker {node}")
        value = next((int(c.value) for c in res.configs if c.name == RETENTION and c.value is not None), None)
        if value is not None:
            self.trace(f"{self.name} read {topic} {RETENTION}={value} on broker {self.answered_by}"
                       f"{'' if guarded else ' (unguarded)'}")
            self.ledger.read_retention(self.answered_by, topic, value, before, guarded)
