"""The simulation's optional clients (issue 28, item 2), by name: which topics they need,
how they are built, and their final checks after the faults. :func:`~.run.simulate`
takes the names (``clients=``; ``python -m hightide.sim --clients``):

- ``txn``: the transactional consume-transform-produce loop and its read_committed
  reader (:mod:`.txn_client`);
- ``classic``: two classic consumer-group members of group ``gc``; ``consumer``: two
  KIP-848 members of group ``gk`` (:mod:`.group_clients`); both record who answered as
  the group's coordinator in which epoch (:class:`~.group_clients.CoordinatorWitness`);
- ``share``: two share-group members of group ``gs`` (:mod:`.share_client`);
- ``admin``: an admin creating and deleting topics and altering their configs, and
  reading metadata from every broker (:mod:`.admin_client`).

The producers, the offset committer and the reader (:mod:`.clients`) always run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .admin_client import AdminWorker, MetadataLedger
from .group_clients import ClassicMember, ConsumerMember, CoordinatorWitness
from .share_client import ShareLedger, ShareMember
from .txn_client import TxnLedger, TxnProducer, TxnReader
from .world import World

__all__ = ["CLIENT_KINDS", "ClientSet"]

CLIENT_KINDS = ("txn", "classic", "consumer", "share", "admin")
TXN_TOPIC = "sim-tx"
TXN_PARTITIONS = 2


class ClientSet:
    """The optional clients of one run. ``source``: the producers' topic and its
    partition count (the transactional loop's input)."""

    def __init__(self, kinds: tuple[str, ...], source: tuple[str, int], world: World) -> None:
        unknown = sorted(set(kinds) - set(CLIENT_KINDS))
        if unknown:
            raise ValueError(f"unknown client kind(s) {', '.join(unknown)} (known: {', '.join(CLIENT_KINDS)})")
        self.kinds, self.source = kinds, source
        self.ledger = TxnLedger()
        self.shares = ShareLedger()
        self.metadata = MetadataLedger()
        self.world = world
        self.clients: list[Any] = []
        self._txn: tuple[TxnProducer, TxnReader] | None = None
        self.witness = CoordinatorWitness(lambda node_id, group: group_epoch_of(world, node_id, group))

    @staticmethod
    def settings(kinds: tuple[str, ...]) -> dict[str, Any]:
        """Broker settings the clients need (none unless they run: the trace of a run
        without them stays as it was): group heartbeats every second, sessions of 10 s,
        share locks of 5 s, 3 share-state partitions."""
        if not {"consumer", "share"} & set(kinds):
            return {}
        out: dict[str, Any] = {}
        for kind in ("consumer", "share"):
            out |= {f"group.{kind}.heartbeat.interval.ms": 1000, f"group.{kind}.min.heartbeat.interval.ms": 1000,
                    f"group.{kind}.session.timeout.ms": 10_000, f"group.{kind}.min.session.timeout.ms": 10_000}
        # acquisition locks of 5 s: unacknowledged records come back within a run;
        # __share_group_state with 3 partitions, as __consumer_offsets (Kafka's 50 would
        # make every replica fetch carry 150 more partitions)
        out |= {"group.share.record.lock.duration.ms": 5000, "group.share.min.record.lock.duration.ms": 1000,
                "share.coordinator.state.topic.num.partitions": 3}
        return out

    def topics(self) -> list[tuple[str, int]]:
        """(name, partitions) of the topics to create before the clients start."""
        return [(TXN_TOPIC, TXN_PARTITIONS)] if "txn" in self.kinds else []

    def make(self, base: Callable[[str], tuple[Any, ...]]) -> list[Any]:
        """The clients; ``base(name)`` gives a client's common constructor arguments."""
        if "txn" in self.kinds:
            sink = (TXN_TOPIC, TXN_PARTITIONS)
            producer = TxnProducer(*base("tx0"), ledger=self.ledger, source=self.source, sink=sink)
            reader = TxnReader(*base("txr"), ledger=self.ledger, sink=sink)
            self._txn = (producer, reader)
            self.clients += [producer, reader]
        topic, partitions = self.source
        for kind, cls, group in (("classic", ClassicMember, "gc"), ("consumer", ConsumerMember, "gk")):
            if kind in self.kinds:
                self.clients += [cls(*base(f"{group}{i}"), group=group, topic=topic, partitions=partitions,
                                     witness=self.witness) for i in range(2)]
        if "share" in self.kinds:
            self.clients += [ShareMember(*base(f"gs{i}"), group="gs", topic=topic, partitions=partitions,
                                         witness=self.witness, ledger=self.shares) for i in range(2)]
        if "admin" in self.kinds:
            brokers = [n.node_id for n in self.world.brokers]
            self.clients.append(AdminWorker(*base("ad0"), ledger=self.metadata, brokers=brokers,
                                            replicas=min(3, len(brokers)),
                                            gate_of=lambda node_id: gate_of(self.world, node_id)))
        return self.clients

    async def final_check(self, deadline: float) -> None:
        """After the clients were stopped: each kind's final check, within ``deadline``."""
        if self._txn is not None:
            producer, reader = self._txn
            await producer.final_check(reader, deadline)

    def counts(self) -> dict[str, int]:
        out = dict(self.ledger.counts) if self._txn is not None else {}
        if "share" in self.kinds:
            out.update(self.shares.counts)
        if "admin" in self.kinds:
            out.update(self.metadata.counts)
        if {"classic", "consumer", "share"} & set(self.kinds):
            out["coordinator answers witnessed"] = self.witness.count
            out["member commits acked"] = sum(getattr(c, "commits", 0) for c in self.clients
                                              if isinstance(c, (ClassicMember, ConsumerMember)))
        return out


def gate_of(world: World, node_id: int) -> tuple[int, int] | None:
    """White-box: (incarnation, read-gate timeouts so far) of broker ``node_id`` if it runs."""
    node = world.nodes.get(node_id)
    if node is None or node.broker is None or node.broker.node is None:
        return None
    return node.incarnations, node.broker.node.gate.timeouts


def group_epoch_of(world: World, node_id: int, group: str) -> tuple[int, int, int] | None:
    """White-box: (``__consumer_offsets`` partition, its leader epoch and its leader in the
    broker's own image) if broker ``node_id`` serves ``group``'s partition now (its
    coordinator runtime has it loaded), else None. Whoever the image names as leader:
    a broker serving a partition its own image gives to another is what the witness
    exists to catch."""
    node = world.nodes.get(node_id)
    broker = node.broker if node is not None else None
    if broker is None or broker.groups is None:
        return None
    part = broker.groups.partition_for(group)
    if part not in broker.groups.runtime.partitions:
        return None
    topic = broker.image.topics.get("__consumer_offsets")
    info = topic.partitions.get(part) if topic is not None else None
    if info is None:
        return None
    return part, info.leader_epoch, info.leader
