"""The controller's replication decisions, sans-IO: Kafka's ``ReplicationControlManager``
(behaviour, not code) for leadership on broker fencing, AlterPartition (56),
ElectLeaders (43) and partition reassignment (45/46).

Every function takes the metadata image (and which brokers may lead) and returns
``(answer, records)``; none mutates the image. Every partition change goes through
:func:`~.partition_change.build_change`. Changes decided in one metadata write are
collected by :class:`PartitionChanges`, which decides each one against the partition as
the earlier changes of the same write leave it (a batch that fences two brokers moves a
partition once, not twice from the same stale state).

Broker lifecycle (called by :mod:`.lifecycle` in the batch of the state change):

* fenced, controlled shutdown, unregistered or replaced (:func:`remove_broker_records`):
  the broker leaves every ISR it is in — unless it is the last member — and every
  partition it led gets a new leader from the remaining ISR, in replica order, or none
  (-1); with ``unclean.leader.election.enable`` (topic config, else the cluster's dynamic
  default, else the controller's static config) an alive replica outside the ISR may
  lead instead (the ISR becomes just it);
* unfenced (:func:`add_broker_records`): every leaderless partition elects again with the
  broker acceptable, so one whose ISR holds it gets it back as leader.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from .image import MetadataImage, PartitionImage, TopicImage
from .partition_change import NO_LEADER, Election, build_change
from .placement import usable_brokers
from .records import NO_LEADER_CHANGE, RECOVERING, PartitionChangeRecord

UNCLEAN_CONFIG = "unclean.leader.election.enable"
#: ElectLeaders' ElectionType (Kafka's ``ElectionType``).
PREFERRED, UNCLEAN = 0, 1

Unclean = Callable[[TopicImage], bool]


def unclean_election_enabled(image: MetadataImage, topic: TopicImage, default: bool) -> bool:
    """``unclean.leader.election.enable`` for ``topic``: the topic's config, else the
    cluster-wide dynamic broker default, else ``default`` (the controller's config)."""
    value = topic.configs.get(UNCLEAN_CONFIG)
    if value is None:
        value = image.broker_dynamic.get("", {}).get(UNCLEAN_CONFIG)
    return default if value is None else value.strip().lower() == "true"


class PartitionChanges:
    """Partition changes of one metadata write. ``active``: the brokers that may lead
    (registered, unfenced, not shutting down); callers adjust it for a broker whose state
    changes in the same write."""

    def __init__(self, image: MetadataImage, active: Iterable[int]) -> None:
        self.image = image
        self.active = set(active)
        self.records: list[PartitionChangeRecord] = []
        self._parts: dict[tuple[uuid.UUID, int], PartitionImage] = {}

    def acceptable(self, broker_id: int) -> bool:
        return broker_id in self.active

    def current(self, topic: TopicImage, partition: int) -> PartitionImage | None:
        """The partition as the image and the changes so far leave it (None: unknown)."""
        return self._parts.get((topic.topic_id, partition), topic.partitions.get(partition))

    def partitions(self) -> Iterator[tuple[TopicImage, PartitionImage]]:
        """Every partition, by topic name then index, as changed so far."""
        for t in sorted(self.image.topics.values(), key=lambda t: t.name):
            for p in sorted(t.partitions):
                part = self.current(t, p)
                if part is not None:
                    yield t, part

    def change(self, topic: TopicImage, part: PartitionImage, *, isr: Sequence[int] | None = None,
               replicas: Sequence[int] | None = None, removing: Sequence[int] | None = None,
               adding: Sequence[int] | None = None, recovery_state: int | None = None,
               election: Election = Election.ONLINE) -> PartitionChangeRecord | None:
        """:func:`build_change` of ``part`` towards the targets; the record (if any) is kept
        and ``part``'s working state moves with it."""
        record = build_change(str(topic.topic_id), part, self.acceptable, isr=isr, replicas=replicas,
                              removing=removing, adding=adding, recovery_state=recovery_state, election=election)
        if record is not None:
            self.records.append(record)
            self._parts[(topic.topic_id, part.partition)] = part.merge(record)
        return record


def _election(unclean: Unclean, topic: TopicImage) -> Election:
    return Election.UNCLEAN if unclean(topic) else Election.ONLINE


def remove_broker_records(changes: PartitionChanges, broker_id: int, unclean: Unclean) -> list[PartitionChangeRecord]:
    """Records taking ``broker_id`` out of every ISR (not the last member) and electing
    new leaders where it led (module doc). ``changes`` collects them too."""
    changes.active.discard(broker_id)
    before = len(changes.records)
    for topic, part in list(changes.partitions()):
        if broker_id in part.isr or part.leader == broker_id:
            changes.change(topic, part, isr=[r for r in part.isr if r != broker_id],
                           election=_election(unclean, topic))
    return changes.records[before:]


def add_broker_records(changes: PartitionChanges, broker_id: int, unclean: Unclean) -> list[PartitionChangeRecord]:
    """Records electing a leader, now that ``broker_id`` may lead, for every leaderless
    partition (module doc)."""
    changes.active.add(broker_id)
    before = len(changes.records)
    for topic, part in list(changes.partitions()):
        if part.leader == NO_LEADER and part.replicas:
            changes.change(topic, part, election=_election(unclean, topic))
    return changes.records[before:]


#: Kafka's ``maxElectionsPerImbalance``: elections per timer run (the next run follows at once).
MAX_ELECTIONS_PER_RUN = 1000


def imbalanced(image: MetadataImage) -> bool:
    """True if some partition is not led by its preferred (first) replica (the image's
    election index: no walk over every partition at each timer wake)."""
    return bool(image.election_candidates()[1])


def leaderless_unclean(image: MetadataImage, unclean: Unclean) -> bool:
    """True if some leaderless partition's topic allows unclean leader election."""
    names = {name for name, _ in image.election_candidates()[0]}
    return any((t := image.topics.get(name)) is not None and unclean(t) for name in names)


def balance_leaders(changes: PartitionChanges, limit: int = MAX_ELECTIONS_PER_RUN) -> list[PartitionChangeRecord]:
    """Preferred elections for partitions not led by their first replica (Kafka's
    ``maybeBalancePartitionLeaders``, ``auto.leader.rebalance.enable``); at most
    ``limit`` records. A partition whose preferred replica is out of the ISR or fenced is
    left as it is."""
    before = len(changes.records)
    for topic, part in list(changes.partitions()):
        if len(changes.records) - before >= limit:
            break
        if part.replicas and part.leader != part.replicas[0]:
            changes.change(topic, part, election=Election.PREFERRED)
    return changes.records[before:]


def elect_unclean_leaders(changes: PartitionChanges, unclean: Unclean,
                          limit: int = MAX_ELECTIONS_PER_RUN) -> list[PartitionChangeRecord]:
    """Unclean elections for leaderless partitions of topics that allow them (Kafka's
    ``maybeElectUncleanLeaders``: a topic switched to unclean election after its
    partition lost its ISR gets a leader); at most ``limit`` records."""
    before = len(changes.records)
    for topic, part in list(changes.partitions()):
        if len(changes.records) - before >= limit:
            break
        if part.leader == NO_LEADER and part.replicas and unclean(topic):
            changes.change(topic, part, election=Election.UNCLEAN)
    return changes.records[before:]


# -- AlterPartition (56) -------------------------------------------------------------------
@dataclass(frozen=True)
class IsrRequest:
    """One partition of an AlterPartition request; ``new_isr`` holds (broker id, broker
    epoch) pairs, epoch -1 meaning "not checked" (v2 has no epochs)."""
    partition: int
    leader_epoch: int
    new_isr: tuple[tuple[int, int], ...]
    leader_recovery_state: int
    partition_epoch: int


@dataclass(frozen=True)
class IsrResult:
    """One partition of the AlterPartition answer: the partition's state after the
    request, or an error (then the other fields are meaningless)."""
    partition: int
    error_code: ErrorCode = ErrorCode.none
    leader: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    partition_epoch: int = -1


@dataclass
class AlterPartitionAnswer:
    error_code: ErrorCode = ErrorCode.none
    message: str | None = None
    #: (topic id, results) in request order.
    topics: list[tuple[uuid.UUID | None, list[IsrResult]]] = field(default_factory=list)


def alter_partition(image: MetadataImage, broker_id: int, broker_epoch: int,
                    topics: Sequence[tuple[uuid.UUID | None, Sequence[IsrRequest]]], unclean: Unclean,
                    version: int = 3) -> tuple[AlterPartitionAnswer, list[PartitionChangeRecord]]:
    """AlterPartition from the leader ``broker_id`` (Kafka's ``alterPartition``):
    STALE_BROKER_EPOCH for the whole request unless the broker is registered with
    ``broker_epoch``; per partition the checks of :func:`isr_request_error`, else the
    change is applied (a reassignment may complete with it: if that moves leadership
    away, NEW_LEADER_ELECTED) and the answer carries the new state."""
    reg = image.brokers.get(broker_id)
    if reg is None or reg.epoch != broker_epoch:
        msg = (f"No broker registration found for broker id {broker_id}" if reg is None else
               f"Expected broker epoch {reg.epoch}, but got broker epoch {broker_epoch}")
        return AlterPartitionAnswer(ErrorCode.stale_broker_epoch, msg), []
    changes = PartitionChanges(image, usable_brokers(image))
    answer = AlterPartitionAnswer()
    for topic_id, parts in topics:
        topic = image.topic_by_id(topic_id) if topic_id is not None else None
        if topic is None:
            answer.topics.append((topic_id, [IsrResult(p.partition, ErrorCode.unknown_topic_id) for p in parts]))
            continue
        answer.topics.append((topic_id, [_alter_one(changes, image, topic, broker_id, p, unclean, version)
                                         for p in parts]))
    return answer, changes.records


def _alter_one(changes: PartitionChanges, image: MetadataImage, topic: TopicImage, broker_id: int,
               req: IsrRequest, unclean: Unclean, version: int) -> IsrResult:
    part = changes.current(topic, req.partition)
    code = isr_request_error(image, part, broker_id, req, version)
    if code != ErrorCode.none or part is None:
        return IsrResult(req.partition, code)
    record = changes.change(topic, part, isr=[b for b, _ in req.new_isr], recovery_state=req.leader_recovery_state,
                            election=_election(unclean, topic))
    if record is not None and record.leader not in (NO_LEADER_CHANGE, broker_id):
        return IsrResult(req.partition, ErrorCode.new_leader_elected)
    now = changes.current(topic, req.partition)
    assert now is not None
    return IsrResult(req.partition, ErrorCode.none, now.leader, now.leader_epoch, now.isr, now.leader_recovery_state,
                     now.partition_epoch)


def isr_request_error(image: MetadataImage, part: PartitionImage | None, broker_id: int, req: IsrRequest,
                      version: int = 3) -> ErrorCode:
    """Kafka's ``validateAlterPartitionData``, in its order: UNKNOWN_TOPIC_OR_PARTITION;
    NOT_CONTROLLER when the request knows a newer leader or partition epoch (this
    controller is behind); FENCED_LEADER_EPOCH for an older leader epoch; INVALID_REQUEST
    when the sender does not lead the partition; INVALID_UPDATE_VERSION for an older
    partition epoch; INVALID_REQUEST for an ISR with a duplicate or a non-replica, without
    the leader, of more than the leader while RECOVERING, or asking RECOVERED→RECOVERING;
    INELIGIBLE_REPLICA (OPERATION_NOT_ATTEMPTED before v2) when an ISR member is not
    registered, fenced, shutting down or of another broker epoch."""
    if part is None:
        return ErrorCode.unknown_topic_or_partition
    if req.leader_epoch > part.leader_epoch or req.partition_epoch > part.partition_epoch:
        return ErrorCode.not_controller
    if req.leader_epoch < part.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if broker_id != part.leader:
        return ErrorCode.invalid_request
    if req.partition_epoch < part.partition_epoch:
        return ErrorCode.invalid_update_version
    isr = [b for b, _ in req.new_isr]
    if len(set(isr)) != len(isr) or not set(isr) <= set(part.replicas) or part.leader not in isr:
        return ErrorCode.invalid_request
    if req.leader_recovery_state == RECOVERING and len(isr) > 1:
        return ErrorCode.invalid_request
    if part.leader_recovery_state != RECOVERING and req.leader_recovery_state == RECOVERING:
        return ErrorCode.invalid_request
    for b, epoch in req.new_isr:
        reg = image.brokers.get(b)
        if reg is None or reg.in_controlled_shutdown or reg.fenced or (epoch != -1 and reg.epoch != epoch):
            return ErrorCode.ineligible_replica if version > 1 else ErrorCode.operation_not_attempted
    return ErrorCode.none


# -- ElectLeaders (43) ---------------------------------------------------------------------
ElectionResult = tuple[int, ErrorCode, str | None]  # (partition, error, message)


def elect_leaders(image: MetadataImage, election_type: int, partitions: Sequence[tuple[str, Sequence[int]]] | None,
                  active: Iterable[int]) -> tuple[list[tuple[str, list[ElectionResult]]], list[PartitionChangeRecord]]:
    """ElectLeaders (Kafka's ``electLeaders``): per partition UNKNOWN_TOPIC_OR_PARTITION,
    ELECTION_NOT_NEEDED (PREFERRED: the preferred replica leads; UNCLEAN: it has a
    leader), PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE when the
    election changes nothing, else NONE with the change. ``partitions`` None: every
    partition, leaving out those that need no election. Raises ValueError for an unknown
    election type (INVALID_REQUEST)."""
    if election_type not in (PREFERRED, UNCLEAN):
        raise ValueError(f"Unknown election type {election_type}")
    changes = PartitionChanges(image, active)
    out: list[tuple[str, list[ElectionResult]]] = []
    if partitions is None:
        for t in sorted(image.topics.values(), key=lambda t: t.name):
            results = [(p, *_elect_one(changes, t.name, p, election_type)) for p in sorted(t.partitions)]
            out.append((t.name, [r for r in results if r[1] != ErrorCode.election_not_needed]))
        return out, changes.records
    for name, ids in partitions:
        out.append((name, [(p, *_elect_one(changes, name, p, election_type)) for p in ids]))
    return out, changes.records


def _elect_one(changes: PartitionChanges, name: str, partition: int, election_type: int) -> tuple[ErrorCode, str | None]:
    topic = changes.image.topics.get(name)
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, f"No such topic as {name}"
    part = changes.current(topic, partition)
    if part is None:
        return ErrorCode.unknown_topic_or_partition, f"No such partition as {name}-{partition}"
    if (election_type == PREFERRED and part.leader == part.preferred_leader) or \
            (election_type == UNCLEAN and part.leader != NO_LEADER):
        return ErrorCode.election_not_needed, "Leader election not needed for topic partition."
    election = Election.PREFERRED if election_type == PREFERRED else Election.UNCLEAN
    if changes.change(topic, part, election=election) is None:
        if election_type == PREFERRED:
            return ErrorCode.preferred_leader_not_available, "The preferred leader was not available."
        return ErrorCode.eligible_leaders_not_available, "Eligible topic partition leaders are not available."
    return ErrorCode.none, None


# -- AlterPartitionReassignments (45), ListPartitionReassignments (46) ---------------------
ReassignResult = tuple[int, ErrorCode, str | None]


def alter_reassignments(image: MetadataImage, topics: Sequence[tuple[str, Sequence[tuple[int, Sequence[int] | None]]]],
                        known: Iterable[int], active: Iterable[int], unclean: Unclean
                        ) -> tuple[list[tuple[str, list[ReassignResult]]], list[PartitionChangeRecord]]:
    """AlterPartitionReassignments (Kafka's ``alterPartitionReassignments``): per
    partition, ``replicas`` None cancels the reassignment in progress
    (NO_REASSIGNMENT_IN_PROGRESS if there is none; INVALID_REPLICA_ASSIGNMENT if reverting
    needs an unclean election that is not enabled), else starts one towards ``replicas``
    (validated as a manual assignment against the ``known`` brokers): the new replicas are
    added to the replica set and ISR-tracked, and the reassignment completes — the removed
    replicas leave — once the ISR holds every target replica (at once when it already
    does). UNKNOWN_TOPIC_OR_PARTITION for a missing topic or partition."""
    changes = PartitionChanges(image, active)
    known = set(known)
    out = []
    for name, parts in topics:
        out.append((name, [(p, *_reassign_one(changes, known, name, p, target, unclean)) for p, target in parts]))
    return out, changes.records


def _reassign_one(changes: PartitionChanges, known: set[int], name: str, partition: int,
                  target: Sequence[int] | None, unclean: Unclean) -> tuple[ErrorCode, str | None]:
    topic = changes.image.topics.get(name)
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {name}."
    part = changes.current(topic, partition)
    if part is None:
        return ErrorCode.unknown_topic_or_partition, f"Unable to find partition {name}:{partition}."
    if target is None:
        return _cancel(changes, topic, part, unclean)
    bad = manual_assignment_error(target, known)
    if bad is not None:
        return ErrorCode.invalid_replica_assignment, bad
    removing = sorted(set(part.replicas) - set(target))
    adding = sorted(set(target) - set(part.replicas))
    replicas = [*target, *removing]
    changes.change(topic, part, replicas=replicas if replicas != list(part.replicas) else None,
                   removing=removing or None, adding=adding or None)  # Kafka keeps the lists when empty
    return ErrorCode.none, None


def _cancel(changes: PartitionChanges, topic: TopicImage, part: PartitionImage,
            unclean: Unclean) -> tuple[ErrorCode, str | None]:
    """Kafka's ``cancelPartitionReassignment`` with ``PartitionReassignmentRevert``."""
    if not part.reassigning:
        return ErrorCode.no_reassignment_in_progress, "No partition reassignment is in progress."
    replicas = [r for r in part.replicas if r not in part.adding_replicas]
    isr = [r for r in part.isr if r not in part.adding_replicas]
    if not isr:
        if not unclean(topic):
            return ErrorCode.invalid_replica_assignment, (
                f"Unable to revert partition assignment for {topic.name}:{part.partition} because it would "
                "require an unclean leader election.")
        isr = replicas[:1]
    changes.change(topic, part, isr=isr, replicas=replicas, removing=[], adding=[],
                   election=_election(unclean, topic))
    return ErrorCode.none, None


def manual_assignment_error(replicas: Sequence[int], known: set[int]) -> str | None:
    """Kafka's ``validateManualPartitionAssignment`` text, or None: an empty list, a
    broker not registered, a broker listed twice (checked in broker id order)."""
    if not replicas:
        return "The manual partition assignment includes an empty replica list."
    previous = None
    for b in sorted(replicas):
        if b not in known:
            return f"The manual partition assignment includes broker {b}, but no such broker is registered."
        if b == previous:
            return f"The manual partition assignment includes the broker {b} more than once."
        previous = b
    return None


@dataclass(frozen=True)
class Reassignment:
    """One partition of ListPartitionReassignments."""
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def list_reassignments(image: MetadataImage, topics: Sequence[tuple[str, Sequence[int]]] | None
                       ) -> list[tuple[str, list[Reassignment]]]:
    """The reassignments in progress (Kafka's ``listPartitionReassignments``): of every
    topic (``topics`` None) or of the partitions named; topics or partitions that do not
    exist or are not reassigning are left out, as are topics with none."""
    wanted = ([(t.name, sorted(t.partitions)) for t in sorted(image.topics.values(), key=lambda t: t.name)]
              if topics is None else topics)
    out = []
    for name, ids in wanted:
        topic = image.topics.get(name)
        if topic is None:
            continue
        found = [Reassignment(p, part.replicas, part.adding_replicas, part.removing_replicas)
                 for p in ids if (part := topic.partitions.get(p)) is not None and part.reassigning]
        if found:
            out.append((name, found))
    return out


__all__ = ["PartitionChanges", "remove_broker_records", "add_broker_records", "unclean_election_enabled",
           "imbalanced", "leaderless_unclean", "balance_leaders", "elect_unclean_leaders", "MAX_ELECTIONS_PER_RUN",
           "IsrRequest", "IsrResult", "AlterPartitionAnswer", "alter_partition", "isr_request_error",
           "elect_leaders", "alter_reassignments", "list_reassignments", "manual_assignment_error", "Reassignment",
           "PREFERRED", "UNCLEAN"]
